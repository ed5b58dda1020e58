package store

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/clawrl/clawrl/session"
)

// TestThumbOutcomes: what became of each thumb, counted in steps that
// started after it.
func TestThumbOutcomes(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(sec int) time.Time { return start.Add(time.Duration(sec) * time.Second) }
	var now atomic.Int64
	now.Store(start.UnixMilli())
	db := open(t, t.TempDir(), Options{Now: func() time.Time { return time.UnixMilli(now.Load()) }})
	set := func(sec int) { now.Store(at(sec).UnixMilli()) }
	thumb := func(resp string, sec int) {
		t.Helper()
		record(t, db, testTurn(resp, "s-"+resp, 0, "q"), nil)
		db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-" + resp, ResponseID: resp, Thumb: 1, Received: at(sec)}})
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	sample := func(resp string) {
		t.Helper()
		if err := db.AddSample(Sample{TurnID: TurnID(resp, 0), Version: 1, Kind: "binary", Reward: 1, Source: "feedback"}); err != nil {
			t.Fatal(err)
		}
	}
	step := func(n int64, end, took int, ids ...string) {
		t.Helper()
		set(end)
		var samples []string
		for _, resp := range ids {
			samples = append(samples, SampleID(TurnID(resp, 0), 0))
		}
		if err := db.CommitStep(Step{Step: n, Version: uint64(n + 1), Parent: uint64(n), Samples: samples, Stats: map[string]float64{"seconds": float64(took)}}); err != nil {
			t.Fatal(err)
		}
	}
	thumb("a", 10) // trained by the first step that started after it
	thumb("b", 10) // trained two steps later
	thumb("c", 10) // never trained: missed
	thumb("d", 35) // never trained, one step since: in time
	thumb("e", 35) // never scored
	sample("a")
	sample("b")
	sample("c")
	sample("d")
	step(1, 12, 5, "a") // started at 7, before the thumbs: does not count
	step(2, 20, 5)      // started at 15
	step(3, 30, 5, "b") // started at 25: one step before it
	step(4, 40, 1)      // started at 39
	if err := db.DropSamples([]string{SampleID(TurnID("c", 0), 0)}, "error: too long"); err != nil {
		t.Fatal(err)
	}
	out, err := db.ThumbOutcomes()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ThumbOutcome{}
	for _, o := range out {
		got[o.TurnID] = o
	}
	check := func(resp, status string, before, since int) {
		t.Helper()
		o := got[TurnID(resp, 0)]
		if o.Status != status || o.StepsBefore != before || o.StepsSince != since {
			t.Errorf("thumb on %s: %s, %d steps before, %d since; want %s, %d, %d", resp, o.Status, o.StepsBefore, o.StepsSince, status, before, since)
		}
	}
	// a trained in step 1, which started before its thumb: it went by
	// with no step started after the thumb.
	check("a", SampleTrained, 0, 0)
	check("b", SampleTrained, 1, 0)
	check("c", SampleDropped, 0, 3)
	check("d", SampleQueued, 0, 1)
	check("e", "unscored", 0, 1)
	if o := got[TurnID("c", 0)]; o.Reason != "error: too long" {
		t.Errorf("dropped thumb's reason %q", o.Reason)
	}
	if o := got[TurnID("e", 0)]; o.TurnStatus != "ready" {
		t.Errorf("unscored thumb's turn is %q, want ready", o.TurnStatus)
	}
}
