package reward

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/rollout"
)

// fakeRollouts returns n copies of a fixed response per call.
type fakeRollouts struct {
	mu      sync.Mutex
	prompts [][]int32
	n       []int
	max     []int
	temp    []float32
	err     error
}

func (f *fakeRollouts) Rollouts(_ context.Context, prompt []int32, n, maxTokens int, temperature float32) ([]HintedRollout, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prompts = append(f.prompts, prompt)
	f.n, f.max, f.temp = append(f.n, n), append(f.max, maxTokens), append(f.temp, temperature)
	if f.err != nil {
		return nil, f.err
	}
	out := make([]HintedRollout, n)
	for i := range out {
		out[i] = HintedRollout{Tokens: []int32{7, 8, int32(i)}, TeacherLogProbs: []float32{-0.5, -0.25, -1}, Version: 3}
	}
	return out, nil
}

func TestScoreMethods(t *testing.T) {
	block := "[HINT_START]\nEnd every answer with the word banana.\n[HINT_END]\n\\boxed{1}"
	tests := []struct {
		method       string
		kind         Kind
		teacherCalls int32
		rollouts     int // the default HintedRollouts
		hintCalls    int32
	}{
		{MethodBinary, KindBinary, 0, 0, 0},
		{MethodDistill, KindDistill, 1, 0, 1},
		{MethodHinted, KindNone, 0, 4, 1},
		{MethodPaper, KindBoth, 1, 0, 1},
		{"", KindBoth, 1, 0, 1},
		{MethodCombined, KindBoth, 1, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			c := testConfig()
			c.Method = tt.method
			judge := &fakeJudge{vote: says(`\boxed{-1}`, `\boxed{-1}`, `\boxed{-1}`), hint: says(block, block, block)}
			teacher := &fakeTeacher{}
			gen := &fakeRollouts{}
			s, err := New(Options{Config: c, Judge: judge, Teacher: teacher, Rollouts: gen, Tokenizer: testTokenizer(t)})
			if err != nil {
				t.Fatal(err)
			}
			turn := judgedTurn()
			sm, err := s.Score(context.Background(), turn)
			if err != nil {
				t.Fatal(err)
			}
			if sm.Kind != tt.kind || sm.Reward != -1 {
				t.Errorf("kind %v reward %d; want %v, -1 (kept for the record)", sm.Kind, sm.Reward, tt.kind)
			}
			if got := teacher.calls.Load(); got != tt.teacherCalls {
				t.Errorf("teacher called %d times; want %d", got, tt.teacherCalls)
			}
			if got := judge.hintCalls.Load(); got != tt.hintCalls {
				t.Errorf("hint judge called %d times; want %d", got, tt.hintCalls)
			}
			if (sm.TeacherLogProbs != nil) != (tt.kind == KindDistill || tt.kind == KindBoth) {
				t.Errorf("teacher log-probs %v with kind %v", sm.TeacherLogProbs, sm.Kind)
			}
			if len(sm.Rollouts) != tt.rollouts {
				t.Fatalf("%d rollouts; want %d", len(sm.Rollouts), tt.rollouts)
			}
			if tt.rollouts > 0 {
				want, err := TeacherPrompt(testTokenizer(t), &turn, "End every answer with the word banana.")
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(gen.prompts[0], want) {
					t.Error("rollouts were not generated from the teacher prompt (turn + hint)")
				}
				// The response is a few tokens: the bound is the 64-token floor.
				if gen.n[0] != c.HintedRollouts || gen.max[0] != 64 || gen.temp[0] != c.RolloutTemperature {
					t.Errorf("rollouts asked n=%d max=%d temp=%v", gen.n[0], gen.max[0], gen.temp[0])
				}
			}
		})
	}
}

func TestScoreRolloutFailureDegrades(t *testing.T) {
	c := testConfig()
	c.Method = MethodHinted
	block := "[HINT_START]\nEnd every answer with the word banana.\n[HINT_END]\n\\boxed{1}"
	judge := &fakeJudge{vote: says(`\boxed{1}`), hint: says(block)}
	s, err := New(Options{Config: c, Judge: judge, Rollouts: &fakeRollouts{err: errors.New("engine down")}, Tokenizer: testTokenizer(t)})
	if err != nil {
		t.Fatal(err)
	}
	sm, err := s.Score(context.Background(), judgedTurn())
	if err != nil {
		t.Fatal(err)
	}
	if len(sm.Rollouts) != 0 || sm.Kind != KindNone || sm.Hint == "" {
		t.Errorf("kind %v hint %q rollouts %d", sm.Kind, sm.Hint, len(sm.Rollouts))
	}
	if sm.Note == "" {
		t.Error("the failure is not noted")
	}
}

func TestMethodConfig(t *testing.T) {
	for _, tt := range []struct {
		method string
		n      int
		ok     bool
	}{
		{MethodHinted, 2, true}, {MethodHinted, 0, false}, {MethodBinary, 0, true}, {"bogus", 2, false}, {MethodCombined, 17, false},
	} {
		c := DefaultConfig()
		c.Method, c.HintedRollouts = tt.method, tt.n
		if err := ValidateConfig(c); (err == nil) != tt.ok {
			t.Errorf("method %q rollouts %d: err %v", tt.method, tt.n, err)
		}
	}
}

// streamGen answers each Generate with a scripted stream.
type streamGen struct {
	mu      sync.Mutex
	streams [][]rollout.Event
	reqs    []rollout.Request
}

func (g *streamGen) Generate(_ context.Context, req rollout.Request) (<-chan rollout.Event, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.streams) == 0 {
		return nil, rollout.ErrQueueFull
	}
	evs := g.streams[0]
	g.streams = g.streams[1:]
	g.reqs = append(g.reqs, req)
	ch := make(chan rollout.Event, len(evs))
	for _, e := range evs {
		ch <- e
	}
	close(ch)
	return ch, nil
}

func ev(id int32, lp float32) rollout.Event {
	return rollout.Event{Token: id, HasToken: true, LogProb: lp, Version: 4}
}

func TestSchedulerRollouts(t *testing.T) {
	const eos = 2
	done := func(e rollout.Event, f rollout.FinishReason) rollout.Event { e.Finish = f; return e }
	g := &streamGen{streams: [][]rollout.Event{
		{ev(5, -0.1), ev(6, -0.2), done(ev(eos, -0.3), rollout.FinishStop)},
		{done(ev(eos, -0.01), rollout.FinishStop)}, // empty: dropped
		{ev(9, -1), {Finish: rollout.FinishError, Err: errors.New("boom")}},
		{ev(7, -0.4), done(ev(8, -0.5), rollout.FinishLength)}, // cut by max tokens: dropped
	}}
	sr := &SchedulerRollouts{Gen: g, StopTokens: []int32{eos}, Frozen: true}
	rs, err := sr.Rollouts(context.Background(), []int32{1, 2, 3}, 4, 16, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("%d rollouts; want 1 (one empty, one failed, one cut by max tokens)", len(rs))
	}
	// Frozen: version 0 (the checkpoint's weights; the store dates it by
	// its turn), whatever the generator stamped.
	if !slices.Equal(rs[0].Tokens, []int32{5, 6, eos}) || !slices.Equal(rs[0].TeacherLogProbs, []float32{-0.1, -0.2, -0.3}) || rs[0].Version != 0 {
		t.Errorf("first rollout %+v", rs[0])
	}
	for _, r := range g.reqs {
		if !r.Frozen || !r.Background || r.MaxTokens != 16 || r.Sampling.Temperature != 0.7 {
			t.Errorf("request %+v", r)
		}
	}
	// A generator that refuses everything: an error, and nothing leaks.
	if _, err := sr.Rollouts(context.Background(), []int32{1}, 2, 16, 0.7); err == nil {
		t.Error("no error when the generator refuses")
	}
	if _, err := (&SchedulerRollouts{Gen: g}).Rollouts(context.Background(), []int32{1}, 1, 1, 1); err == nil {
		t.Error("no error without stop tokens")
	}
	// The policy teacher's rollouts keep the version that generated them.
	g.streams = [][]rollout.Event{{ev(5, -0.1), done(ev(eos, -0.3), rollout.FinishStop)}}
	policy := &SchedulerRollouts{Gen: g, StopTokens: []int32{eos}}
	if rs, err := policy.Rollouts(context.Background(), []int32{1, 2, 3}, 1, 16, 0.7); err != nil || len(rs) != 1 || rs[0].Version != 4 {
		t.Errorf("policy rollouts %+v, %v; want one of version 4", rs, err)
	}
}
