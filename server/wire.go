package server

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/clawrl/clawrl/sample"
)

// tokenLogprob is a token's entry in logprobs.content (chat) and the
// source of the other endpoints' log-prob shapes.
type tokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func (s *Server) tokenBytes(id int32) (string, []int) {
	raw := s.tok.AppendDecoded(nil, []int32{id})
	b := make([]int, len(raw))
	for i, c := range raw {
		b[i] = int(c)
	}
	return string(raw), b
}

// lp64 widens a float32 log-prob to the float64 with the same shortest
// decimal form (-0.1, not -0.10000000149011612). JSON has no -Inf: as
// OpenAI does, an impossible token gets -9999.
func lp64(f float32) float64 {
	if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) || f < -9999 {
		return -9999
	}
	return f64(f)
}

// f64 widens f to the float64 with the same shortest decimal form.
func f64(f float32) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	if err != nil {
		return float64(f)
	}
	return v
}

func (s *Server) tokenLogprob(id int32, lp float32, top []sample.TokenLogProb) tokenLogprob {
	e := tokenLogprob{Logprob: lp64(lp), TopLogprobs: []topLogprob{}}
	e.Token, e.Bytes = s.tokenBytes(id)
	for _, t := range top {
		var a topLogprob
		a.Token, a.Bytes = s.tokenBytes(t.Token)
		a.Logprob = lp64(t.LogProb)
		e.TopLogprobs = append(e.TopLogprobs, a)
	}
	return e
}

// usage is the chat and completions usage object.
type usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func makeUsage(prompt int, outs []*output) usage {
	u := usage{PromptTokens: prompt, PromptTokensDetails: &promptTokensDetails{}}
	for i, o := range outs {
		if o == nil {
			continue
		}
		u.CompletionTokens += len(o.tokens)
		if i == 0 {
			u.PromptTokensDetails.CachedTokens = o.cached
		}
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// fingerprint names the weights that served a response.
func fingerprint(version uint64) string { return "clawrl-v" + strconv.FormatUint(version, 10) }

// sseWriteTimeout bounds one write to a streaming client: a client that
// stops reading is dropped, and its generation cancelled, instead of
// holding a generation open forever.
const sseWriteTimeout = 2 * time.Minute

// sseWriter writes server-sent events and flushes each.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

// startSSE sends the headers of an event stream.
func startSSE(w http.ResponseWriter, version uint64) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Weight-Version", strconv.FormatUint(version, 10))
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.flush()
	return s
}

// data sends one "data:" event holding v as JSON; with a name, it is
// preceded by an "event:" line.
func (s *sseWriter) data(name string, v any) error {
	if s.err != nil {
		return s.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.err = fmt.Errorf("encode event: %w", err)
		return s.err
	}
	var sb strings.Builder
	if name != "" {
		sb.WriteString("event: ")
		sb.WriteString(name)
		sb.WriteByte('\n')
	}
	sb.WriteString("data: ")
	sb.Write(b)
	sb.WriteString("\n\n")
	return s.write([]byte(sb.String()))
}

func (s *sseWriter) done() error { return s.write([]byte("data: [DONE]\n\n")) }

func (s *sseWriter) comment() error { return s.write([]byte(": keep-alive\n\n")) }

// write sends b, within sseWriteTimeout where the connection allows it.
func (s *sseWriter) write(b []byte) error {
	if s.err != nil {
		return s.err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout)) // unsupported on some writers
	if _, err := s.w.Write(b); err != nil {
		s.err = err
		return err
	}
	return s.flush()
}

func (s *sseWriter) flush() error {
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
	return s.err
}

// keepAlive returns a ticker channel for SSE comments, or nil when off.
func (s *Server) keepAlive() (<-chan time.Time, func()) {
	if s.opts.KeepAlive < 0 {
		return nil, func() {}
	}
	t := time.NewTicker(s.opts.KeepAlive)
	return t.C, t.Stop
}

// writeJSON sends v with status 200.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
