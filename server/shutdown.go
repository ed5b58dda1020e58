package server

import "net/http"

// Streams the shutdown cuts. When in-flight requests outlast the
// shutdown timeout, Serve cancels their generations (the base context)
// and waits a little for their handlers. A stream cut that way still ends
// as clients expect: each choice still open gets a finish reason
// ("length": the reply is cut short), then an error event says why, then
// [DONE] (the Responses API: its items closed, an error event, then
// response.incomplete). Its turn is recorded, with the finish reason
// "interrupted", and a stored response keeps what was written. A request
// that was not streamed gets a 503 instead.

// finishInterrupted is the recorded finish reason of a choice the
// shutdown cut; clients read "length".
const finishInterrupted = "interrupted"

// shutdownError is what a client reads when the shutdown cut its reply.
func (s *Server) shutdownError() *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "server_shutdown",
		Message:    "The server is shutting down: the reply was cut short. Retry the request for a whole one.",
		RetryAfter: s.opts.RetryAfter}
}

// cut marks the choices that the server's shutdown cut (as opposed to
// their client leaving, or an error): their finish becomes
// finishInterrupted. It returns their indices (nil: the outputs were not
// cut by the shutdown). outs are indexed by choice.
func (s *Server) cut(outs []*output) []int {
	if s.base.Err() == nil {
		return nil
	}
	var idx []int
	for _, o := range outs {
		if o == nil || o.err != nil {
			return nil
		}
		if o.finish == "" {
			idx = append(idx, o.index)
		}
	}
	for _, i := range idx {
		outs[i].finish = finishInterrupted
	}
	return idx
}

// wireFinish is the finish reason clients read for a recorded one.
func wireFinish(finish string) string {
	if finish == finishInterrupted {
		return "length"
	}
	return finish
}
