// ZERO4 zeroes four vector registers (for the kernels' sums).
#define ZERO4(a, b, c, d) \
	VPXORD a, a, a; \
	VPXORD b, b, b; \
	VPXORD c, c, c; \
	VPXORD d, d, d
