package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/clawrl/clawrl/grammar"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// conversation is a chat request's input, whatever the endpoint.
type conversation struct {
	messages []tokenizer.Message
	tools    []json.RawMessage // chat-completions form, as given
	names    map[string]bool   // tool names
	choice   toolChoice
	oneCall  bool // parallel_tool_calls: false
	vars     map[string]any
	// format is response_format's schema (nil: free text); schemas and
	// toolOrder are the parameters of the tools a call may name, compiled
	// unless tool_choice is none (see constrain.go).
	format    *grammar.Schema
	schemas   map[string]*grammar.Schema
	toolOrder []string
}

// compileTools compiles the parameter schemas of the tools a call may
// name, which calls are then generated under (constrain.go).
func (conv *conversation) compileTools() *apiError { return conv.compileToolSchemas() }

// sampling is how a request wants its choices generated.
type sampling struct {
	n         int
	maxTokens int // 0: not given
	params    sample.Params
	stops     []string
	logprobs  bool
}

// samplingFields are the sampling fields the endpoints share.
type samplingFields struct {
	Temperature *float64 `json:"temperature"`
	TopP        *float64 `json:"top_p"`
	TopK        *int     `json:"top_k"`
	Seed        *int64   `json:"seed"`
}

// params validates the shared sampling fields. OpenAI's defaults are
// temperature 1 and top_p 1.
func (f samplingFields) params() (sample.Params, *apiError) {
	p := sample.Params{Temperature: 1, TopP: 1}
	if f.Temperature != nil {
		t := *f.Temperature
		if math.IsNaN(t) || t < 0 || t > 2 {
			return p, invalid("temperature", "invalid_value", "Invalid 'temperature': %v is out of range [0, 2].", t)
		}
		p.Temperature = float32(t)
	}
	if f.TopP != nil {
		v := *f.TopP
		if math.IsNaN(v) || v < 0 || v > 1 {
			return p, invalid("top_p", "invalid_value", "Invalid 'top_p': %v is out of range [0, 1].", v)
		}
		p.TopP = float32(v)
	}
	if f.TopK != nil {
		if *f.TopK < 0 {
			return p, invalid("top_k", "invalid_value", "Invalid 'top_k': %d must be >= 0.", *f.TopK)
		}
		p.TopK = *f.TopK
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed)
		p.Seed = &seed
	}
	if err := p.Validate(); err != nil {
		return p, invalid("", "invalid_value", "Invalid sampling parameters: %v", err)
	}
	return p, nil
}

// checkMaxTokens validates a max_tokens-like field.
func checkMaxTokens(v *int, param string) (int, *apiError) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 {
		return 0, invalid(param, "invalid_value", "Invalid '%s': %d must be at least 1.", param, *v)
	}
	return *v, nil
}

// checkN validates n.
func (s *Server) checkN(v *int) (int, *apiError) {
	if v == nil {
		return 1, nil
	}
	if *v < 1 || *v > s.opts.MaxN {
		return 0, invalid("n", "invalid_value", "Invalid 'n': %d is out of range [1, %d].", *v, s.opts.MaxN)
	}
	return *v, nil
}

// prepared is a request ready to generate.
type prepared struct {
	prompt []int32
	jobs   []job
	// The render spec of prompt (session.Turn): the tools, template
	// variables and prefill it was rendered with.
	tools   []json.RawMessage
	vars    map[string]any
	prefill string
}

// prepareChat renders the chat template over conv and plans the choices.
func (s *Server) prepareChat(conv *conversation, smp sampling) (*prepared, *apiError) {
	var tools []json.RawMessage
	if conv.choice.mode != "none" {
		tools = conv.tools
	}
	vars := make(map[string]any, len(s.opts.TemplateVars)+len(conv.vars))
	for k, v := range s.opts.TemplateVars {
		vars[k] = v
	}
	for k, v := range conv.vars {
		vars[k] = v
	}
	// A forced call starts prefilled in the model's own syntax.
	var prefill string
	switch conv.choice.mode {
	case "required":
		prefill = s.callSyntax.form().prefill("")
	case "function":
		prefill = s.callSyntax.form().prefill(conv.choice.name)
	}
	// Only the template's own text makes control tokens: a "<|im_end|>"
	// in a message, a tool result or a tool's arguments is plain text.
	prompt, text, err := s.tok.EncodeChat(tokenizer.ChatRequest{
		Messages: conv.messages, Tools: tools, AddGenerationPrompt: true, Vars: vars, Prefill: prefill,
	})
	if err != nil {
		return nil, invalid("messages", "invalid_messages", "The messages could not be rendered with the model's chat template: %v", err)
	}
	reasoning := prefill == "" && strings.HasSuffix(strings.TrimRight(text, "\n"), tagThink)
	maxTokens, e := s.fit(len(prompt), smp.maxTokens)
	if e != nil {
		return nil, e
	}
	p := &prepared{prompt: prompt, tools: tools, vars: vars, prefill: prefill}
	g := grammarFor(conv, s.callSyntax)
	for i := range smp.n {
		params := smp.params
		if params.Seed != nil {
			seed := *params.Seed + uint64(i)
			params.Seed = &seed
		}
		p.jobs = append(p.jobs, job{
			index:     i,
			req:       rollout.Request{Prompt: prompt, Sampling: params, MaxTokens: maxTokens, StopTokens: s.opts.StopTokens, Constraint: s.constraint(conv, g, reasoning)},
			stops:     smp.stops,
			chat:      true,
			tools:     len(tools) > 0,
			reasoning: reasoning,
			prefill:   prefill,
			oneCall:   conv.oneCall,
			logprobs:  smp.logprobs,
		})
	}
	return p, nil
}

// fit returns the completion budget of a prompt: the requested one if it
// fits the context, else the context left up to DefaultMaxTokens. A
// request that does not fit is refused, never truncated.
func (s *Server) fit(promptLen, requested int) (int, *apiError) {
	left := s.opts.ContextLength - promptLen
	if requested > 0 {
		if requested > left {
			return 0, invalid("messages", codeContextLength,
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				s.opts.ContextLength, promptLen+requested, promptLen, requested)
		}
		return requested, nil
	}
	if left < 1 {
		return 0, invalid("messages", codeContextLength,
			"This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.",
			s.opts.ContextLength, promptLen)
	}
	return min(left, s.opts.DefaultMaxTokens), nil
}

// turnMeta says how a request relates to sessions and training.
type turnMeta struct {
	owner     string // the sender's session-id prefix (identity.go)
	given     string // the session id as the client gave it, "" to infer
	sessionID string // given, scoped to owner (identity.go)
	record    bool   // a main turn that may be trained on
	done      bool   // X-Session-Done
}

// sessionFields are the body fields that may name a session.
type sessionFields struct {
	SessionID      string `json:"session_id"`
	User           string `json:"user"`
	PromptCacheKey string `json:"prompt_cache_key"`
	Train          *bool  `json:"train"`
}

func (s *Server) turnMeta(r *http.Request, f sessionFields) (turnMeta, *apiError) {
	m := turnMeta{record: true, owner: owner(r)}
	for _, id := range []string{r.Header.Get("X-Session-Id"), f.SessionID, f.User, f.PromptCacheKey} {
		if id = strings.TrimSpace(id); id != "" {
			m.given, m.sessionID = id, s.sessionID(m.owner, id)
			break
		}
	}
	switch tt := strings.ToLower(strings.TrimSpace(r.Header.Get("X-Turn-Type"))); tt {
	case "", "main":
	case "side":
		m.record = false
	default:
		return m, invalid("X-Turn-Type", "invalid_value", "Invalid X-Turn-Type header %q: use main or side.", tt)
	}
	if headerTrue(r.Header.Get("X-No-Train")) || (f.Train != nil && !*f.Train) {
		m.record = false
	}
	m.done = headerTrue(r.Header.Get("X-Session-Done"))
	return m, nil
}

func headerTrue(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// launched is a chat-shaped request (chat completions, Responses) whose
// generations have started: the turn's metadata, the rendered prompt, the
// generations and the session binding (nil when the turn is not recorded).
type launched struct {
	meta    turnMeta
	p       *prepared
	gens    []*generation
	binding *session.Binding
}

// launch reads the request's session headers and fields, renders the
// conversation, starts its generations under ctx and binds the request to
// its session. On failure it writes the error response and returns nil.
func (s *Server) launch(ctx context.Context, w http.ResponseWriter, r *http.Request, f sessionFields, conv *conversation, smp sampling) *launched {
	meta, e := s.turnMeta(r, f)
	var p *prepared
	if e == nil {
		p, e = s.prepareChat(conv, smp)
	}
	var gens []*generation
	if e == nil {
		gens, e = s.start(ctx, p.jobs)
	}
	if e != nil {
		writeError(w, e)
		return nil
	}
	return &launched{meta: meta, p: p, gens: gens, binding: s.begin(w, meta, conv)}
}

// turnRequest is what a chat-shaped endpoint (chat completions,
// responses) hands serveTurn once its body is parsed.
type turnRequest struct {
	endpoint string // "chat.completions" or "responses"
	id       string // the response's id
	received time.Time
	fields   sessionFields
	conv     *conversation
	smp      sampling
	// write streams or collects the response of l's generations; it calls
	// complete with the outputs once every choice finished without error,
	// before the response's last bytes (so that feedback sent as soon as
	// the answer is read finds the turn).
	write func(ctx context.Context, cancel context.CancelFunc, l *launched, complete func(outs []*output)) []*output
}

// serveTurn is the one path from a parsed chat-shaped request to a
// recorded turn: it launches the generations (session metadata, chat
// template, constraints, scheduler), lets the endpoint write its
// response, observes the request and records the turn exactly once
// (record keeps only complete ones: an error or a client gone records
// nothing).
func (s *Server) serveTurn(w http.ResponseWriter, r *http.Request, t turnRequest) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	l := s.launch(ctx, w, r, t.fields, t.conv, t.smp)
	if l == nil {
		return
	}
	recorded := false
	record := func(outs []*output) {
		if !recorded {
			recorded = true
			s.record(l.binding, l.meta, t.endpoint, t.id, t.conv, l.p, outs, t.received)
		}
	}
	outs := t.write(ctx, cancel, l, record)
	s.observe(t.endpoint, t.received, outs)
	record(outs)
}

// decodeRequest reads a request body into req and checks the model it
// names; false (the error written) when either fails.
func (s *Server) decodeRequest(w http.ResponseWriter, r *http.Request, req any, model func() string) bool {
	if e := decodeBody(r, s.opts.MaxBodyBytes, req); e != nil {
		writeError(w, e)
		return false
	}
	if e := s.checkModel(model()); e != nil {
		writeError(w, e)
		return false
	}
	return true
}

// begin binds a recorded request to its session (completing the turn it
// continues) and names the session in the X-Session-Id response header; it
// returns nil for requests that are not recorded.
func (s *Server) begin(w http.ResponseWriter, meta turnMeta, conv *conversation) *session.Binding {
	if !meta.record {
		if meta.done && meta.sessionID != "" {
			s.tracker.End(meta.sessionID)
		}
		return nil
	}
	b := s.tracker.Begin(session.Request{Owner: meta.owner, SessionID: meta.sessionID, Messages: conv.messages})
	// The client's own id when it gave one (stored hashed), else the id of
	// the inferred session, which the client may send back.
	if meta.given != "" && b.SessionID == meta.sessionID {
		w.Header().Set("X-Session-Id", meta.given)
	} else {
		w.Header().Set("X-Session-Id", b.SessionID)
	}
	return b
}

// record stores finished choices as the session's new turn.
func (s *Server) record(b *session.Binding, meta turnMeta, endpoint, responseID string, conv *conversation,
	p *prepared, outs []*output, received time.Time) {
	if b == nil {
		return
	}
	turns := make([]*session.Turn, 0, len(outs))
	for _, o := range outs {
		if o == nil || o.err != nil || o.finish == "" {
			return // an incomplete response is not a turn
		}
		t := &session.Turn{
			ResponseID:     responseID,
			Choice:         o.index,
			Endpoint:       endpoint,
			Model:          s.opts.ModelID,
			Messages:       conv.messages,
			Tools:          p.tools,
			TemplateVars:   p.vars,
			Prefill:        p.prefill,
			Reply:          replyMessage(o),
			PromptTokens:   p.prompt,
			ResponseTokens: o.tokens,
			LogProbs:       o.logProbs,
			SampleLogProbs: o.sampleLogProbs,
			Forced:         o.forced,
			Version:        o.version(s.opts.Version()),
			FinishReason:   o.finish,
			Received:       received,
			FirstToken:     o.firstAt,
			Finished:       o.endAt,
		}
		for _, v := range o.versions {
			if v != t.Version {
				t.Versions = o.versions
				break
			}
		}
		turns = append(turns, t)
	}
	s.tracker.Record(b, turns, meta.done)
}

// replyMessage is the assistant message a choice returned.
func replyMessage(o *output) tokenizer.Message {
	m := tokenizer.Message{Role: "assistant", Content: o.content, ReasoningContent: o.reasoning}
	for _, c := range o.calls {
		args, _ := json.Marshal(c.args)
		m.ToolCalls = append(m.ToolCalls, tokenizer.ToolCall{
			ID: c.id, Type: "function", Function: tokenizer.FunctionCall{Name: c.name, Arguments: args},
		})
	}
	return m
}

// observe records a finished request's metrics.
func (s *Server) observe(endpoint string, received time.Time, outs []*output) {
	var first time.Time
	total := 0
	for _, o := range outs {
		if o == nil {
			continue
		}
		total += len(o.tokens)
		if !o.firstAt.IsZero() && (first.IsZero() || o.firstAt.Before(first)) {
			first = o.firstAt
		}
	}
	s.met.tokens.WithLabelValues(endpoint).Add(float64(total))
	if !first.IsZero() {
		s.met.ttft.WithLabelValues(endpoint).Observe(first.Sub(received).Seconds())
	}
}

// firstError returns the error of the first failed choice.
func firstError(outs []*output) error {
	for _, o := range outs {
		if o != nil && o.err != nil {
			return fmt.Errorf("choice %d: %w", o.index, o.err)
		}
	}
	return nil
}

// cancelled reports whether some choice ended because its client left.
func cancelled(outs []*output) bool {
	for _, o := range outs {
		if o == nil || (o.err == nil && o.finish == "") {
			return true
		}
	}
	return false
}
