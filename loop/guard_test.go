package loop

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
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

// guardLoop is newLoop with checkpoints and guard options.
func guardLoop(t *testing.T, r *rig, db *store.DB, g GuardOptions, measureKL bool) (*Loop, *trainer.Trainer, string) {
	t.Helper()
	cfg := reward.DefaultConfig()
	cfg.HintVotes = 0
	scorer, err := reward.New(reward.Options{Config: cfg, Judge: &judge{verdict: `\boxed{1}`}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	opts := trainer.DefaultOptions()
	opts.LR, opts.WarmupSteps, opts.LoRARank = 5e-2, 0, 4
	opts.MeasureKL = measureKL
	opts.TargetKL = 0 // these steps must move the policy far enough to trip the guard
	tr, err := trainer.New(r.m, r.m.Weights(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	tr.SetVersion(r.store.Current())
	cj, err := os.ReadFile(filepath.Join(r.dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	l, err := New(Options{DB: db, Scorer: scorer, Trainer: tr, Versions: r.store, BatchSize: 1,
		Checkpoint: trainer.CheckpointOptions{Root: root, Keep: 1, ConfigJSON: cj}, CheckpointEvery: 1, Guard: g,
		Poll: 20 * time.Millisecond, Registry: prometheus.NewRegistry(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return l, tr, root
}

// greedy is the served model's greedy continuation of a fixed prompt.
func greedy(t *testing.T, r *rig) []int32 {
	return r.generate(t, []int32{7, 8, 9}).ResponseTokens
}

// An injected regression: the skill score falls after training, so the
// guard serves the starting version again, lowers the learning rate and
// counts the event; the rolled-back steps' samples never train again.
func TestGuardRollsBackARegression(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	var checks atomic.Int32
	skill := func(context.Context) (float64, error) {
		if checks.Add(1) == 1 {
			return 0.9, nil // the starting version
		}
		return 0.5, nil // after training: forgot
	}
	l, tr, root := guardLoop(t, r, db, GuardOptions{Skill: skill, SkillMargin: 0.1, SkillEvery: 2}, false)
	start := r.store.Current()
	before := greedy(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for i := range 2 {
		turn := r.generate(t, []int32{1, 2, int32(3 + i)})
		turn.ResponseID = fmt.Sprintf("chatcmpl-g%d", i)
		put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	}
	waitFor(t, "the guard to trip", func() bool { return l.Guard().Events["skill"] == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := l.Guard()
	if st.LRScale != 0.5 || st.Baseline != 0.9 {
		t.Errorf("guard status %+v", st)
	}
	if tr.StepCount() != 0 {
		t.Errorf("trainer at step %d after rolling back to the start; want 0", tr.StepCount())
	}
	if got := greedy(t, r); !slices.Equal(got, before) {
		t.Errorf("served greedy output %v after the rollback; the starting version gave %v", got, before)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM steps WHERE status = 'rolled_back'"); n != 2 {
		t.Errorf("%d steps rolled back; want 2", n)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'dropped' AND reason = 'rolled_back'"); n != 2 {
		t.Errorf("%d samples dropped as rolled back; want 2", n)
	}
	// The version's note says why, after the prefix that cli/serve.go reads.
	if n := count(t, db, "SELECT COUNT(*) FROM versions WHERE note LIKE ?", fmt.Sprintf("rollback to %d (skill): held-out skill 0.50 %%", start)); n != 1 {
		t.Errorf("no version records the rollback to %d and its reason", start)
	}
	// The good version is pinned on disk, so pruning keeps it.
	if st.Good == start || !weights.Pinned(root, st.Good) {
		t.Errorf("last good %d (start %d) pinned: %v", st.Good, start, weights.Pinned(root, st.Good))
	}
}

// An injected NaN: a sample whose teacher log-probs are NaN makes a
// non-finite step, which the trainer skips; the guard serves the last good
// version (the start: the skill check has not passed anything newer) and
// lowers the learning rate.
func TestGuardNonFinite(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	skill := func(context.Context) (float64, error) { return 1, nil }
	l, tr, _ := guardLoop(t, r, db, GuardOptions{Skill: skill, SkillMargin: 0.1, SkillEvery: 100}, false)
	start := r.store.Current()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	turn := r.generate(t, []int32{1, 2, 3})
	turn.ResponseID = "chatcmpl-ok"
	put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	waitFor(t, "a step", func() bool { return tr.StepCount() == 1 })

	bad := r.generate(t, []int32{4, 5, 6})
	bad.ResponseID = "chatcmpl-nan"
	db.Offer(session.Record{Kind: session.KindRecorded, Turn: bad})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	nan := make([]float32, len(bad.ResponseTokens))
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	if err := db.AddSample(store.Sample{TurnID: "chatcmpl-nan/0", Version: bad.Version, Kind: "distill", Source: "judge", Teacher: nan, Hint: "x"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the guard to trip", func() bool { return l.Guard().Events["nonfinite"] == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tr.LRScale() != 0.5 || tr.StepCount() != 0 {
		t.Errorf("lr scale %v, step %d; want 0.5 and the start's 0", tr.LRScale(), tr.StepCount())
	}
	if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE reason LIKE 'nonfinite%'"); n != 1 {
		t.Errorf("%d samples dropped as non-finite; want 1", n)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM versions WHERE note LIKE ?", fmt.Sprintf("rollback to %d (nonfinite): a non-finite step: %%", start)); n != 1 {
		t.Error("the rollback and its reason are not recorded")
	}
}

// KL to the reference above the threshold trips the guard at once; a
// trainer that does not measure KL never trips it.
func TestGuardKL(t *testing.T) {
	for _, measure := range []bool{false, true} {
		t.Run(fmt.Sprint("measure=", measure), func(t *testing.T) {
			r := newRig(t)
			db := openDB(t)
			l, tr, _ := guardLoop(t, r, db, GuardOptions{KLMax: 1e-9}, measure)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			// KL is measured before the update, on the parameters the step
			// starts from: the first step's is 0, the second's is not.
			for i := range 2 {
				turn := r.generate(t, []int32{1, 2, int32(3 + i)})
				turn.ResponseID = fmt.Sprintf("chatcmpl-kl%d", i)
				put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
				waitFor(t, "a step", func() bool { return count(t, db, "SELECT COUNT(*) FROM steps") == i+1 })
			}
			if measure {
				waitFor(t, "the guard to trip", func() bool { return l.Guard().Events["kl"] == 1 })
			}
			cancel()
			<-done
			if trips := l.Guard().Events["kl"]; (trips == 1) != measure {
				t.Errorf("%d KL trips; want %v", trips, measure)
			}
			if measure && (tr.StepCount() != 1 || tr.LRScale() != 0.5) {
				t.Errorf("step %d lr scale %v after the trip", tr.StepCount(), tr.LRScale())
			}
			if n := count(t, db, "SELECT COUNT(*) FROM versions WHERE note LIKE 'rollback to % (kl): KL to the reference % > 1e-09'"); (n == 1) != measure {
				t.Errorf("%d versions note a rollback for KL; want %v", n, measure)
			}
		})
	}
}

// The skill baseline is the first start's, kept across restarts: a decline
// spread over restarts still counts from the start. A restart scores no
// probes before its first step (they would hold it back).
func TestGuardBaselineKeptAcrossRestarts(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	for i, score := range []float64{0.9, 0.6} {
		calls := 0
		skill := func(context.Context) (float64, error) { calls++; return score, nil }
		l, _, _ := guardLoop(t, r, db, GuardOptions{Skill: skill, SkillMargin: 0.1}, false)
		l.guardStart(context.Background())
		if got := l.Guard().Baseline; got != 0.9 {
			t.Errorf("start %d: baseline %v; want the first start's 0.9", i, got)
		}
		if want := 1 - i; calls != want {
			t.Errorf("start %d scored the probes %d times before its first step; want %d", i, calls, want)
		}
	}
}

// A baseline stored for another probe set (or in the old bare-number
// form, for the unnamed set) is not comparable: it is measured again.
func TestGuardBaselineProbeSetChanged(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	if err := db.SetMeta(metaGuardBaseline, "0.9"); err != nil { // written by an older daemon
		t.Fatal(err)
	}
	for _, c := range []struct {
		set   string
		score float64
		want  float64
	}{
		{"", 0.7, 0.9},          // the same (unnamed) set: kept
		{"skills-24", 0.6, 0.6}, // a new set: measured again
		{"skills-24", 0.3, 0.6}, // kept for it
		{"skills-32", 0.5, 0.5},
	} {
		skill := func(context.Context) (float64, error) { return c.score, nil }
		l, _, _ := guardLoop(t, r, db, GuardOptions{Skill: skill, SkillSet: c.set, SkillMargin: 0.1}, false)
		l.guardStart(context.Background())
		if got := l.Guard().Baseline; got != c.want {
			t.Errorf("set %q scoring %v: baseline %v; want %v", c.set, c.score, got, c.want)
		}
	}
}

// The learning rate a rollback lowered stays lowered after a restart.
func TestGuardLRScaleKeptAcrossRestarts(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, tr, _ := guardLoop(t, r, db, GuardOptions{LRFactor: 0.5}, false)
	l.guardStart(context.Background())
	l.guardTrip("test", "kl")
	l.guardTrip("test", "kl")
	if got := tr.LRScale(); got != 0.25 {
		t.Fatalf("lr scale %v after two trips; want 0.25", got)
	}
	l2, tr2, _ := guardLoop(t, r, db, GuardOptions{LRFactor: 0.5}, false)
	if got := tr2.LRScale(); got != 1 {
		t.Fatalf("a new trainer starts at lr scale %v", got)
	}
	l2.guardStart(context.Background())
	if got := tr2.LRScale(); got != 0.25 {
		t.Errorf("lr scale %v after a restart; want the stored 0.25", got)
	}
	if got := l2.Guard().LRScale; got != 0.25 {
		t.Errorf("guard status lr scale %v", got)
	}
}

// A lowered learning rate recovers by one trip's factor after
// RecoverAfter good checks in a row, up to the configured rate; a trip
// restarts the count; the recovered scale is what a restart reads; with
// RecoverAfter 0 it stays lowered.
func TestGuardLRRecovers(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, tr, _ := guardLoop(t, r, db, GuardOptions{LRFactor: 0.5, RecoverAfter: 2}, false)
	l.guardStart(context.Background())
	l.guardTrip("test", "kl")
	l.guardTrip("test", "kl")
	steps := []struct {
		trip bool
		want float64
	}{
		{false, 0.25}, {false, 0.5}, // two good checks: one factor back
		{false, 0.5}, {true, 0.25}, {false, 0.25}, // a trip restarts the count
		{false, 0.5}, {false, 0.5}, {false, 1}, {false, 1}, {false, 1}, // never above the configured rate
	}
	for i, s := range steps {
		if s.trip {
			l.guardTrip("test", "skill")
		} else {
			l.guardGoodCheck()
		}
		if got := tr.LRScale(); got != s.want {
			t.Fatalf("step %d: lr scale %v; want %v", i, got, s.want)
		}
	}
	l.guardTrip("test", "kl")
	l2, tr2, _ := guardLoop(t, r, db, GuardOptions{LRFactor: 0.5}, false)
	l2.guardStart(context.Background())
	if got := tr2.LRScale(); got != 0.5 {
		t.Errorf("lr scale %v after a restart; want the stored 0.5", got)
	}
	for range 5 {
		l2.guardGoodCheck()
	}
	if got := tr2.LRScale(); got != 0.5 {
		t.Errorf("lr scale %v with recover_after 0; want it kept at 0.5", got)
	}
}

// The learning rate recovers in a running loop: a skill regression trips
// the guard (rollback, rate halved), then skill checks pass again and,
// after RecoverAfter of them in a row, the rate is back to the configured
// one; a restart reads the recovered scale.
func TestGuardLRRecoversInTheLoop(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	var checks atomic.Int32
	skill := func(context.Context) (float64, error) {
		if checks.Add(1) == 2 {
			return 0.5, nil // the first check after training: forgot
		}
		return 0.9, nil // the start, and every check after the rollback
	}
	l, tr, _ := guardLoop(t, r, db, GuardOptions{Skill: skill, SkillMargin: 0.1, SkillEvery: 1, LRFactor: 0.5, RecoverAfter: 2}, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	turn := func(i int) {
		tn := r.generate(t, []int32{1, 2, int32(3 + i)})
		tn.ResponseID = fmt.Sprintf("chatcmpl-rec%d", i)
		put(t, db, tn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	}
	turn(0)
	waitFor(t, "the guard to trip", func() bool { return l.Guard().Events["skill"] == 1 })
	if got := tr.LRScale(); got != 0.5 {
		t.Fatalf("lr scale %v after the trip; want 0.5", got)
	}
	for i := 1; i <= 2; i++ {
		turn(i)
		waitFor(t, fmt.Sprintf("skill check %d after the trip", i), func() bool { return checks.Load() == int32(2+i) })
	}
	waitFor(t, "the rate to recover", func() bool { return tr.LRScale() == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l2, tr2, _ := guardLoop(t, r, db, GuardOptions{LRFactor: 0.5, RecoverAfter: 2}, false)
	l2.guardStart(context.Background())
	if got := tr2.LRScale(); got != 1 {
		t.Errorf("lr scale %v after a restart; want the recovered 1", got)
	}
}
