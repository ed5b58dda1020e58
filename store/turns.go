package store

import (
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/tokenizer"
)

// Turn statuses.
const (
	TurnOpen     = "open"     // waiting for its next state
	TurnReady    = "ready"    // complete, waiting to be scored
	TurnScored   = "scored"   // scored (a sample, or nothing to train)
	TurnFailed   = "failed"   // could not be scored (invalid input)
	TurnRedacted = "redacted" // held a secret: kept as redacted text, never trained
)

// turnBody is the JSON body of a turn row: everything that is not a
// column or a token array.
type turnBody struct {
	Inferred     bool                `json:"inferred,omitempty"`
	Endpoint     string              `json:"endpoint"`
	Model        string              `json:"model"`
	Messages     []tokenizer.Message `json:"messages"`
	Tools        []json.RawMessage   `json:"tools,omitempty"`
	Vars         map[string]any      `json:"template_vars,omitempty"`
	Prefill      string              `json:"prefill,omitempty"`
	Reply        tokenizer.Message   `json:"reply"`
	Versions     []uint64            `json:"versions,omitempty"`
	FinishReason string              `json:"finish_reason"`
	FirstToken   int64               `json:"first_token_ms,omitempty"`
	Finished     int64               `json:"finished_ms,omitempty"`
	Keys         [][32]byte          `json:"keys,omitempty"`
}

// TurnID is the store's id of a turn: its response id and choice.
func TurnID(responseID string, choice int) string {
	return fmt.Sprintf("%s/%d", responseID, choice)
}

// Offer takes a session record (it implements session.Sink). It never
// refuses: a recorded turn is enqueued for insertion (the Tracker then
// waits in Flush), a completed turn for its next state, feedback for
// insertion. When the disk budget is spent new turns are refused with a
// counted reason; the Tracker still serves them.
func (d *DB) Offer(rec session.Record) bool {
	switch rec.Kind {
	case session.KindRecorded:
		if rec.Turn == nil {
			return true
		}
		if d.overBudget() {
			d.met.refused.WithLabelValues("disk_budget").Inc()
			d.warn.Warn("disk_budget", fmt.Errorf("%s: %d bytes, budget %d", d.path, d.Bytes(), d.opts.MaxBytes),
				"store: disk budget reached: new turns are not stored for training (raise data.max_mb or forget old data)")
			return true
		}
		t := *rec.Turn
		_ = d.enqueue("turn", false, false, func(tx *sql.Tx) error { return d.insertTurn(tx, &t) })
	case session.KindTurn:
		if rec.Turn == nil {
			return true
		}
		t := *rec.Turn
		d.enqueueReadying("complete", TurnID(t.ResponseID, t.Choice), func(tx *sql.Tx) (bool, error) { return d.completeTurn(tx, &t) })
	case session.KindFeedback:
		if rec.Feedback == nil {
			return true
		}
		fb := *rec.Feedback
		d.enqueueReadying("feedback", TurnID(fb.ResponseID, fb.Choice), func(tx *sql.Tx) (bool, error) { return d.insertFeedback(tx, &fb) })
	}
	return true
}

// enqueueReadying queues a write of turn id that reports whether feedback
// made the turn ready; once it is committed, such a turn is noted for
// FeedbackReady.
func (d *DB) enqueueReadying(kind, id string, write func(*sql.Tx) (bool, error)) {
	var readied bool
	_ = d.enqueueAfter(kind, false, true, func(tx *sql.Tx) (err error) {
		readied, err = write(tx)
		return err
	}, func() {
		if readied {
			d.noteFeedbackReady(id)
		}
	})
}

// redactMessages redacts the text of msgs in place (they are copies) and
// reports whether anything was replaced.
func (d *DB) redactMessages(msgs []tokenizer.Message) bool {
	if d.opts.NoRedact {
		return false
	}
	hit := false
	red := func(s *string) {
		if r, n := Redact(*s); n > 0 {
			*s, hit = r, true
		}
	}
	for i := range msgs {
		m := &msgs[i]
		red(&m.Content)
		red(&m.ReasoningContent)
		if len(m.ToolCalls) > 0 {
			calls := append([]tokenizer.ToolCall(nil), m.ToolCalls...)
			for j := range calls {
				args := string(calls[j].Function.Arguments)
				if r, n := Redact(args); n > 0 {
					hit = true
					if json.Valid([]byte(r)) {
						calls[j].Function.Arguments = json.RawMessage(r)
					} else {
						calls[j].Function.Arguments = json.RawMessage(`{}`)
					}
				}
			}
			m.ToolCalls = calls
		}
	}
	return hit
}

func (d *DB) insertTurn(tx *sql.Tx, t *session.Turn) error {
	body := turnBody{
		Inferred: t.Inferred, Endpoint: t.Endpoint, Model: t.Model,
		Messages: append([]tokenizer.Message(nil), t.Messages...), Tools: t.Tools, Vars: t.TemplateVars, Prefill: t.Prefill,
		Reply: t.Reply, Versions: t.Versions, FinishReason: t.FinishReason,
		FirstToken: ms(t.FirstToken), Finished: ms(t.Finished), Keys: t.Keys,
	}
	reply := []tokenizer.Message{body.Reply}
	redacted := d.redactMessages(body.Messages)
	redacted = d.redactMessages(reply) || redacted
	body.Reply = reply[0]
	if len(body.Tools) > 0 && !d.opts.NoRedact {
		tools := make([]json.RawMessage, len(body.Tools))
		for i, tl := range body.Tools {
			tools[i] = tl
			if r, n := Redact(string(tl)); n > 0 && json.Valid([]byte(r)) {
				tools[i], redacted = json.RawMessage(r), true
			}
		}
		body.Tools = tools
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("store: turn %s: %w", TurnID(t.ResponseID, t.Choice), err)
	}
	var prompt, response, logprobs, slogprobs, forced []byte
	if !redacted {
		prompt, response, logprobs = encodeInt32s(t.PromptTokens), encodeInt32s(t.ResponseTokens), encodeFloat32s(t.LogProbs)
		if len(t.SampleLogProbs) == len(t.ResponseTokens) {
			slogprobs = encodeFloat32s(t.SampleLogProbs)
		}
		if len(t.Forced) == len(t.ResponseTokens) {
			forced = encodeBools(t.Forced)
		}
	}
	_, err = tx.Exec(`INSERT INTO turns(id, session_id, idx, choice, response_id, version, status, received, redacted, body, prompt, response, logprobs, sample_logprobs, forced)
		VALUES (?, ?, ?, ?, ?, ?, 'open', ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
		TurnID(t.ResponseID, t.Choice), t.SessionID, t.Index, t.Choice, t.ResponseID, int64(t.Version),
		ms(t.Received), boolInt(redacted), raw, prompt, response, logprobs, slogprobs, forced)
	if err != nil {
		return fmt.Errorf("store: turn %s: %w", TurnID(t.ResponseID, t.Choice), err)
	}
	d.met.turns.WithLabelValues("recorded").Inc()
	return nil
}

// completeTurn stores a turn's next state and makes it ready to score (a
// redacted one: kept, never scored). A turn that ended by shutdown stays
// open (the next start gives it back to the Tracker). A turn that was
// never inserted (recorded after the Tracker closed) is inserted first.
// It reports whether the turn became ready with feedback already given
// (text before the next state).
func (d *DB) completeTurn(tx *sql.Tx, t *session.Turn) (readied bool, err error) {
	if t.End == session.EndShutdown {
		return false, nil
	}
	id := TurnID(t.ResponseID, t.Choice)
	next := append([]tokenizer.Message(nil), t.NextState...)
	redacted := d.redactMessages(next)
	var raw []byte
	if len(next) > 0 {
		if raw, err = json.Marshal(next); err != nil {
			return false, fmt.Errorf("store: turn %s: %w", id, err)
		}
	}
	completed := ms(t.Completed)
	if completed == 0 {
		completed = d.now()
	}
	update := func() (int64, error) {
		res, err := tx.Exec(`UPDATE turns SET next_state = ?, completed = ?, end_reason = ?, redacted = redacted OR ?,
			status = CASE WHEN redacted OR ? THEN 'redacted' ELSE 'ready' END
			WHERE id = ? AND status = 'open'`, raw, completed, string(t.End), boolInt(redacted), boolInt(redacted), id)
		if err != nil {
			return 0, fmt.Errorf("store: turn %s: %w", id, err)
		}
		return res.RowsAffected()
	}
	withFeedback := func() bool {
		var yes bool
		_ = tx.QueryRow(`SELECT status = 'ready' AND EXISTS (SELECT 1 FROM feedback WHERE feedback.turn_id = turns.id) FROM turns WHERE id = ?`, id).Scan(&yes)
		return yes
	}
	n, err := update()
	if err != nil || n > 0 {
		if n > 0 {
			d.met.turns.WithLabelValues("completed").Inc()
			readied = withFeedback()
		}
		return readied, err
	}
	// A turn that a thumb made ready before its next state came keeps the
	// next state now (for export and a later look), and is not scored
	// again: the thumb decided its reward. It keeps its end reason: the
	// thumb ended it, and scoring leaves the late next state out
	// (ReadyTurns).
	res, err := tx.Exec(`UPDATE turns SET next_state = ?, redacted = redacted OR ?
		WHERE id = ? AND end_reason = ? AND next_state IS NULL`, raw, boolInt(redacted), id, endThumb)
	if err != nil {
		return false, fmt.Errorf("store: turn %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return false, nil
	}
	var exists int
	if err := tx.QueryRow("SELECT COUNT(*) FROM turns WHERE id = ?", id).Scan(&exists); err != nil || exists > 0 || d.overBudget() {
		return false, err // completed already, or refused by the budget
	}
	if err := d.insertTurn(tx, t); err != nil {
		return false, err
	}
	if n, err = update(); n > 0 {
		d.met.turns.WithLabelValues("completed").Inc()
	}
	return false, err
}

// endThumb is the end reason of a turn that a thumb made ready before its
// next state came.
const endThumb = "thumb"

// insertFeedback stores feedback. A thumb is a complete signal: a turn
// still waiting for its next state (the last of its session, so far) is
// ready to score at once, with the thumb as its reward; its next state,
// if it comes, is kept but decides nothing. Feedback on a turn that is
// already ready, scored or failed gives it a new scoring generation: it is
// scored again with the feedback (a thumb decides, a text becomes a hint)
// and its new sample trains in a later step. It reports whether the
// feedback made the turn ready (FeedbackReady).
func (d *DB) insertFeedback(tx *sql.Tx, fb *session.Feedback) (readied bool, err error) {
	text := fb.Text
	if !d.opts.NoRedact {
		text, _ = Redact(text)
	}
	id := TurnID(fb.ResponseID, fb.Choice)
	if _, err := tx.Exec(`INSERT INTO feedback(id, turn_id, thumb, text, received) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(id) DO NOTHING`, fb.ID, id, fb.Thumb, text, ms(fb.Received)); err != nil {
		return false, fmt.Errorf("store: feedback %s: %w", fb.ID, err)
	}
	if fb.Thumb != 0 {
		// A redacted turn (its text held a secret: no tokens kept) is
		// never scored; the thumb ends it all the same.
		res, err := tx.Exec(`UPDATE turns SET status = CASE WHEN redacted THEN 'redacted' ELSE 'ready' END, completed = ?, end_reason = ?
			WHERE id = ? AND status = 'open'`, d.now(), endThumb, id)
		if err != nil {
			return false, fmt.Errorf("store: feedback %s: %w", fb.ID, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			d.met.turns.WithLabelValues("thumbed").Inc()
			return true, nil
		}
	}
	res, err := tx.Exec(`UPDATE turns SET gen = gen + 1, status = 'ready' WHERE id = ? AND status IN ('ready', 'scored', 'failed')`, id)
	if err != nil {
		return false, fmt.Errorf("store: feedback %s: %w", fb.ID, err)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		d.met.turns.WithLabelValues("rescored").Inc()
		return true, nil
	}
	return false, nil
}

// maxFeedbackReady bounds the ids FeedbackReady holds; beyond it the
// oldest are forgotten (ReadyTurns still finds their turns).
const maxFeedbackReady = 4096

// noteFeedbackReady remembers, once its write is committed, that
// feedback made turn id ready.
func (d *DB) noteFeedbackReady(id string) {
	d.fbMu.Lock()
	defer d.fbMu.Unlock()
	if len(d.fbReady) >= maxFeedbackReady {
		d.fbReady = append(d.fbReady[:0], d.fbReady[len(d.fbReady)-maxFeedbackReady/2:]...)
	}
	d.fbReady = append(d.fbReady, id)
}

// feedbackReadyQuery lists the ready turns that have feedback, oldest
// first: read once at Open, so that after a restart they are still
// scored before the other ready turns.
const feedbackReadyQuery = `SELECT t.id FROM turns t WHERE t.status = 'ready'
	AND EXISTS (SELECT 1 FROM feedback f WHERE f.turn_id = t.id) ORDER BY t.completed LIMIT ?`

// loadFeedbackReady fills the ids FeedbackReady hands out with the ready
// turns that feedback is waiting on in the store (see FeedbackReady):
// what a daemon had noted in memory before it stopped.
func (d *DB) loadFeedbackReady() error {
	rows, err := d.db.Query(feedbackReadyQuery, maxFeedbackReady)
	if err != nil {
		return fmt.Errorf("store: %s: ready turns with feedback: %w", d.path, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("store: %s: ready turns with feedback: %w", d.path, err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: %s: ready turns with feedback: %w", d.path, err)
	}
	d.fbMu.Lock()
	d.fbReady = ids
	d.fbMu.Unlock()
	return nil
}

// FeedbackReady returns, and forgets, the ids of the turns that feedback
// made ready (a thumb on a turn waiting for its next state, feedback on
// a turn already scored) or that became ready with feedback already
// given, since the last call (or, on the first call, left ready with
// feedback by an earlier run of the daemon), oldest first. It costs no
// query, so the scorer can take those turns at once (ReadTurn) whatever
// the backlog of other ready turns. The ids are kept in memory, as a
// hint (ReadyTurns finds the same turns, newest first with the rest);
// Open reads those of an earlier run back from the store.
func (d *DB) FeedbackReady() []string {
	d.fbMu.Lock()
	defer d.fbMu.Unlock()
	out := d.fbReady
	d.fbReady = nil
	return out
}

// FindTurn finds a stored turn for feedback (it implements
// session.Archive): by response id and choice, or by session and turn
// index.
func (d *DB) FindTurn(req session.FeedbackRequest) (session.Feedback, error) {
	var row *sql.Row
	if req.ResponseID != "" {
		row = d.db.QueryRow("SELECT session_id, idx, choice, response_id FROM turns WHERE id = ?", TurnID(req.ResponseID, req.Choice))
	} else {
		row = d.db.QueryRow("SELECT session_id, idx, choice, response_id FROM turns WHERE session_id = ? AND idx = ? AND choice = ?",
			req.SessionID, req.Turn, req.Choice)
	}
	var fb session.Feedback
	err := row.Scan(&fb.SessionID, &fb.TurnIndex, &fb.Choice, &fb.ResponseID)
	if errors.Is(err, sql.ErrNoRows) {
		return fb, fmt.Errorf("feedback for response %q / session %q turn %d: %w",
			req.ResponseID, req.SessionID, req.Turn, session.ErrUnknownTurn)
	}
	if err != nil {
		return fb, fmt.Errorf("store: finding turn: %w", err)
	}
	return fb, nil
}

// OpenTurns returns the turns still waiting for their next state (those a
// thumb made ready included), newest last, as the Tracker needs them to
// resume (ids, session, index, keys).
func (d *DB) OpenTurns(limit int) ([]*session.Turn, error) {
	rows, err := d.db.Query(`SELECT session_id, idx, choice, response_id, received, body FROM
		(SELECT * FROM turns WHERE status = 'open' OR (end_reason = ? AND next_state IS NULL) ORDER BY received DESC LIMIT ?) ORDER BY received`,
		endThumb, limit)
	if err != nil {
		return nil, fmt.Errorf("store: open turns: %w", err)
	}
	defer rows.Close()
	var out []*session.Turn
	for rows.Next() {
		var t session.Turn
		var received int64
		var raw []byte
		if err := rows.Scan(&t.SessionID, &t.Index, &t.Choice, &t.ResponseID, &received, &raw); err != nil {
			return nil, fmt.Errorf("store: open turns: %w", err)
		}
		var body turnBody
		if err := json.Unmarshal(raw, &body); err != nil {
			return nil, fmt.Errorf("store: turn %s: body: %w", TurnID(t.ResponseID, t.Choice), err)
		}
		t.Inferred, t.Keys, t.Received = body.Inferred, body.Keys, time.UnixMilli(received)
		out = append(out, &t)
	}
	return out, rows.Err()
}

// ReadyTurn is a complete turn to score, with its feedback.
type ReadyTurn struct {
	ID         string
	Gen        int
	SessionID  string
	ResponseID string
	Choice     int
	Version    uint64
	Messages   []tokenizer.Message
	Tools      []json.RawMessage
	// TemplateVars and Prefill complete the render spec (session.Turn);
	// nil vars: a turn stored before they were recorded.
	TemplateVars map[string]any
	Prefill      string
	Reply        tokenizer.Message
	NextState    []tokenizer.Message
	End          string
	Prompt       []int32
	Response     []int32
	LogProbs     []float32
	Feedback     []session.Feedback
	Completed    time.Time
}

// readyTurnsQuery lists ready turns' ids, newest first, from the
// turns_status index (TestReadyTurnsReadTheIndex).
const readyTurnsQuery = `SELECT id FROM turns WHERE status = 'ready' ORDER BY completed DESC LIMIT ?`

// ReadyTurns returns up to limit turns that are ready to score, newest
// first (under sustained load the newest turns are the ones whose samples
// can still train within max_staleness; older ones wait for a lull),
// skipping the ids in busy. It reads the status index alone, whatever
// the backlog: the turns that feedback made ready, which go first, are
// named by FeedbackReady instead (ordering the ready turns by whether
// they have feedback took a scan and a sort of every ready turn, and
// under load, when thousands wait, that starved the store's other
// users; Open reads back those an earlier run left ready). A turn that a
// thumb made ready is scored as it stood at the thumb: a next state that
// came after the thumb is left out (the thumb decided its reward, and its
// sample does not wait for a judge to read what came next).
func (d *DB) ReadyTurns(limit int, busy map[string]bool) ([]ReadyTurn, error) {
	// Ids first (the indexes alone), so that busy turns cost no body read.
	rows, err := d.db.Query(readyTurnsQuery, limit+len(busy))
	if err != nil {
		return nil, fmt.Errorf("store: ready turns: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: ready turns: %w", err)
		}
		if !busy[id] && len(ids) < limit {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: ready turns: %w", err)
	}
	out := make([]ReadyTurn, 0, len(ids))
	for _, id := range ids {
		t, ok, err := d.ReadTurn(id)
		if err != nil {
			return nil, err
		}
		if ok { // else scored or forgotten meanwhile
			out = append(out, t)
		}
	}
	return out, nil
}

// ReadTurn reads turn id to score it, as ReadyTurns does; ok is false
// when it is not ready (scored, forgotten, or not complete).
func (d *DB) ReadTurn(id string) (t ReadyTurn, ok bool, err error) {
	var version, completed int64
	var raw, next, prompt, response, logprobs []byte
	err = d.db.QueryRow(`SELECT id, gen, session_id, response_id, choice, version, end_reason, completed, body, next_state, prompt, response, logprobs
		FROM turns WHERE id = ? AND status = 'ready'`, id).Scan(&t.ID, &t.Gen, &t.SessionID, &t.ResponseID, &t.Choice, &version, &t.End, &completed,
		&raw, &next, &prompt, &response, &logprobs)
	if errors.Is(err, sql.ErrNoRows) {
		return t, false, nil
	}
	if err != nil {
		return t, false, fmt.Errorf("store: ready turn %s: %w", id, err)
	}
	var body turnBody
	if err := json.Unmarshal(raw, &body); err != nil {
		return t, false, fmt.Errorf("store: turn %s: body: %w", t.ID, err)
	}
	t.Version, t.Completed = uint64(version), time.UnixMilli(completed)
	t.Messages, t.Tools, t.Reply = body.Messages, body.Tools, body.Reply
	t.TemplateVars, t.Prefill = body.Vars, body.Prefill
	if next != nil && t.End != endThumb {
		if err := json.Unmarshal(next, &t.NextState); err != nil {
			return t, false, fmt.Errorf("store: turn %s: next state: %w", t.ID, err)
		}
	}
	t.Prompt, t.Response, t.LogProbs = decodeInt32s(prompt), decodeInt32s(response), decodeFloat32s(logprobs)
	if t.Feedback, err = d.feedbackOf(t.ID); err != nil {
		return t, false, err
	}
	return t, true, nil
}

func (d *DB) feedbackOf(turnID string) ([]session.Feedback, error) {
	rows, err := d.db.Query("SELECT id, thumb, text, received FROM feedback WHERE turn_id = ? ORDER BY received, id", turnID)
	if err != nil {
		return nil, fmt.Errorf("store: feedback of %s: %w", turnID, err)
	}
	defer rows.Close()
	var out []session.Feedback
	for rows.Next() {
		var fb session.Feedback
		var received int64
		if err := rows.Scan(&fb.ID, &fb.Thumb, &fb.Text, &received); err != nil {
			return nil, fmt.Errorf("store: feedback of %s: %w", turnID, err)
		}
		fb.Received = time.UnixMilli(received)
		out = append(out, fb)
	}
	return out, rows.Err()
}

// FailTurn marks a turn that cannot be scored (invalid input), so that it
// is not offered again; new feedback makes it ready once more.
func (d *DB) FailTurn(id string, gen int, reason string) error {
	return d.enqueue("fail", true, false, func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE turns SET status = 'failed', end_reason = end_reason || ' failed: ' || ? WHERE id = ? AND gen = ? AND status = 'ready'",
			truncate(reason, 200), id, gen)
		return err
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func encodeInt32s(v []int32) []byte {
	if v == nil {
		return nil
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

func decodeInt32s(b []byte) []int32 {
	if b == nil {
		return nil
	}
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func encodeFloat32s(v []float32) []byte {
	if v == nil {
		return nil
	}
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func decodeFloat32s(b []byte) []float32 {
	if b == nil {
		return nil
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}
