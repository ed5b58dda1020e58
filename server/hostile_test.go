package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveEnv runs e's server with Serve on a loopback listener (so the
// connection-level limits apply) and returns its address.
func serveEnv(t *testing.T, e *env) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// A body that trickles in, or never comes, gets 408 within the read
// timeout and its connection is closed.
func TestSlowBodyTimesOut(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.ReadTimeout = 300 * time.Millisecond })
	addr := serveEnv(t, e)
	for _, trickle := range []bool{false, true} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		start := time.Now()
		stop := make(chan struct{})
		if trickle {
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
						conn.Write([]byte(" "))
					}
				}
			}()
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		close(stop)
		if err != nil {
			t.Fatalf("trickle %v: no response: %v", trickle, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "request_timeout") {
			t.Errorf("trickle %v: %d %s, want 408", trickle, resp.StatusCode, body)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("trickle %v: answered after %v", trickle, took)
		}
		conn.Close()
	}
}

// An upload over the limit gets the 413, not a connection reset, while
// the client is still sending it.
func TestOversizedUploadSees413(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxBodyBytes = 4 << 20 })
	addr := serveEnv(t, e)
	big := bytes.Repeat([]byte("x"), 15<<19) // 7.5 MiB
	body := append([]byte(`{"model":"clawrl-test","messages":[{"role":"user","content":"`), big...)
	body = append(body, `"}]}`...)
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the client saw %v, not the 413", err)
	}
	defer resp.Body.Close()
	var got struct {
		Error struct{ Code string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || got.Error.Code != "request_too_large" {
		t.Errorf("status %d, code %q", resp.StatusCode, got.Error.Code)
	}
}

// Type errors name the API's field, never an internal Go struct.
func TestTypeErrorsNameAPIFields(t *testing.T) {
	e := newEnv(t)
	resp, body := e.do(http.MethodPost, "/v1/chat/completions", `{"model":"clawrl-test",`+okMsgs+`,"temperature":"hot"}`)
	if resp.StatusCode != 400 || !strings.Contains(body, `"param":"temperature"`) || strings.Contains(body, "Fields") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

// Valid UTF-8 passes, U+FFFD itself included (a client replaying a reply
// that held a replacement character); raw invalid bytes do not (see
// TestBadRequests).
func TestReplacementCharacterAccepted(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		`{"model":"clawrl-test","messages":[{"role":"user","content":"caf\ufffd"}],"max_tokens":1}`,
		"{\"model\":\"clawrl-test\",\"messages\":[{\"role\":\"user\",\"content\":\"caf\uFFFD \u00e9t\u00e9\"}],\"max_tokens\":1}",
	} {
		if resp, out := e.do(http.MethodPost, "/v1/chat/completions", body); resp.StatusCode != 200 {
			t.Errorf("%q: %d %s", body, resp.StatusCode, out)
		}
	}
}

type fakeAdmin struct{ asked []uint64 }

func (f *fakeAdmin) Rollback(_ context.Context, v uint64) (uint64, error) {
	f.asked = append(f.asked, v)
	if v > 10 {
		return 0, fmt.Errorf("%w: %d", ErrUnknownVersion, v)
	}
	return 42, nil
}

// POST /admin/rollback answers only to an admin key, never an API key.
func TestAdminRollbackAuth(t *testing.T) {
	off := newEnv(t)
	if resp, body := off.do(http.MethodPost, "/admin/rollback", `{"version":3}`); resp.StatusCode != 403 {
		t.Errorf("without admin keys: %d %s, want 403", resp.StatusCode, body)
	}
	adm := &fakeAdmin{}
	e := newEnv(t, func(o *Options) { o.APIKeys, o.AdminKeys, o.Admin = []string{"user-key"}, []string{"admin-key"}, adm })
	for _, tt := range []struct {
		key, body string
		status    int
	}{
		{"", `{"version":3}`, 401},
		{"user-key", `{"version":3}`, 401},
		{"admin-key", `{}`, 400},
		{"admin-key", `{"version":99}`, 404},
		{"admin-key", `{"version":3}`, 200},
	} {
		var hdr []string
		if tt.key != "" {
			hdr = []string{"Authorization", "Bearer " + tt.key}
		}
		if resp, body := e.do(http.MethodPost, "/admin/rollback", tt.body, hdr...); resp.StatusCode != tt.status {
			t.Errorf("key %q body %s: %d %s, want %d", tt.key, tt.body, resp.StatusCode, body, tt.status)
		}
	}
	if len(adm.asked) != 2 || adm.asked[1] != 3 {
		t.Errorf("rollbacks asked: %v", adm.asked)
	}
}
