package loop

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
)

// judge answers every vote with a scripted verdict and counts calls.
type judge struct {
	verdict string
	calls   atomic.Int32
}

func (j *judge) Complete(_ context.Context, req reward.Request) ([]string, error) {
	j.calls.Add(1)
	out := make([]string, req.N)
	for i := range out {
		out[i] = "The user moved on. " + j.verdict
	}
	return out, nil
}

type rig struct {
	dir   string
	m     *model.Model
	store *weights.Store
	sched *rollout.Scheduler
}

func newRig(t *testing.T) *rig {
	t.Helper()
	dir := t.TempDir()
	spec := model.RandomSpec{
		Arch: model.ArchQwen3, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: 64, MaxPositions: 256, DType: "float32", Seed: 5, InitStd: 0.2,
	}
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: m.Config.KVBytesPerToken(compute.F32) * 1024})
	if err != nil {
		t.Fatal(err)
	}
	store := weights.NewStore(weights.StoreOptions{Keep: 1})
	if _, err := store.Publish(m.Weights(), 0, weights.Meta{Note: "base"}); err != nil {
		t.Fatal(err)
	}
	sched, err := rollout.New(rollout.Options{Model: m, Cache: kv, Versions: store, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sched.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		store.Close()
		kv.Close()
		m.Close()
	})
	return &rig{dir: dir, m: m, store: store, sched: sched}
}

// generate runs one greedy generation and returns the record a server
// would make of it.
func (r *rig) generate(t *testing.T, prompt []int32) *session.Turn {
	t.Helper()
	ch, err := r.sched.Generate(context.Background(), rollout.Request{Prompt: prompt, MaxTokens: 6, Sampling: sample.Params{}})
	if err != nil {
		t.Fatal(err)
	}
	turn := &session.Turn{ResponseID: "chatcmpl-x", PromptTokens: prompt,
		Messages: []tokenizer.Message{{Role: "user", Content: "hi"}}, Reply: tokenizer.Message{Role: "assistant", Content: "hello"}}
	for ev := range ch {
		if ev.HasToken {
			turn.ResponseTokens = append(turn.ResponseTokens, ev.Token)
			turn.LogProbs = append(turn.LogProbs, ev.LogProb)
			turn.Version = ev.Version
		}
	}
	return turn
}

// put writes a turn through the store's sink as the tracker would: recorded
// at generation, completed when its next state arrives.
func put(t *testing.T, db *store.DB, turn *session.Turn, next []tokenizer.Message) {
	t.Helper()
	db.Offer(session.Record{Kind: session.KindRecorded, Turn: turn})
	done := *turn
	done.NextState, done.End, done.Completed = next, session.EndNextState, time.Now()
	if next == nil {
		done.End = session.EndExpired
	}
	db.Offer(session.Record{Kind: session.KindTurn, Turn: &done})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
}

func newLoop(t *testing.T, r *rig, db *store.DB, j reward.Backend, batch int) (*Loop, *trainer.Trainer) {
	t.Helper()
	cfg := reward.DefaultConfig()
	cfg.HintVotes = 0
	scorer, err := reward.New(reward.Options{Config: cfg, Judge: j, Log: zerolog.Nop()})
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
	l, err := New(Options{DB: db, Scorer: scorer, Trainer: tr, Versions: r.store, BatchSize: batch,
		Poll: 20 * time.Millisecond, Registry: prometheus.NewRegistry(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	return l, tr
}

func openDB(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func count(t *testing.T, db *store.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.SQL().QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLoopTrainsAndPublishes(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	j := &judge{verdict: `\boxed{1}`}
	l, _ := newLoop(t, r, db, j, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	before := r.store.Current()
	for i := range 2 {
		turn := r.generate(t, []int32{1, 2, 3, int32(4 + i)})
		turn.ResponseID = fmt.Sprintf("chatcmpl-%d", i)
		if turn.Version != before {
			t.Fatalf("generation on version %d, want %d", turn.Version, before)
		}
		put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks, next question"}})
	}
	// A turn with no evidence scores nothing and trains nothing.
	none := r.generate(t, []int32{9, 9})
	none.ResponseID = "chatcmpl-none"
	put(t, db, none, nil)

	waitFor(t, "a published version", func() bool { return r.store.Current() != before })
	after := r.store.Current()
	if got := r.generate(t, []int32{1, 2, 3}); got.Version != after {
		t.Errorf("next generation on version %d, want the published %d", got.Version, after)
	}
	if st := l.LastStep(); !st.Applied || st.Samples != 2 {
		t.Errorf("last step %+v, want 2 samples applied", st)
	}
	waitFor(t, "the empty turn scored", func() bool { return count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'nosignal'") == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(l.met.published); n != 1 {
		t.Errorf("%v versions published, want 1", n)
	}
	if w := testutil.ToFloat64(l.met.step.WithLabelValues("importance_weight")); w <= 0 {
		t.Errorf("importance weight gauge %v after a step", w)
	}
	if n := testutil.ToFloat64(l.met.step.WithLabelValues("samples")); n != 2 {
		t.Errorf("samples gauge %v, want 2", n)
	}
	if j.calls.Load() != 2 {
		t.Errorf("judge called %d times, want 2 (the turn without evidence is not judged)", j.calls.Load())
	}
	if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained' AND step_id IS NOT NULL"); n != 2 {
		t.Errorf("%d samples recorded as trained, want 2", n)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM steps WHERE status = 'applied' AND version = ?", after); n != 1 {
		t.Errorf("%d applied steps recorded for version %d, want 1", n, after)
	}
	// The step's record carries the trainer's numbers for it.
	h, err := db.History(0)
	if err != nil || len(h.Steps) != 1 {
		t.Fatalf("history %+v, %v", h, err)
	}
	met, got := l.LastStep(), h.Steps[0].Stats
	for _, tt := range []struct {
		stat string
		want float64
	}{
		{"loss", met.Loss}, {"kl", met.KL}, {"step_kl", met.StepKL}, {"trust_scale", met.TrustScale},
		{"entropy", met.Entropy}, {"grad_norm", met.GradNorm}, {"lr", met.LR}, {"lr_scale", 1},
		{"clip_fraction", met.ClipFraction}, {"importance_weight", met.ImportanceWeight}, {"samples", 2}, {"tokens", float64(met.Tokens)},
	} {
		if v, ok := got[tt.stat]; !ok || v != tt.want {
			t.Errorf("stat %s = %v (recorded: %v), want %v", tt.stat, v, ok, tt.want)
		}
	}
	if met.Entropy <= 0 || met.GradNorm <= 0 || met.LR <= 0 || got["seconds"] <= 0 {
		t.Errorf("a trained step with entropy %v, grad norm %v, lr %v, %v s", met.Entropy, met.GradNorm, met.LR, got["seconds"])
	}
}

// replayer hands out fixed supervised samples, or fails.
type replayer struct {
	fail     bool
	versions []uint64
}

func (r *replayer) Samples(n int, version uint64) ([]trainer.Sample, error) {
	r.versions = append(r.versions, version)
	if r.fail {
		return nil, fmt.Errorf("no replay today")
	}
	out := make([]trainer.Sample, n)
	for i := range out {
		out[i] = trainer.Sample{ResponseID: "replay", Prompt: []int32{1, 2}, Response: []int32{5, 6}, Advantages: []float32{1, 1}, Version: version, Supervised: true}
	}
	return out, nil
}

// Replay samples join every step beside the store's, stamped with the
// trainer's version; only the store's are recorded. A replay source that
// fails does not stop training.
func TestReplayJoinsSteps(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprint("fail=", fail), func(t *testing.T) {
			r := newRig(t)
			db := openDB(t)
			l, tr := newLoop(t, r, db, &judge{verdict: `\boxed{1}`}, 2)
			rp := &replayer{fail: fail}
			l.opts.Replay, l.opts.ReplaySamples = rp, 3
			start := tr.Version()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			for i := range 2 {
				turn := r.generate(t, []int32{1, 2, 3, int32(4 + i)})
				turn.ResponseID = fmt.Sprintf("chatcmpl-%d", i)
				put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks, next question"}})
			}
			waitFor(t, "a published version", func() bool { return r.store.Current() != start })
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			want, replayed := 5, 3.0
			if fail {
				want, replayed = 2, 0
			}
			if st := l.LastStep(); !st.Applied || st.Samples != want {
				t.Errorf("last step %+v, want %d samples applied", st, want)
			}
			if n := testutil.ToFloat64(l.met.replayed); n != replayed {
				t.Errorf("%v replay samples counted, want %v", n, replayed)
			}
			if len(rp.versions) != 1 || rp.versions[0] != start {
				t.Errorf("replay drawn at versions %v, want [%d]", rp.versions, start)
			}
			if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained' AND step_id IS NOT NULL"); n != 2 {
				t.Errorf("%d samples recorded as trained, want the store's 2", n)
			}
		})
	}
}

// Late feedback on a turn that has already trained becomes a new sample,
// trained in a later step; the first sample is not trained again.
func TestLateFeedbackTrains(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, _ := newLoop(t, r, db, &judge{verdict: `\boxed{1}`}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()

	turn := r.generate(t, []int32{1, 2, 3})
	turn.ResponseID = "chatcmpl-late"
	put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "ok thanks"}})
	waitFor(t, "the first step", func() bool { return count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained'") == 1 })
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-1", ResponseID: "chatcmpl-late", Thumb: -1, Received: time.Now()}})
	waitFor(t, "the late sample trained", func() bool { return count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained'") == 2 })
	var reward int
	if err := db.SQL().QueryRow("SELECT reward FROM samples WHERE id = ?", store.SampleID(store.TurnID("chatcmpl-late", 0), 1)).Scan(&reward); err != nil {
		t.Fatal(err)
	}
	if reward != -1 {
		t.Errorf("late thumb-down sample has reward %d, want -1 (the thumb overrides the judge)", reward)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM steps WHERE status = 'applied'"); n != 2 {
		t.Errorf("%d steps, want 2", n)
	}
}

// A restart from an older checkpoint marks the steps after it lost and
// queues their samples again, so each trains exactly once on the resumed
// lineage.
func TestResumeRequeuesLostSteps(t *testing.T) {
	r := newRig(t)
	db := openDB(t)
	l, tr := newLoop(t, r, db, &judge{verdict: `\boxed{1}`}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	for i := range 3 {
		turn := r.generate(t, []int32{1, 2, int32(3 + i)})
		turn.ResponseID = fmt.Sprintf("chatcmpl-r%d", i)
		put(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	}
	waitFor(t, "three steps", func() bool { return count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained'") == 3 })
	cancel()
	<-done
	if tr.StepCount() != 3 {
		t.Fatalf("trainer at step %d, want 3", tr.StepCount())
	}
	res, err := db.Resume(1, false) // the checkpoint held step 1
	if err != nil {
		t.Fatal(err)
	}
	if res.LostSteps != 2 || res.Requeued != 2 || res.QueuedSamples != 2 {
		t.Errorf("resume %+v, want 2 lost steps and 2 samples queued again", res)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'trained'"); n != 1 {
		t.Errorf("%d samples still trained, want 1", n)
	}
}

func TestToTrainerSample(t *testing.T) {
	base := store.Sample{ID: "r/0#0", Prompt: []int32{1}, Response: []int32{2}, LogProbs: []float32{-1}, Version: 3,
		Reward: -1, Teacher: []float32{-0.5}}
	tests := []struct {
		kind        reward.Kind
		reward      float32
		withTeacher bool
	}{
		{reward.KindBinary, -1, false},
		{reward.KindDistill, 0, true},
		{reward.KindBoth, -1, true},
	}
	for _, tt := range tests {
		s := base
		s.Kind = tt.kind.String()
		got := ToTrainerSample(s)
		if got.Reward != tt.reward || (got.TeacherLogProbs != nil) != tt.withTeacher || got.Version != 3 ||
			!slices.Equal(got.RolloutLogProbs, base.LogProbs) || got.TurnID != "r/0#0" {
			t.Errorf("%v: got %+v", tt.kind, got)
		}
	}
	// A hinted rollout: the teacher's response, learnt from the teacher's
	// log-probs alone (no reward, no behaviour log-probs to correct for).
	s := base
	s.Kind, s.LogProbs = store.KindRollout, nil
	got := ToTrainerSample(s)
	if got.Reward != 0 || !slices.Equal(got.TeacherLogProbs, base.Teacher) || got.RolloutLogProbs != nil || !got.TeacherDrawn || got.Mask != nil {
		t.Errorf("rollout: got %+v", got)
	}
}

// TestToTrainerSampleBehaviour: the behaviour log-probs are those of the
// distribution the tokens were drawn from when the turn recorded them
// (else the model's own, as before), and the tokens a grammar forced are
// masked out of the loss.
func TestToTrainerSampleBehaviour(t *testing.T) {
	s := store.Sample{ID: "g/0#0", Kind: reward.KindBinary.String(), Reward: -1, Prompt: []int32{1}, Response: []int32{2, 3, 4},
		LogProbs: []float32{-1, -2, -3}, SampleLogProbs: []float32{-0.5, 0, -1}, Forced: []bool{false, true, false}}
	got := ToTrainerSample(s)
	if !slices.Equal(got.RolloutLogProbs, s.SampleLogProbs) || !slices.Equal(got.Mask, []bool{true, false, true}) {
		t.Errorf("behaviour %v mask %v; want the sampling log-probs and the forced token masked", got.RolloutLogProbs, got.Mask)
	}
	s.SampleLogProbs, s.Forced = nil, []bool{false, false, false}
	got = ToTrainerSample(s)
	if !slices.Equal(got.RolloutLogProbs, s.LogProbs) || got.Mask != nil {
		t.Errorf("a turn recorded before: behaviour %v mask %v; want the model's own and no mask", got.RolloutLogProbs, got.Mask)
	}
}

func TestToRewardTurn(t *testing.T) {
	st := store.ReadyTurn{ID: "chatcmpl-a/1", Gen: 2, Prompt: []int32{1}, Response: []int32{2},
		LogProbs: []float32{-1}, Version: 2, Feedback: []session.Feedback{{Thumb: 1, Text: "great"}},
		NextState: []tokenizer.Message{{Role: "user", Content: "ok"}}}
	rt := ToRewardTurn(st, map[string]any{"enable_thinking": false})
	if rt.ID != "chatcmpl-a/1#2" || rt.Version != 2 || len(rt.Feedback) != 1 || rt.Feedback[0].Thumb != 1 ||
		rt.TemplateVars["enable_thinking"] != false || len(rt.NextState) != 1 {
		t.Errorf("got %+v", rt)
	}
}
