package learnbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/clawrl/clawrl/tokenizer"
)

// Client talks to a clawrl daemon through its OpenAI-compatible API, as
// any client would, plus /metrics to know when the daemon has caught up.
type Client struct {
	BaseURL string // http://host:port
	APIKey  string
	Model   string // "" asks /v1/models for the first model
	HTTP    *http.Client
}

// ChatRequest is one chat completion the bench sends.
type ChatRequest struct {
	Messages  []tokenizer.Message
	Tools     []json.RawMessage
	SessionID string
	// System, when set, is sent as a system message before Messages.
	System      string
	NoTrain     bool
	Temperature float64
	MaxTokens   int
	Seed        uint64
}

// Reply is the first choice of a chat completion.
type Reply struct {
	// ID is the chat completion's id, the response_id of feedback.
	ID   string
	Text string
	// Tool is the name of the first tool called, "" for none.
	Tool string
	// Version is the weight version that generated the reply.
	Version uint64
	// Cut reports a reply that ran into max_tokens (finish_reason
	// "length") instead of ending on its own.
	Cut bool
	msg tokenizer.Message
}

// Message is the reply as an assistant message to send back in the
// conversation (tool calls included, so that the daemon recognises its own
// turn).
func (r Reply) Message() tokenizer.Message {
	m := r.msg
	m.Role = "assistant"
	return m
}

// Chat sends one chat completion and returns its first choice.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (Reply, error) {
	msgs := req.Messages
	if req.System != "" {
		msgs = append([]tokenizer.Message{{Role: "system", Content: req.System}}, msgs...)
	}
	body := map[string]any{
		"model":       c.Model,
		"messages":    msgs,
		"temperature": req.Temperature,
		"max_tokens":  req.MaxTokens,
		"seed":        req.Seed,
	}
	if len(req.Tools) > 0 {
		body["tools"] = req.Tools
	}
	h := http.Header{}
	if req.SessionID != "" {
		h.Set("X-Session-Id", req.SessionID)
	}
	if req.NoTrain {
		h.Set("X-No-Train", "1")
	}
	var out struct {
		ID      string `json:"id"`
		Choices []struct {
			Message      tokenizer.Message `json:"message"`
			FinishReason string            `json:"finish_reason"`
		} `json:"choices"`
	}
	rh, err := c.do(ctx, http.MethodPost, "/v1/chat/completions", h, body, &out)
	if err != nil {
		return Reply{}, err
	}
	if len(out.Choices) == 0 {
		return Reply{}, errors.New("learnbench: a chat completion with no choices")
	}
	m := out.Choices[0].Message
	r := Reply{ID: out.ID, Text: m.Content, msg: m, Cut: out.Choices[0].FinishReason == "length"}
	r.Version, _ = strconv.ParseUint(rh.Get("X-Weight-Version"), 10, 64)
	if len(m.ToolCalls) > 0 {
		r.Tool = m.ToolCalls[0].Function.Name
	}
	return r, nil
}

// Feedback sends a thumb (+1 or -1) on the reply with id responseID
// (POST /v1/feedback), as a person clicking a thumb does: no words.
func (c *Client) Feedback(ctx context.Context, responseID string, thumb int) error {
	var out struct {
		ID string `json:"id"`
	}
	_, err := c.do(ctx, http.MethodPost, "/v1/feedback", nil, map[string]any{"response_id": responseID, "thumb": thumb}, &out)
	return err
}

// Resolve fills Model from /v1/models when it is empty and returns the
// served weight version.
func (c *Client) Resolve(ctx context.Context) (uint64, error) {
	var out struct {
		Data []struct {
			ID            string `json:"id"`
			WeightVersion uint64 `json:"weight_version"`
		} `json:"data"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/models", nil, nil, &out); err != nil {
		return 0, err
	}
	if len(out.Data) == 0 {
		return 0, errors.New("learnbench: the daemon lists no model")
	}
	if c.Model == "" {
		c.Model = out.Data[0].ID
	}
	return out.Data[0].WeightVersion, nil
}

// Metrics reads the daemon's Prometheus metrics (counters and gauges):
// each series by name{label=value,...}, and each name's sum over its
// series by name alone.
func (c *Client) Metrics(ctx context.Context) (map[string]float64, error) {
	req, err := c.request(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("learnbench: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return nil, fmt.Errorf("learnbench: metrics: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("learnbench: metrics: %w", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var v float64
			switch {
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Untyped != nil:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			out[name] += v
			if len(m.GetLabel()) > 0 {
				var ls []string
				for _, l := range m.GetLabel() {
					ls = append(ls, l.GetName()+"="+l.GetValue())
				}
				out[name+"{"+strings.Join(ls, ",")+"}"] += v
			}
		}
	}
	return out, nil
}

// Settle waits until the daemon has scored every completed turn and
// trained every queued sample (the gauges clawrl_store_turns_ready,
// clawrl_loop_scoring_inflight and clawrl_store_samples_queued read 0), or
// timeout passes (then it returns an error saying what is left).
func (c *Client) Settle(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var left string
	for {
		m, err := c.Metrics(ctx)
		if err != nil {
			return err
		}
		ready, inflight, queued := m["clawrl_store_turns_ready"], m["clawrl_loop_scoring_inflight"], m["clawrl_store_samples_queued"]
		if ready == 0 && inflight == 0 && queued == 0 {
			return nil
		}
		left = fmt.Sprintf("%v turns ready, %v scoring, %v samples queued", ready, inflight, queued)
		if time.Now().After(deadline) {
			return fmt.Errorf("learnbench: the daemon did not catch up in %s: %s", timeout, left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) request(ctx context.Context, method, path string, h http.Header, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	return req, nil
}

// do sends a request and decodes the JSON answer into out; a non-2xx
// answer is an error with the API's message. A 429 or 503 is retried
// after a pause (the daemon sheds load; the bench waits its turn).
func (c *Client) do(ctx context.Context, method, path string, h http.Header, body, out any) (http.Header, error) {
	for attempt := 0; ; attempt++ {
		req, err := c.request(ctx, method, path, h, body)
		if err != nil {
			return nil, err
		}
		resp, err := c.httpClient().Do(req)
		if err != nil {
			return nil, fmt.Errorf("learnbench: %s %s: %w", method, path, err)
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("learnbench: %s %s: %w", method, path, err)
		}
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && attempt < 20 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		if resp.StatusCode/100 != 2 {
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			_ = json.Unmarshal(b, &e)
			msg := e.Error.Message
			if msg == "" {
				msg = strings.TrimSpace(string(b))
			}
			return nil, fmt.Errorf("learnbench: %s %s: %s: %s", method, path, resp.Status, msg)
		}
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("learnbench: %s %s: %w", method, path, err)
		}
		return resp.Header, nil
	}
}
