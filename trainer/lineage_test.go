package trainer

import (
	"slices"
	"testing"
)

// TestLineageSteps: staleness along the version tree, in optimizer steps.
//
//	1 (step 0) ─ 2 (1) ─ 3 (2) ─ 4 (3)
//	             └ 5: rollback to 2 (1) ─ 6 (2)
//	             └ 7: rollback to 2 (1) ─ 8 (2) ─ 9 (3)
//	10: a restart's version of checkpoint 9 (3)
func TestLineageSteps(t *testing.T) {
	l := NewLineage()
	for _, v := range []struct {
		n, parent uint64
		step      int64
	}{{1, 0, 0}, {2, 1, 1}, {3, 2, 2}, {4, 3, 3}, {5, 2, 1}, {6, 5, 2}, {7, 2, 1}, {8, 7, 2}, {9, 8, 3}, {10, 9, 3}} {
		l.Add(v.n, v.parent, v.step)
	}
	for _, tt := range []struct {
		from, to uint64
		want     int
		ok       bool
	}{
		{9, 9, 0, true},
		{8, 9, 1, true},
		{2, 9, 2, true},
		{1, 9, 3, true},
		{2, 7, 0, true},  // a rollback adds no step
		{2, 5, 0, true},  // nor does a second one
		{9, 10, 0, true}, // nor a restart
		{4, 9, 4, true},  // a rolled-back branch: 2 steps up to 2, 2 down to 9
		{6, 8, 2, true},  // two rollbacks' branches
		{9, 8, 1, true},  // ahead of the trainer: as far
		{0, 9, 0, false}, // unknown (the frozen checkpoint's 0)
		{11, 9, 0, false},
		{9, 11, 0, false},
	} {
		got, ok := l.Steps(tt.from, tt.to)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Steps(%d, %d) = %d, %v; want %d, %v", tt.from, tt.to, got, ok, tt.want, tt.ok)
		}
	}
	// A damaged record with a cycle does not hang.
	l.Add(20, 21, 5)
	l.Add(21, 20, 6)
	if _, ok := l.Steps(20, 9); ok {
		t.Error("a cycle gave a distance")
	}
}

// TestStalenessInSteps: the trainer counts a sample's staleness in steps
// of the lineage when it knows the sample's version, in version numbers
// otherwise; after rollbacks, a sample one real step behind trains where
// version numbers (max_staleness 2, five numbers behind) dropped it.
func TestStalenessInSteps(t *testing.T) {
	m, _ := loadTiny(t, tinySpec())
	o := testOptions(false)
	o.MaxStaleness = 2
	tr := newTrainer(t, m, o)
	// 1 ─ 2 ─ 3; rollbacks to 2 as 4 and 5; 6 trained from 5.
	for _, v := range []struct {
		n, parent uint64
		step      int64
	}{{1, 0, 0}, {2, 1, 1}, {3, 2, 2}, {4, 2, 1}, {5, 2, 1}, {6, 5, 2}} {
		tr.Lineage().Add(v.n, v.parent, v.step)
	}
	tr.SetVersion(6)
	for v, want := range map[uint64]int{6: 0, 5: 1, 2: 1, 1: 2, 3: 2} {
		if got := tr.Staleness(v); got != want {
			t.Errorf("staleness of version %d: %d, want %d", v, got, want)
		}
	}
	batch := mixedBatch(4, 6)
	for i, v := range []uint64{2, 1, 3, 6, 0, 9} {
		batch[i].Version = v
	}
	met, err := tr.Step(batch)
	if err != nil {
		t.Fatal(err)
	}
	// 2: 1 step; 1 and 3: 2 steps; 6: fresh; 0: unknown, 6 numbers
	// behind: stale; 9: unknown and ahead: fresh.
	if !slices.Equal(met.Staleness, []int{2, 1, 2}) || met.Stale != 1 || met.Samples != 5 {
		t.Errorf("staleness bins %v, %d stale, %d trained; want [2 1 2], 1, 5", met.Staleness, met.Stale, met.Samples)
	}
}
