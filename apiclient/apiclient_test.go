package apiclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadStream(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		content string // concatenated delta content
		chunks  int
		err     string // "" for success; ErrStreamCut by its text
	}{
		{"two chunks", "data: {\"id\":\"a\",\"choices\":[{\"delta\":{\"content\":\"He\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\ndata: [DONE]\n\n", "Hello", 2, ""},
		{"no space after data:", "data:{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata:[DONE]\n", "x", 1, ""},
		{"comments and events are skipped", ": keep-alive\nevent: message\ndata: {\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\ndata: [DONE]\n", "y", 1, ""},
		{"usage only", "data: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n\ndata: [DONE]\n", "", 1, ""},
		{"cut", "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n", "par", 1, ErrStreamCut.Error()},
		{"error event", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine failed\",\"type\":\"server_error\"}}\n\n", "a", 1, "engine failed"},
		{"bad json", "data: {nope\n\n", "", 0, "bad stream chunk"},
		{"empty", "", "", 0, ErrStreamCut.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var content strings.Builder
			n := 0
			err := ReadStream(strings.NewReader(tc.body), func(c *Chunk) error {
				n++
				for _, ch := range c.Choices {
					if ch.Delta.Content != nil {
						content.WriteString(*ch.Delta.Content)
					}
				}
				return nil
			})
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if content.String() != tc.content || n != tc.chunks {
				t.Errorf("content %q in %d chunks, want %q in %d", content.String(), n, tc.content, tc.chunks)
			}
		})
	}
	stop := errors.New("stop")
	if err := ReadStream(strings.NewReader("data: {}\n\ndata: [DONE]\n"), func(*Chunk) error { return stop }); err != stop {
		t.Errorf("fn's error: got %v", err)
	}
}

// TestPostAndRead runs against a server that answers a stream, a whole
// completion (it ignored "stream") or an error.
func TestPostAndRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("X-Session-Id") != "s1" {
			http.Error(w, "missing headers", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
		case "/whole":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"whole"}}]}`)
		case "/limited":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"queue full","type":"rate_limit","code":"queue_full"}}`)
		default:
			http.Error(w, "no such route", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	h := http.Header{"X-Session-Id": {"s1"}}
	text := func(path string) (string, error) {
		resp, err := Post(context.Background(), nil, srv.URL+path, h, map[string]any{"stream": true})
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		err = Read(resp, func(c *Chunk) error {
			for _, ch := range c.Choices {
				d := ch.Delta
				if ch.Message != nil {
					d = *ch.Message
				}
				if d.Content != nil {
					b.WriteString(*d.Content)
				}
			}
			return nil
		})
		return b.String(), err
	}
	if got, err := text("/stream"); got != "hi" || err != nil {
		t.Errorf("stream: %q, %v", got, err)
	}
	if got, err := text("/whole"); got != "whole" || err != nil {
		t.Errorf("whole completion: %q, %v", got, err)
	}
	_, err := text("/limited")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 429 || ae.Message != "queue full" || ae.CodeString() != "queue_full" {
		t.Errorf("429: %#v", err)
	}
	_, err = text("/missing")
	if !errors.As(err, &ae) || ae.Status != 404 || !strings.Contains(ae.Message, "no such route") {
		t.Errorf("404 with a plain body: %#v", err)
	}
}

// FuzzReadStream: no input panics the reader, and a successful read saw
// a [DONE] line.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n")
	f.Add("data: {\"error\":{\"message\":\"m\",\"code\":5}}\n")
	f.Add(": ping\n\ndata:\n")
	f.Fuzz(func(t *testing.T, body string) {
		err := ReadStream(strings.NewReader(body), func(*Chunk) error { return nil })
		if err == nil && !strings.Contains(body, "[DONE]") {
			t.Fatalf("a read without [DONE] succeeded: %q", body)
		}
	})
}
