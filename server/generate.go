package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
)

// job is one choice to generate.
type job struct {
	index int
	req   rollout.Request
	stops []string // stop strings
	// chat says the output is parsed into reasoning, content and tool
	// calls; otherwise it is plain text (legacy completions).
	chat      bool
	tools     bool   // parse tool calls
	reasoning bool   // the prompt opened a <think> block
	prefill   string // text the prompt already holds of the reply
	// oneCall stops the generation after the first tool call
	// (parallel_tool_calls: false).
	oneCall  bool
	logprobs bool
}

// generation is a started job.
type generation struct {
	job
	events <-chan rollout.Event
	ctx    context.Context // the generation's, which cancel ends
	cancel context.CancelFunc
}

// output is a finished choice.
type output struct {
	index     int
	tokens    []int32
	logProbs  []float32
	versions  []uint64 // per token
	lp        []tokenLogprob
	text      string // plain text (legacy completions)
	reasoning string
	content   string
	calls     []toolCall
	// finish is the OpenAI finish reason; "" when the client went away.
	finish  string
	err     error
	cached  int
	firstAt time.Time
	endAt   time.Time

	// sampleLogProbs are the log-probs under the distribution each token
	// was drawn from (the behaviour policy), forced the tokens a grammar
	// left no alternative to; both per token, for the turn record.
	sampleLogProbs []float32
	forced         []bool
}

// version is the weight version of the first token (or def without tokens).
func (o *output) version(def uint64) uint64 {
	if len(o.versions) > 0 {
		return o.versions[0]
	}
	return def
}

// event is what a running choice reports: a delta, or its end.
type event struct {
	index int
	d     delta
	done  *output
}

// start calls Generate for every job. If one fails, those already started
// are cancelled and the error is returned.
func (s *Server) start(ctx context.Context, jobs []job) ([]*generation, *apiError) {
	gens := make([]*generation, 0, len(jobs))
	for _, j := range jobs {
		gctx, cancel := context.WithCancel(ctx)
		ch, err := s.gen.Generate(gctx, j.req)
		if err != nil {
			cancel()
			for _, g := range gens {
				g.cancel()
				for range g.events { // the stream ends promptly once cancelled
				}
			}
			return nil, s.generateError(err)
		}
		gens = append(gens, &generation{job: j, events: ch, ctx: gctx, cancel: cancel})
	}
	return gens, nil
}

// runAll runs the generations, each in its own goroutine, and returns
// their events on one channel, which is closed when all have ended. With
// deltas false only the ends are sent. The caller reads the channel to
// its end (it cancels the generations if its client is gone): every
// delta and every end is delivered, so a stream cut by the server's
// shutdown still has all it generated.
func (s *Server) runAll(gens []*generation, deltas bool) <-chan event {
	out := make(chan event, 16)
	var wg sync.WaitGroup
	for _, g := range gens {
		wg.Go(func() {
			var emit func(delta) bool
			if deltas {
				emit = func(d delta) bool { out <- event{index: g.index, d: d}; return true }
			}
			o := s.runSafe(g, emit)
			out <- event{index: g.index, done: o}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// runSafe is run that turns a panic into a failed choice (the handler's
// recover middleware does not see this goroutine).
func (s *Server) runSafe(g *generation, emit func(delta) bool) (o *output) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error().Interface("panic", v).Bytes("stack", debug.Stack()).Msg("generation reader panicked")
			g.cancel()
			for range g.events {
			}
			o = &output{index: g.index, err: fmt.Errorf("internal error: %v", v)}
		}
	}()
	return s.run(g, emit)
}

// run reads one generation to its end: it decodes tokens into text
// (whole UTF-8 characters only), applies the stop strings, parses the text
// and passes each delta to emit (which may be nil). A false from emit
// cancels the generation.
func (s *Server) run(g *generation, emit func(delta) bool) *output {
	defer g.cancel()
	o := &output{index: g.index}
	dec := s.tok.NewStreamDecoder()
	stop := sample.NewStopMatcher(g.stops)
	var parser *outputParser
	if g.chat {
		parser = newOutputParser(g.tools, g.reasoning, s.callSyntax)
		parser.oneCall = g.oneCall
	}
	listening := emit != nil
	stopped := false // ended by a stop string or by oneCall
	var plain []byte

	deliver := func(ds []delta) {
		for _, d := range ds {
			if listening && !emit(d) {
				listening = false
				g.cancel()
			}
		}
	}
	push := func(text string, lp *tokenLogprob) {
		var ds []delta
		if parser != nil {
			ds = parser.push(text)
		} else if text != "" {
			plain = append(plain, text...)
			ds = []delta{{content: text}}
		}
		if lp != nil {
			o.lp = append(o.lp, *lp)
			if len(ds) == 0 {
				ds = []delta{{}}
			}
			last := &ds[len(ds)-1]
			last.logprobs = append(last.logprobs, *lp)
		}
		deliver(ds)
	}
	if g.prefill != "" {
		push(g.prefill, nil)
	}

	var final rollout.FinishReason
	first := true
	for ev := range g.events {
		if first {
			o.cached = ev.CachedTokens
			first = false
		}
		if ev.Finish != "" {
			final = ev.Finish
			o.err = ev.Err
		}
		if !ev.HasToken || stopped {
			continue
		}
		if o.firstAt.IsZero() {
			o.firstAt = time.Now()
		}
		o.tokens = append(o.tokens, ev.Token)
		o.logProbs = append(o.logProbs, ev.LogProb)
		o.sampleLogProbs = append(o.sampleLogProbs, ev.SampleLogProb)
		o.forced = append(o.forced, ev.Forced)
		o.versions = append(o.versions, ev.Version)
		if ev.Finish == rollout.FinishStop && s.stopSet[ev.Token] {
			continue // the end-of-turn token is not text
		}
		var lp *tokenLogprob
		if g.logprobs {
			e := s.tokenLogprob(ev.Token, ev.LogProb, ev.Top)
			lp = &e
		}
		// Text leaves the process as valid UTF-8 (Hugging Face's lossy
		// decoding), so the reply the client reads is the one recorded.
		text, hit := stop.Push(tokenizer.Lossy(dec.Add(ev.Token)))
		push(text, lp)
		if hit || (g.oneCall && parser != nil && parser.callsDone() > 0) {
			stopped = true
			g.cancel()
		}
	}
	o.endAt = time.Now()
	if !stopped {
		text, hit := stop.Push(tokenizer.Lossy(dec.Flush()))
		if !hit {
			text += stop.Flush()
		}
		push(text, nil)
		stopped = hit
	}
	if parser != nil {
		deliver(parser.finish())
		o.reasoning, o.content, o.calls = parser.reasoning.String(), parser.content.String(), parser.calls
	} else {
		o.text = string(plain)
	}

	switch {
	case stopped:
		o.finish = "stop"
	case final == rollout.FinishStop:
		o.finish = "stop"
	case final == rollout.FinishLength:
		o.finish = "length"
	case final == rollout.FinishError:
		if o.err == nil {
			o.err = errors.New("generation failed")
		}
	case final == rollout.FinishCancelled, final == "" && g.ctx != nil && g.ctx.Err() != nil:
		// The client went away, or the shutdown cut the generation. (A
		// cancelled generation's final event is offered to its channel
		// without waiting: a reader that lags 16 events behind may not
		// see it, only the channel's end.)
		o.finish = ""
	default:
		o.err = errors.New("generation ended without a final event")
	}
	if o.finish == "stop" && len(o.calls) > 0 {
		o.finish = "tool_calls"
	}
	return o
}
