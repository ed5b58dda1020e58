package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

func open(t testing.TB, dir string, opts Options) *DB {
	t.Helper()
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func testTurn(resp, sess string, idx int, user string) *session.Turn {
	return &session.Turn{
		SessionID: sess, Index: idx, ResponseID: resp, Endpoint: "chat.completions", Model: "m",
		Messages:       []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: user}},
		Reply:          tokenizer.Message{Role: "assistant", Content: "Sure."},
		PromptTokens:   []int32{1, 2, 3},
		ResponseTokens: []int32{4, 5},
		LogProbs:       []float32{-0.5, -0.25},
		Version:        3,
		Keys:           [][32]byte{{1, 2, 3}},
		Received:       time.Now(),
	}
}

// record writes a turn as the tracker does: recorded, then (with next)
// completed.
func record(t testing.TB, db *DB, turn *session.Turn, next []tokenizer.Message) {
	t.Helper()
	db.Offer(session.Record{Kind: session.KindRecorded, Turn: turn})
	if next != nil {
		done := *turn
		done.NextState, done.End, done.Completed = next, session.EndNextState, time.Now()
		db.Offer(session.Record{Kind: session.KindTurn, Turn: &done})
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
}

func countRows(t testing.TB, db *DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.SQL().QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTurnLifecycle(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{})
	turn := testTurn("chatcmpl-1", "s1", 0, "hello")
	record(t, db, turn, nil)

	open1, err := db.OpenTurns(10)
	if err != nil || len(open1) != 1 {
		t.Fatalf("open turns %v, %v", open1, err)
	}
	if o := open1[0]; o.SessionID != "s1" || o.ResponseID != "chatcmpl-1" || len(o.Keys) != 1 || o.Keys[0] != turn.Keys[0] {
		t.Errorf("open turn %+v", o)
	}
	if ready, _ := db.ReadyTurns(10, nil); len(ready) != 0 {
		t.Errorf("an open turn is ready: %+v", ready)
	}
	// Feedback before the next state travels with the turn. Its thumb
	// made the turn ready: the next state that came after is kept, and
	// left out of its scoring (the thumb decided).
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-1", ResponseID: "chatcmpl-1", Thumb: 1, Text: "nice"}})
	done := *turn
	done.NextState, done.End = []tokenizer.Message{{Role: "user", Content: "thanks"}}, session.EndNextState
	db.Offer(session.Record{Kind: session.KindTurn, Turn: &done})
	db.Flush()
	ready, err := db.ReadyTurns(10, nil)
	if err != nil || len(ready) != 1 {
		t.Fatalf("ready %v, %v", ready, err)
	}
	r := ready[0]
	if r.ID != "chatcmpl-1/0" || r.Gen != 0 || r.Version != 3 || len(r.Prompt) != 3 || r.LogProbs[1] != -0.25 ||
		len(r.NextState) != 0 || r.End != endThumb || len(r.Feedback) != 1 || r.Feedback[0].Text != "nice" {
		t.Errorf("ready turn %+v", r)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns WHERE next_state IS NOT NULL"); n != 1 {
		t.Errorf("the next state after the thumb was not kept")
	}
	if n, _ := db.ReadyTurns(10, map[string]bool{r.ID: true}); len(n) != 0 {
		t.Errorf("busy turn offered again")
	}

	// Scored, then late feedback: a new generation, ready again.
	if err := db.AddSample(Sample{TurnID: r.ID, Gen: 0, Version: 3, Kind: "binary", Reward: 1, Source: "feedback"}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns WHERE status = 'scored'"); n != 1 {
		t.Fatalf("turn not scored")
	}
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-2", ResponseID: "chatcmpl-1", Thumb: -1}})
	db.Flush()
	ready, _ = db.ReadyTurns(10, nil)
	if len(ready) != 1 || ready[0].Gen != 1 || len(ready[0].Feedback) != 2 {
		t.Fatalf("after late feedback: %+v", ready)
	}
	// A stale result of the old generation is superseded.
	if err := db.AddSample(Sample{TurnID: r.ID, Gen: 0, Version: 3, Kind: "binary", Reward: 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddSample(Sample{TurnID: r.ID, Gen: 1, Version: 3, Kind: "binary", Reward: -1, Source: "feedback"}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'queued'"); n != 1 {
		t.Errorf("%d queued samples, want 1 (the first generation's superseded)", n)
	}
	fb, err := db.FindTurn(session.FeedbackRequest{SessionID: "s1", Turn: 0})
	if err != nil || fb.ResponseID != "chatcmpl-1" {
		t.Errorf("FindTurn by session: %+v, %v", fb, err)
	}
	if _, err := db.FindTurn(session.FeedbackRequest{ResponseID: "nope"}); !errors.Is(err, session.ErrUnknownTurn) {
		t.Errorf("FindTurn of an unknown id: %v", err)
	}
}

func TestExactlyOnce(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	for i := range 3 {
		turn := testTurn(fmt.Sprintf("r%d", i), "s", i, "q")
		record(t, db, turn, []tokenizer.Message{{Role: "user", Content: "ok"}})
		if err := db.AddSample(Sample{TurnID: TurnID(turn.ResponseID, 0), Version: 3, Kind: "binary", Reward: 1}); err != nil {
			t.Fatal(err)
		}
	}
	q, oldest, err := db.Queued(10)
	if err != nil || len(q) != 3 || oldest.IsZero() || len(q[0].Prompt) != 3 {
		t.Fatalf("queued %d, %v, %v", len(q), oldest, err)
	}
	if err := db.CommitStep(Step{Step: 1, Version: 4, Parent: 3, Samples: []string{q[0].ID, q[1].ID}}); err != nil {
		t.Fatal(err)
	}
	if err := db.CommitStep(Step{Step: 2, Version: 5, Parent: 4, Samples: []string{q[1].ID, q[2].ID}}); err == nil {
		t.Fatal("a sample trained twice was accepted")
	}
	// The failed step left nothing behind.
	if n := countRows(t, db, "SELECT COUNT(*) FROM steps"); n != 1 {
		t.Errorf("%d steps recorded, want 1", n)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'queued'"); n != 1 {
		t.Errorf("%d queued, want 1", n)
	}
	if v, _ := db.LastVersion(); v != 4 {
		t.Errorf("last version %d, want 4", v)
	}
	r, err := db.Resume(0, false)
	if err != nil || r.LostSteps != 1 || r.Requeued != 2 || r.QueuedSamples != 3 {
		t.Errorf("resume from step 0: %+v, %v", r, err)
	}
	if v, _ := db.LastVersion(); v != 4 {
		t.Errorf("a lost step's version must stay issued: last %d", v)
	}
	if n, err := db.DropStale(func(v uint64) bool { return v < 4 }); err != nil || n != 3 {
		t.Errorf("DropStale: %d, %v", n, err)
	}
}

// fileHas reports whether any of the database's files holds s.
func fileHas(t *testing.T, db *DB, s string) bool {
	t.Helper()
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(db.Path() + suffix)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

func TestForgetRemovesTheBytes(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	const secret = "my grandmother's maiden name is Quetzalcoatl-7781"
	for i := range 3 {
		record(t, db, testTurn(fmt.Sprintf("f%d", i), "victim", i, secret), []tokenizer.Message{{Role: "user", Content: secret}})
		db.AddSample(Sample{TurnID: TurnID(fmt.Sprintf("f%d", i), 0), Kind: "binary", Reward: 1, Hint: secret})
	}
	record(t, db, testTurn("keep", "other", 0, "keep me"), nil)
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-x", ResponseID: "f0", Text: secret}})
	db.Flush()
	if !fileHas(t, db, secret) {
		t.Fatal("the text was never written (test is vacuous)")
	}
	f, err := db.ForgetSession("victim")
	if err != nil {
		t.Fatal(err)
	}
	if f.Turns != 3 || f.Samples != 3 || f.Feedback != 1 {
		t.Errorf("forgot %+v", f)
	}
	if fileHas(t, db, secret) {
		t.Error("the forgotten text is still in the database files")
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns"); n != 1 {
		t.Errorf("%d turns left, want the other session's 1", n)
	}
}

func TestRedactedTurnsAreNotTrainable(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	key := "sk-proj-" + strings.Repeat("a1B2", 10)
	turn := testTurn("red", "s", 0, "my key is "+key+" please use it")
	record(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	if fileHas(t, db, key) {
		t.Error("the API key reached the database files")
	}
	var status string
	var prompt []byte
	if err := db.SQL().QueryRow("SELECT status, prompt FROM turns").Scan(&status, &prompt); err != nil {
		t.Fatal(err)
	}
	if status != TurnRedacted || prompt != nil {
		t.Errorf("redacted turn: status %q, prompt tokens kept: %v", status, prompt != nil)
	}
	if r, _ := db.ReadyTurns(10, nil); len(r) != 0 {
		t.Errorf("a redacted turn is offered for scoring")
	}

	raw := open(t, t.TempDir(), Options{NoRedact: true})
	record(t, raw, testTurn("raw", "s", 0, "my key is "+key), nil)
	if !fileHas(t, raw, key) {
		t.Error("NoRedact stored redacted text")
	}
}

func TestExport(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	record(t, db, testTurn("e1", "s", 0, "first"), []tokenizer.Message{{Role: "user", Content: "wrong, try again"}})
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-e", ResponseID: "e1", Thumb: -1, Text: "wrong"}})
	db.Flush()
	if err := db.AddSample(Sample{TurnID: "e1/0", Gen: 1, Version: 3, Kind: "both", Reward: -1, Source: "feedback", Votes: []int{-1, -1, 1},
		Hint: "Check the facts first.", Teacher: []float32{-0.1, -0.2}}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := db.Export(&buf)
	if err != nil || n != 1 {
		t.Fatalf("exported %d, %v", n, err)
	}
	var rec ExportRecord
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Label == nil || *rec.Label || rec.Reward != -1 || rec.Hint != "Check the facts first." || len(rec.Votes) != 3 ||
		len(rec.Prompt) != 2 || rec.Completion[0].Content != "Sure." || len(rec.Messages) != 3 || rec.Messages[2].Role != "assistant" ||
		len(rec.TeacherAdvantages) != 2 || rec.TeacherAdvantages[0] != float32(-0.1)-float32(-0.5) || len(rec.ResponseTokenIDs) != 2 ||
		len(rec.Feedback) != 1 || rec.Feedback[0].Text != "wrong" {
		t.Errorf("export record %+v", rec)
	}
	st, err := db.Stats()
	if err != nil || st.Turns["scored"] != 1 || st.Samples["queued"] != 1 || st.Feedback != 1 || st.Sessions != 1 {
		t.Errorf("stats %+v, %v", st, err)
	}
}

func TestOpenRefuses(t *testing.T) {
	t.Run("corrupt", func(t *testing.T) {
		dir := t.TempDir()
		garbage := bytes.Repeat([]byte("this is not an sqlite database "), 400)
		if err := os.WriteFile(filepath.Join(dir, FileName), garbage, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{})
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) ||
			!strings.Contains(err.Error(), "move it aside") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		dir := t.TempDir()
		db := open(t, dir, Options{})
		for i := range 200 {
			record(t, db, testTurn(fmt.Sprintf("t%d", i), "s", i, strings.Repeat("x", 500)), nil)
		}
		db.Close()
		path := filepath.Join(dir, FileName)
		st, _ := os.Stat(path)
		if err := os.Truncate(path, st.Size()/2); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("a truncated database opened: %v", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		// A store truncated to nothing must not silently become a new one.
		dir := t.TempDir()
		path := filepath.Join(dir, FileName)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{})
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "empty (0 bytes)") {
			t.Errorf("err = %v", err)
		}
		if st, _ := os.Stat(path); st.Size() != 0 {
			t.Errorf("the refused file was written to: %d bytes", st.Size())
		}
	})
	t.Run("read-only file", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes read-only files")
		}
		dir := t.TempDir()
		open(t, dir, Options{}).Close()
		path := filepath.Join(dir, FileName)
		if err := os.Chmod(path, 0o400); err != nil {
			t.Fatal(err)
		}
		_, err := Open(dir, Options{})
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod u+w") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("not writable", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, nil, 0o600)
		_, err := Open(filepath.Join(file, "data"), Options{})
		if err == nil || !strings.Contains(err.Error(), "data directory") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("other base model", func(t *testing.T) {
		dir := t.TempDir()
		db := open(t, dir, Options{BaseModel: "model-a"})
		db.Close()
		_, err := Open(dir, Options{BaseModel: "model-b"})
		if err == nil || !strings.Contains(err.Error(), "model-a") || !strings.Contains(err.Error(), "model-b") {
			t.Errorf("err = %v", err)
		}
		db2 := open(t, dir, Options{BaseModel: "model-a"})
		db2.Close()
	})
	t.Run("mode", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "new")
		db := open(t, dir, Options{})
		db.Close()
		st, err := os.Stat(dir)
		if err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("data dir mode %v, %v", st.Mode(), err)
		}
	})
}

func TestDiskBudget(t *testing.T) {
	db := open(t, t.TempDir(), Options{MaxBytes: 1})
	record(t, db, testTurn("b1", "s", 0, "hi"), []tokenizer.Message{{Role: "user", Content: "ok"}})
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns"); n != 0 {
		t.Errorf("%d turns stored past the budget", n)
	}
}

func TestPurge(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	old := testTurn("old", "s", 0, "old")
	old.Received = time.Now().AddDate(0, 0, -40)
	record(t, db, old, nil)
	record(t, db, testTurn("new", "s", 1, "new"), nil)
	f, err := db.Purge(time.Now().AddDate(0, 0, -30))
	if err != nil || f.Turns != 1 {
		t.Fatalf("purge %+v, %v", f, err)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns WHERE id = 'new/0'"); n != 1 {
		t.Error("purge deleted a recent turn")
	}
}

// A store of 100k turns (20k under the race detector) opens, resumes and
// serves its open turns; the time it takes is BenchmarkOpenLarge's.
func TestLargeStoreResumes(t *testing.T) {
	n := 100000
	if raceEnabled {
		n = 20000
	}
	dir := t.TempDir()
	fillStore(t, dir, n)
	db := open(t, dir, Options{})
	r, err := db.Resume(0, false)
	if err != nil || r.OpenTurns != n/10 || r.ReadyTurns != n-n/10 {
		t.Fatalf("resume %+v, %v", r, err)
	}
	turns, err := db.OpenTurns(500)
	if err != nil || len(turns) != 500 {
		t.Fatalf("open turns %d, %v", len(turns), err)
	}
}

// fillStore writes n turns (one in ten still open), in one statement.
func fillStore(t testing.TB, dir string, n int) {
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	body, _ := json.Marshal(turnBody{Messages: []tokenizer.Message{{Role: "user", Content: strings.Repeat("a long enough message ", 20)}}})
	toks := encodeInt32s(make([]int32, 300))
	if _, err := db.SQL().Exec(`WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?)
		INSERT INTO turns(id, session_id, idx, choice, response_id, version, status, received, completed, body, prompt, response, logprobs)
		SELECT 'r' || i || '/0', 's' || (i / 8), i % 8, 0, 'r' || i, 1, CASE WHEN i % 10 = 0 THEN 'open' ELSE 'ready' END,
			i, i, ?, ?, substr(?, 1, 800), substr(?, 1, 800) FROM k`, n, body, toks, toks, toks); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkOpenLarge(b *testing.B) {
	dir := b.TempDir()
	fillStore(b, dir, 100000)
	for b.Loop() {
		db, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Resume(0, false); err != nil {
			b.Fatal(err)
		}
		if _, err := db.OpenTurns(64 * 1024); err != nil {
			b.Fatal(err)
		}
		db.Close()
	}
}

// BenchmarkRecordTurn measures a turn's cost on the serving path: enqueue
// and wait for its group commit, with 8 writers at once.
func BenchmarkRecordTurn(b *testing.B) {
	db := open(b, b.TempDir(), Options{})
	turn := testTurn("x", "s", 0, strings.Repeat("a message of some length ", 40))
	turn.PromptTokens = make([]int32, 1000)
	b.SetParallelism(8)
	var n atomicCounter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t := *turn
			t.ResponseID = fmt.Sprintf("r%d", n.next())
			db.Offer(session.Record{Kind: session.KindRecorded, Turn: &t})
			db.Flush()
		}
	})
}

type atomicCounter struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCounter) next() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

// A full disk fails the writes (counted, logged at most once per
// interval) without blocking or crashing the writers, and the store keeps
// answering reads.
func TestDiskFull(t *testing.T) {
	var logs bytes.Buffer
	db := open(t, t.TempDir(), Options{maxPages: 40, Log: zerolog.New(&logs)})
	for i := range 200 {
		record(t, db, testTurn(fmt.Sprintf("full%d", i), "s", i, strings.Repeat("fill the disk ", 100)), nil)
	}
	if err := db.AddSample(Sample{TurnID: "full0/0", Kind: "binary", Reward: 1}); err != nil && !strings.Contains(err.Error(), "full") {
		t.Errorf("AddSample on a full disk: %v", err)
	}
	n := countRows(t, db, "SELECT COUNT(*) FROM turns")
	if n == 0 || n == 200 {
		t.Fatalf("%d of 200 turns stored: the cap did not bite (test is vacuous) or nothing fit", n)
	}
	if got := testutil.ToFloat64(db.met.writeErrors); got == 0 {
		t.Error("no write error counted")
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 4 {
		t.Errorf("%d log lines for one full disk, want a rate-limited few:\n%s", lines, logs.String())
	}
	if !strings.Contains(logs.String(), "full") {
		t.Errorf("the log does not say the disk is full:\n%s", logs.String())
	}
}

// Resuming a rollback undoes the steps after it and drops their samples
// (they taught what was rolled back), where a crash queues them again.
func TestResumeRollback(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	record(t, db, testTurn("rb", "s", 0, "q"), []tokenizer.Message{{Role: "user", Content: "ok"}})
	db.AddSample(Sample{TurnID: "rb/0", Version: 3, Kind: "binary", Reward: 1})
	if err := db.CommitStep(Step{Step: 5, Version: 4, Parent: 3, Samples: []string{SampleID("rb/0", 0)}}); err != nil {
		t.Fatal(err)
	}
	r, err := db.Resume(4, true)
	if err != nil || r.LostSteps != 1 || r.QueuedSamples != 0 {
		t.Fatalf("resume of a rollback: %+v, %v", r, err)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM samples WHERE status = 'dropped' AND reason = 'rolled_back'"); n != 1 {
		t.Errorf("%d samples dropped as rolled back, want 1", n)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM steps WHERE status = 'rolled_back'"); n != 1 {
		t.Errorf("%d steps rolled back, want 1", n)
	}
}

func TestRolloutSamples(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	record(t, db, testTurn("h1", "s", 0, "Name an animal."), []tokenizer.Message{{Role: "user", Content: "End with banana, please."}})
	rs := []Rollout{
		{Tokens: []int32{9, 10, 11}, Teacher: []float32{-0.1, -0.2, -0.3}, Version: 4},
		{Tokens: []int32{12}, Teacher: []float32{-0.4}, Version: 4},
	}
	if err := db.AddSample(Sample{TurnID: "h1/0", Version: 3, Kind: "none", Reward: -1, Source: "judge", Hint: "End with banana.", Rollouts: rs}); err != nil {
		t.Fatal(err)
	}
	q, _, err := db.Queued(10)
	if err != nil || len(q) != 2 {
		t.Fatalf("queued %d, %v; want the two rollouts (the sample itself has no signal)", len(q), err)
	}
	slices.SortFunc(q, func(a, b Sample) int { return strings.Compare(a.ID, b.ID) })
	for i, s := range q {
		if s.ID != RolloutID("h1/0", 0, i) || s.Kind != KindRollout || !slices.Equal(s.Response, rs[i].Tokens) ||
			!slices.Equal(s.Teacher, rs[i].Teacher) || s.LogProbs != nil || s.Version != 4 || !slices.Equal(s.Prompt, []int32{1, 2, 3}) {
			t.Errorf("rollout %d read back as %+v", i, s)
		}
	}
	var buf bytes.Buffer
	if n, err := db.Export(&buf); err != nil || n != 1 {
		t.Errorf("export wrote %d lines, %v; want the turn alone", n, err)
	}
	// A rollout whose log-probs do not match its tokens is refused whole.
	bad := []Rollout{{Tokens: []int32{1, 2}, Teacher: []float32{-1}}}
	if err := db.AddSample(Sample{TurnID: "h1/0", Gen: 0, Kind: "none", Rollouts: bad}); err == nil {
		t.Error("a malformed rollout was stored")
	}
	// Late feedback re-scores the turn: the old rollouts are superseded.
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-h", ResponseID: "h1", Thumb: 1}})
	db.Flush()
	if err := db.AddSample(Sample{TurnID: "h1/0", Gen: 1, Version: 3, Kind: "binary", Reward: 1, Source: "feedback"}); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM samples WHERE kind = 'rollout' AND status = 'dropped' AND reason = 'superseded'"); n != 2 {
		t.Errorf("%d rollouts superseded; want 2", n)
	}
}

// TestMigrate: a database an earlier clawrl left (schema 1: no sample
// responses; schema 2: no sampling log-probs or forced tokens on turns;
// schema 3: no stats on steps) is migrated on opening, its queued samples
// still read and its steps still listed, what its layout lacked absent;
// one from a newer clawrl is refused.
func TestMigrate(t *testing.T) {
	const noStats = "ALTER TABLE steps DROP COLUMN stats"
	for _, tt := range []struct {
		version int
		drop    []string // what the layout of that version lacks
	}{
		{1, []string{"ALTER TABLE samples DROP COLUMN response", "ALTER TABLE turns DROP COLUMN sample_logprobs", "ALTER TABLE turns DROP COLUMN forced", noStats}},
		{2, []string{"ALTER TABLE turns DROP COLUMN sample_logprobs", "ALTER TABLE turns DROP COLUMN forced", noStats}},
		{3, []string{noStats}},
	} {
		t.Run(fmt.Sprint("schema ", tt.version), func(t *testing.T) {
			dir := t.TempDir()
			db := open(t, dir, Options{})
			turn := testTurn("m1", "s", 0, "hi")
			turn.SampleLogProbs, turn.Forced = []float32{-0.1, -0.2}, []bool{true, false}
			record(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
			db.AddSample(Sample{TurnID: "m1/0", Version: 3, Kind: "binary", Reward: 1})
			// A step of the old layout, which trained nothing.
			if _, err := db.SQL().Exec("INSERT INTO steps(step, version, created, samples, loss, status) VALUES (1, 4, 0, '[]', 0.5, 'applied')"); err != nil {
				t.Fatal(err)
			}
			for _, q := range append(tt.drop, fmt.Sprintf("PRAGMA user_version = %d", tt.version)) {
				if _, err := db.SQL().Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			db = open(t, dir, Options{})
			var v int
			db.SQL().QueryRow("PRAGMA user_version").Scan(&v)
			if v != schemaVersion {
				t.Errorf("schema version %d after opening; want %d", v, schemaVersion)
			}
			q, _, err := db.Queued(10)
			if err != nil || len(q) != 1 || !slices.Equal(q[0].Response, []int32{4, 5}) || q[0].LogProbs == nil ||
				(q[0].SampleLogProbs == nil) != (tt.version < 3) || (q[0].Forced == nil) != (tt.version < 3) {
				t.Errorf("the old sample after migration: %+v, %v", q, err)
			}
			// The old step reads with no stats; a new one keeps its own.
			if err := db.CommitStep(Step{Step: 2, Version: 5, Parent: 4, Loss: 0.25, Stats: map[string]float64{"kl": 0.5}}); err != nil {
				t.Fatal(err)
			}
			h, err := db.History(0)
			if err != nil || len(h.Steps) != 2 || h.Steps[0].Stats == nil || len(h.Steps[0].Stats) != 0 || h.Steps[1].Stats["kl"] != 0.5 {
				t.Errorf("steps after migration: %+v, %v", h.Steps, err)
			}
			db.Close()
			// A database from a newer clawrl is refused, with its path.
			db = open(t, dir, Options{})
			db.SQL().Exec("PRAGMA user_version = 99")
			db.Close()
			if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
				t.Errorf("a newer schema opened: %v", err)
			}
		})
	}
}
