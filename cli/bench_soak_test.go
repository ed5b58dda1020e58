package cli

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestSoakMeasure: the soak's goal report from a store written by hand:
// thumbs by steps before training, in time, missed; judged samples
// dropped as stale, and which of them were already stale when scored.
func TestSoakMeasure(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	tick := func() time.Time { return time.UnixMilli(now.Add(1000)) }
	db, err := store.Open(t.TempDir(), store.Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	flush := func() {
		t.Helper()
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	turn := func(resp string, thumb int, next bool) string {
		t.Helper()
		tr := &session.Turn{SessionID: "s-" + resp, ResponseID: resp, Endpoint: "chat.completions", Model: "m",
			Messages: []tokenizer.Message{{Role: "user", Content: "q"}}, Reply: tokenizer.Message{Role: "assistant", Content: "a"},
			PromptTokens: []int32{1, 2}, ResponseTokens: []int32{3}, LogProbs: []float32{-1}, Version: 1, Received: tick()}
		db.Offer(session.Record{Kind: session.KindRecorded, Turn: tr})
		if thumb != 0 {
			db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-" + resp, ResponseID: resp, Thumb: thumb, Received: tick()}})
		}
		if next {
			done := *tr
			done.NextState, done.End, done.Completed = []tokenizer.Message{{Role: "user", Content: "ok"}}, session.EndNextState, tick()
			db.Offer(session.Record{Kind: session.KindTurn, Turn: &done})
		}
		flush()
		return store.TurnID(resp, 0)
	}
	sample := func(id, source string) string {
		t.Helper()
		tick()
		if err := db.AddSample(store.Sample{TurnID: id, Version: 1, Kind: "binary", Reward: 1, Source: source}); err != nil {
			t.Fatal(err)
		}
		return store.SampleID(id, 0)
	}
	version := uint64(1)
	if err := db.RecordVersion(version, 0, 0, "base"); err != nil {
		t.Fatal(err)
	}
	step := func(ids ...string) {
		t.Helper()
		tick()
		if err := db.CommitStep(store.Step{Step: int64(version), Version: version + 1, Parent: version, Samples: ids}); err != nil {
			t.Fatal(err)
		}
		version++
	}

	a := sample(turn("a", 1, false), "feedback")
	judgedEarly := sample(turn("j", 0, true), "judge") // scored at version 1, before the steps
	step(a)                                            // a: trained by the first step after its thumb
	b := turn("b", -1, false)                          // thumbed, scored late
	step()
	step()
	sample(b, "feedback") // queued after 2 steps since its thumb: missed
	step()
	step()
	judgedLate := sample(turn("k", 0, true), "judge") // scored 5 steps behind
	step()
	turn("c", 1, false) // thumbed, unscored, no step since: in time
	n, err := db.DropStale(func(v uint64) bool { return v == 1 })
	if err != nil || n != 2 {
		t.Fatalf("dropped %d, %v; want the two judged samples", n, err)
	}

	r := soakReport{MaxStaleness: 4, Steps: map[string]int{"applied": 6}}
	if err := r.measure(db); err != nil {
		t.Fatal(err)
	}
	th := r.Thumbs
	if th.Thumbs != 3 || th.TrainedAfter["0"] != 1 || th.InTime != 1 || th.Missed != 1 || th.MissedAt[store.SampleQueued] != 1 || th.Late != 0 {
		t.Errorf("thumbs %+v", th)
	}
	j := r.Judged
	if j.Samples != 2 || j.Stale != 2 || j.StaleWhenScored != 1 || j.Outcome["dropped: stale"] != 2 {
		t.Errorf("judged %+v (samples %s, %s)", j, judgedEarly, judgedLate)
	}
	if r.GoalMet {
		t.Error("goal met with a missed thumb and stale judged samples")
	}
}
