package cuda

import (
	"testing"

	"github.com/clawrl/clawrl/compute/computetest"
)

// TestConformance runs the conformance suite of compute backends on the
// backend over the fake driver, as it chooses its kernels and with every
// choice forced, so that each kernel meets every case of the suite: the
// tensor-core products of both tile sizes for every row count (never the
// GEMV kernels), decode attention with the keys split into many parts,
// and prefill attention for decode steps too.
func TestConformance(t *testing.T) {
	b := testBackend(t)
	for _, c := range []struct {
		name string
		b    *Backend
	}{
		{"auto", b},
		{"tensor-cores-64", variant(b, func(v *Backend) { v.gemvMaxM, v.gemmTile = 0, 64 })},
		{"tensor-cores-128", variant(b, func(v *Backend) { v.gemvMaxM, v.gemmTile = 0, 128 })},
		{"decode-split", variant(b, func(v *Backend) { v.attnPath, v.minSplitLen = attnDecode, 32 })},
		{"prefill", variant(b, func(v *Backend) { v.attnPath = attnPrefill })},
	} {
		t.Run(c.name, func(t *testing.T) {
			computetest.Backend(t, c.b, computetest.Options{BF16Products: true})
		})
	}
	launched(t, b.dev, "gemv_f32", "gemv_bf16", "gemm_f32", "gemm_bf16_64x64", "gemm_bf16_128x128",
		"attn_decode_f32", "attn_decode_bf16", "attn_combine", "attn_prefill_f32", "attn_prefill_bf16",
		"store_kv_f32", "store_kv_bf16", "embedding_f32", "embedding_bf16", "rmsnorm_warp_f32", "rmsnorm_block_f32",
		"rope_f32", "silu_mul_f32", "gelu_mul_f32", "scale_f32", "softcap_f32", "softcap_backward_f32", "add_f32",
		"log_softmax_f32", "gather_f32")
}

// variant returns a backend on b's device with b's tuning knobs changed by
// set.
func variant(b *Backend, set func(*Backend)) *Backend {
	v := &Backend{dev: b.dev, name: b.name, errWord: b.errWord, gemvMaxM: b.gemvMaxM, gemmTile: b.gemmTile,
		attnPath: b.attnPath, minSplitLen: b.minSplitLen}
	set(v)
	return v
}

// launched checks that each kernel has run on d.
func launched(t *testing.T, d *Device, kernels ...string) {
	t.Helper()
	n := d.Launches()
	for _, k := range kernels {
		if n[k] == 0 {
			t.Errorf("kernel %s never ran", k)
		}
	}
}
