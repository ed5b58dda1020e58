package session

import (
	"crypto/sha256"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestIDsScope(t *testing.T) {
	ids := IDs{Key: []byte("k1"), Hash: true}
	other := IDs{Key: []byte("k2"), Hash: true}
	a, b := ids.Owner(sha256.Sum256([]byte("key-a"))), ids.Owner(sha256.Sum256([]byte("key-b")))
	if !regexp.MustCompile(`^k[0-9a-f]{10}\.$`).MatchString(a) || a == b {
		t.Fatalf("owners %q, %q", a, b)
	}
	hashed := regexp.MustCompile(`^(k[0-9a-f]{10}\.)?h-[0-9a-f]{32}$`)
	for _, tc := range []struct {
		name string
		got  string
		ok   func(string) bool
	}{
		{"hashed, no keys", ids.Scope("", "alice@example.com"), hashed.MatchString},
		{"hashed, owner a", ids.Scope(a, "alice@example.com"), func(s string) bool { return hashed.MatchString(s) && strings.HasPrefix(s, a) }},
		{"empty stays empty", ids.Scope(a, "  "), func(s string) bool { return s == "" }},
		{"an id the server gave owner a", ids.Scope(a, a+"sess-0123abcd"), func(s string) bool { return s == a+"sess-0123abcd" }},
		{"a's issued id named by b is b's own", ids.Scope(b, a+"sess-0123abcd"), func(s string) bool { return strings.HasPrefix(s, b+"h-") }},
		{"already hashed for a", ids.Scope(a, ids.Scope(a, "x")), func(s string) bool { return s == ids.Scope(a, "x") }},
		{"no hashing", IDs{Key: []byte("k1")}.Scope(a, "alice"), func(s string) bool { return s == a+"alice" }},
		{"no hashing, no keys", IDs{}.Scope("", "alice"), func(s string) bool { return s == "alice" }},
	} {
		if !tc.ok(tc.got) {
			t.Errorf("%s: %q", tc.name, tc.got)
		}
	}
	if ids.Scope(a, "s1") == ids.Scope(b, "s1") || ids.Scope("", "s1") == other.Scope("", "s1") || ids.Scope(a, "s1") != ids.Scope(a, " s1 ") {
		t.Error("scoped ids must differ by owner and key, and only by them")
	}
	if strings.Contains(ids.Scope("", "alice@example.com"), "alice") {
		t.Error("the hash shows the id")
	}
}

// TestOwnersStayApart: two owners with the same conversation and the same
// session id never continue, thumb or see each other's turns.
func TestOwnersStayApart(t *testing.T) {
	h := newHarness(t, Options{})
	const a, b = "ka.", "kb."
	// Inferred sessions with identical messages.
	ba := h.tr.Begin(Request{Owner: a, Messages: msgs(user("hi"))})
	h.tr.Record(ba, []*Turn{{ResponseID: "r-a", Messages: msgs(user("hi")), Reply: asst("hello")}}, false)
	if !strings.HasPrefix(ba.SessionID, a+"sess-") {
		t.Fatalf("inferred id %q lacks the owner", ba.SessionID)
	}
	bb := h.tr.Begin(Request{Owner: b, Messages: msgs(user("hi"), asst("hello"), user("and?"))})
	if bb.Continued || bb.SessionID == ba.SessionID || !strings.HasPrefix(bb.SessionID, b) {
		t.Fatalf("b's request continued a's session: %+v", bb)
	}
	if recs := h.emitted(); len(recs) != 0 {
		t.Fatalf("a's turn completed by b's message: %s", describe(recs))
	}
	// Feedback: b cannot thumb a's turn, by response id or by session id.
	for _, req := range []FeedbackRequest{{Owner: b, ResponseID: "r-a", Thumb: -1}, {Owner: b, SessionID: ba.SessionID, Thumb: -1}} {
		if _, err := h.tr.AddFeedback(req); !errors.Is(err, ErrUnknownTurn) {
			t.Errorf("b's feedback %+v on a's turn: %v", req, err)
		}
	}
	if _, err := h.tr.AddFeedback(FeedbackRequest{Owner: a, ResponseID: "r-a", Thumb: 1}); err != nil {
		t.Errorf("a's own feedback: %v", err)
	}
	// A session id that is not the owner's is ignored.
	bc := h.tr.Begin(Request{Owner: b, SessionID: ba.SessionID, Messages: msgs(user("x"))})
	if bc.SessionID == ba.SessionID {
		t.Fatalf("b entered a's session by naming it")
	}
	// The archive's turns are checked too.
	h2 := newHarness(t, Options{Archive: archiveOf{Feedback{SessionID: a + "h-0123", TurnIndex: 3, ResponseID: "old"}}})
	if _, err := h2.tr.AddFeedback(FeedbackRequest{Owner: b, ResponseID: "old", Thumb: 1}); !errors.Is(err, ErrUnknownTurn) {
		t.Errorf("b's feedback on a's archived turn: %v", err)
	}
	if fb, err := h2.tr.AddFeedback(FeedbackRequest{Owner: a, ResponseID: "old", Thumb: 1}); err != nil || fb.TurnIndex != 3 {
		t.Errorf("a's feedback on its archived turn: %+v, %v", fb, err)
	}
}

// archiveOf finds one turn.
type archiveOf struct{ fb Feedback }

func (a archiveOf) FindTurn(req FeedbackRequest) (Feedback, error) {
	if req.ResponseID == a.fb.ResponseID {
		return a.fb, nil
	}
	return Feedback{}, ErrUnknownTurn
}
