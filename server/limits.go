package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// drainLimit bounds what is read and dropped of a body over the limit
// (the connection's read timeout bounds the time).
const drainLimit = 1 << 30

// limitBody bounds the request body. A body over the limit gets a 413
// with an OpenAI error body, whether its length was declared (refused at
// once) or found while reading (a chunked body: the handler's read fails
// and it answers 413). Either way the response is sent first and the rest
// of the body is then read and dropped, up to drainLimit within the read
// timeout, before the connection closes: a client still sending its body
// (most send all of it before they read) would otherwise get a
// connection reset, which loses the response in its socket, instead of
// the 413.
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.opts.MaxBodyBytes {
			// Reads may follow the response's writes.
			_ = http.NewResponseController(w).EnableFullDuplex()
			w.Header().Set("Connection", "close")
			writeError(w, tooLarge(s.opts.MaxBodyBytes))
			drain(w, r.Body)
			return
		}
		raw := r.Body
		body := &limitedBody{ReadCloser: http.MaxBytesReader(w, raw, s.opts.MaxBodyBytes)}
		r.Body = body
		next.ServeHTTP(w, r)
		if body.hit {
			drain(w, raw)
		}
	})
}

// limitedBody notes when its limit cut the body.
type limitedBody struct {
	io.ReadCloser
	hit bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		b.hit = true
	}
	return n, err
}

// drain sends what the handler wrote, then reads and drops the rest of
// body.
func drain(w http.ResponseWriter, body io.Reader) {
	_ = http.NewResponseController(w).Flush()
	_, _ = io.CopyN(io.Discard, body, drainLimit)
}

func tooLarge(limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, Code: "request_too_large",
		Message: fmt.Sprintf("The request body is larger than the limit of %d bytes.", limit)}
}
