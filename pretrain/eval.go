package pretrain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

// Evaluation of a checkpoint through the serving engine (model, KV cache,
// continuous-batching scheduler), with greedy decoding, on held-out
// questions of the corpus.

// Score counts right answers.
type Score struct {
	N       int     `json:"n"`
	Correct int     `json:"correct"`
	Rate    float64 `json:"rate"`
}

func (s *Score) add(ok bool) {
	s.N++
	if ok {
		s.Correct++
	}
	s.Rate = float64(s.Correct) / float64(s.N)
}

// ToolScore grades tool-use prompts: the generated call parses (a
// <tool_call> block holding a JSON object with a name and an object of
// arguments), names the right function, and has exactly the expected
// arguments.
type ToolScore struct {
	N         int     `json:"n"`
	Parsed    int     `json:"parsed"`
	RightName int     `json:"right_name"`
	RightArgs int     `json:"right_args"`
	ParseRate float64 `json:"parse_rate"`
	NameRate  float64 `json:"name_rate"`
	ArgsRate  float64 `json:"args_rate"`
}

// Eval is the result of Evaluate.
type Eval struct {
	Arithmetic   Score            `json:"arithmetic"`
	ArithmeticBy map[string]Score `json:"arithmetic_by_op"`
	Tools        ToolScore        `json:"tools"`
	// Judge: held-out judge prompts whose \boxed{} vote (or hint
	// decision) matches the reference.
	Judge   Score    `json:"judge"`
	Samples []Sample `json:"samples"`

	// JudgeBy is the vote judge's agreement per class of what happened
	// next (praise, form_correction, tool_error, ...), hint examples left
	// out.
	JudgeBy map[string]Score `json:"judge_by_class,omitempty"`
	// Hints grades the hint judge on held-out corrections of a reply's
	// form: the hint parses and states the instruction the user gave.
	Hints HintScore `json:"hints"`
	// SessionVotes and SessionHints grade the judge on turns of sessions
	// with a lasting preference (session.go), the person correcting in
	// held-out phrasings as `clawrl bench learn` does: votes matching the
	// reference, and hints after a correction that parse and state the
	// preference's canonical instruction.
	SessionVotes Score     `json:"session_votes"`
	SessionHints HintScore `json:"session_hints"`
	// Follow is instruction following per kind (package instruct) on
	// held-out phrasings and arguments: "system" with the instruction in
	// the system prompt, "hint" with it appended to the request as the
	// teacher context does, "none" without it (the base rate: how often a
	// reply follows it by chance).
	Follow map[string]map[string]Score `json:"follow,omitempty"`
}

// HintScore grades hints.
type HintScore struct {
	N      int     `json:"n"`
	Parsed int     `json:"parsed"` // a hint between the markers, accepted
	Exact  int     `json:"exact"`  // the hint is the instruction the correction stated
	Rate   float64 `json:"parse_rate"`
	Exacts float64 `json:"exact_rate"`
}

// add grades one hint judge's answer against the hint wanted.
func (hs *HintScore) add(answer, want string) {
	hs.N++
	if h := reward.ParseHint(answer); h.Valid && h.Accept {
		hs.Parsed++
		if strings.TrimSpace(h.Hint) == want {
			hs.Exact++
		}
	}
	hs.Rate, hs.Exacts = float64(hs.Parsed)/float64(hs.N), float64(hs.Exact)/float64(hs.N)
}

// Placements of an instruction in the evaluation of Follow.
const (
	PlaceNone   = "none"
	PlaceSystem = "system"
	PlaceHint   = "hint"
)

// Sample is a conversation and the model's greedy reply.
type Sample struct {
	Messages []tokenizer.Message `json:"messages"`
	Tools    []string            `json:"tools,omitempty"` // names of the tools offered
	Reply    string              `json:"reply"`
}

// EvalOptions say how much to evaluate.
type EvalOptions struct {
	Seed                     uint64
	Arithmetic, Tools, Judge int
	// Follow is the number of held-out prompts per instruction kind and
	// placement; 0 skips that evaluation.
	Follow int
	Texts  *corpus.Texts // for the generator's text category (may be nil)
}

// evaluator generates greedily with a loaded checkpoint.
type evaluator struct {
	e     *engine.Engine
	m     *model.Model
	tok   *tokenizer.Tokenizer
	sched rollout.Generator
	stops []int32
}

// openEvaluator opens dir on the CPU with float32 products and a float32
// KV cache of 256 MiB, and a scheduler of 16 sequences.
func openEvaluator(dir string) (*evaluator, error) {
	cfg := engine.Defaults()
	cfg.Model.KVCacheMB, cfg.Model.KVCacheDType = 256, "f32"
	cfg.Rollout.MaxBatch, cfg.Rollout.QueueSize = 16, 64
	e, err := engine.Open(cfg, engine.Options{Model: dir, Log: zerolog.Nop()})
	if err != nil {
		return nil, err
	}
	return &evaluator{e: e, m: e.Model(), tok: e.Tokenizer(), sched: e.Scheduler(), stops: e.StopTokens()}, nil
}

// reply generates greedily after the conversation ex (up to maxTokens).
func (e *evaluator) reply(ctx context.Context, ex corpus.Example, maxTokens int) (string, error) {
	text, err := corpus.Render(e.tok, ex, true)
	if err != nil {
		return "", err
	}
	ids := e.tok.Encode(text)
	maxTokens = min(maxTokens, e.m.Config.MaxPositions-len(ids))
	if maxTokens < 1 {
		return "", fmt.Errorf("prompt of %d tokens leaves no room to generate", len(ids))
	}
	events, err := e.sched.Generate(ctx, rollout.Request{Prompt: ids, Sampling: sample.Params{Temperature: 0}, MaxTokens: maxTokens, StopTokens: e.stops})
	if err != nil {
		return "", err
	}
	var out []int32
	for ev := range events {
		if ev.HasToken && ev.Finish != rollout.FinishStop {
			out = append(out, ev.Token)
		}
		if ev.Err != nil {
			return "", ev.Err
		}
	}
	return e.tok.Decode(out), nil
}

// replies generates for every conversation, several at once.
func (e *evaluator) replies(ctx context.Context, exs []corpus.Example, maxTokens int) ([]string, error) {
	out := make([]string, len(exs))
	errs := make([]error, len(exs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range exs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = e.reply(ctx, exs[i], maxTokens)
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// Evaluate measures the checkpoint in dir on held-out questions: the
// accuracy of arithmetic answers, the share of tool-use prompts answered
// with a well-formed call of the right function, and the judge's votes;
// plus a few sample replies.
func Evaluate(ctx context.Context, dir string, o EvalOptions) (*Eval, error) {
	e, err := openEvaluator(dir)
	if err != nil {
		return nil, err
	}
	defer e.e.Close()
	g := corpus.NewGenerator(o.Texts)
	rng := rand.New(rand.NewPCG(o.Seed, 0xe7a1))
	res := &Eval{ArithmeticBy: map[string]Score{}}

	var arith []corpus.Example
	for range o.Arithmetic {
		ex := g.HeldOutExample(rng, corpus.CatArithmetic)
		arith = append(arith, corpus.Prompt(ex))
	}
	out, err := e.replies(ctx, arith, 40)
	if err != nil {
		return nil, err
	}
	for i, ex := range arith {
		ok := corpus.LastInteger(out[i]) == ex.Want
		res.Arithmetic.add(ok)
		op := opOf(ex.Key)
		s := res.ArithmeticBy[op]
		s.add(ok)
		res.ArithmeticBy[op] = s
	}

	var tools []corpus.Example
	var want []tokenizer.ToolCall
	for len(tools) < o.Tools {
		ex := g.HeldOutExample(rng, corpus.CatTools)
		m, _ := corpus.FirstReply(ex)
		if ex.Want == "" || len(m.ToolCalls) == 0 {
			continue
		}
		tools = append(tools, corpus.Prompt(ex))
		want = append(want, m.ToolCalls[0])
	}
	out, err = e.replies(ctx, tools, 160)
	if err != nil {
		return nil, err
	}
	ts := &res.Tools
	for i, ex := range tools {
		ts.N++
		c, ok := corpus.ParseToolCall(out[i])
		if !ok {
			continue
		}
		ts.Parsed++
		if c.Name == ex.Want {
			ts.RightName++
			if corpus.JSONEqual(c.Arguments, want[i].Function.Arguments) {
				ts.RightArgs++
			}
		}
	}
	if ts.N > 0 {
		ts.ParseRate, ts.NameRate, ts.ArgsRate = float64(ts.Parsed)/float64(ts.N), float64(ts.RightName)/float64(ts.N), float64(ts.RightArgs)/float64(ts.N)
	}

	var judge []corpus.Example
	var votes []int
	for range o.Judge {
		ex := g.HeldOutExample(rng, corpus.CatJudge)
		m, _ := corpus.FirstReply(ex)
		v, _ := reward.ParseVote(m.Content)
		judge = append(judge, corpus.Prompt(ex))
		votes = append(votes, v)
	}
	out, err = e.replies(ctx, judge, 120)
	if err != nil {
		return nil, err
	}
	res.JudgeBy = map[string]Score{}
	for i := range judge {
		v, ok := reward.ParseVote(out[i])
		res.Judge.add(ok && v == votes[i])
		if class, isVote := judgeClass(judge[i].Key); isVote {
			s := res.JudgeBy[class]
			s.add(ok && v == votes[i])
			res.JudgeBy[class] = s
		}
	}
	if err := e.evalHints(ctx, rng, o.Judge, &res.Hints); err != nil {
		return nil, err
	}
	if err := e.evalSessions(ctx, rng, o.Judge, &res.SessionVotes, &res.SessionHints); err != nil {
		return nil, err
	}
	if o.Follow > 0 {
		if res.Follow, err = e.evalFollow(ctx, rng, o.Follow); err != nil {
			return nil, err
		}
	}

	samples := corpus.SampleConversations()
	out, err = e.replies(ctx, samples, 160)
	if err != nil {
		return nil, err
	}
	for i, ex := range samples {
		s := Sample{Messages: ex.Messages, Reply: out[i]}
		for _, raw := range ex.Tools {
			var d struct {
				Function struct{ Name string } `json:"function"`
			}
			if json.Unmarshal(raw, &d) == nil {
				s.Tools = append(s.Tools, d.Function.Name)
			}
		}
		res.Samples = append(res.Samples, s)
	}
	return res, nil
}

// opOf is the operation of an arithmetic key ("arith:7+5").
func opOf(key string) string {
	for _, op := range []string{"+", "-", "*"} {
		if strings.Contains(strings.TrimPrefix(key, "arith:"), op) {
			return map[string]string{"+": "add", "-": "sub", "*": "mul"}[op]
		}
	}
	return "?"
}

// judgeClass reads the class of what happened next from a judge example's
// key, and whether it is a vote (not a hint) example.
func judgeClass(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "judge:")
	if !ok {
		return "", false
	}
	class, _, _ := strings.Cut(rest, "|")
	return class, !strings.Contains(key, "|hint")
}

// evalHints asks the hint judge about n held-out corrections of a reply's
// form.
func (e *evaluator) evalHints(ctx context.Context, rng *rand.Rand, n int, hs *HintScore) error {
	exs, want := corpus.HintCases(rng, n)
	out, err := e.replies(ctx, exs, 120)
	if err != nil {
		return err
	}
	for i := range exs {
		hs.add(out[i], want[i])
	}
	return nil
}

// evalSessions asks the vote judge about n session turns and the hint
// judge about n corrected ones, the corrections in held-out phrasings.
func (e *evaluator) evalSessions(ctx context.Context, rng *rand.Rand, n int, votes *Score, hs *HintScore) error {
	exs, want := corpus.SessionCases(rng, n)
	out, err := e.replies(ctx, exs, 120)
	if err != nil {
		return err
	}
	for i := range exs {
		if i < n {
			v, ok := reward.ParseVote(out[i])
			votes.add(ok && fmt.Sprint(v) == want[i])
			continue
		}
		hs.add(out[i], want[i])
	}
	return nil
}

// evalFollow measures instruction following per kind and placement on
// held-out questions, phrasings and arguments.
func (e *evaluator) evalFollow(ctx context.Context, rng *rand.Rand, n int) (map[string]map[string]Score, error) {
	type item struct {
		kind, place string
		c           instruct.Constraint
		ex          corpus.Example
	}
	var items []item
	for _, k := range instruct.Kinds() {
		for range n {
			c := instruct.Random(rng, k, instruct.HeldOut)
			q, _, _ := corpus.PlainQuestion(rng, true)
			instr := c.Instruction(rng, instruct.HeldOut)
			items = append(items,
				item{string(k), PlaceNone, c, corpus.Example{Messages: []tokenizer.Message{corpus.User(q)}}},
				item{string(k), PlaceSystem, c, corpus.Example{Messages: []tokenizer.Message{{Role: "system", Content: instr}, corpus.User(q)}}},
				item{string(k), PlaceHint, c, corpus.Example{Messages: []tokenizer.Message{corpus.User(corpus.WithHint(q, instr))}}})
		}
	}
	exs := make([]corpus.Example, len(items))
	for i, it := range items {
		exs[i] = it.ex
	}
	out, err := e.replies(ctx, exs, 96)
	if err != nil {
		return nil, err
	}
	res := map[string]map[string]Score{}
	for i, it := range items {
		if res[it.kind] == nil {
			res[it.kind] = map[string]Score{}
		}
		s := res[it.kind][it.place]
		s.add(it.c.Check(out[i]))
		res[it.kind][it.place] = s
	}
	return res, nil
}
