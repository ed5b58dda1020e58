package store

import (
	"testing"
	"time"

	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestThumbIsCompleteSignal: a thumb on a turn still waiting for its next
// state (a session's last answer) makes it ready to score at once; it
// stays given back to the tracker on restart, so that a next state that
// comes later is kept, without a second scoring; a text-only feedback
// does not make a turn ready; thumbed turns are scored before newer ones
// without feedback.
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
	if len(ready) != 2 || ready[0].ResponseID != "chatcmpl-last" || ready[1].ResponseID != "chatcmpl-plain" {
		t.Fatalf("ready turns %v, want the thumbed one first, then the completed one", ids(ready))
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
