package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/clawrl/clawrl/rollout"
)

// Error types and codes, as the OpenAI API names them.
const (
	typeInvalidRequest = "invalid_request_error"
	typeServer         = "server_error"
	// OpenAI reports request-rate limits with type "requests" (and token
	// limits with "tokens"), code "rate_limit_exceeded".
	typeRateLimit = "requests"

	codeContextLength = "context_length_exceeded"
	codeInvalidAPIKey = "invalid_api_key"
	codeRateLimit     = "rate_limit_exceeded"
)

// apiError is an error the client sees, with its HTTP status.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   string // "" is null
	Code    string // "" is null
	// RetryAfter, when set, is sent as the Retry-After header.
	RetryAfter time.Duration
}

func (e *apiError) Error() string { return e.Message }

// body is the OpenAI error object {"error": {...}}.
func (e *apiError) body() errorBody {
	b := errorBody{}
	b.Error.Message = e.Message
	b.Error.Type = e.Type
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.Code != "" {
		b.Error.Code = &e.Code
	}
	return b
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func invalid(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

func internalError(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Type: typeServer,
		Message: "The server had an error while processing your request: " + err.Error()}
}

// writeError sends e as the whole response.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(max(1, int(e.RetryAfter.Round(time.Second)/time.Second))))
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.body())
}

// generateError maps an error of rollout.Generator.Generate to what the
// client sees.
func (s *Server) generateError(err error) *apiError {
	switch {
	case errors.Is(err, rollout.ErrQueueFull):
		return &apiError{Status: http.StatusTooManyRequests, Type: typeRateLimit, Code: codeRateLimit,
			Message:    "The server is busy: too many requests are waiting. Please retry after a short wait.",
			RetryAfter: s.opts.RetryAfter}
	case errors.Is(err, rollout.ErrContextLength):
		return invalid("messages", codeContextLength,
			"This model's maximum context length is %d tokens; the prompt and the requested completion do not fit.",
			s.opts.ContextLength)
	case errors.Is(err, rollout.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "service_unavailable",
			Message: "The server is shutting down.", RetryAfter: s.opts.RetryAfter}
	}
	return internalError(err)
}
