// Package apiclient reads what an OpenAI-compatible server answers: the
// chunks of a streamed chat completion (server-sent events), a whole
// completion from a server that ignored "stream", and OpenAI-style error
// bodies. `clawrl chat`, the benches and the tests that talk to the
// daemon over HTTP all read streams through it, so a change to the wire
// format is made once.
package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Chunk is one chat.completion.chunk of a stream, with the fields clients
// read. A whole chat.completion (a server that ignored "stream") decodes
// into it too, with Choice.Message set instead of Delta.
type Chunk struct {
	ID                string   `json:"id"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage"`
	Error             *Error   `json:"error"`
}

// Choice is one choice of a chunk.
type Choice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	Message      *Delta  `json:"message"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is a piece of a message (or a whole message, in Choice.Message).
type Delta struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        []ToolCallDelta `json:"tool_calls"`
}

// ToolCallDelta is a piece of a tool call; pieces of one call share its
// Index.
type ToolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Usage is the token count of a completion.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Error is an OpenAI-style error: the body of a 4xx/5xx answer, or an
// error event in a stream.
type Error struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"` // a string, a number or null, depending on the server
	// Status is the HTTP status of the answer that carried it (0 in a
	// stream).
	Status int `json:"-"`
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
	}
	return e.Message
}

// CodeString is the error's code as text ("" when there is none).
func (e *Error) CodeString() string {
	if e.Code == nil {
		return ""
	}
	return fmt.Sprint(e.Code)
}

// ErrStreamCut is returned by Read when a stream ended without
// "data: [DONE]": the server or the connection went away mid-answer.
var ErrStreamCut = errors.New("the stream ended without [DONE]")

// maxLine bounds one event's line (a chunk with many log-probs).
const maxLine = 16 << 20

// Read reads a chat completion's answer: the chunks of a text/event-stream
// body, calling fn for each until "data: [DONE]", or the single completion
// object of an application/json body (a server that ignored "stream"). A
// chunk that carries an error ends the read with that *Error; an error
// from fn ends it with fn's error. A stream without [DONE] ends with
// ErrStreamCut (or the read error), after fn saw what came.
func Read(resp *http.Response, fn func(*Chunk) error) error {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var ck Chunk
		if err := json.NewDecoder(resp.Body).Decode(&ck); err != nil {
			return fmt.Errorf("reading the completion: %w", err)
		}
		if ck.Error != nil {
			return ck.Error
		}
		return fn(&ck)
	}
	return ReadStream(resp.Body, fn)
}

// ReadStream reads server-sent events of chat completion chunks from r (see
// Read).
func ReadStream(r io.Reader, fn func(*Chunk) error) error {
	sc := bufio.NewScanner(r)
	// A buffer that grows only when a line needs it: clients of a bench
	// share the server's cores, and zeroing a large buffer per request
	// showed in profiles.
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // comments, event names, blank separators
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			return nil
		}
		var ck Chunk
		if err := json.Unmarshal(data, &ck); err != nil {
			return fmt.Errorf("bad stream chunk: %w", err)
		}
		if ck.Error != nil {
			return ck.Error
		}
		if err := fn(&ck); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return ErrStreamCut
}

// Post sends body as JSON to url with the headers given and returns the
// response when its status is 200; any other status is returned as an
// *Error with the server's message (the body closed).
func Post(ctx context.Context, hc *http.Client, url string, header http.Header, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, ReadError(resp)
	}
	return resp, nil
}

// ReadError reads an error answer: its OpenAI-style body's message, or the
// body's text, or the status.
func ReadError(resp *http.Response) *Error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error *Error `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Message != "" {
		e.Error.Status = resp.StatusCode
		return e.Error
	}
	msg := strings.TrimSpace(string(body))
	if msg == "" {
		msg = resp.Status
	}
	return &Error{Message: msg, Status: resp.StatusCode}
}
