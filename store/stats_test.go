package store

import (
	"testing"

	"github.com/clawrl/clawrl/tokenizer"
)

// TestStatsCountsHints: `clawrl data stats` says how many scored turns got
// a hint, by the status of their sample; rollouts of a hint are not hints.
func TestStatsCountsHints(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	for i, hint := range []string{"Check the file first.", "", "Answer in French."} {
		id := []string{"h1", "h2", "h3"}[i]
		record(t, db, testTurn(id, "s", i, "question"), []tokenizer.Message{{Role: "user", Content: "no"}})
		s := Sample{TurnID: id + "/0", Gen: 0, Version: 3, Kind: "distill", Source: "judge", Hint: hint, Teacher: []float32{-0.1, -0.2}}
		if hint == "" {
			s.Kind, s.Teacher = "binary", nil
		}
		if i == 2 {
			s.Rollouts = []Rollout{{Tokens: []int32{7}, Teacher: []float32{-0.3}, Version: 3}}
		}
		if err := db.AddSample(s); err != nil {
			t.Fatal(err)
		}
	}
	st, err := db.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Hints["queued"] != 2 || len(st.Hints) != 1 {
		t.Errorf("hints %v, want 2 queued", st.Hints)
	}
}
