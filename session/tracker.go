package session

import (
	"container/list"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawrl/clawrl/tokenizer"
)

// Options configure a Tracker. Zero values take the defaults.
type Options struct {
	// Sink receives completed turns and feedback; nil discards them (they
	// are counted as dropped).
	Sink Sink
	// MaxSessions bounds the sessions remembered at once (default 1024);
	// the least recently used is forgotten first.
	MaxSessions int
	// IdleTimeout forgets a session this long after its last request
	// (default 1h).
	IdleTimeout time.Duration
	// MaxTurnsPerSession bounds the turns a session remembers for matching
	// and feedback (default 64).
	MaxTurnsPerSession int
	// MaxDroppedTrailing is how many trailing messages of a request may be
	// missing from the request that continues it (default 2; -1 for none).
	MaxDroppedTrailing int
	// Archive, if set, finds turns for feedback that the Tracker has
	// forgotten.
	Archive Archive
	// Now replaces time.Now (for tests).
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.MaxSessions <= 0 {
		o.MaxSessions = 1024
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = time.Hour
	}
	if o.MaxTurnsPerSession <= 0 {
		o.MaxTurnsPerSession = 64
	}
	switch {
	case o.MaxDroppedTrailing == 0:
		o.MaxDroppedTrailing = 2
	case o.MaxDroppedTrailing < 0:
		o.MaxDroppedTrailing = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Tracker assigns requests to sessions, keeps each session's pending turns
// until their next state arrives, and emits completed turns and feedback to
// the Sink. It is safe for concurrent use.
type Tracker struct {
	opts Options
	met  metrics

	mu       sync.Mutex
	sessions map[string]*sessionState
	lru      *list.List // of *sessionState, most recently used first
	// index maps the digest of (messages up to an answered message, reply)
	// to the turns it identifies, most recent first.
	index      map[digest][]*entry
	byResponse map[string][]*entry
	closed     bool
}

type sessionState struct {
	id       string
	inferred bool
	next     int      // index of the next turn
	pending  []*entry // the latest response's choices, awaiting a next state
	entries  []*entry // remembered turns, oldest first
	lastSeen time.Time
	elem     *list.Element
}

// entry is a remembered turn. turn is set until the turn is emitted.
type entry struct {
	sess       *sessionState
	index      int
	choice     int
	responseID string
	keys       []digest
	turn       *Turn
}

// Maximum turns remembered under one digest (identical conversations).
const maxPerDigest = 4

// New returns a Tracker.
func New(opts Options) *Tracker {
	opts.setDefaults()
	t := &Tracker{
		opts:       opts,
		sessions:   map[string]*sessionState{},
		lru:        list.New(),
		index:      map[digest][]*entry{},
		byResponse: map[string][]*entry{},
	}
	t.met = newMetrics(t)
	return t
}

// Request is what Begin needs of an arriving main request.
type Request struct {
	// Owner is the prefix of the session ids of whoever sent the request
	// (the server's: a tag of the API key, or "" when there are no keys).
	// A session belongs to the owner whose prefix its id starts with:
	// inferred sessions get ids that start with it, a request only
	// continues its owner's turns, and feedback and deletion reach only
	// its owner's sessions.
	Owner string
	// SessionID is the session's id, or "" to infer the session. It must
	// start with Owner (the server scopes the ids clients give).
	SessionID string
	// Messages is the normalised conversation.
	Messages []tokenizer.Message
}

// Binding ties a request to its session, from Begin to Record.
type Binding struct {
	// SessionID is the session the request belongs to.
	SessionID string
	// Inferred is true when the session was inferred from the messages.
	Inferred bool
	// Continued is true when the request continued a remembered turn.
	Continued bool
	chain     []digest
	roles     []string
}

// Begin assigns a main request to its session and completes the session's
// pending turn: the turn the request continues gets the request's new
// trailing messages as its next state and is emitted. Call it when the
// request has been accepted for generation, then Record when the
// generation is done.
func (t *Tracker) Begin(req Request) *Binding {
	hs := newHasher()
	if !strings.HasPrefix(req.SessionID, req.Owner) {
		req.SessionID = "" // not the owner's: never reach another's session
	}
	b := &Binding{chain: hs.chain(req.Owner, req.Messages), roles: make([]string, len(req.Messages))}
	for i, m := range req.Messages {
		b.roles[i] = m.Role
	}
	now := t.opts.Now()

	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
	var sess *sessionState
	if req.SessionID != "" {
		sess = t.sessions[req.SessionID]
	}
	// The longest prefix ending in an assistant message that is a stored
	// (conversation, reply) is the turn this request continues.
	var match *entry
	at := -1
	for j := len(req.Messages) - 1; j >= 0 && match == nil; j-- {
		if req.Messages[j].Role != "assistant" {
			continue
		}
		for _, e := range t.index[b.chain[j+1]] {
			if req.SessionID != "" && e.sess != sess {
				continue
			}
			if match == nil || (match.turn == nil && e.turn != nil) {
				match, at = e, j
			}
		}
	}
	switch {
	case sess != nil:
	case match != nil:
		sess = match.sess
	default:
		id := req.SessionID
		if id == "" {
			id = req.Owner + newID("sess-")
		}
		sess = &sessionState{id: id, inferred: req.SessionID == ""}
		sess.elem = t.lru.PushFront(sess)
		t.sessions[id] = sess
	}
	sess.lastSeen = now
	t.lru.MoveToFront(sess.elem)
	b.SessionID, b.Inferred, b.Continued = sess.id, sess.inferred, match != nil

	if match != nil && match.turn != nil {
		turn := match.turn
		turn.NextState = cloneMessages(req.Messages[at+1:])
		turn.End = EndNextState
		t.emitTurnLocked(match, now)
	}
	var rest []*entry
	for _, e := range sess.pending {
		if e.turn != nil {
			rest = append(rest, e)
		}
	}
	sess.pending = nil
	if match == nil && req.SessionID != "" && len(rest) == 1 {
		// A named session whose history no longer holds the reply (a
		// client that compacts or rewrites it): the new trailing user and
		// tool messages are still the best next state there is.
		turn := rest[0].turn
		turn.NextState = cloneMessages(trailingInput(req.Messages))
		turn.End = EndUnmatched
		t.emitTurnLocked(rest[0], now)
		rest = nil
	}
	for _, e := range rest {
		e.turn.End = EndSuperseded
		t.emitTurnLocked(e, now)
	}
	return b
}

// Record stores the finished generation of a request as its session's new
// turn, one Turn per choice (they share a turn index). The Tracker fills in
// SessionID, Inferred, Index and, when it emits a turn, End, NextState and
// Completed. With done, the session ends: the turns are emitted at once
// with EndSessionDone and the session is forgotten.
func (t *Tracker) Record(b *Binding, turns []*Turn, done bool) {
	hs := newHasher()
	replies := make([]digest, len(turns))
	for i, tr := range turns {
		replies[i] = hs.message(tr.Reply)
	}
	now := t.opts.Now()

	t.mu.Lock()
	locked := true
	defer func() {
		if locked {
			t.mu.Unlock()
		}
	}()
	if t.closed {
		// Shutting down: a durable sink keeps the turn open for the next
		// start (KindRecorded); any other gets it ended by the shutdown.
		_, durable := t.opts.Sink.(Flusher)
		for _, tr := range turns {
			tr.SessionID, tr.Inferred = b.SessionID, b.Inferred
			if durable {
				t.offerRecordedLocked(tr)
				continue
			}
			tr.End, tr.Completed = EndShutdown, now
			t.offerLocked(Record{Kind: KindTurn, Turn: tr})
		}
		locked = false
		t.mu.Unlock()
		t.flush()
		return
	}
	t.expireLocked(now)
	sess := t.sessions[b.SessionID]
	if sess == nil { // forgotten while generating
		sess = &sessionState{id: b.SessionID, inferred: b.Inferred}
		sess.elem = t.lru.PushFront(sess)
		t.sessions[sess.id] = sess
	}
	sess.lastSeen = now
	t.lru.MoveToFront(sess.elem)
	index := sess.next
	sess.next++
	t.met.recorded.Add(float64(len(turns)))
	for i, tr := range turns {
		tr.SessionID, tr.Inferred, tr.Index = sess.id, sess.inferred, index
		e := &entry{sess: sess, index: index, choice: tr.Choice, responseID: tr.ResponseID, turn: tr}
		for _, cut := range t.cuts(b.roles) {
			e.keys = append(e.keys, hs.link(b.chain[cut], replies[i]))
		}
		tr.Keys = append(tr.Keys[:0:0], digestsAsArrays(e.keys)...)
		t.insertLocked(e)
		t.offerRecordedLocked(tr)
	}
	t.trimLocked(sess, now)
	if done {
		t.endSessionLocked(sess, EndSessionDone, now)
	}
	locked = false
	t.mu.Unlock()
	t.flush()
}

// insertLocked indexes a new entry by its keys and response id and adds
// it to its session as remembered and pending.
func (t *Tracker) insertLocked(e *entry) {
	for _, key := range e.keys {
		list := append([]*entry{e}, t.index[key]...)
		if len(list) > maxPerDigest {
			list = list[:maxPerDigest]
		}
		t.index[key] = list
	}
	if e.responseID != "" {
		t.byResponse[e.responseID] = append(t.byResponse[e.responseID], e)
	}
	e.sess.entries = append(e.sess.entries, e)
	e.sess.pending = append(e.sess.pending, e)
}

// trimLocked forgets a session's oldest turns beyond MaxTurnsPerSession.
func (t *Tracker) trimLocked(sess *sessionState, now time.Time) {
	for len(sess.entries) > t.opts.MaxTurnsPerSession {
		t.forgetEntryLocked(sess.entries[0], EndExpired, now)
		sess.entries = sess.entries[1:]
	}
}

// offerRecordedLocked offers a just-recorded turn to the sink as a
// KindRecorded record carrying a copy of the turn (the Tracker goes on
// filling in the original).
func (t *Tracker) offerRecordedLocked(tr *Turn) {
	if _, ok := t.opts.Sink.(Flusher); !ok {
		return
	}
	cp := *tr
	t.offerLocked(Record{Kind: KindRecorded, Turn: &cp})
}

// flush waits for a durable sink; its error is the sink's to report.
func (t *Tracker) flush() {
	if f, ok := t.opts.Sink.(Flusher); ok {
		_ = f.Flush()
	}
}

// Restore gives the Tracker turns that were waiting for their next state
// when an earlier process stopped (from a durable store), so that a
// request continuing one of them completes it as if there had been no
// restart. Each turn needs SessionID, Index, Choice, ResponseID and Keys;
// turns of sessions the Tracker already knows are added to them.
func (t *Tracker) Restore(turns []*Turn) {
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tr := range turns {
		sess := t.sessions[tr.SessionID]
		if sess == nil {
			sess = &sessionState{id: tr.SessionID, inferred: tr.Inferred}
			sess.elem = t.lru.PushFront(sess)
			t.sessions[sess.id] = sess
		}
		sess.lastSeen = now
		sess.next = max(sess.next, tr.Index+1)
		e := &entry{sess: sess, index: tr.Index, choice: tr.Choice, responseID: tr.ResponseID, turn: tr}
		for _, k := range tr.Keys {
			e.keys = append(e.keys, digest(k))
		}
		t.insertLocked(e)
		t.trimLocked(sess, now)
	}
	t.expireLocked(now)
}

// Forget drops a session from memory without emitting its pending turns
// (the user asked for its records to be deleted). It reports whether the
// session was remembered.
func (t *Tracker) Forget(sessionID string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	sess := t.sessions[sessionID]
	if sess == nil {
		return false
	}
	for _, e := range sess.entries {
		e.turn = nil
		t.forgetEntryLocked(e, EndExpired, t.opts.Now())
	}
	sess.entries, sess.pending = nil, nil
	t.lru.Remove(sess.elem)
	delete(t.sessions, sess.id)
	return true
}

func digestsAsArrays(ds []digest) [][32]byte {
	out := make([][32]byte, len(ds))
	for i, d := range ds {
		out[i] = d
	}
	return out
}

// cuts returns the prefix lengths of a request's messages under which its
// reply is indexed: all of them, and shorter prefixes that drop up to
// MaxDroppedTrailing trailing messages and end with a user or tool message.
func (t *Tracker) cuts(roles []string) []int {
	n := len(roles)
	out := []int{n}
	for cut := n - 1; cut >= 1 && cut >= n-t.opts.MaxDroppedTrailing; cut-- {
		if r := roles[cut-1]; r == "user" || r == "tool" {
			out = append(out, cut)
		}
	}
	return out
}

// End closes a session by id (X-Session-Done on a request that is not
// recorded): its pending turns are emitted with EndSessionDone. It reports
// whether the session existed.
func (t *Tracker) End(sessionID string) bool {
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	sess := t.sessions[sessionID]
	if sess == nil {
		return false
	}
	t.endSessionLocked(sess, EndSessionDone, now)
	return true
}

// ErrUnknownTurn is returned by AddFeedback for a turn the Tracker does not
// remember.
var ErrUnknownTurn = errors.New("session: unknown turn")

// FeedbackRequest names a turn and carries the feedback for it.
type FeedbackRequest struct {
	// Owner is the sender's session-id prefix (see Request.Owner): a turn
	// of a session that is not the owner's is unknown to it.
	Owner string
	// ResponseID names the turn; when empty, SessionID and Turn do.
	ResponseID string
	SessionID  string
	Turn       int
	// Choice picks a choice of an n>1 response (default 0).
	Choice int
	// Thumb is +1, -1 or 0 (none).
	Thumb int
	Text  string
}

// AddFeedback attaches feedback to a remembered turn and emits it as a
// KindFeedback record. A turn still waiting for its next state also lists
// it in Turn.Feedback.
//
// With a durable sink (Flusher), AddFeedback returns once the feedback is
// stored. A turn the Tracker has forgotten is looked up in the Archive.
func (t *Tracker) AddFeedback(req FeedbackRequest) (Feedback, error) {
	fb, err := t.addFeedback(req)
	if err == nil {
		t.flush()
	}
	return fb, err
}

func (t *Tracker) addFeedback(req FeedbackRequest) (Feedback, error) {
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var target *entry
	if req.ResponseID != "" {
		for _, e := range t.byResponse[req.ResponseID] {
			if e.choice == req.Choice {
				target = e
			}
		}
	} else if sess := t.sessions[req.SessionID]; sess != nil {
		for _, e := range sess.entries {
			if e.index == req.Turn && e.choice == req.Choice {
				target = e
			}
		}
	}
	unknown := fmt.Errorf("feedback for response %q / session %q turn %d: %w", req.ResponseID, req.SessionID, req.Turn, ErrUnknownTurn)
	if target != nil && !strings.HasPrefix(target.sess.id, req.Owner) {
		return Feedback{}, unknown // another owner's turn: as if there were none
	}
	var fb Feedback
	switch {
	case target != nil:
		fb = Feedback{SessionID: target.sess.id, TurnIndex: target.index, Choice: target.choice, ResponseID: target.responseID}
	case t.opts.Archive != nil:
		found, err := t.opts.Archive.FindTurn(req)
		if err != nil {
			return Feedback{}, err
		}
		if !strings.HasPrefix(found.SessionID, req.Owner) {
			return Feedback{}, unknown
		}
		fb = found
	default:
		return Feedback{}, unknown
	}
	fb.ID, fb.Thumb, fb.Text, fb.Received = newID("fb-"), req.Thumb, req.Text, now
	if target != nil && target.turn != nil {
		target.turn.Feedback = append(target.turn.Feedback, fb)
	}
	t.met.feedback.Inc()
	if !t.offerLocked(Record{Kind: KindFeedback, Feedback: &fb}) {
		t.met.feedbackDropped.Inc()
	}
	return fb, nil
}

// Sweep forgets sessions idle for longer than IdleTimeout, emitting their
// pending turns with EndExpired. Begin and Record sweep too; call Sweep
// from a ticker so that an idle server also lets go.
func (t *Tracker) Sweep() {
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expireLocked(now)
}

// Close emits every pending turn with EndShutdown and forgets all
// sessions. Turns recorded afterwards are emitted at once, with
// EndShutdown.
func (t *Tracker) Close() {
	now := t.opts.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.lru.Len() > 0 {
		t.endSessionLocked(t.lru.Back().Value.(*sessionState), EndShutdown, now)
	}
	t.closed = true
}

// Collectors returns the Tracker's Prometheus metrics, for the caller to
// register.
func (t *Tracker) Collectors() []prometheus.Collector { return t.met.all() }

func (t *Tracker) expireLocked(now time.Time) {
	for t.lru.Len() > 0 {
		oldest := t.lru.Back().Value.(*sessionState)
		if t.lru.Len() <= t.opts.MaxSessions && now.Sub(oldest.lastSeen) < t.opts.IdleTimeout {
			return
		}
		t.endSessionLocked(oldest, EndExpired, now)
	}
}

// endSessionLocked emits the session's pending turns with reason and
// forgets the session.
func (t *Tracker) endSessionLocked(sess *sessionState, reason EndReason, now time.Time) {
	for _, e := range sess.entries {
		t.forgetEntryLocked(e, reason, now)
	}
	sess.entries, sess.pending = nil, nil
	t.lru.Remove(sess.elem)
	delete(t.sessions, sess.id)
}

// forgetEntryLocked removes e from the indexes, emitting its turn first if
// it is still pending.
func (t *Tracker) forgetEntryLocked(e *entry, reason EndReason, now time.Time) {
	if e.turn != nil {
		e.turn.End = reason
		t.emitTurnLocked(e, now)
	}
	for _, k := range e.keys {
		t.index[k] = without(t.index[k], e)
		if len(t.index[k]) == 0 {
			delete(t.index, k)
		}
	}
	if e.responseID != "" {
		t.byResponse[e.responseID] = without(t.byResponse[e.responseID], e)
		if len(t.byResponse[e.responseID]) == 0 {
			delete(t.byResponse, e.responseID)
		}
	}
}

// emitTurnLocked hands e's turn to the sink; the entry stays remembered
// (for matching and feedback) without it.
func (t *Tracker) emitTurnLocked(e *entry, now time.Time) {
	turn := e.turn
	e.turn = nil
	turn.Completed = now
	t.met.emitted.WithLabelValues(string(turn.End)).Inc()
	if !t.offerLocked(Record{Kind: KindTurn, Turn: turn}) {
		t.met.dropped.Inc()
	}
}

func (t *Tracker) offerLocked(rec Record) bool {
	return t.opts.Sink != nil && t.opts.Sink.Offer(rec)
}

func (t *Tracker) openSessions() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

func without(list []*entry, e *entry) []*entry {
	out := list[:0]
	for _, x := range list {
		if x != e {
			out = append(out, x)
		}
	}
	return out
}

// trailingInput returns the user and tool messages at the end of msgs.
func trailingInput(msgs []tokenizer.Message) []tokenizer.Message {
	i := len(msgs)
	for i > 0 && (msgs[i-1].Role == "user" || msgs[i-1].Role == "tool") {
		i--
	}
	return msgs[i:]
}

func cloneMessages(msgs []tokenizer.Message) []tokenizer.Message {
	return append([]tokenizer.Message(nil), msgs...)
}

// newID returns prefix followed by 26 random upper-case letters and digits.
func newID(prefix string) string { return prefix + rand.Text() }

// metrics are the Tracker's Prometheus collectors.
type metrics struct {
	recorded        prometheus.Counter
	emitted         *prometheus.CounterVec
	dropped         prometheus.Counter
	feedback        prometheus.Counter
	feedbackDropped prometheus.Counter
	open            prometheus.GaugeFunc
}

func newMetrics(t *Tracker) metrics {
	return metrics{
		recorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "clawrl_turns_recorded_total",
			Help: "Main turns recorded for training (one per choice).",
		}),
		emitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clawrl_turns_completed_total",
			Help: "Turns completed and handed to the reward stage, by how they ended.",
		}, []string{"end"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "clawrl_turns_dropped_total",
			Help: "Completed turns the reward queue could not take.",
		}),
		feedback: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "clawrl_feedback_total",
			Help: "Explicit feedback received.",
		}),
		feedbackDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "clawrl_feedback_dropped_total",
			Help: "Feedback records the reward queue could not take.",
		}),
		open: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "clawrl_sessions_open",
			Help: "Sessions remembered.",
		}, func() float64 { return float64(t.openSessions()) }),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.recorded, m.emitted, m.dropped, m.feedback, m.feedbackDropped, m.open}
}
