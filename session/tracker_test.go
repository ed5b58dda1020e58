package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/clawrl/clawrl/tokenizer"
)

func sys(s string) tokenizer.Message  { return tokenizer.Message{Role: "system", Content: s} }
func user(s string) tokenizer.Message { return tokenizer.Message{Role: "user", Content: s} }
func asst(s string) tokenizer.Message { return tokenizer.Message{Role: "assistant", Content: s} }
func tool(id, s string) tokenizer.Message {
	return tokenizer.Message{Role: "tool", Content: s, ToolCallID: id}
}

func call(id, name, args string) tokenizer.ToolCall {
	return tokenizer.ToolCall{ID: id, Type: "function", Function: tokenizer.FunctionCall{Name: name, Arguments: json.RawMessage(args)}}
}

func msgs(m ...tokenizer.Message) []tokenizer.Message { return m }

// harness drives a Tracker as the server does: Begin, then Record.
type harness struct {
	t    *testing.T
	tr   *Tracker
	sink *ChanSink
	now  time.Time
	mu   sync.Mutex
}

func newHarness(t *testing.T, opts Options) *harness {
	h := &harness{t: t, sink: NewChanSink(64), now: time.Unix(1_700_000_000, 0)}
	if opts.Sink == nil {
		opts.Sink = h.sink
	}
	opts.Now = h.clock
	h.tr = New(opts)
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

// turn serves one request: Begin, then Record of the given replies.
func (h *harness) turn(sessionID string, m []tokenizer.Message, done bool, replies ...tokenizer.Message) (*Binding, []*Turn) {
	h.t.Helper()
	b := h.tr.Begin(Request{SessionID: sessionID, Messages: m})
	rid := newID("chatcmpl-")
	var turns []*Turn
	for i, r := range replies {
		turns = append(turns, &Turn{ResponseID: rid, Choice: i, Messages: m, Reply: r})
	}
	h.tr.Record(b, turns, done)
	return b, turns
}

// emitted returns the records emitted so far.
func (h *harness) emitted() []Record {
	var out []Record
	for {
		select {
		case r := <-h.sink.C():
			out = append(out, r)
		default:
			return out
		}
	}
}

func (h *harness) onlyTurn() *Turn {
	h.t.Helper()
	recs := h.emitted()
	if len(recs) != 1 || recs[0].Kind != KindTurn {
		h.t.Fatalf("emitted %s, want one turn", describe(recs))
	}
	return recs[0].Turn
}

func describe(recs []Record) string {
	var parts []string
	for _, r := range recs {
		switch r.Kind {
		case KindTurn:
			parts = append(parts, fmt.Sprintf("turn(%s #%d %s)", r.Turn.SessionID, r.Turn.Index, r.Turn.End))
		case KindFeedback:
			parts = append(parts, fmt.Sprintf("feedback(%s #%d)", r.Feedback.SessionID, r.Feedback.TurnIndex))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func contents(m []tokenizer.Message) []string {
	var out []string
	for _, x := range m {
		out = append(out, x.Role+":"+x.Content)
	}
	return out
}

func TestInferredContinuation(t *testing.T) {
	h := newHarness(t, Options{})
	b1, _ := h.turn("", msgs(sys("S"), user("hi")), false, asst("hello"))
	if !b1.Inferred || b1.Continued {
		t.Fatalf("first request: %+v", b1)
	}
	if recs := h.emitted(); len(recs) != 0 {
		t.Fatalf("nothing should be emitted before the next state: %s", describe(recs))
	}
	b2, _ := h.turn("", msgs(sys("S"), user("hi"), asst("hello"), user("thanks")), false, asst("welcome"))
	if b2.SessionID != b1.SessionID || !b2.Continued {
		t.Fatalf("second request in session %q (continued %v), want %q", b2.SessionID, b2.Continued, b1.SessionID)
	}
	got := h.onlyTurn()
	if got.Index != 0 || got.End != EndNextState || got.SessionID != b1.SessionID {
		t.Fatalf("turn = #%d %s %s", got.Index, got.End, got.SessionID)
	}
	if c := contents(got.NextState); len(c) != 1 || c[0] != "user:thanks" {
		t.Fatalf("next state = %q", c)
	}
	// The third request continues turn 1.
	h.turn("", msgs(sys("S"), user("hi"), asst("hello"), user("thanks"), asst("welcome"), user("bye")), false, asst("ciao"))
	if got := h.onlyTurn(); got.Index != 1 || contents(got.NextState)[0] != "user:bye" {
		t.Fatalf("turn 1 = #%d %q", got.Index, contents(got.NextState))
	}
}

func TestEphemeralTrailingMessage(t *testing.T) {
	// OpenClaw appends a context message it does not keep in its history.
	for _, eph := range []tokenizer.Message{sys("now: 10:00"), user("[context] cwd=/x")} {
		t.Run(eph.Role, func(t *testing.T) {
			h := newHarness(t, Options{})
			b1, _ := h.turn("", msgs(sys("S"), user("list files"), eph), false, asst("a.txt b.txt"))
			eph2 := eph
			eph2.Content += " later"
			b2, _ := h.turn("", msgs(sys("S"), user("list files"), asst("a.txt b.txt"), user("open a"), eph2), false, asst("ok"))
			if b2.SessionID != b1.SessionID {
				t.Fatalf("ephemeral message split the session")
			}
			got := h.onlyTurn()
			if c := contents(got.NextState); len(c) != 2 || c[0] != "user:open a" {
				t.Fatalf("next state = %q", c)
			}
		})
	}
}

func TestSharedPrefixSessionsStayApart(t *testing.T) {
	h := newHarness(t, Options{})
	prefix := msgs(sys(strings.Repeat("You are a helpful agent. ", 2000)), user("hello"))
	bA, _ := h.turn("", prefix, false, asst("Hi, I am A."))
	bB, _ := h.turn("", prefix, false, asst("Hi, I am B."))
	if bA.SessionID == bB.SessionID {
		t.Fatalf("two fresh conversations got one session")
	}
	// Interleave their continuations, B first.
	for round := 0; round < 3; round++ {
		for _, c := range []struct {
			b     *Binding
			reply string
		}{{bB, "Hi, I am B."}, {bA, "Hi, I am A."}} {
			hist := append(append([]tokenizer.Message{}, prefix...), asst(c.reply))
			for r := 0; r < round; r++ {
				hist = append(hist, user(fmt.Sprintf("q%d", r)), asst(fmt.Sprintf("%s answer %d", c.reply, r)))
			}
			hist = append(hist, user(fmt.Sprintf("q%d", round)))
			b, _ := h.turn("", hist, false, asst(fmt.Sprintf("%s answer %d", c.reply, round)))
			if b.SessionID != c.b.SessionID {
				t.Fatalf("round %d: continuation of %q went to %q", round, c.b.SessionID, b.SessionID)
			}
			got := h.onlyTurn()
			if got.SessionID != c.b.SessionID || got.Index != round {
				t.Fatalf("round %d: completed %s #%d", round, got.SessionID, got.Index)
			}
		}
	}
}

func TestToolCallsMatchIgnoringIDsAndReasoning(t *testing.T) {
	h := newHarness(t, Options{})
	reply := tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{
		call("call7hG2", "read", `{"path": "a.txt", "n": 1}`),
	}}
	b1, _ := h.turn("", msgs(sys("S"), user("read a")), false, reply)
	// The client rewrites the id, sends the arguments as a JSON string with
	// other spacing and key order, and adds reasoning_content.
	back := tokenizer.Message{Role: "assistant", Content: "", ReasoningContent: "I should read it.",
		ToolCalls: []tokenizer.ToolCall{call("abc123", "read", `"{\"n\":1,\"path\":\"a.txt\"}"`)}}
	b2, _ := h.turn("", msgs(sys("S"), user("read a"), back, tool("abc123", "hello world")), false, asst("It says hello world."))
	if b2.SessionID != b1.SessionID {
		t.Fatalf("tool-call continuation not matched")
	}
	got := h.onlyTurn()
	if c := contents(got.NextState); len(c) != 1 || c[0] != "tool:hello world" {
		t.Fatalf("next state = %q", c)
	}
}

func TestDigestNormalisation(t *testing.T) {
	hs := newHasher()
	cases := []struct {
		name string
		a, b tokenizer.Message
		same bool
	}{
		{"whitespace", user("hello   world\n"), user(" hello world"), true},
		{"developer is system", tokenizer.Message{Role: "developer", Content: "x"}, sys("x"), true},
		{"think block", asst("<think>\nhmm\n</think>\n\nHi"), asst("Hi"), true},
		{"reasoning ignored", tokenizer.Message{Role: "assistant", Content: "Hi", ReasoningContent: "r"}, asst("Hi"), true},
		{"tool_call_id ignored", tool("a", "out"), tool("b", "out"), true},
		{"content differs", user("a"), user("b"), false},
		{"role differs", user("a"), asst("a"), false},
		{"args differ", tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{call("", "f", `{"a":1}`)}},
			tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{call("", "f", `{"a":2}`)}}, false},
		{"field boundaries", user("ab"), tokenizer.Message{Role: "userab"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := hs.message(c.a) == hs.message(c.b); got != c.same {
				t.Fatalf("same digest = %v, want %v", got, c.same)
			}
		})
	}
}

func TestExplicitSessions(t *testing.T) {
	t.Run("unmatched history falls back to trailing input", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.turn("s1", msgs(sys("S"), user("long story")), false, asst("summary A"))
		// The client compacted its history: the reply is gone.
		b, _ := h.turn("s1", msgs(sys("S"), user("[compacted]"), user("go on")), false, asst("more"))
		if b.SessionID != "s1" || b.Inferred || b.Continued {
			t.Fatalf("binding = %+v", b)
		}
		got := h.onlyTurn()
		if got.End != EndUnmatched || len(got.NextState) != 2 {
			t.Fatalf("turn ended %s with %q", got.End, contents(got.NextState))
		}
	})
	t.Run("n>1 siblings: the chosen one continues", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.turn("s2", msgs(user("name a color")), false, asst("red"), asst("blue"))
		h.turn("s2", msgs(user("name a color"), asst("blue"), user("why?")), false, asst("sky"))
		recs := h.emitted()
		if len(recs) != 2 {
			t.Fatalf("emitted %s", describe(recs))
		}
		ends := map[int]EndReason{}
		for _, r := range recs {
			ends[r.Turn.Choice] = r.Turn.End
		}
		if ends[1] != EndNextState || ends[0] != EndSuperseded {
			t.Fatalf("ends = %v", ends)
		}
	})
	t.Run("other sessions' turns are not matched", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.turn("a", msgs(user("hi")), false, asst("yo"))
		b, _ := h.turn("b", msgs(user("hi"), asst("yo"), user("sup")), false, asst("nm"))
		if b.Continued || b.SessionID != "b" {
			t.Fatalf("binding = %+v", b)
		}
		if recs := h.emitted(); len(recs) != 0 {
			t.Fatalf("emitted %s", describe(recs))
		}
	})
	t.Run("session done", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.turn("d", msgs(user("hi")), false, asst("yo"))
		h.turn("d", msgs(user("hi"), asst("yo"), user("bye")), true, asst("bye!"))
		recs := h.emitted()
		if len(recs) != 2 || recs[0].Turn.End != EndNextState || recs[1].Turn.End != EndSessionDone || recs[1].Turn.NextState != nil {
			t.Fatalf("emitted %s", describe(recs))
		}
		if _, err := h.tr.AddFeedback(FeedbackRequest{SessionID: "d", Turn: 1, Thumb: 1}); !errors.Is(err, ErrUnknownTurn) {
			t.Fatalf("feedback on a closed session: %v", err)
		}
	})
	t.Run("End closes a session", func(t *testing.T) {
		h := newHarness(t, Options{})
		h.turn("e", msgs(user("hi")), false, asst("yo"))
		if !h.tr.End("e") || h.tr.End("e") {
			t.Fatal("End should report the session once")
		}
		if got := h.onlyTurn(); got.End != EndSessionDone {
			t.Fatalf("end = %s", got.End)
		}
	})
}

func TestFeedback(t *testing.T) {
	h := newHarness(t, Options{})
	_, turns := h.turn("f", msgs(user("hi")), false, asst("yo"))
	rid := turns[0].ResponseID

	fb, err := h.tr.AddFeedback(FeedbackRequest{ResponseID: rid, Thumb: -1, Text: "rude"})
	if err != nil {
		t.Fatal(err)
	}
	if fb.SessionID != "f" || fb.TurnIndex != 0 || fb.Thumb != -1 {
		t.Fatalf("feedback = %+v", fb)
	}
	recs := h.emitted()
	if len(recs) != 1 || recs[0].Kind != KindFeedback || recs[0].Feedback.ID != fb.ID {
		t.Fatalf("emitted %s", describe(recs))
	}
	// By session and turn, after the turn was completed.
	h.turn("f", msgs(user("hi"), asst("yo"), user("hm")), false, asst("sorry"))
	got := h.onlyTurn()
	if len(got.Feedback) != 1 || got.Feedback[0].ID != fb.ID {
		t.Fatalf("completed turn carries feedback %+v", got.Feedback)
	}
	if _, err := h.tr.AddFeedback(FeedbackRequest{SessionID: "f", Turn: 0, Thumb: 1}); err != nil {
		t.Fatal(err)
	}
	if recs := h.emitted(); len(recs) != 1 || recs[0].Kind != KindFeedback {
		t.Fatalf("emitted %s", describe(recs))
	}
	for _, req := range []FeedbackRequest{{ResponseID: "nope"}, {SessionID: "f", Turn: 7}, {SessionID: "zz"}, {ResponseID: rid, Choice: 1}} {
		if _, err := h.tr.AddFeedback(req); !errors.Is(err, ErrUnknownTurn) {
			t.Errorf("%+v: err = %v", req, err)
		}
	}
}

func TestExpiryAndCapacity(t *testing.T) {
	h := newHarness(t, Options{IdleTimeout: time.Minute, MaxSessions: 2})
	h.turn("a", msgs(user("1")), false, asst("x"))
	h.advance(30 * time.Second)
	h.turn("b", msgs(user("2")), false, asst("y"))
	h.advance(31 * time.Second)
	h.tr.Sweep() // a idled 61s
	if got := h.onlyTurn(); got.SessionID != "a" || got.End != EndExpired {
		t.Fatalf("expired %s %s", got.SessionID, got.End)
	}
	h.turn("c", msgs(user("3")), false, asst("z"))
	h.turn("d", msgs(user("4")), false, asst("w")) // over capacity: b goes
	if got := h.onlyTurn(); got.SessionID != "b" || got.End != EndExpired {
		t.Fatalf("evicted %s %s", got.SessionID, got.End)
	}
	h.tr.Close()
	recs := h.emitted()
	if len(recs) != 2 || recs[0].Turn.End != EndShutdown || recs[1].Turn.End != EndShutdown {
		t.Fatalf("close emitted %s", describe(recs))
	}
	if v := value(h.tr.met.open); v != 0 {
		t.Fatalf("sessions open after close = %v", v)
	}
}

func TestMaxTurnsPerSession(t *testing.T) {
	h := newHarness(t, Options{MaxTurnsPerSession: 2})
	hist := msgs(user("q0"))
	var first string
	for i := range 4 {
		_, turns := h.turn("m", hist, false, asst(fmt.Sprintf("a%d", i)))
		if i == 0 {
			first = turns[0].ResponseID
		}
		hist = append(hist, asst(fmt.Sprintf("a%d", i)), user(fmt.Sprintf("q%d", i+1)))
	}
	if n := len(h.emitted()); n != 3 {
		t.Fatalf("emitted %d turns, want 3", n)
	}
	if _, err := h.tr.AddFeedback(FeedbackRequest{ResponseID: first, Thumb: 1}); !errors.Is(err, ErrUnknownTurn) {
		t.Fatalf("the oldest turn should be forgotten: %v", err)
	}
	if _, err := h.tr.AddFeedback(FeedbackRequest{SessionID: "m", Turn: 3, Thumb: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestDroppedWhenSinkFull(t *testing.T) {
	sink := NewChanSink(1)
	h := newHarness(t, Options{Sink: sink})
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		h.turn(id, msgs(user("hi")), true, asst("yo"))
	}
	if v := value(h.tr.met.dropped); v != 2 {
		t.Fatalf("dropped = %v, want 2", v)
	}
	if v := value(h.tr.met.recorded); v != 3 {
		t.Fatalf("recorded = %v, want 3", v)
	}
	if len(sink.C()) != 1 {
		t.Fatalf("sink holds %d", len(sink.C()))
	}
}

func TestConcurrentUse(t *testing.T) {
	h := newHarness(t, Options{Sink: NewChanSink(1)})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			hist := msgs(sys("S"), user(fmt.Sprintf("g%d", g)))
			for i := range 20 {
				reply := asst(fmt.Sprintf("g%d r%d", g, i))
				b, turns := h.turn("", hist, false, reply)
				_ = b
				_, _ = h.tr.AddFeedback(FeedbackRequest{ResponseID: turns[0].ResponseID, Thumb: 1})
				hist = append(hist, reply, user(fmt.Sprintf("g%d q%d", g, i)))
			}
		})
	}
	wg.Wait()
	if v := value(h.tr.met.recorded); v != 160 {
		t.Fatalf("recorded = %v", v)
	}
	if v := value(h.tr.met.open); v != 8 {
		t.Fatalf("open sessions = %v, want 8", v)
	}
}

func BenchmarkBeginLongPrompt(b *testing.B) {
	tr := New(Options{})
	hist := msgs(sys(strings.Repeat("x", 47_000)))
	for i := range 40 {
		hist = append(hist, user(fmt.Sprintf("q%d %s", i, strings.Repeat("y", 500))), asst(strings.Repeat("z", 500)))
	}
	hist = append(hist, user("last"))
	b.ResetTimer()
	for b.Loop() {
		tr.Begin(Request{Messages: hist})
	}
}

// value sums the samples of a counter or gauge collector.
func value(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			panic(err)
		}
		sum += pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	return sum
}

// durableSink is a ChanSink that is also a Flusher and an Archive, as the
// store is.
type durableSink struct {
	*ChanSink
	flushes int
	mu      sync.Mutex
	known   map[string]Feedback
}

func (d *durableSink) Flush() error {
	d.mu.Lock()
	d.flushes++
	d.mu.Unlock()
	return nil
}

func (d *durableSink) FindTurn(req FeedbackRequest) (Feedback, error) {
	if fb, ok := d.known[req.ResponseID]; ok {
		return fb, nil
	}
	return Feedback{}, ErrUnknownTurn
}

// A durable sink gets every turn when it is recorded (before its next
// state), and the tracker waits for it (Flush) before Record returns.
func TestRecordedTurnsAreFlushed(t *testing.T) {
	ds := &durableSink{ChanSink: NewChanSink(64)}
	h := newHarness(t, Options{Sink: ds})
	h.sink = ds.ChanSink
	_, turns := h.turn("s", msgs(user("hi")), false, asst("hello"))
	recs := h.emitted()
	if len(recs) != 1 || recs[0].Kind != KindRecorded || recs[0].Turn == turns[0] || recs[0].Turn.ResponseID != turns[0].ResponseID ||
		len(recs[0].Turn.Keys) == 0 {
		t.Fatalf("records %+v, want one KindRecorded copy of the turn with its keys", recs)
	}
	if ds.flushes != 1 {
		t.Errorf("%d flushes, want 1", ds.flushes)
	}
	if _, err := h.tr.AddFeedback(FeedbackRequest{ResponseID: turns[0].ResponseID, Thumb: 1}); err != nil || ds.flushes != 2 {
		t.Errorf("feedback: %v, %d flushes", err, ds.flushes)
	}
}

// A restarted tracker given the open turns of the last run (Restore)
// completes them when the conversation goes on, in the same session.
func TestRestoreCompletesOpenTurns(t *testing.T) {
	ds := &durableSink{ChanSink: NewChanSink(64)}
	h := newHarness(t, Options{Sink: ds})
	h.sink = ds.ChanSink
	_, turns := h.turn("", msgs(sys("be brief"), user("hi")), false, asst("hello"))
	rec := h.emitted()[0].Turn

	// A new tracker, as after a restart, knows only what was stored.
	h2 := newHarness(t, Options{})
	stored := &Turn{SessionID: rec.SessionID, Index: rec.Index, ResponseID: rec.ResponseID, Keys: rec.Keys, Inferred: true}
	h2.tr.Restore([]*Turn{stored})
	b, _ := h2.turn("", msgs(sys("be brief"), user("hi"), asst("hello"), user("thanks!")), false, asst("welcome"))
	if b.SessionID != rec.SessionID || !b.Continued {
		t.Errorf("continued in session %q (continued %v), want %q", b.SessionID, b.Continued, rec.SessionID)
	}
	var done *Turn
	for _, r := range h2.emitted() {
		if r.Kind == KindTurn {
			done = r.Turn
		}
	}
	if done == nil || done.ResponseID != turns[0].ResponseID || done.End != EndNextState || len(done.NextState) != 1 || done.NextState[0].Content != "thanks!" {
		t.Fatalf("restored turn emitted as %+v", done)
	}
	if done.Index != 0 || b == nil {
		t.Errorf("index %d", done.Index)
	}
}

// Forget drops a session without emitting its pending turns; feedback on
// a turn the tracker does not remember is looked up in the Archive.
func TestForgetAndArchive(t *testing.T) {
	ds := &durableSink{ChanSink: NewChanSink(64), known: map[string]Feedback{
		"chatcmpl-old": {SessionID: "gone", TurnIndex: 3, ResponseID: "chatcmpl-old"},
	}}
	h := newHarness(t, Options{Sink: ds, Archive: ds})
	h.sink = ds.ChanSink
	h.turn("s", msgs(user("hi")), false, asst("hello"))
	h.emitted()
	if !h.tr.Forget("s") || h.tr.Forget("s") {
		t.Fatal("Forget did not report the session once")
	}
	h.tr.Close()
	for _, r := range h.emitted() {
		if r.Kind == KindTurn {
			t.Errorf("a forgotten session's turn was emitted: %+v", r.Turn)
		}
	}
	fb, err := h.tr.AddFeedback(FeedbackRequest{ResponseID: "chatcmpl-old", Thumb: -1, Text: "late"})
	if err != nil || fb.SessionID != "gone" || fb.TurnIndex != 3 || fb.Thumb != -1 || fb.ID == "" {
		t.Errorf("archived feedback %+v, %v", fb, err)
	}
	if _, err := h.tr.AddFeedback(FeedbackRequest{ResponseID: "nope", Thumb: 1}); !errors.Is(err, ErrUnknownTurn) {
		t.Errorf("unknown turn: %v", err)
	}
}

// A reply with bytes that are not UTF-8 reaches the client as U+FFFD (the
// JSON encoder's replacement, one per byte); the history the client sends
// back still continues the turn.
func TestInvalidUTF8ReplyContinues(t *testing.T) {
	h := newHarness(t, Options{})
	reply := "caf\xc3 ok \xff\xfe!"
	h.turn("", msgs(user("hi")), false, asst(reply))
	raw, err := json.Marshal(reply)
	if err != nil {
		t.Fatal(err)
	}
	var seen string // what the client decodes from the response
	if err := json.Unmarshal(raw, &seen); err != nil {
		t.Fatal(err)
	}
	if seen == reply || !strings.Contains(seen, "\uFFFD") {
		t.Fatalf("the JSON round trip kept the bytes (%q): test is vacuous", seen)
	}
	b, _ := h.turn("", msgs(user("hi"), asst(seen), user("and?")), false, asst("more"))
	if !b.Continued {
		t.Errorf("the client's history (%q) did not continue the turn", seen)
	}
}
