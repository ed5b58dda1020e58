package fakecuda

import (
	"os"
	"strings"
	"testing"
)

func TestKernelNames(t *testing.T) {
	for _, c := range []struct {
		src  string
		want []string
	}{
		{`extern "C" __global__ void add_f32(float* d) {}`, []string{"add_f32"}},
		{"extern \"C\"  __global__\nvoid  __launch_bounds__(256) gemv(int n)\n{}", []string{"gemv"}},
		{`extern "C" __global__ __launch_bounds__(128, 2) void rms(float* x) {}
static __device__ float helper(float x) { return x; }
extern "C" __global__ void rope(float* x) {}`, []string{"rms", "rope"}},
		{`__global__ void not_extern_c(float* x) {}`, nil},
	} {
		var got []string
		for _, m := range kernelRE.FindAllStringSubmatch(c.src, -1) {
			got = append(got, m[1])
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%q: kernels %v, want %v", c.src, got, c.want)
		}
	}
}

func TestBuild(t *testing.T) {
	p := Build(t)
	if st, err := os.Stat(p); err != nil || st.Size() == 0 {
		t.Fatalf("%s: %v", p, err)
	}
	// Every kernel source got a registration unit.
	_, units, err := files()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range units {
		names = append(names, u.name)
	}
	if s := strings.Join(names, " "); !strings.Contains(s, "gen_selftest.cc") || !strings.Contains(s, "gen_emu_misuse.cc") {
		t.Errorf("translation units %v", names)
	}
}
