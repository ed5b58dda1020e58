// Package server is clawrl's OpenAI-compatible HTTP API: chat completions,
// the Responses API, legacy completions, models, feedback, health and
// metrics, over a chi router.
//
// It turns requests into prompts (chat template applied), hands them to a
// rollout.Generator, and streams the tokens back as text, reasoning and tool
// calls, with OpenAI's wire shapes. It never runs the model itself. Each
// main chat turn is also recorded, through a session.Tracker, for training:
// the server decides which session a request belongs to (headers, body, or
// inference from the conversation) and what the turn's next state is.
//
// Headers beyond OpenAI's:
//
//	X-Session-Id: <id>   the session (else body session_id, user, prompt_cache_key, or inferred)
//	X-Turn-Type: main|side   side turns are served but never recorded
//	X-Session-Done: 1    the session ends with this request
//	X-No-Train: 1        serve without recording (also body "train": false)
//	X-Weight-Version     (response) the weight version that served the request
//	X-Session-Id         (response) the session a recorded turn went to
//
// Models are accepted under any name (the served model answers). Responses
// are kept unless a request says store: false, so previous_response_id and
// item references resolve (stored.go); background responses are refused.
// Legacy completions are served but never recorded.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/grammar"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// Options configure a Server. Generator, Tokenizer, ModelID and
// ContextLength are required; zero values of the rest take the defaults.
type Options struct {
	// Generator runs the generations.
	Generator rollout.Generator
	// Tokenizer encodes prompts, decodes tokens and holds the chat template.
	Tokenizer *tokenizer.Tokenizer
	// ModelID is the model's name in responses and /v1/models.
	ModelID string
	// ContextLength is the most prompt plus completion tokens a request
	// may use.
	ContextLength int
	// Version returns the current weight version (nil: always 0).
	Version func() uint64
	// Ready reports whether the model is loaded (nil: always ready).
	// Before it is, /readyz and the generation endpoints answer 503.
	Ready func() bool

	// IDKey is the secret under which session ids are hashed and API keys
	// tagged (identity.go); the daemon keeps one per data directory so that
	// a restart finds its sessions again. Empty: a random key per process.
	IDKey []byte
	// HashIDs stores the session ids clients give as keyed hashes
	// (data.hash_ids); false keeps them as sent.
	HashIDs bool
	// APIKeys are the accepted bearer keys; none means no authentication
	// (the config layer allows that on loopback only).
	APIKeys []string
	// MaxBodyBytes bounds a request body (default 8 MiB: an agent's whole
	// history fits, a runaway client does not).
	MaxBodyBytes int64
	// MaxN bounds n, the choices per request (default 8).
	MaxN int
	// DefaultMaxTokens caps the completion when the request does not say
	// (default 8192; never more than the context left).
	DefaultMaxTokens int
	// StopTokens end a generation (default: the tokenizer's EOS and the
	// usual end-of-turn tokens it has).
	StopTokens []int32
	// TemplateVars are extra chat-template variables for every request
	// (such as "enable_thinking": false); a request's chat_template_kwargs
	// override them.
	TemplateVars map[string]any
	// RetryAfter is the wait suggested with 429 and 503 (default 1s).
	RetryAfter time.Duration
	// KeepAlive is the interval of SSE comments while a stream waits for
	// tokens (default 15s; negative disables).
	KeepAlive time.Duration
	// ReadTimeout bounds the reading of a whole request, body included
	// (default 60s): a body sent at a trickle or not at all gets 408 and
	// its connection is let go.
	ReadTimeout time.Duration
	// ShutdownTimeout bounds how long Serve lets in-flight streams finish
	// before cancelling them (default 30s).
	ShutdownTimeout time.Duration

	// Sink receives completed turns and feedback for the reward stage.
	Sink session.Sink
	// Sessions bounds session memory; its Sink field is ignored (Sink above
	// is used).
	Sessions session.Options
	// ModelAliases are other names a request's model may give for the
	// served model; "*" accepts any name (for clients that insist on their
	// own). Without them an unknown model gets 404 model_not_found.
	ModelAliases []string
	// AdminKeys are the bearer keys of the admin routes (POST
	// /admin/rollback); none disables them (403).
	AdminKeys []string
	// Admin performs the admin routes' actions; nil answers 501.
	Admin Admin
	// Data, if set, deletes a user's records: DELETE /v1/sessions/{id}.
	// Without it the route answers 501.
	Data DataStore
	// Responses, if set, keeps Responses API responses (unless a request
	// says store: false) so that previous_response_id and item
	// references resolve, and serves GET and DELETE /v1/responses/{id}
	// (stored.go). Without it those are refused or not found.
	Responses ResponseStore
	// Dashboard, if set, serves the web dashboard: its page at GET
	// /dashboard (static, no data: no key needed) and its data at GET
	// /dashboard/state (behind the API keys). Without it /dashboard is 404.
	Dashboard Dashboard

	// Logger receives request and startup logs.
	Logger zerolog.Logger
	// Registry, if set, gets the server's metrics and is served on
	// /metrics (so other packages' metrics can share it); nil makes a new
	// one with the Go and process collectors.
	Registry *prometheus.Registry
}

// Admin rolls the served weights back to an earlier checkpointed version,
// as a new version; it returns the new version's number.
type Admin interface {
	Rollback(ctx context.Context, version uint64) (uint64, error)
}

// Dashboard serves the web dashboard's page, script and state.
type Dashboard interface {
	ServePage(w http.ResponseWriter, r *http.Request)
	ServeScript(w http.ResponseWriter, r *http.Request)
	ServeState(w http.ResponseWriter, r *http.Request)
}

// DataStore deletes the stored records of a session (its turns, feedback
// and untrained samples) and reports what it removed.
type DataStore interface {
	ForgetSession(id string) (Forgotten, error)
}

// Forgotten counts a session's deleted records.
type Forgotten struct {
	Turns, Feedback, Samples int
}

// Server is the HTTP API. Create it with New.
type Server struct {
	opts    Options
	tok     *tokenizer.Tokenizer
	gen     rollout.Generator
	tracker *session.Tracker
	met     *metrics
	reg     *prometheus.Registry
	log     zerolog.Logger
	keys    [][sha256.Size]byte
	admin   [][sha256.Size]byte
	ids     session.IDs // scopes and hashes session ids (identity.go)
	stopSet map[int32]bool
	started time.Time
	handler http.Handler

	// callSyntax is how the model writes a tool call (its chat template's).
	callSyntax callSyntax

	// inflight counts running handlers, so Serve can wait for them.
	inflight sync.WaitGroup
	// base is the parent of every request context under Serve; cancelling
	// it cancels all in-flight generations.
	base       context.Context
	cancelBase context.CancelFunc

	vocabOnce  sync.Once
	vocabBytes grammar.Vocab // the tokens as bytes, for constrained decoding
}

// New checks opts and builds a Server.
func New(opts Options) (*Server, error) {
	switch {
	case opts.Generator == nil:
		return nil, errors.New("server: Options.Generator is required")
	case opts.Tokenizer == nil:
		return nil, errors.New("server: Options.Tokenizer is required")
	case opts.ModelID == "":
		return nil, errors.New("server: Options.ModelID is required")
	case opts.ContextLength <= 0:
		return nil, fmt.Errorf("server: Options.ContextLength %d must be positive", opts.ContextLength)
	case !opts.Tokenizer.HasChatTemplate():
		return nil, errors.New("server: the model has no chat template (GGUF files made before llama.cpp stored one, and base models, carry none): set model.chat_template to a Jinja chat template file, or to the template itself")
	}
	if opts.Version == nil {
		opts.Version = func() uint64 { return 0 }
	}
	if opts.Ready == nil {
		opts.Ready = func() bool { return true }
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 8 << 20
	}
	if opts.MaxN <= 0 {
		opts.MaxN = 8
	}
	if opts.DefaultMaxTokens <= 0 {
		opts.DefaultMaxTokens = 8192
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	if opts.KeepAlive == 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 60 * time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if len(opts.StopTokens) == 0 {
		opts.StopTokens = defaultStopTokens(opts.Tokenizer)
		if len(opts.StopTokens) == 0 {
			return nil, errors.New("server: the tokenizer has no EOS token; set Options.StopTokens")
		}
	}
	tmpl, _ := opts.Tokenizer.ChatTemplate("")
	if tu, ok := opts.Tokenizer.ChatTemplate("tool_use"); ok {
		tmpl = tu // the one a request with tools renders with
	}
	s := &Server{
		opts:    opts,
		tok:     opts.Tokenizer,
		gen:     opts.Generator,
		log:     opts.Logger,
		reg:     opts.Registry,
		stopSet: map[int32]bool{},
		started: time.Now(),

		callSyntax: detectCallSyntax(tmpl),
	}
	s.base, s.cancelBase = context.WithCancel(context.Background())
	for _, t := range opts.StopTokens {
		s.stopSet[t] = true
	}
	for _, k := range opts.APIKeys {
		if k != "" {
			s.keys = append(s.keys, sha256.Sum256([]byte(k)))
		}
	}
	s.ids = session.IDs{Key: opts.IDKey, Hash: opts.HashIDs}
	if len(s.ids.Key) == 0 {
		s.ids.Key = randomKey()
	}
	for _, k := range opts.AdminKeys {
		if k = strings.TrimSpace(k); k != "" {
			s.admin = append(s.admin, sha256.Sum256([]byte(k)))
		}
	}
	so := opts.Sessions
	so.Sink = opts.Sink
	s.tracker = session.New(so)
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.met = newMetrics(s)
	for _, c := range append(s.met.collectors(), s.tracker.Collectors()...) {
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// defaultStopTokens returns the tokenizer's EOS and the end-of-turn tokens
// of the common chat formats that it has.
func defaultStopTokens(t *tokenizer.Tokenizer) []int32 {
	var out []int32
	seen := map[int32]bool{}
	add := func(id int32) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if id, ok := t.EOS(); ok {
		add(id)
	}
	for _, id := range t.TurnEnds() {
		add(id)
	}
	return out
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.track, s.recoverPanic)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest,
			Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest,
			Message: fmt.Sprintf("Method %s is not allowed for %s", r.Method, r.URL.Path)})
	})
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	r.Get("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.opts.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("loading\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	r.Post("/admin/rollback", s.handleRollback)
	if d := s.opts.Dashboard; d != nil {
		r.Get("/dashboard", d.ServePage)
		r.Get("/dashboard/", d.ServePage)
		r.Get("/dashboard/app.js", d.ServeScript)
	}
	r.Group(func(r chi.Router) {
		r.Use(s.auth)
		if d := s.opts.Dashboard; d != nil {
			r.Get("/dashboard/state", d.ServeState)
		}
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
		r.Get("/v1/models", s.handleModels)
		r.Get("/v1/models/*", s.handleModel) // model ids may hold slashes
		r.Post("/v1/feedback", s.handleFeedback)
		r.Delete("/v1/sessions/{id}", s.handleForgetSession)
		r.Get("/v1/responses/{id}", s.handleGetResponse)
		r.Delete("/v1/responses/{id}", s.handleDeleteResponse)
		r.Group(func(r chi.Router) {
			r.Use(s.limitBody, s.requireReady)
			r.Post("/v1/chat/completions", s.handleChat)
			r.Post("/v1/responses", s.handleResponses)
			r.Post("/v1/completions", s.handleCompletions)
		})
	})
	return r
}

// Serve serves the API on ln until ctx ends, then shuts down gracefully:
// it stops accepting connections, lets in-flight requests (streams
// included) finish for up to ShutdownTimeout, then cancels the rest. Pending
// turns are emitted with session.EndShutdown before it returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if len(s.keys) == 0 {
		s.log.Warn().Str("addr", ln.Addr().String()).
			Msg("no API keys configured: the API is unauthenticated (allowed on loopback only)")
	}
	ev := s.log.Info().Str("addr", ln.Addr().String()).Str("model", s.opts.ModelID)
	if s.opts.Dashboard != nil {
		ev = ev.Str("dashboard", "http://"+ln.Addr().String()+"/dashboard")
	}
	ev.Msg("serving the OpenAI-compatible API")
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		// The whole request, body included: a client that sends its body
		// at a trickle, or not at all, lets go of its connection.
		ReadTimeout: s.opts.ReadTimeout,
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return s.base },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()

	sweepDone := make(chan struct{})
	var sweeper sync.WaitGroup
	sweeper.Go(func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-sweepDone:
				return
			case <-t.C:
				s.tracker.Sweep()
			}
		}
	})
	defer func() {
		close(sweepDone)
		sweeper.Wait()
		s.tracker.Close()
	}()

	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.log.Info().Dur("timeout", s.opts.ShutdownTimeout).Msg("shutting down: finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		// The generations still running are cut; their handlers end
		// each stream properly (a finish reason, an error event, [DONE])
		// and record the turns, before the connections close.
		s.log.Warn().Err(err).Msg("shutdown deadline reached: cancelling in-flight requests")
		s.cancelBase()
		waitTimeout(&s.inflight, 5*time.Second)
		_ = hs.Close()
	}
	<-errc // http.ErrServerClosed
	waitTimeout(&s.inflight, 5*time.Second)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("server: shutdown: %w", err)
	}
	return nil
}

// waitTimeout waits for wg, or for d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// statusWriter records the status and size of a response. It unwraps for
// http.ResponseController (flushing SSE).
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// track counts, times and logs every request, gives it a request id, and
// registers it as in flight.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		s.met.inFlight.Inc()
		defer s.met.inFlight.Dec()
		start := time.Now()
		reqID := newID("req_", 24)
		w.Header().Set("X-Request-Id", reqID)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		endpoint := "other"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" && status != http.StatusNotFound {
			endpoint = rc.RoutePattern()
		}
		s.met.requests.WithLabelValues(endpoint, fmt.Sprint(status)).Inc()
		level := zerolog.InfoLevel
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			level = zerolog.DebugLevel
		}
		s.log.WithLevel(level).Str("id", reqID).Str("method", r.Method).Str("path", r.URL.Path).
			Int("status", status).Int64("bytes", sw.bytes).Dur("took", time.Since(start)).Msg("request")
	})
}

// recoverPanic turns a handler's panic into a 500 with an OpenAI error
// body (when nothing was written yet) and logs the stack.
func (s *Server) recoverPanic(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error().Str("path", r.URL.Path).Interface("panic", v).Bytes("stack", debug.Stack()).Msg("handler panicked")
			if sw, ok := w.(*statusWriter); ok && sw.status != 0 {
				return // too late for an error response
			}
			writeError(w, &apiError{Status: http.StatusInternalServerError, Type: typeServer,
				Message: "The server had an error while processing your request."})
		}()
		next.ServeHTTP(w, r)
	})
}

// keyMatches reports whether r's bearer key is one of keys (in constant
// time) and whether it gave one at all.
func keyMatches(r *http.Request, keys [][sha256.Size]byte) (match, given bool) {
	_, match, given = matchKey(r, keys)
	return match, given
}

// matchKey is keyMatches that also returns the key's hash.
func matchKey(r *http.Request, keys [][sha256.Size]byte) (sum [sha256.Size]byte, match, given bool) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum = sha256.Sum256([]byte(strings.TrimSpace(key)))
	m := 0
	for _, k := range keys {
		m |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	return sum, ok && m == 1, ok
}

// auth checks the bearer key, in constant time, when keys are configured.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.keys) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		sum, match, ok := matchKey(r, s.keys)
		if !ok || !match {
			msg := "Incorrect API key provided."
			if !ok {
				msg = "You didn't provide an API key. Provide it in the Authorization header as 'Bearer YOUR_KEY'."
			}
			writeError(w, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest,
				Code: codeInvalidAPIKey, Message: msg})
			return
		}
		next.ServeHTTP(w, s.withOwner(r, sum))
	})
}

// requireReady answers 503 until the model is loaded.
func (s *Server) requireReady(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.Ready() {
			writeError(w, &apiError{Status: http.StatusServiceUnavailable, Type: typeServer, Code: "model_not_ready",
				Message: "The model is still loading; retry shortly.", RetryAfter: s.opts.RetryAfter})
			return
		}
		next.ServeHTTP(w, r)
	})
}
