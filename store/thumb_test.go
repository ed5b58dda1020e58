package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestThumbIsCompleteSignal: a thumb on a turn still waiting for its next
// state (a session's last answer) makes it ready to score at once; it
// stays given back to the tracker on restart, so that a next state that
// comes later is kept, without a second scoring; a text-only feedback
// does not make a turn ready; the store names the thumbed turn
// (FeedbackReady), which the loop scores before newer ones without
// feedback.
func TestThumbIsCompleteSignal(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	last := testTurn("chatcmpl-last", "s1", 0, "the last question")
	record(t, db, last, nil)
	other := testTurn("chatcmpl-other", "s2", 0, "another question")
	record(t, db, other, nil)
	plain := testTurn("chatcmpl-plain", "s3", 0, "a question with a reply")
	plain.Received = time.Now().Add(time.Minute) // completed after the thumb: newer
	record(t, db, plain, []tokenizer.Message{{Role: "user", Content: "ok"}})

	feedback := func(resp string, thumb int, text string) {
		t.Helper()
		db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-" + resp + text, ResponseID: resp, Thumb: thumb, Text: text, Received: time.Now()}})
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	feedback("chatcmpl-other", 0, "just a remark") // text only: still waits
	feedback("chatcmpl-last", -1, "")
	time.Sleep(5 * time.Millisecond)
	plainDone := *plain
	plainDone.NextState, plainDone.End, plainDone.Completed = []tokenizer.Message{{Role: "user", Content: "ok"}}, session.EndNextState, time.Now().Add(time.Hour)
	db.Offer(session.Record{Kind: session.KindTurn, Turn: &plainDone})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}

	ready, err := db.ReadyTurns(10, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ready, func(a, b ReadyTurn) int { return strings.Compare(a.ResponseID, b.ResponseID) })
	if len(ready) != 2 || ready[0].ResponseID != "chatcmpl-last" || ready[1].ResponseID != "chatcmpl-plain" {
		t.Fatalf("ready turns %v, want the thumbed one and the completed one", ids(ready))
	}
	// The thumbed turn goes first because the store names it, not by the
	// order of ReadyTurns (which reads the status index alone).
	if fr := db.FeedbackReady(); !slices.Contains(fr, ready[0].ID) || slices.Contains(fr, ready[1].ID) {
		t.Fatalf("feedback made ready %v, want the thumbed turn %s alone", fr, ready[0].ID)
	}
	if r := ready[0]; r.NextState != nil || len(r.Feedback) != 1 || r.Feedback[0].Thumb != -1 || r.End != endThumb {
		t.Fatalf("the thumbed turn: next state %v, feedback %+v, end %q", r.NextState, r.Feedback, r.End)
	}
	open, err := db.OpenTurns(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 2 {
		t.Fatalf("open turns %d, want the thumbed turn and the one with a text only", len(open))
	}

	// The next state comes: it is kept, the turn is not made ready again.
	if err := db.AddSample(Sample{TurnID: ready[0].ID, Gen: ready[0].Gen, Kind: "binary", Reward: -1, Source: "feedback", Version: 3}); err != nil {
		t.Fatal(err)
	}
	done := *last
	done.NextState, done.End, done.Completed = []tokenizer.Message{{Role: "user", Content: "that was wrong"}}, session.EndNextState, time.Now()
	db.Offer(session.Record{Kind: session.KindTurn, Turn: &done})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns WHERE id = ? AND next_state IS NOT NULL AND status = 'scored'", TurnID("chatcmpl-last", 0)); n != 1 {
		t.Errorf("the late next state: %d rows kept it on the scored turn, want 1", n)
	}
	if open, _ := db.OpenTurns(10); len(open) != 1 || open[0].ResponseID != "chatcmpl-other" {
		t.Errorf("after its next state the thumbed turn is still given back to the tracker: %d open", len(open))
	}
}

func ids(ts []ReadyTurn) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ResponseID)
	}
	return out
}

// TestThumbOnRedactedTurn: a thumb ends a turn whose text held a secret
// like any other, but the turn (no tokens kept) is not offered for
// scoring, where it could only fail. Before, the thumb made it ready and
// the scorer marked it failed.
func TestThumbOnRedactedTurn(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	turn := testTurn("chatcmpl-red", "s", 0, "my key is sk-proj-"+strings.Repeat("a1B2", 10))
	record(t, db, turn, nil)
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-red", ResponseID: "chatcmpl-red", Thumb: 1, Received: time.Now()}})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.ReadyTurns(10, nil); len(r) != 0 {
		t.Errorf("a thumbed redacted turn is offered for scoring")
	}
	if n := countRows(t, db, "SELECT COUNT(*) FROM turns WHERE status = ? AND end_reason = ?", TurnRedacted, endThumb); n != 1 {
		t.Errorf("the thumbed redacted turn is not redacted and ended by the thumb")
	}
}

// TestThumbsTrainFirst: a sample a thumb decided is handed to the trainer
// before judged samples, even of newer versions and newer; among thumbs,
// the newest first. Before, the newest version came first whatever the
// source, so a thumb waited behind the judge's samples.
func TestThumbsTrainFirst(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	add := func(resp string, version uint64, source string) {
		t.Helper()
		turn := testTurn(resp, "s-"+resp, 0, "q")
		record(t, db, turn, []tokenizer.Message{{Role: "user", Content: "ok"}})
		if err := db.AddSample(Sample{TurnID: TurnID(resp, 0), Version: version, Kind: "binary", Reward: 1, Source: source}); err != nil {
			t.Fatal(err)
		}
	}
	add("thumb-old", 3, "feedback")
	add("judged-new", 9, "judge")
	add("thumb-new", 5, "feedback")
	add("judged-old", 4, "judge")
	q, _, err := db.Queued(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range q {
		got = append(got, s.TurnID)
	}
	want := []string{"thumb-new/0", "thumb-old/0", "judged-new/0", "judged-old/0"}
	if !slices.Equal(got, want) {
		t.Errorf("queued order %v, want %v", got, want)
	}
	if n, err := db.QueuedAhead(5); err != nil || n != 3 {
		t.Errorf("queued ahead of a judged sample of version 5: %d, %v; want the 2 thumbs and version 9's", n, err)
	}
}

// TestSkipTurn: a turn that is not scored leaves the ready turns with a
// dropped sample saying why; feedback makes it ready again.
func TestSkipTurn(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	record(t, db, testTurn("skip", "s", 0, "q"), []tokenizer.Message{{Role: "user", Content: "ok"}})
	if err := db.SkipTurn(TurnID("skip", 0), 0, 3, "stale_unscored"); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.ReadyTurns(10, nil); len(r) != 0 {
		t.Fatalf("a skipped turn is still ready")
	}
	st, err := db.Stats()
	if err != nil || st.Dropped["stale_unscored"] != 1 {
		t.Fatalf("dropped %v, %v; want one stale_unscored", st.Dropped, err)
	}
	db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-skip", ResponseID: "skip", Thumb: -1, Received: time.Now()}})
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if r, _ := db.ReadyTurns(10, nil); len(r) != 1 || r[0].Gen != 1 {
		t.Fatalf("after a thumb the skipped turn is not ready again: %v", ids(r))
	}
}

// TestFeedbackReady: the store names the turns feedback made ready, once
// each, after their commit: a thumb on a turn waiting for its next state,
// feedback on a scored turn, and a turn that completes with text feedback
// given before; not a turn whose text feedback still waits for its next
// state.
func TestFeedbackReady(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{})
	fb := func(resp string, thumb int, text string) {
		t.Helper()
		db.Offer(session.Record{Kind: session.KindFeedback, Feedback: &session.Feedback{ID: "fb-" + resp + text, ResponseID: resp, Thumb: thumb, Text: text, Received: time.Now()}})
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	record(t, db, testTurn("thumbed", "s1", 0, "q"), nil)
	fb("thumbed", 1, "")
	text := testTurn("text", "s2", 0, "q")
	record(t, db, text, nil)
	fb("text", 0, "shorter please")
	if got := db.FeedbackReady(); !slices.Equal(got, []string{TurnID("thumbed", 0)}) {
		t.Fatalf("feedback ready %v, want the thumbed turn", got)
	}
	if got := db.FeedbackReady(); len(got) != 0 {
		t.Fatalf("named again: %v", got)
	}
	record(t, db, text, []tokenizer.Message{{Role: "user", Content: "next"}})
	if err := db.AddSample(Sample{TurnID: TurnID("thumbed", 0), Version: 3, Kind: "binary", Reward: 1, Source: "feedback"}); err != nil {
		t.Fatal(err)
	}
	fb("thumbed", -1, "")
	if got := db.FeedbackReady(); !slices.Equal(got, []string{TurnID("text", 0), TurnID("thumbed", 0)}) {
		t.Fatalf("feedback ready %v, want the completed turn with text, then the rescored one", got)
	}
	for _, id := range []string{TurnID("text", 0), TurnID("thumbed", 0)} {
		if r, ok, err := db.ReadTurn(id); err != nil || !ok || len(r.Feedback) == 0 {
			t.Errorf("ReadTurn(%s): ok %v, %v, feedback %v", id, ok, err, r.Feedback)
		}
	}
	if _, ok, err := db.ReadTurn("nope/0"); ok || err != nil {
		t.Errorf("ReadTurn of an unknown turn: ok %v, %v", ok, err)
	}

	// After a restart the turns that feedback left ready are named again
	// (the loop scores them before the other ready turns), and a ready
	// turn without feedback is not.
	record(t, db, testTurn("plain", "s3", 0, "q"), []tokenizer.Message{{Role: "user", Content: "next"}})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, dir, Options{})
	got := db.FeedbackReady()
	slices.Sort(got)
	if want := []string{TurnID("text", 0), TurnID("thumbed", 0)}; !slices.Equal(got, want) {
		t.Fatalf("feedback ready after a restart %v, want %v", got, want)
	}
	if got := db.FeedbackReady(); len(got) != 0 {
		t.Fatalf("named again after a restart: %v", got)
	}
}

// TestReadyTurnsReadTheIndex: ReadyTurns is called on every new ready
// turn under load, with thousands waiting; its query must walk the status
// index and stop at its limit, not scan and sort every ready turn (which
// ordering by feedback did, and which took a 64-client soak's store and
// trainer down with it).
func TestReadyTurnsReadTheIndex(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	rows, err := db.SQL().Query("EXPLAIN QUERY PLAN "+readyTurnsQuery, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	got := strings.Join(plan, "; ")
	if !strings.Contains(got, "USING INDEX turns_status") || strings.Contains(got, "TEMP B-TREE") || strings.Contains(got, "SUBQUERY") {
		t.Fatalf("ReadyTurns' plan %q: want the turns_status index alone, no sort, no subquery", got)
	}
}
