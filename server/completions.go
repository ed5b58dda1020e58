package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clawrl/clawrl/rollout"
)

// completionRequest is the body of POST /v1/completions (legacy text
// completion: no chat template). Completions are served but not recorded
// for training.
type completionRequest struct {
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	N             *int            `json:"n"`
	MaxTokens     *int            `json:"max_tokens"`
	Stop          json.RawMessage `json:"stop"`
	Logprobs      *int            `json:"logprobs"`
	Echo          bool            `json:"echo"`
	Suffix        *string         `json:"suffix"`
	BestOf        *int            `json:"best_of"`
	samplingFields
}

// OpenAI's legacy default completion length.
const defaultCompletionTokens = 16

// completionPrompt is one prompt: its text and its tokens.
type completionPrompt struct {
	text string
	ids  []int32
}

// prompts reads prompt: a string, an array of strings, an array of token
// ids, or an array of arrays of token ids (one choice set per prompt).
func (s *Server) prompts(raw json.RawMessage) ([]completionPrompt, *apiError) {
	if isNull(raw) {
		return nil, invalid("prompt", "missing_required_parameter", "Missing required parameter: 'prompt'.")
	}
	raw = bytes.TrimSpace(raw)
	var one string
	if raw[0] == '"' && json.Unmarshal(raw, &one) == nil {
		return []completionPrompt{s.textPrompt(one)}, nil
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil && len(texts) > 0 {
		out := make([]completionPrompt, len(texts))
		for i, t := range texts {
			out[i] = s.textPrompt(t)
		}
		return out, nil
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil && len(ids) > 0 {
		p, e := s.tokenPrompt(ids, "prompt")
		return []completionPrompt{p}, e
	}
	var many [][]int64
	if err := json.Unmarshal(raw, &many); err == nil && len(many) > 0 {
		out := make([]completionPrompt, len(many))
		for i, ids := range many {
			var e *apiError
			if out[i], e = s.tokenPrompt(ids, fmt.Sprintf("prompt[%d]", i)); e != nil {
				return nil, e
			}
		}
		return out, nil
	}
	return nil, invalid("prompt", "invalid_type",
		"Invalid type for 'prompt': expected a string, a non-empty array of strings, an array of token ids or an array of arrays of token ids.")
}

func (s *Server) textPrompt(text string) completionPrompt {
	// A raw prompt is the client's own template text: special tokens
	// written in it are control tokens, as in vLLM and transformers
	// (chat requests, where text comes from users, use EncodeChat), and
	// it gets the BOS token first where the tokenizer adds one, as vLLM
	// and llama.cpp's server do (Llama, Mistral; not Qwen).
	return completionPrompt{text: text, ids: s.tok.EncodePrompt(text)}
}

func (s *Server) tokenPrompt(ids []int64, param string) (completionPrompt, *apiError) {
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= int64(s.tok.VocabSize()) {
			return completionPrompt{}, invalid(param, "invalid_value", "Invalid token id %d in '%s': the vocabulary has %d tokens.", id, param, s.tok.VocabSize())
		}
		out[i] = int32(id)
	}
	return completionPrompt{text: s.tok.Decode(out), ids: out}, nil
}

type completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
}

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy log-prob shape. The first token of an
// echoed prompt has none: null in token_logprobs and top_logprobs.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}

// legacyToken is how the legacy shape writes a token: its text, or, when
// its bytes are not whole UTF-8 characters (part of a character split
// over tokens), "bytes:" and each byte as \xNN, as OpenAI does, so that
// distinct tokens never collapse into one "\ufffd".
func legacyToken(b []int) string {
	raw := make([]byte, len(b))
	for i, c := range b {
		raw[i] = byte(c)
	}
	if utf8.Valid(raw) {
		return string(raw)
	}
	var sb strings.Builder
	sb.WriteString("bytes:")
	for _, c := range raw {
		fmt.Fprintf(&sb, "\\x%02x", c)
	}
	return sb.String()
}

// add appends log-prob entries; offset is where the first one's text
// starts. It returns the offset after them.
func (lp *completionLogprobs) add(entries []tokenLogprob, offset int) int {
	for _, e := range entries {
		lp.Tokens = append(lp.Tokens, legacyToken(e.Bytes))
		v := e.Logprob
		lp.TokenLogprobs = append(lp.TokenLogprobs, &v)
		top := map[string]float64{}
		for _, t := range e.TopLogprobs {
			if k := legacyToken(t.Bytes); !hasKey(top, k) {
				top[k] = t.Logprob
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(e.Bytes)
	}
	return offset
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// legacyLogprobs turns log-prob entries into the completions shape; offset
// is where the choice's text starts.
func legacyLogprobs(entries []tokenLogprob, offset int) *completionLogprobs {
	lp := newCompletionLogprobs()
	lp.add(entries, offset)
	return lp
}

// echoed is what an echo with log-probs learns of its prompt: the
// log-probs of its tokens after the first (the first has none), filled in
// before the completion's first event reaches the reader.
type echoed struct {
	prompt completionPrompt
	lp     []tokenLogprob
}

// logprobs is the echoed prompt in the legacy shape.
func (ec *echoed) logprobs(s *Server) (*completionLogprobs, int) {
	lp := newCompletionLogprobs()
	_, b := s.tokenBytes(ec.prompt.ids[0])
	lp.Tokens = append(lp.Tokens, legacyToken(b))
	lp.TokenLogprobs = append(lp.TokenLogprobs, nil)
	lp.TopLogprobs = append(lp.TopLogprobs, nil)
	lp.TextOffset = append(lp.TextOffset, 0)
	return lp, lp.add(ec.lp, len(b))
}

// forcePrompt is the constraint of an echo with log-probs: the prompt's
// tokens after the first are forced one by one (their log-probs are the
// model's own, as for any token drawn under a constraint), then the
// completion is free.
type forcePrompt struct {
	ids []int32
	at  int
}

func (f *forcePrompt) Allow(tok int32) bool { return f.at >= len(f.ids) || tok == f.ids[f.at] }

func (f *forcePrompt) Accept(int32) {
	if f.at < len(f.ids) {
		f.at++
	}
}

// echoEvents reads a generation that starts with the forced prompt: it
// keeps the prompt tokens' log-probs in ec and passes on the rest as the
// completion, ending it at a stop token or after maxTokens tokens (the
// generation itself runs without stop tokens, which the prompt may hold,
// and a token longer).
func (s *Server) echoEvents(in <-chan rollout.Event, cancel context.CancelFunc, ec *echoed, maxTokens int) <-chan rollout.Event {
	out := make(chan rollout.Event, 4)
	go func() {
		defer close(out)
		forced, passed, ended := len(ec.prompt.ids)-1, 0, false
		cached := -1
		end := func(ev rollout.Event) {
			out <- ev
			ended = true
			cancel()
		}
		for ev := range in {
			if ended {
				continue // drain what follows the end we sent
			}
			if cached < 0 {
				cached = ev.CachedTokens
			}
			if ev.HasToken && forced > 0 {
				forced--
				ec.lp = append(ec.lp, s.tokenLogprob(ev.Token, ev.LogProb, ev.Top))
				if ev.Finish == "" {
					if forced == 0 && maxTokens == 0 {
						end(rollout.Event{Finish: rollout.FinishLength, CachedTokens: cached})
					}
					continue
				}
				ev.HasToken = false // the generation ended inside the prompt
			} else if ev.HasToken && maxTokens == 0 {
				// A one-token prompt and no completion: nothing to pass on.
				end(rollout.Event{Finish: rollout.FinishLength, CachedTokens: cached})
				continue
			}
			if ev.HasToken {
				passed++
				switch {
				case s.stopSet[ev.Token]:
					ev.Finish = rollout.FinishStop
				case passed >= maxTokens:
					ev.Finish = rollout.FinishLength
				}
			}
			if passed <= 1 {
				ev.CachedTokens = cached
			}
			if ev.Finish != "" {
				end(ev)
				continue
			}
			out <- ev
		}
	}()
	return out
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req completionRequest
	if !s.decodeRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	prompts, e := s.prompts(req.Prompt)
	if e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.Suffix != nil && *req.Suffix != "":
		e = invalid("suffix", "unsupported_parameter", "suffix is not supported.")
	case req.BestOf != nil && *req.BestOf > 1:
		e = invalid("best_of", "unsupported_parameter", "best_of is not supported.")
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > 5):
		e = invalid("logprobs", "invalid_value", "Invalid 'logprobs': %d is out of range [0, 5].", *req.Logprobs)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	n, e := s.checkN(req.N)
	if e != nil {
		writeError(w, e)
		return
	}
	if n*len(prompts) > s.opts.MaxN {
		writeError(w, invalid("prompt", "invalid_value", "Too many choices: %d prompts × n=%d is more than %d.", len(prompts), n, s.opts.MaxN))
		return
	}
	maxTokens := defaultCompletionTokens
	if req.MaxTokens != nil {
		// With echo, max_tokens 0 asks for the prompt alone (its
		// log-probs, for evaluation harnesses).
		if req.Echo && *req.MaxTokens == 0 {
			maxTokens = 0
		} else if maxTokens, e = checkMaxTokens(req.MaxTokens, "max_tokens"); e != nil {
			writeError(w, e)
			return
		}
	}
	params, e := req.params()
	if e != nil {
		writeError(w, e)
		return
	}
	stops, e := parseStop(req.Stop)
	if e != nil {
		writeError(w, e)
		return
	}
	logprobs := req.Logprobs != nil
	if logprobs {
		params.TopLogProbs = *req.Logprobs
	}
	var jobs []job
	echoes := map[int]*echoed{} // by choice index, for echo with log-probs
	promptTokens := 0
	for pi, prompt := range prompts {
		ids := prompt.ids
		if len(ids) == 0 {
			writeError(w, invalid("prompt", "invalid_value", "The prompt is empty."))
			return
		}
		budget, e := s.fit(len(ids), max(maxTokens, 1))
		if e != nil {
			e.Param = "prompt"
			writeError(w, e)
			return
		}
		promptTokens += len(ids)
		for i := range n {
			p := params
			if p.Seed != nil {
				seed := *p.Seed + uint64(len(jobs))
				p.Seed = &seed
			}
			j := job{index: pi*n + i, stops: stops, logprobs: logprobs,
				req: rollout.Request{Prompt: ids, Sampling: p, MaxTokens: budget, StopTokens: s.opts.StopTokens}}
			if req.Echo && logprobs {
				// The prompt's log-probs come from generating it: its
				// tokens after the first are forced.
				echoes[j.index] = &echoed{prompt: prompt}
				j.req.Prompt = ids[:1]
				j.req.MaxTokens = len(ids) - 1 + max(maxTokens, 1)
				j.req.StopTokens = nil
				j.req.Constraint = &forcePrompt{ids: slices.Clone(ids[1:])}
			}
			jobs = append(jobs, j)
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	gens, e := s.start(ctx, jobs)
	if e != nil {
		writeError(w, e)
		return
	}
	for _, g := range gens {
		if ec := echoes[g.index]; ec != nil {
			g.events = s.echoEvents(g.events, g.cancel, ec, maxTokens)
		}
	}
	c := completion{ID: newID("cmpl-", 29), Object: "text_completion", Created: received.Unix(), Model: s.opts.ModelID}
	cc := completionCall{s: s, c: c, gens: gens, promptTokens: promptTokens}
	if req.Echo {
		cc.echo = func(index int) (string, *echoed) { return prompts[index/n].text, echoes[index] }
	}
	var outs []*output
	if req.Stream {
		outs = cc.stream(ctx, cancel, w, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
	} else {
		outs = cc.collect(ctx, w)
	}
	s.observe("completions", received, outs)
}

// completionCall writes one legacy completion.
type completionCall struct {
	s            *Server
	c            completion
	gens         []*generation
	promptTokens int
	// echo, when set, gives a choice's prompt text and, with log-probs,
	// what its generation learnt of the prompt.
	echo func(index int) (string, *echoed)
}

// prefix is the echoed prompt of choice i (its text and, with log-probs,
// their entries), and the offset where the completion's text starts.
func (cc *completionCall) prefix(i int) (string, *completionLogprobs, int) {
	if cc.echo == nil {
		return "", nil, 0
	}
	text, ec := cc.echo(i)
	if ec == nil || !cc.gens[i].logprobs {
		return text, nil, len(text)
	}
	lp, end := ec.logprobs(cc.s)
	return text, lp, end
}

func (cc *completionCall) collect(ctx context.Context, w http.ResponseWriter) []*output {
	s, c := cc.s, cc.c
	outs := make([]*output, len(cc.gens))
	for ev := range s.runAll(cc.gens, false) {
		outs[ev.index] = ev.done
	}
	if err := firstError(outs); err != nil {
		writeError(w, internalError(err))
		return outs
	}
	if cancelled(outs) {
		if s.base.Err() != nil {
			writeError(w, s.shutdownError())
		}
		return outs
	}
	version := outs[0].version(s.opts.Version())
	c.SystemFingerprint = fingerprint(version)
	for i, o := range outs {
		finish := o.finish
		text, lp, offset := cc.prefix(i)
		ch := completionChoice{Text: text + o.text, Index: i, FinishReason: &finish}
		if cc.gens[i].logprobs {
			if lp == nil {
				lp = newCompletionLogprobs()
			}
			lp.add(o.lp, offset)
			ch.Logprobs = lp
		}
		c.Choices = append(c.Choices, ch)
	}
	u := makeUsage(cc.promptTokens, outs)
	c.Usage = &u
	w.Header().Set("X-Weight-Version", strconv.FormatUint(version, 10))
	writeJSON(w, c)
	return outs
}

func (cc *completionCall) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, includeUsage bool) []*output {
	s, c := cc.s, cc.c
	version := s.opts.Version()
	c.SystemFingerprint = fingerprint(version)
	sse := startSSE(w, version)
	tick, stopTick := s.keepAlive()
	defer stopTick()
	outs := make([]*output, len(cc.gens))
	offsets := make([]int, len(cc.gens))
	started := make([]bool, len(cc.gens))
	events := s.runAll(cc.gens, true)
	for open := true; open; {
		var err error
		select {
		case ev, ok := <-events:
			if !ok {
				open = false
				continue
			}
			if !started[ev.index] && (ev.done == nil || (ev.done.err == nil && ev.done.finish != "")) {
				// The echoed prompt comes first.
				started[ev.index] = true
				if text, lp, offset := cc.prefix(ev.index); cc.echo != nil {
					ck := c
					ck.Choices = []completionChoice{{Text: text, Index: ev.index, Logprobs: lp}}
					err = sse.data("", ck)
					offsets[ev.index] = offset
				}
			}
			ck := c
			if ev.done != nil {
				outs[ev.index] = ev.done
				if ev.done.err != nil || ev.done.finish == "" {
					continue
				}
				finish := ev.done.finish
				ck.Choices = []completionChoice{{Index: ev.index, FinishReason: &finish}}
			} else {
				ch := completionChoice{Text: ev.d.content, Index: ev.index}
				if cc.gens[ev.index].logprobs && len(ev.d.logprobs) > 0 {
					ch.Logprobs = legacyLogprobs(ev.d.logprobs, offsets[ev.index])
				}
				offsets[ev.index] += len(ev.d.content)
				ck.Choices = []completionChoice{ch}
			}
			if err == nil {
				err = sse.data("", ck)
			}
		case <-tick:
			err = sse.comment()
		}
		if err != nil {
			cancel()
		}
	}
	if err := firstError(outs); err != nil {
		_ = sse.data("", internalError(err).body())
		return outs
	}
	if cut := s.cut(outs); cut != nil {
		// The shutdown cut it: finish reasons, the error, [DONE].
		for _, i := range cut {
			ck := c
			finish := wireFinish(outs[i].finish)
			ck.Choices = []completionChoice{{Index: i, FinishReason: &finish}}
			_ = sse.data("", ck)
		}
		_ = sse.data("", s.shutdownError().body())
		_ = sse.done()
		return outs
	}
	if cancelled(outs) {
		return outs
	}
	if includeUsage {
		u := makeUsage(cc.promptTokens, outs)
		ck := c
		ck.Choices = []completionChoice{}
		ck.Usage = &u
		_ = sse.data("", ck)
	}
	_ = sse.done()
	return outs
}
