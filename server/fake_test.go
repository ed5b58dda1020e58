package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// script is what the fake generator produces for one request.
type script struct {
	text     string        // generated text; the EOS token follows
	cached   int           // CachedTokens on the first event
	version  uint64        // version of the tokens
	switchAt int           // from this token on, tokens carry version+1 (0: never)
	delay    time.Duration // before each token
	endless  bool          // generate filler until cancelled or MaxTokens
	fail     bool          // end with FinishError after the text
}

// fakeGen is a rollout.Generator that streams scripted tokens. It honours
// cancellation, bounds every generation by MaxTokens, and can refuse with
// ErrQueueFull.
type fakeGen struct {
	tok    *tokenizer.Tokenizer
	eos    int32
	reply  func(prompt string, req rollout.Request) script
	full   atomic.Bool
	active atomic.Int64

	mu        sync.Mutex
	reqs      []rollout.Request
	cancelled chan time.Time // when a generation saw its context end
	wg        sync.WaitGroup
}

func newFakeGen(tok *tokenizer.Tokenizer) *fakeGen {
	eos, _ := tok.EOS()
	return &fakeGen{
		tok: tok, eos: eos,
		reply:     func(string, rollout.Request) script { return script{text: "Hello there!"} },
		cancelled: make(chan time.Time, 256),
	}
}

func (f *fakeGen) requests() []rollout.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]rollout.Request(nil), f.reqs...)
}

func (f *fakeGen) Generate(ctx context.Context, req rollout.Request) (<-chan rollout.Event, error) {
	if f.full.Load() {
		return nil, rollout.ErrQueueFull
	}
	if req.MaxTokens <= 0 {
		panic("fakeGen: MaxTokens must be positive")
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	sc := f.reply(f.tok.Decode(req.Prompt), req)
	toks := f.tok.Encode(sc.text)
	if fp, ok := req.Constraint.(*forcePrompt); ok {
		// An echo with log-probs: the prompt's forced tokens come first,
		// as a constrained model would write them.
		toks = append(slices.Clone(fp.ids), toks...)
	}
	filler := f.tok.Encode(" la")
	ch := make(chan rollout.Event, 4)
	f.active.Add(1)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer f.active.Add(-1)
		defer close(ch)
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		cancelled := func() {
			select {
			case f.cancelled <- time.Now():
			default:
			}
			ch <- rollout.Event{Finish: rollout.FinishCancelled}
		}
		for i := 0; ; i++ {
			if ctx.Err() != nil {
				cancelled()
				return
			}
			var ev rollout.Event
			switch {
			case i < len(toks):
				ev = rollout.Event{Token: toks[i], HasToken: true}
			case sc.endless:
				ev = rollout.Event{Token: filler[i%len(filler)], HasToken: true}
			case sc.fail:
				ch <- rollout.Event{Finish: rollout.FinishError, Err: errFake}
				return
			default:
				ev = rollout.Event{Token: f.eos, HasToken: true, Finish: rollout.FinishStop}
			}
			if i == 0 {
				ev.CachedTokens = sc.cached
			}
			ev.Version = sc.version
			if sc.switchAt > 0 && i >= sc.switchAt {
				ev.Version++
			}
			ev.LogProb = -float32(i%5+1) / 10
			for k := range req.Sampling.TopLogProbs {
				ev.Top = append(ev.Top, sample.TokenLogProb{Token: ev.Token + int32(k), LogProb: ev.LogProb - float32(k)})
			}
			if ev.Finish == "" && i == req.MaxTokens-1 {
				ev.Finish = rollout.FinishLength
			}
			if sc.delay > 0 {
				timer.Reset(sc.delay)
				select {
				case <-timer.C:
				case <-ctx.Done():
					cancelled()
					return
				}
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				cancelled()
				return
			}
			if ev.Finish != "" {
				return
			}
		}
	}()
	return ch, nil
}

type fakeError string

func (e fakeError) Error() string { return string(e) }

const errFake = fakeError("fake engine failure")

// trained is the small test tokenizer (it has a chat template).
var trained = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	return tokenizer.Load("../tokenizer/testdata/trained")
})

// env is a server with a fake generator behind an httptest server.
type env struct {
	t       testing.TB
	gen     *fakeGen
	srv     *Server
	ts      *httptest.Server
	sink    *session.ChanSink
	version atomic.Uint64
	ready   atomic.Bool
	client  openai.Client
}

func newEnv(t testing.TB, configure ...func(*Options)) *env {
	t.Helper()
	tok, err := trained()
	if err != nil {
		t.Fatalf("load tokenizer: %v", err)
	}
	return newEnvWith(t, tok, configure...)
}

func newEnvWith(t testing.TB, tok *tokenizer.Tokenizer, configure ...func(*Options)) *env {
	t.Helper()
	e := &env{t: t, gen: newFakeGen(tok), sink: session.NewChanSink(256)}
	e.version.Store(7)
	e.ready.Store(true)
	opts := Options{
		Generator:     e.gen,
		Tokenizer:     tok,
		ModelID:       "clawrl-test",
		ContextLength: 4096,
		Version:       e.version.Load,
		Ready:         e.ready.Load,
		Sink:          e.sink,
		Logger:        zerolog.New(io.Discard),
		KeepAlive:     -1,
	}
	for _, c := range configure {
		c(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	e.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		e.ts.Close()
		e.gen.wg.Wait()
	})
	e.client = e.newClient()
	return e
}

func (e *env) newClient(opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(e.ts.URL + "/v1/"),
		option.WithAPIKey("test-key"),
		option.WithMaxRetries(0),
		option.WithHTTPClient(e.ts.Client()),
	}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw request and returns the response with its body read.
func (e *env) post(path, body string, header ...string) (*http.Response, string) {
	e.t.Helper()
	return e.do(http.MethodPost, path, body, header...)
}

func (e *env) do(method, path, body string, header ...string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, string(b)
}

// records drains what the sink holds.
func (e *env) records() []session.Record {
	var out []session.Record
	for {
		select {
		case r := <-e.sink.C():
			out = append(out, r)
		default:
			return out
		}
	}
}

// ctx is a test context with a bound.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}
