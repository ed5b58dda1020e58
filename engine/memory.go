package engine

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
)

// kvBudget is the bytes of a KV cache: mb MiB when mb > 0, else sized
// from the model: contexts full contexts of contextBytes each, at most
// 1/share of avail (the memory available, 0 when unknown), at least floor.
// A cache's memory is committed as it fills, so a large budget costs
// nothing until sequences use it.
func kvBudget(mb int, contextBytes int64, contexts int, share, floor, avail int64) int64 {
	if mb > 0 {
		return int64(mb) << 20
	}
	b := contextBytes * int64(contexts)
	if avail > 0 {
		b = min(b, avail/share)
	}
	return max(b, floor)
}

// memAvailable is the memory the kernel reports available for new
// allocations, in bytes; 0 where it cannot be read.
func memAvailable() int64 { return memInfo("MemAvailable") }

// memInfo reads field (in kB) of /proc/meminfo, in bytes; 0 where it
// cannot be read.
func memInfo(field string) int64 {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// SetMemoryLimit gives the garbage collector a soft limit of 90% of the
// machine's memory, unless GOMEMLIMIT sets one. The weights and the KV
// cache are large and live as long as the daemon, and the collector paces
// itself by the live heap: without a limit, garbage could grow as large as
// they are before a collection, and push a busy daemon out of memory.
func SetMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if total := memInfo("MemTotal"); total > 0 {
		debug.SetMemoryLimit(total / 10 * 9)
	}
}
