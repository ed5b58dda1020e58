package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cuda/fakecuda"
)

// The tests run the package over the fake driver (cuda/fakecuda) with two
// devices, so that peer copies are covered. With
// CLAWRL_CUDA_TEST_DRIVER=real they run over the machine's driver instead
// (libcuda.so.1, or CLAWRL_LIBCUDA), on a GPU; the tests of the fake
// driver's own behaviour then skip, and the benchmarks run.
func TestMain(m *testing.M) {
	os.Setenv("CLAWRL_FAKECUDA_DEVICES", "2")
	os.Exit(m.Run())
}

// realDriver reports whether the tests run on the machine's driver.
func realDriver() bool { return os.Getenv("CLAWRL_CUDA_TEST_DRIVER") == "real" }

// useFake points the package at the fake driver for the test (unless the
// tests run on the real one).
func useFake(t testing.TB) {
	t.Helper()
	if realDriver() {
		return
	}
	t.Setenv(LibraryEnv, fakecuda.Build(t))
}

// skipOnReal skips a test of the fake driver's own behaviour.
func skipOnReal(t testing.TB) {
	t.Helper()
	if realDriver() {
		t.Skip("a test of the fake driver")
	}
}

var (
	devMu   sync.Mutex
	devices = map[int]*Device{}
)

// testDevice returns device i of the fake driver, opened once for the
// test binary (contexts and modules are per process, as in a daemon).
func testDevice(t testing.TB, i int) *Device {
	t.Helper()
	useFake(t)
	devMu.Lock()
	defer devMu.Unlock()
	if d := devices[i]; d != nil {
		return d
	}
	d, err := OpenDevice(i)
	if err != nil {
		t.Fatal(err)
	}
	devices[i] = d
	return d
}

func TestNoDriver(t *testing.T) {
	t.Setenv(LibraryEnv, "/nonexistent/libcuda.so.1")
	_, err := Devices()
	if err == nil || !strings.Contains(err.Error(), "no CUDA driver found (libcuda.so.1)") || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Devices without a driver: %v", err)
	}
	if _, err := OpenDevice(0); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenDevice without a driver: %v", err)
	}
	if _, err := Open(0); !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "no CUDA driver found (libcuda.so.1)") {
		t.Fatalf("Open without a driver: %v", err)
	}
}

func TestDevices(t *testing.T) {
	useFake(t)
	infos, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := DriverVersion(); err != nil || v < 11000 {
		t.Errorf("DriverVersion: %d, %v", v, err)
	}
	if realDriver() {
		for _, in := range infos {
			t.Logf("%+v", in)
			if in.Name == "" || in.Memory == 0 || in.SMs <= 0 || in.Major < 8 {
				t.Errorf("device %+v (the kernels need compute capability 8.0)", in)
			}
		}
		return
	}
	if len(infos) != 2 {
		t.Fatalf("%d devices, want 2 (CLAWRL_FAKECUDA_DEVICES)", len(infos))
	}
	for i, in := range infos {
		if in.Index != i || in.Name != "clawrl fake CUDA device" || in.Memory == 0 || in.SMs <= 0 || in.Major != 8 || in.SharedOptin <= 48<<10 {
			t.Errorf("device %d: %+v", i, in)
		}
	}
	d := testDevice(t, 1)
	if d.Info().Index != 1 {
		t.Errorf("device 1 reports index %d", d.Info().Index)
	}
	free, total, err := d.MemInfo()
	if err != nil || total != infos[1].Memory || free > total {
		t.Errorf("MemInfo: %d free of %d, %v", free, total, err)
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	d := testDevice(t, 0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 3, 64, 1000, 1 << 16} {
		f := make([]float32, n)
		for i := range f {
			f[i] = float32(r.NormFloat64())
		}
		p, err := d.Alloc(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		if err := Upload(d, p, f); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, n)
		if err := Download(d, got, p); err != nil {
			t.Fatal(err)
		}
		for i := range f {
			if got[i] != f[i] {
				t.Fatalf("n=%d: element %d = %v, want %v", n, i, got[i], f[i])
			}
		}
		// A device-to-device copy of the second half onto the first, and a
		// memset of the last word.
		q, err := d.Alloc(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.CopyDevice(q, p+Ptr(4*(n/2)), 4*(n-n/2)); err != nil {
			t.Fatal(err)
		}
		if err := d.Memset32(q+Ptr(4*(n-1)), math.Float32bits(7), 1); err != nil {
			t.Fatal(err)
		}
		if err := Download(d, got, q); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n-n/2 && i < n-1; i++ {
			if got[i] != f[n/2+i] {
				t.Fatalf("n=%d: copied element %d = %v, want %v", n, i, got[i], f[n/2+i])
			}
		}
		if got[n-1] != 7 {
			t.Fatalf("n=%d: memset word = %v, want 7", n, got[n-1])
		}
		for _, x := range []Ptr{p, q} {
			if err := d.Free(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Other element types go through the same bytes.
	u := []uint16{1, 0xffff, 0x3f80}
	p, err := d.Alloc(6)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	if err := Upload(d, p, u); err != nil {
		t.Fatal(err)
	}
	got := make([]uint16, 3)
	if err := Download(d, got, p); err != nil || got[0] != 1 || got[1] != 0xffff || got[2] != 0x3f80 {
		t.Fatalf("uint16 round trip: %v, %v", got, err)
	}
}

func TestDriverErrors(t *testing.T) {
	d := testDevice(t, 0)
	for _, c := range []struct {
		name string
		run  func() error
		want string
		code int
	}{
		{"free of a pointer never allocated", func() error { return d.Free(Ptr(0x1234560)) },
			"cuMemFree_v2: CUDA_ERROR_INVALID_VALUE: invalid argument", 1},
		{"allocation beyond device memory", func() error { _, err := d.Alloc(1 << 46); return err },
			"cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY: out of memory", 2},
		{"unknown kernel", func() error { return d.Launch("no_such_kernel", Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0) },
			"cuModuleGetFunction: CUDA_ERROR_NOT_FOUND: named symbol not found", 500},
		{"block too large", func() error {
			return d.Launch("selftest_reverse", Dim3{1, 1, 1}, Dim3{2048, 1, 1}, 0, Ptr(0), Ptr(0))
		}, "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE", 1},
		{"shared memory beyond the device", func() error {
			return d.Launch("selftest_reverse", Dim3{1, 1, 1}, Dim3{32, 1, 1}, 1<<20, Ptr(0), Ptr(0))
		}, "cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE", 1},
		{"copy out of an allocation (fake)", func() error {
			if realDriver() {
				return errors.New("cuMemcpyHtoDAsync_v2: CUDA_ERROR_INVALID_VALUE (not checked on the real driver)")
			}
			p, err := d.Alloc(16)
			if err != nil {
				return err
			}
			defer d.Free(p)
			return Upload(d, p, make([]float32, 1000))
		}, "cuMemcpyHtoDAsync_v2: CUDA_ERROR_INVALID_VALUE", 1},
		{"bad argument type", func() error {
			return d.Launch("selftest_reverse", Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, "x")
		}, "unsupported type string", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			var ce *Error
			if c.code != 0 && (!errors.As(err, &ce) || ce.Code != c.code) {
				t.Fatalf("error %v is not a driver error with code %d", err, c.code)
			}
		})
	}
	// The device still works.
	if err := d.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestContextIsPerThread calls the driver from the test's goroutine, whose
// thread has no current context: the call fails, which is why a Device
// makes its calls on its worker.
func TestContextIsPerThread(t *testing.T) {
	d := testDevice(t, 0)
	var p Ptr
	err := d.drv.check("cuMemAlloc_v2", d.drv.call(d.drv.cuMemAlloc, uintptr(unsafe.Pointer(&p)), 16))
	if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_CONTEXT") {
		t.Fatalf("cuMemAlloc off the worker: %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
}

func TestSelftestKernels(t *testing.T) {
	d := testDevice(t, 0)
	r := rand.New(rand.NewPCG(3, 4))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	upload := func(v any) Ptr {
		t.Helper()
		var p Ptr
		var err error
		switch v := v.(type) {
		case []float32:
			if p, err = d.Alloc(4 * len(v)); err == nil {
				err = Upload(d, p, v)
			}
		case []uint16:
			if p, err = d.Alloc(2 * len(v)); err == nil {
				err = Upload(d, p, v)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Free(p) })
		return p
	}
	download := func(p Ptr, n int) []float32 {
		t.Helper()
		v := make([]float32, n)
		if err := Download(d, v, p); err != nil {
			t.Fatal(err)
		}
		return v
	}

	t.Run("block sum", func(t *testing.T) {
		for _, c := range []struct{ rows, n, threads int }{{3, 1000, 256}, {2, 31, 64}, {1, 4096, 1024}, {5, 7, 32}} {
			in := randn(c.rows * c.n)
			out := upload(make([]float32, c.rows))
			if err := d.Launch("selftest_block_sum", Dim3{c.rows, 1, 1}, Dim3{c.threads, 1, 1}, 0, out, upload(in), c.n); err != nil {
				t.Fatal(err)
			}
			got := download(out, c.rows)
			for i := range c.rows {
				want := 0.0
				for _, x := range in[i*c.n : (i+1)*c.n] {
					want += float64(x)
				}
				if math.Abs(float64(got[i])-want) > 1e-4*math.Sqrt(float64(c.n)) {
					t.Errorf("%+v: row %d: %v, want %v", c, i, got[i], want)
				}
			}
		}
	})

	t.Run("warp shuffles", func(t *testing.T) {
		const blocks, threads = 2, 96
		in := randn(blocks * threads)
		out := upload(make([]float32, 4*blocks*threads))
		if err := d.Launch("selftest_warp", Dim3{blocks, 1, 1}, Dim3{threads, 1, 1}, 0, out, upload(in)); err != nil {
			t.Fatal(err)
		}
		got := download(out, 4*blocks*threads)
		for tid := range blocks * threads {
			w0, lane := tid/32*32, tid%32
			sum, seg := 0.0, 0.0
			for l := range 32 {
				sum += float64(in[w0+l])
				if l/8 == lane/8 {
					seg += float64(in[w0+l])
				}
			}
			down := in[tid]
			if lane < 31 {
				down = in[tid+1]
			}
			want := []float64{sum, float64(in[w0+(lane+3)%32]), float64(down), seg}
			for k, w := range want {
				if math.Abs(float64(got[4*tid+k])-w) > 1e-5 {
					t.Fatalf("thread %d output %d: %v, want %v", tid, k, got[4*tid+k], w)
				}
			}
		}
	})

	t.Run("dynamic shared memory", func(t *testing.T) {
		const blocks, threads = 3, 128
		in := randn(blocks * threads)
		out := upload(make([]float32, blocks*threads))
		if err := d.Launch("selftest_reverse", Dim3{blocks, 1, 1}, Dim3{threads, 1, 1}, 4*threads, out, upload(in)); err != nil {
			t.Fatal(err)
		}
		got := download(out, blocks*threads)
		for b := range blocks {
			for i := range threads {
				if got[b*threads+i] != in[b*threads+threads-1-i] {
					t.Fatalf("block %d element %d: %v, want %v", b, i, got[b*threads+i], in[b*threads+threads-1-i])
				}
			}
		}
	})

	t.Run("mma m16n8k16 bf16", func(t *testing.T) {
		// Values with few significant bits, so that every product and sum
		// is exact in float32 whatever the order: the comparison is exact,
		// and a wrong fragment layout moves values to other places.
		a := make([]float32, 16*16)
		for i := range a {
			a[i] = float32(r.IntN(17)-8) / 4
		}
		w := make([]uint16, 8*16)
		wv := make([]float32, 8*16)
		for i := range w {
			wv[i] = float32(r.IntN(9) - 4)
			w[i] = uint16(math.Float32bits(wv[i]) >> 16)
		}
		c := make([]float32, 16*8)
		for i := range c {
			c[i] = float32(i)
		}
		dst := upload(make([]float32, 16*8))
		if err := d.Launch("selftest_mma", Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, dst, upload(a), upload(w), upload(c)); err != nil {
			t.Fatal(err)
		}
		got := download(dst, 16*8)
		for m := range 16 {
			for n := range 8 {
				want := c[m*8+n]
				for k := range 16 {
					want += a[m*16+k] * wv[n*16+k]
				}
				if got[m*8+n] != want {
					t.Fatalf("D[%d][%d] = %v, want %v", m, n, got[m*8+n], want)
				}
			}
		}
		// And rounding: A values that are not BF16 are rounded to nearest
		// even before the product.
		a2 := []float32{1 + 1.0/256 + 1.0/1024, 1 + 3.0/256}
		want := []float32{1 + 1.0/128, 1 + 1.0/64} // 1+2^-8+2^-10 rounds up; 1+3·2^-8 is a tie that goes to even
		aa := make([]float32, 16*16)
		aa[0], aa[1] = a2[0], a2[1]
		ww := make([]uint16, 8*16)
		ww[0], ww[1] = 0x3f80, 0x3f80 // W[0][0] = W[0][1] = 1
		if err := d.Launch("selftest_mma", Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, dst, upload(aa), upload(ww), upload(make([]float32, 16*8))); err != nil {
			t.Fatal(err)
		}
		if got := download(dst, 1)[0]; got != want[0]+want[1] {
			t.Fatalf("rounded product %v, want %v", got, want[0]+want[1])
		}
	})
}

func TestEmulatorReportsMisuse(t *testing.T) {
	skipOnReal(t)
	d := testDevice(t, 1)
	if err := d.w.do(func() error {
		if _, ok := d.entry["emutest_misuse"]; ok {
			return nil
		}
		return d.loadModule("host", []byte("fakecuda:host\x00"), []string{"emutest_misuse"})
	}); err != nil {
		t.Fatal(err)
	}
	out, err := d.Alloc(4 * 64)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(out)
	for _, c := range []struct {
		mode int
		want string
	}{
		{1, "deadlock"},
		{2, "disagree on a collective"},
		{3, "shuffle reads lane 5, which did not take part"},
		{4, "trap from the kernel"},
	} {
		err := d.Launch("emutest_misuse", Dim3{1, 1, 1}, Dim3{64, 1, 1}, 0, out, c.mode)
		if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_LAUNCH_FAILED") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("mode %d: %v, want a launch failure about %q", c.mode, err, c.want)
		}
	}
	if err := d.Launch("emutest_misuse", Dim3{1, 1, 1}, Dim3{64, 1, 1}, 0, out, 0); err != nil {
		t.Fatalf("a correct launch after the failures: %v", err)
	}
	// A missing barrier: in one of two blocks the neighbour has not written
	// its slot yet.
	if err := d.Launch("emutest_misuse", Dim3{2, 1, 1}, Dim3{32, 1, 1}, 4*32, out, 5); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 64)
	if err := Download(d, got, out); err != nil {
		t.Fatal(err)
	}
	stale := 0
	for _, v := range got {
		if v != v {
			stale++
		}
	}
	if stale == 0 {
		t.Errorf("a read without a barrier saw every write: %v", got)
	}
}

func TestPeerCopy(t *testing.T) {
	useFake(t)
	if infos, err := Devices(); err != nil || len(infos) < 2 {
		t.Skipf("peer copies need two devices (%v)", err)
	}
	d0, d1 := testDevice(t, 0), testDevice(t, 1)
	if err := d1.EnablePeer(d0); err != nil {
		t.Fatal(err)
	}
	if err := d1.EnablePeer(d0); err != nil {
		t.Fatalf("enabling peer access twice: %v", err)
	}
	src, err := d0.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer d0.Free(src)
	dst, err := d1.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Free(dst)
	want := []float32{1, 2, 3, 4}
	if err := Upload(d0, src, want); err != nil {
		t.Fatal(err)
	}
	if err := d0.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := d1.CopyFromPeer(dst, d0, src, 16); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 4)
	if err := Download(d1, got, dst); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("peer copy: %v, want %v", got, want)
		}
	}
}

func TestTimeQueued(t *testing.T) {
	d := testDevice(t, 0)
	p, err := d.Alloc(4 << 10)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	el, err := d.TimeQueued(func() error { return d.Memset32(p, 0, 1<<10) })
	if err != nil || el < 0 {
		t.Fatalf("TimeQueued: %v, %v", el, err)
	}
}

func TestDeviceClose(t *testing.T) {
	useFake(t)
	d, err := OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := d.Alloc(4); !errors.Is(err, errClosed) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	b, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	x, err := b.NewTensor(compute.F32, 4)
	if err != nil {
		t.Fatal(err)
	}
	b.Add(x, x, x)
	if err := b.Close(); err != nil {
		t.Fatalf("Backend.Close: %v", err)
	}
}

// TestPTXUpToDate checks that the committed PTX is what the kernel sources
// compile to (cuda/kernels/build-ptx.sh --check), where clang 14 is
// installed.
func TestPTXUpToDate(t *testing.T) {
	clang := ""
	for _, c := range []string{"clang++-14", "clang++"} {
		if p, err := exec.LookPath(c); err == nil {
			clang = p
			break
		}
	}
	if clang == "" {
		t.Skip("no clang++: the PTX check needs clang 14 (apt-get install clang)")
	}
	ver, _ := exec.Command(clang, "--version").Output()
	if !strings.Contains(string(ver), "clang version 14.") {
		t.Skipf("%s is not clang 14; the committed PTX comes from clang 14", clang)
	}
	cmd := exec.Command("kernels/build-ptx.sh", "--check")
	cmd.Env = append(os.Environ(), "CLANG="+clang)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
