package store

import (
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/tokenizer"
)

// TestBehaviourRoundTrip: a turn's sampling log-probs and forced tokens
// come back with its queued sample (a turn without them reads nil, a
// hinted rollout never has them), and a length that does not match the
// response is not stored.
func TestBehaviourRoundTrip(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	next := []tokenizer.Message{{Role: "user", Content: "thanks"}}
	with := testTurn("b1", "s", 0, "hi")
	with.SampleLogProbs, with.Forced = []float32{-0.125, 0}, []bool{false, true}
	record(t, db, with, next)
	plain := testTurn("b2", "s2", 0, "hi")
	record(t, db, plain, next)
	odd := testTurn("b3", "s3", 0, "hi")
	odd.SampleLogProbs, odd.Forced = []float32{-1}, []bool{true}
	record(t, db, odd, next)
	for _, id := range []string{"b1/0", "b2/0", "b3/0"} {
		rs := []Rollout(nil)
		if id == "b1/0" {
			rs = []Rollout{{Tokens: []int32{9}, Teacher: []float32{-0.5}, Version: 3}}
		}
		if err := db.AddSample(Sample{TurnID: id, Version: 3, Kind: "binary", Reward: 1, Source: "judge", Rollouts: rs}); err != nil {
			t.Fatal(err)
		}
	}
	q, _, err := db.Queued(10)
	if err != nil || len(q) != 4 {
		t.Fatalf("queued %d, %v; want 4", len(q), err)
	}
	for _, s := range q {
		switch {
		case strings.Contains(s.ID, "/r"):
			if s.SampleLogProbs != nil || s.Forced != nil || s.LogProbs != nil {
				t.Errorf("rollout %s carries the turn's log-probs: %+v", s.ID, s)
			}
		case s.TurnID == "b1/0":
			if !slices.Equal(s.SampleLogProbs, with.SampleLogProbs) || !slices.Equal(s.Forced, with.Forced) || !slices.Equal(s.LogProbs, with.LogProbs) {
				t.Errorf("sample %s: sampling log-probs %v forced %v log-probs %v", s.ID, s.SampleLogProbs, s.Forced, s.LogProbs)
			}
		default:
			if s.SampleLogProbs != nil || s.Forced != nil || s.LogProbs == nil {
				t.Errorf("sample %s: sampling log-probs %v forced %v log-probs %v; want nil, nil and the model's", s.ID, s.SampleLogProbs, s.Forced, s.LogProbs)
			}
		}
	}
}

// TestFrozenRolloutVersion: a rollout of a frozen teacher arrives with
// version 0 (the checkpoint's weights are no version of the lineage) and
// is stored with its turn's version, so that it ages like the turn;
// a policy teacher's keeps its own. Stored as 0, staleness counted it
// from the first version: every one was dropped after max_staleness
// steps.
func TestFrozenRolloutVersion(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	record(t, db, testTurn("f1", "s", 0, "Name an animal."), []tokenizer.Message{{Role: "user", Content: "End with banana."}})
	rs := []Rollout{
		{Tokens: []int32{9}, Teacher: []float32{-0.1}, Version: 0},
		{Tokens: []int32{10}, Teacher: []float32{-0.2}, Version: 12},
	}
	if err := db.AddSample(Sample{TurnID: "f1/0", Version: 11, Kind: "none", Reward: 0, Source: "judge", Hint: "End with banana.", Rollouts: rs}); err != nil {
		t.Fatal(err)
	}
	q, _, err := db.Queued(10)
	if err != nil || len(q) != 2 {
		t.Fatalf("queued %d, %v", len(q), err)
	}
	got := map[string]uint64{}
	for _, s := range q {
		got[s.ID] = s.Version
	}
	if got[RolloutID("f1/0", 0, 0)] != 11 || got[RolloutID("f1/0", 0, 1)] != 12 {
		t.Errorf("rollout versions %v; want the turn's 11 for the frozen teacher's, 12 for the policy's", got)
	}
}

// TestDropStale: the caller's rule decides which versions are stale;
// samples that explicit feedback decided stay queued.
func TestDropStale(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	next := []tokenizer.Message{{Role: "user", Content: "ok"}}
	for i, v := range []uint64{3, 7, 9} {
		turn := testTurn("d"+string(rune('a'+i)), "s"+string(rune('a'+i)), 0, "q")
		record(t, db, turn, next)
		if err := db.AddSample(Sample{TurnID: TurnID(turn.ResponseID, 0), Version: v, Kind: "binary", Reward: 1, Source: "judge"}); err != nil {
			t.Fatal(err)
		}
	}
	turn := testTurn("dfb", "sfb", 0, "q")
	record(t, db, turn, next)
	if err := db.AddSample(Sample{TurnID: TurnID(turn.ResponseID, 0), Version: 3, Kind: "binary", Reward: -1, Source: "feedback"}); err != nil {
		t.Fatal(err)
	}
	// Versions 3 and 9 are stale (a rollback can make a higher number the
	// older weights); 7 is not.
	n, err := db.DropStale(func(v uint64) bool { return v != 7 })
	if err != nil || n != 2 {
		t.Fatalf("dropped %d, %v; want 2", n, err)
	}
	if k := countRows(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'queued'"); k != 2 {
		t.Errorf("%d queued; want version 7's and the feedback's", k)
	}
	if k := countRows(t, db, "SELECT COUNT(*) FROM samples WHERE reason = 'stale' AND version IN (3, 9) AND source = 'judge'"); k != 2 {
		t.Errorf("%d dropped as stale; want the judged ones of versions 3 and 9", k)
	}
}
