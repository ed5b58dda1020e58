package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// Bodies over the limit get a 413 with an OpenAI error body that the
// client can read, however far over the limit and however sent: with a
// declared length, chunked, and by a client that writes its whole body
// before it reads (as most do), never a connection reset.
func TestOversizedBodiesSee413(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxBodyBytes = 1 << 20 })
	addr := serveEnv(t, e)
	body := func(n int) []byte {
		b := append([]byte(`{"model":"clawrl-test","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("x"), n)...)
		return append(b, `"}]}`...)
	}
	check := func(name string, status int, data []byte) {
		t.Helper()
		var got struct {
			Error struct{ Code, Type string } `json:"error"`
		}
		if err := json.Unmarshal(data, &got); err != nil || status != http.StatusRequestEntityTooLarge || got.Error.Code != "request_too_large" {
			t.Errorf("%s: %d %.200s", name, status, data)
		}
	}
	for _, size := range []int{3 << 20, 64 << 20} {
		// The Go client, with a declared length.
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body(size)))
		if err != nil {
			t.Fatalf("%d MiB: the client saw %v, not the 413", size>>20, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		check(fmt.Sprintf("%d MiB", size>>20), resp.StatusCode, data)

		// Chunked: the limit is found while reading.
		pr, pw := io.Pipe()
		go func() {
			b := body(size)
			for len(b) > 0 {
				n := min(len(b), 256<<10)
				if _, err := pw.Write(b[:n]); err != nil {
					return
				}
				b = b[n:]
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", pr)
		req.Header.Set("Content-Type", "application/json")
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%d MiB chunked: the client saw %v, not the 413", size>>20, err)
		}
		data, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		pr.Close()
		check(fmt.Sprintf("%d MiB chunked", size>>20), resp.StatusCode, data)

		// A client that writes everything, then reads.
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		b := body(size)
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(b))
		if _, err := conn.Write(b); err != nil {
			t.Fatalf("%d MiB raw: writing the body: %v", size>>20, err)
		}
		raw, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%d MiB raw: %v", size>>20, err)
		}
		data, _ = io.ReadAll(raw.Body)
		check(fmt.Sprintf("%d MiB raw", size>>20), raw.StatusCode, data)
		if !raw.Close {
			t.Errorf("%d MiB raw: the connection is kept after a body over the limit", size>>20)
		}
		conn.Close()
	}
	// A body within the limit still works.
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body(1000)))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a small body: %v %v", err, resp.Status)
	}
	resp.Body.Close()
}
