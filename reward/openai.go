package reward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// NMode says how an OpenAIBackend asks for several samples.
type NMode string

// N modes.
const (
	// NAuto sends one request with n; when the endpoint returns fewer
	// choices, or rejects n > 1 with a 400, the rest come from parallel
	// requests with n = 1, and so do all later calls.
	NAuto NMode = "auto"
	// NNative always sends one request with n.
	NNative NMode = "native"
	// NParallel always sends n parallel requests with n = 1.
	NParallel NMode = "parallel"
)

// OpenAIOptions configure an OpenAIBackend.
type OpenAIOptions struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1 or
	// http://127.0.0.1:8000/v1; requests go to BaseURL/chat/completions.
	BaseURL string
	// APIKey is sent as a bearer token when not empty.
	APIKey string
	// Model names the judge model.
	Model string
	// N is how to get several samples (default NAuto).
	N NMode
	// Client makes the requests (default: a client without its own
	// timeout; the Scorer bounds each attempt with a context).
	Client *http.Client
}

// OpenAIBackend calls an OpenAI-compatible /chat/completions endpoint.
type OpenAIBackend struct {
	url    string
	opts   OpenAIOptions
	client *http.Client
	// noN is set once the endpoint has shown it ignores or rejects n.
	noN atomic.Bool
}

// NewOpenAIBackend checks opts and returns the backend.
func NewOpenAIBackend(opts OpenAIOptions) (*OpenAIBackend, error) {
	if opts.BaseURL == "" || opts.Model == "" {
		return nil, errors.New("reward: openai judge needs a base URL and a model")
	}
	if !strings.HasPrefix(opts.BaseURL, "http://") && !strings.HasPrefix(opts.BaseURL, "https://") {
		return nil, fmt.Errorf("reward: openai judge base URL %q must start with http:// or https://", opts.BaseURL)
	}
	switch opts.N {
	case "":
		opts.N = NAuto
	case NAuto, NNative, NParallel:
	default:
		return nil, fmt.Errorf("reward: openai judge n mode %q is not one of auto, native, parallel", opts.N)
	}
	c := opts.Client
	if c == nil {
		c = &http.Client{}
	}
	return &OpenAIBackend{url: strings.TrimRight(opts.BaseURL, "/") + "/chat/completions", opts: opts, client: c}, nil
}

// Complete asks for req.N completions (see NMode).
func (o *OpenAIBackend) Complete(ctx context.Context, req Request) ([]string, error) {
	if req.N < 1 {
		return nil, Permanent(fmt.Errorf("reward: openai judge: N %d must be >= 1", req.N))
	}
	if req.N == 1 || o.opts.N == NParallel || (o.opts.N == NAuto && o.noN.Load()) {
		return o.parallel(ctx, req, req.N)
	}
	out, err := o.post(ctx, req, req.N)
	var se *statusError
	if o.opts.N == NAuto && errors.As(err, &se) && se.code == http.StatusBadRequest {
		// Some endpoints refuse n > 1 outright; remember that only if
		// single requests then work.
		out, err := o.parallel(ctx, req, req.N)
		if err == nil {
			o.noN.Store(true)
		}
		return out, err
	}
	if err != nil {
		return nil, err
	}
	if len(out) < req.N && o.opts.N == NAuto {
		o.noN.Store(true)
		more, err := o.parallel(ctx, req, req.N-len(out))
		if err == nil {
			out = append(out, more...)
		}
	}
	return out, nil
}

// parallel sends k requests with n = 1 at once and gathers what succeeds.
func (o *OpenAIBackend) parallel(ctx context.Context, req Request, k int) ([]string, error) {
	var (
		mu       sync.Mutex
		out      []string
		firstErr error
		wg       sync.WaitGroup
	)
	for range k {
		wg.Go(func() {
			texts, err := o.post(ctx, req, 1)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpOr(firstErr, err)
				return
			}
			out = append(out, texts...)
		})
	}
	wg.Wait()
	if len(out) == 0 {
		return nil, firstErr
	}
	return out, nil
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	N           int           `json:"n,omitempty"`
	Temperature float32       `json:"temperature"`
	MaxTokens   int           `json:"max_tokens,omitempty"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
}

// statusError is a non-200 answer.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.code, e.body)
}

// maxResponseBytes bounds what is read of a judge's answer.
const maxResponseBytes = 8 << 20

// post sends one request for n completions.
func (o *OpenAIBackend) post(ctx context.Context, req Request, n int) ([]string, error) {
	body := chatRequest{Model: o.opts.Model, Temperature: req.Temperature, MaxTokens: req.MaxTokens}
	if n > 1 {
		body.N = n
	}
	for _, m := range req.Messages {
		body.Messages = append(body.Messages, chatMessage{Role: m.Role, Content: defangControl(m.Content)})
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, Permanent(fmt.Errorf("reward: openai judge: encoding the request: %w", err))
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, o.url, bytes.NewReader(data))
	if err != nil {
		return nil, Permanent(fmt.Errorf("reward: openai judge: %w", err))
	}
	hr.Header.Set("Content-Type", "application/json")
	if o.opts.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+o.opts.APIKey)
	}
	resp, err := o.client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("reward: openai judge: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("reward: openai judge: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		err := &statusError{code: resp.StatusCode, body: oneLine(string(raw), 300)}
		if retryableStatus(resp.StatusCode) {
			return nil, fmt.Errorf("reward: openai judge: %w", err)
		}
		return nil, Permanent(fmt.Errorf("reward: openai judge: %w", err))
	}
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return nil, fmt.Errorf("reward: openai judge: decoding the answer: %w", err)
	}
	var out []string
	for _, c := range cr.Choices {
		if c.Message.Content != nil {
			out = append(out, *c.Message.Content)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("reward: openai judge: the answer has no choices with content")
	}
	return out, nil
}

// controlLikeRE matches how common chat formats spell their control
// tokens: ChatML, Llama 3 and Phi "<|...|>", DeepSeek "<｜...｜>", Llama 2
// and Mistral "[INST]", "<s>", "<<SYS>>" and "[TOOL_CALLS]", Gemma
// "<start_of_turn>".
var controlLikeRE = regexp.MustCompile(`<\|[^<>|\s]{1,64}\|>|<｜[^<>｜\s]{1,64}｜>|\[/?INST\]|</?s>|<</?SYS>>|<(?:start|end)_of_turn>|\[/?(?:AVAILABLE_TOOLS|TOOL_CALLS|TOOL_RESULTS|SYSTEM_PROMPT)\]`)

// defangControl breaks every control-token spelling in s with a zero-width
// space after its first character. A remote judge's server may read them
// in message content as control tokens (vLLM and transformers do), so
// that a user quoted in the transcript could end the judge's turn; the
// local judge needs no such help (EncodeChat).
func defangControl(s string) string {
	return controlLikeRE.ReplaceAllStringFunc(s, func(m string) string {
		_, n := utf8.DecodeRuneInString(m)
		return m[:n] + "\u200b" + m[n:]
	})
}

// retryableStatus reports whether an HTTP status may go away on retry.
func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusConflict ||
		code == http.StatusTooManyRequests || code >= 500
}
