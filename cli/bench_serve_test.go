package cli

import (
	"slices"
	"testing"
	"time"
)

// The swap latency of a version is from the end of its step to the first
// token any client got from it or a later version, after that end.
func TestSwapLatencies(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ends := map[uint64]time.Time{2: at(0), 3: at(100), 4: at(500)}
	firsts := []servedFirst{
		{1, at(50)},  // an older version after the swap: not it
		{2, at(-10)}, // before the step ended: not it
		{2, at(30)},  // version 2: 30 ms
		{3, at(400)}, // version 3: 300 ms (later than the version-4-less answer below)
		{4, at(350)}, // a later version also counts for 3: 250 ms; for 4 it is before its end
		{4, at(900)}, // version 4: 400 ms
	}
	got := swapLatencies(ends, firsts)
	slices.Sort(got)
	want := []time.Duration{30 * time.Millisecond, 250 * time.Millisecond, 400 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Errorf("latencies %v, want %v", got, want)
	}
	if got := swapLatencies(map[uint64]time.Time{9: at(0)}, firsts); len(got) != 0 {
		t.Errorf("a version nobody was served from: %v", got)
	}
}
