package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

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

// prompts reads prompt: a string, or an array of strings (one choice set
// per prompt).
func (req *completionRequest) prompts() ([]string, *apiError) {
	if isNull(req.Prompt) {
		return nil, invalid("prompt", "missing_required_parameter", "Missing required parameter: 'prompt'.")
	}
	raw := bytes.TrimSpace(req.Prompt)
	var one string
	if raw[0] == '"' && json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || len(many) == 0 {
		return nil, invalid("prompt", "invalid_type", "Invalid type for 'prompt': expected a string or a non-empty array of strings.")
	}
	return many, nil
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

type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// legacyLogprobs turns log-prob entries into the completions shape; offset
// is where the choice's text starts.
func legacyLogprobs(entries []tokenLogprob, offset int) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, e := range entries {
		lp.Tokens = append(lp.Tokens, e.Token)
		lp.TokenLogprobs = append(lp.TokenLogprobs, e.Logprob)
		top := map[string]float64{}
		for _, t := range e.TopLogprobs {
			if _, ok := top[t.Token]; !ok {
				top[t.Token] = t.Logprob
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, offset)
		offset += len(e.Bytes)
	}
	return lp
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	received := time.Now()
	var req completionRequest
	if !s.decodeRequest(w, r, &req, func() string { return req.Model }) {
		return
	}
	prompts, e := req.prompts()
	if e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.Echo:
		e = invalid("echo", "unsupported_parameter", "echo is not supported.")
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
		if maxTokens, e = checkMaxTokens(req.MaxTokens, "max_tokens"); e != nil {
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
	promptTokens := 0
	for pi, text := range prompts {
		ids := s.tok.Encode(text)
		if len(ids) == 0 {
			writeError(w, invalid("prompt", "invalid_value", "The prompt is empty."))
			return
		}
		budget, e := s.fit(len(ids), maxTokens)
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
			jobs = append(jobs, job{index: pi*n + i, stops: stops, logprobs: logprobs,
				req: rollout.Request{Prompt: ids, Sampling: p, MaxTokens: budget, StopTokens: s.opts.StopTokens}})
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	gens, e := s.start(ctx, jobs)
	if e != nil {
		writeError(w, e)
		return
	}
	c := completion{ID: newID("cmpl-", 29), Object: "text_completion", Created: received.Unix(), Model: s.opts.ModelID}
	var outs []*output
	if req.Stream {
		outs = s.streamCompletion(ctx, cancel, w, c, gens, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, promptTokens)
	} else {
		outs = s.collectCompletion(ctx, w, c, gens, promptTokens)
	}
	s.observe("completions", received, outs)
}

func (s *Server) collectCompletion(ctx context.Context, w http.ResponseWriter, c completion, gens []*generation, promptTokens int) []*output {
	outs := make([]*output, len(gens))
	for ev := range s.runAll(ctx, gens, false) {
		outs[ev.index] = ev.done
	}
	if err := firstError(outs); err != nil {
		writeError(w, internalError(err))
		return outs
	}
	if cancelled(outs) {
		return outs
	}
	version := outs[0].version(s.opts.Version())
	c.SystemFingerprint = fingerprint(version)
	for i, o := range outs {
		finish := o.finish
		ch := completionChoice{Text: o.text, Index: i, FinishReason: &finish}
		if gens[i].logprobs {
			ch.Logprobs = legacyLogprobs(o.lp, 0)
		}
		c.Choices = append(c.Choices, ch)
	}
	u := makeUsage(promptTokens, outs)
	c.Usage = &u
	w.Header().Set("X-Weight-Version", strconv.FormatUint(version, 10))
	writeJSON(w, c)
	return outs
}

func (s *Server) streamCompletion(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, c completion,
	gens []*generation, includeUsage bool, promptTokens int) []*output {
	version := s.opts.Version()
	c.SystemFingerprint = fingerprint(version)
	sse := startSSE(w, version)
	tick, stopTick := s.keepAlive()
	defer stopTick()
	outs := make([]*output, len(gens))
	offsets := make([]int, len(gens))
	events := s.runAll(ctx, gens, true)
	for open := true; open; {
		var err error
		select {
		case ev, ok := <-events:
			if !ok {
				open = false
				continue
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
				if gens[ev.index].logprobs && len(ev.d.logprobs) > 0 {
					ch.Logprobs = legacyLogprobs(ev.d.logprobs, offsets[ev.index])
				}
				offsets[ev.index] += len(ev.d.content)
				ck.Choices = []completionChoice{ch}
			}
			err = sse.data("", ck)
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
	if cancelled(outs) {
		return outs
	}
	if includeUsage {
		u := makeUsage(promptTokens, outs)
		ck := c
		ck.Choices = []completionChoice{}
		ck.Usage = &u
		_ = sse.data("", ck)
	}
	_ = sse.done()
	return outs
}
