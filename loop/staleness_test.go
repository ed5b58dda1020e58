package loop

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// stalenessLoop is a loop that trains what is queued after 20 ms, up to
// batch samples a step, checkpoints every version and keeps them all
// (rollbacks go back to any).
func stalenessLoop(t *testing.T, r *rig, db *store.DB, batch int) (*Loop, *trainer.Trainer, string) {
	t.Helper()
	cfg := reward.DefaultConfig()
	cfg.HintVotes = 0
	scorer, err := reward.New(reward.Options{Config: cfg, Judge: &judge{verdict: `\boxed{1}`}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	opts := trainer.DefaultOptions()
	opts.LR, opts.WarmupSteps, opts.LoRARank = 1e-2, 0, 4
	tr, err := trainer.New(r.m, r.m.Weights(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	tr.SetVersion(r.store.Current())
	if err := db.RecordVersion(r.store.Current(), 0, 0, "base"); err != nil {
		t.Fatal(err)
	}
	cj, err := os.ReadFile(filepath.Join(r.dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	l, err := New(Options{DB: db, Scorer: scorer, Trainer: tr, Versions: r.store, BatchSize: batch, MaxWait: 20 * time.Millisecond,
		Checkpoint: trainer.CheckpointOptions{Root: root, Keep: 16, ConfigJSON: cj}, CheckpointEvery: 1,
		Poll: 20 * time.Millisecond, Registry: prometheus.NewRegistry(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return l, tr, root
}

// trainTurn generates a turn on the served version, completes it and
// waits until its sample has trained and the step's version is published.
func trainTurn(t *testing.T, r *rig, db *store.DB, id string) *session.Turn {
	t.Helper()
	before := r.store.Current()
	turn := r.generate(t, []int32{1, 2, 3, int32(len(id))})
	turn.ResponseID = id
	put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	// Trained (the step is on record), then published.
	waitFor(t, id+" trained", func() bool {
		return count(t, db, "SELECT COUNT(*) FROM samples WHERE turn_id = ? AND status = 'trained'", store.TurnID(id, 0)) == 1 &&
			r.store.Current() != before
	})
	return turn
}

// TestStalenessCountsStepsNotVersions: rollbacks publish old weights under
// new numbers and must not age anything. A turn generated on version v,
// completed after three rollbacks to v and one step, is one optimizer
// step behind the trainer, five version numbers behind (more than
// max_staleness 4): it trains. Counted in version numbers (the code
// before), it was dropped as stale.
func TestStalenessCountsStepsNotVersions(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, tr, root := stalenessLoop(t, r, db, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	trainTurn(t, r, db, "chatcmpl-a")
	v := r.store.Current()
	// Generated on v, its next state still to come.
	held := r.generate(t, []int32{4, 5, 6})
	held.ResponseID, held.SessionID = "chatcmpl-held", "held"
	if held.Version != v {
		t.Fatalf("held turn on version %d, want %d", held.Version, v)
	}
	db.Offer(session.Record{Kind: session.KindRecorded, Turn: held})
	trainTurn(t, r, db, "chatcmpl-bb")
	for range 3 {
		c, err := weights.Open(weights.DirOf(root, v))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Rollback(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, "SELECT COUNT(*) FROM versions WHERE note = ?", fmt.Sprintf("rollback to %d (requested): POST /admin/rollback", v)); n != 3 {
		t.Errorf("%d versions note the requested rollback to %d; want 3", n, v)
	}
	trainTurn(t, r, db, "chatcmpl-ccc")
	if gap := tr.Version() - v; gap <= uint64(tr.Options().MaxStaleness) {
		t.Fatalf("the version gap is %d; the test needs more than max_staleness %d", gap, tr.Options().MaxStaleness)
	}
	if s := tr.Staleness(v); s != 1 {
		t.Errorf("staleness of version %d at version %d: %d steps, want 1", v, tr.Version(), s)
	}
	completed := *held
	completed.NextState, completed.End, completed.Completed = []tokenizer.Message{{Role: "user", Content: "thanks"}}, session.EndNextState, time.Now()
	db.Offer(session.Record{Kind: session.KindTurn, Turn: &completed})
	waitFor(t, "the held turn's sample trained or dropped", func() bool {
		return count(t, db, "SELECT COUNT(*) FROM samples WHERE turn_id = ? AND status IN ('trained', 'dropped')", store.TurnID(held.ResponseID, 0)) == 1
	})
	if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE turn_id = ? AND status = 'trained'", store.TurnID(held.ResponseID, 0)); n != 1 {
		var reason string
		db.SQL().QueryRow("SELECT reason FROM samples WHERE turn_id = ?", store.TurnID(held.ResponseID, 0)).Scan(&reason)
		t.Errorf("the held turn's sample was not trained (%s); one step behind, it is fresh", reason)
	}
}

// TestFrozenTeacherRolloutsTrain: a frozen teacher's hinted rollouts
// (generated on the checkpoint's weights by the real scheduler, which
// stamps them version 0) are dated by their turn and train like it; the
// trainer is five versions past version 0 by then. Stored as version 0
// (the code before), every one was dropped as stale.
func TestFrozenTeacherRolloutsTrain(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, tr, _ := stalenessLoop(t, r, db, 32)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for i := range 5 {
		trainTurn(t, r, db, fmt.Sprintf("chatcmpl-%d", i))
	}
	// A turn of the served version, one the judge would hint on; the
	// frozen teacher writes responses to its prompt.
	turn := r.generate(t, []int32{7, 8, 9})
	turn.ResponseID, turn.SessionID = "chatcmpl-hinted", "hinted"
	db.Offer(session.Record{Kind: session.KindRecorded, Turn: turn})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	stops := make([]int32, 32) // half the vocabulary ends a response: short rollouts
	for i := range stops {
		stops[i] = int32(i)
	}
	sr := &reward.SchedulerRollouts{Gen: r.sched, StopTokens: stops, Frozen: true}
	rs, err := sr.Rollouts(ctx, turn.PromptTokens, 16, 24, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range rs {
		if ro.Version != 0 {
			t.Fatalf("a frozen rollout of version %d, want 0", ro.Version)
		}
	}
	if tr.Version() <= uint64(tr.Options().MaxStaleness) {
		t.Fatalf("trainer at version %d: the test needs it past max_staleness", tr.Version())
	}
	trained := count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained'")
	if err := db.AddSample(store.Sample{TurnID: store.TurnID(turn.ResponseID, 0), Version: turn.Version, Kind: "none",
		Source: "judge", Hint: "End with banana.", Rollouts: storeRollouts(rs)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rollouts trained or dropped", func() bool {
		return count(t, db, "SELECT COUNT(*) FROM samples WHERE kind = 'rollout' AND status = 'queued'") == 0
	})
	var versions []int
	rows, err := db.SQL().Query("SELECT version FROM samples WHERE kind = 'rollout'")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		rows.Scan(&v)
		versions = append(versions, v)
	}
	rows.Close()
	if !slices.Equal(slices.Compact(versions), []int{int(turn.Version)}) {
		t.Errorf("rollout versions %v, want the turn's %d", versions, turn.Version)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE kind = 'rollout' AND status = 'trained'"); n != len(rs) {
		rows, _ := db.SQL().Query("SELECT id, status, reason FROM samples WHERE kind = 'rollout'")
		for rows.Next() {
			var id, st, reason string
			rows.Scan(&id, &st, &reason)
			t.Logf("%s %s %s", id, st, reason)
		}
		rows.Close()
		t.Errorf("%d of %d rollouts trained (%d samples trained before)", n, len(rs), trained)
	}
}

// TestCheckpointShare: at a share so small that the next checkpoint
// must wait hours after the base's (trainer.checkpoint_max_share), a
// step's periodic checkpoint is owed rather than written, and the
// checkpoint at shutdown writes it.
func TestCheckpointShare(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, _, root := stalenessLoop(t, r, db, 1)
	l.opts.CheckpointShare = 1e-6
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	trainTurn(t, r, db, "chatcmpl-a")
	va := r.store.Current()
	// The second step starts once the first one's checkpoint is decided.
	trainTurn(t, r, db, "chatcmpl-bb")
	v := r.store.Current()
	list := func() []uint64 {
		ns, err := weights.List(root)
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	has := func() bool { return slices.Contains(list(), v) }
	if ns := list(); slices.Contains(ns, va) {
		t.Errorf("version %d was checkpointed at once, at a share of 1e-6 (checkpoints %v)", va, ns)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !has() {
		t.Errorf("the owed checkpoint of version %d was not written at shutdown", v)
	}
}

// TestCkptWait: after a checkpoint that took d, the next periodic one
// waits d·(1/share − 1) from its end.
func TestCkptWait(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		share     float64
		took, ago time.Duration
		waits     bool
	}{
		{0.1, time.Second, time.Second, true},            // 9 s wait, 1 s gone
		{0.1, time.Second, 10 * time.Second, false},      // 9 s wait, 10 s gone
		{0.5, time.Second, 500 * time.Millisecond, true}, // 1 s wait
		{0.5, time.Second, 2 * time.Second, false},
		{0, time.Hour, 0, false}, // no bound
		{1, time.Hour, 0, false},
		{0.1, 0, 0, false}, // no checkpoint yet
	} {
		l := &Loop{opts: Options{CheckpointShare: c.share}, ckptEnd: now.Add(-c.ago), ckptTook: c.took}
		if got := l.ckptWait() > 0; got != c.waits {
			t.Errorf("share %v, took %v, %v ago: waits %v, want %v", c.share, c.took, c.ago, got, c.waits)
		}
	}
}
