package loop

import (
	"context"
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
	return &rig{m: m, store: store, sched: sched}
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

func TestLoopTrainsAndPublishes(t *testing.T) {
	r := newRig(t)
	records := make(chan session.Record, 8)
	j := &judge{verdict: `\boxed{1}`}
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
	defer tr.Close()
	tr.SetVersion(r.store.Current())
	reg := prometheus.NewRegistry()
	l, err := New(Options{Records: records, Scorer: scorer, Trainer: tr, Store: r.store, BatchSize: 2, Registry: reg, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()

	before := r.store.Current()
	for i := range 2 {
		turn := r.generate(t, []int32{1, 2, 3, int32(4 + i)})
		if turn.Version != before {
			t.Fatalf("generation on version %d, want %d", turn.Version, before)
		}
		turn.NextState = []tokenizer.Message{{Role: "user", Content: "thanks, next question"}}
		turn.End = session.EndNextState
		records <- session.Record{Kind: session.KindTurn, Turn: turn}
	}
	// A turn with no evidence scores nothing and trains nothing.
	records <- session.Record{Kind: session.KindTurn, Turn: r.generate(t, []int32{9, 9})}

	deadline := time.Now().Add(30 * time.Second)
	for r.store.Current() == before {
		if time.Now().After(deadline) {
			t.Fatalf("no version published; last step %+v", l.LastStep())
		}
		time.Sleep(10 * time.Millisecond)
	}
	after := r.store.Current()
	if got := r.generate(t, []int32{1, 2, 3}); got.Version != after {
		t.Errorf("next generation on version %d, want the published %d", got.Version, after)
	}
	if st := l.LastStep(); !st.Applied || st.Samples != 2 {
		t.Errorf("last step %+v, want 2 samples applied", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(l.met.published); n != 1 {
		t.Errorf("%v versions published, want 1", n)
	}
	if n := testutil.ToFloat64(l.met.scored.WithLabelValues(reward.KindNone.String())); n != 1 {
		t.Errorf("%v turns scored as nothing, want 1", n)
	}
	if j.calls.Load() != 2 {
		t.Errorf("judge called %d times, want 2 (the turn without evidence is not judged)", j.calls.Load())
	}
}

func TestToTrainerSample(t *testing.T) {
	base := reward.Sample{TurnID: "r/0", PromptTokens: []int32{1}, ResponseTokens: []int32{2}, LogProbs: []float32{-1}, Version: 3,
		Reward: -1, TeacherLogProbs: []float32{-0.5}}
	tests := []struct {
		kind        reward.Kind
		ok          bool
		reward      float32
		withTeacher bool
	}{
		{reward.KindNone, false, 0, false},
		{reward.KindBinary, true, -1, false},
		{reward.KindDistill, true, 0, true},
		{reward.KindBoth, true, -1, true},
	}
	for _, tt := range tests {
		s := base
		s.Kind = tt.kind
		got, ok := ToTrainerSample(s)
		if ok != tt.ok {
			t.Fatalf("%v: ok = %v", tt.kind, ok)
		}
		if !ok {
			continue
		}
		if got.Reward != tt.reward || (got.TeacherLogProbs != nil) != tt.withTeacher || got.Version != 3 ||
			!slices.Equal(got.RolloutLogProbs, base.LogProbs) || got.TurnID != "r/0" {
			t.Errorf("%v: got %+v", tt.kind, got)
		}
	}
}

func TestToRewardTurn(t *testing.T) {
	st := &session.Turn{ResponseID: "chatcmpl-a", Choice: 1, PromptTokens: []int32{1}, ResponseTokens: []int32{2},
		LogProbs: []float32{-1}, Version: 2, Feedback: []session.Feedback{{Thumb: 1, Text: "great"}},
		NextState: []tokenizer.Message{{Role: "user", Content: "ok"}}}
	rt := ToRewardTurn(st, map[string]any{"enable_thinking": false})
	if rt.ID != "chatcmpl-a/1" || rt.Version != 2 || len(rt.Feedback) != 1 || rt.Feedback[0].Thumb != 1 ||
		rt.TemplateVars["enable_thinking"] != false || len(rt.NextState) != 1 {
		t.Errorf("got %+v", rt)
	}
}
