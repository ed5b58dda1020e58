// Zeroing of the AVX-512 attention kernels' sums (attention_amd64.s,
// attention_dec_amd64.s).

#define ZERO4(a, b, c, d) \
	VPXORD a, a, a; \
	VPXORD b, b, b; \
	VPXORD c, c, c; \
	VPXORD d, d, d

// ZERO8, ZERO16 and ZERO24 zero Z0..Z7, Z0..Z15 and Z0..Z23.
#define ZERO8 \
	ZERO4(Z0, Z1, Z2, Z3); \
	ZERO4(Z4, Z5, Z6, Z7)

#define ZERO16 \
	ZERO8; \
	ZERO4(Z8, Z9, Z10, Z11); \
	ZERO4(Z12, Z13, Z14, Z15)

#define ZERO24 \
	ZERO16; \
	ZERO4(Z16, Z17, Z18, Z19); \
	ZERO4(Z20, Z21, Z22, Z23)
