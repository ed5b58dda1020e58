package kernels

import "testing"

func TestSetKernels(t *testing.T) {
	prev := Kernels()
	defer SetKernels(prev)
	avail := AvailableKernels()
	if avail[0] != KernelsGeneric {
		t.Fatalf("AvailableKernels() = %v, want generic first", avail)
	}
	for _, name := range avail {
		if err := SetKernels(name); err != nil {
			t.Fatalf("SetKernels(%q): %v", name, err)
		}
		if got := Kernels(); got != name {
			t.Fatalf("Kernels() = %q after SetKernels(%q)", got, name)
		}
	}
	if err := SetKernels("avx9000"); err == nil {
		t.Fatal("SetKernels of an unknown set succeeded")
	}
	if got := Kernels(); got != avail[len(avail)-1] {
		t.Fatalf("a failed SetKernels changed the set to %q", got)
	}
	t.Logf("kernel sets on this machine: %v", avail)
}
