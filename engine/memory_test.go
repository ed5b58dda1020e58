package engine

import (
	"runtime"
	"testing"
)

func TestKVBudget(t *testing.T) {
	const mib, gib = 1 << 20, 1 << 30
	for _, tt := range []struct {
		name                      string
		mb                        int
		ctx                       int64
		contexts                  int
		share, floor, avail, want int64
	}{
		{"configured", 512, 100 * mib, 4, 2, gib, 64 * gib, 512 * mib},
		{"four contexts", 0, 1 * gib, 4, 2, gib, 64 * gib, 4 * gib},
		{"capped by available memory", 0, 4 * gib, 4, 2, gib, 20 * gib, 10 * gib},
		{"floor", 0, 10 * mib, 4, 2, gib, 64 * gib, gib},
		{"floor over the cap", 0, 4 * gib, 4, 2, gib, gib, gib},
		{"available unknown", 0, 3 * gib, 1, 4, 256 * mib, 0, 3 * gib},
	} {
		if got := kvBudget(tt.mb, tt.ctx, tt.contexts, tt.share, tt.floor, tt.avail); got != tt.want {
			t.Errorf("%s: %d MiB, want %d MiB", tt.name, got>>20, tt.want>>20)
		}
	}
	if runtime.GOOS == "linux" && (memAvailable() <= 0 || memInfo("MemTotal") < memAvailable()) {
		t.Errorf("/proc/meminfo: available %d, total %d", memAvailable(), memInfo("MemTotal"))
	}
}
