package store

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/clawrl/clawrl/tokenizer"
)

// Forgotten counts what ForgetSession or Purge deleted.
type Forgotten struct {
	Turns     int `json:"turns"`
	Feedback  int `json:"feedback"`
	Samples   int `json:"samples"`
	Responses int `json:"responses"` // stored Responses API responses
}

// ForgetSession deletes a session's turns, their feedback and their
// samples (trained ones too: the weights keep what they learned, the
// store keeps no record of the text) and its stored responses, then
// checkpoints and truncates the WAL so that no copy of the text stays in
// the files (secure_delete overwrites the freed pages). It waits for the
// commit.
func (d *DB) ForgetSession(id string) (Forgotten, error) {
	var f Forgotten
	err := d.enqueue("forget", true, false, func(tx *sql.Tx) error {
		var err error
		if f, err = deleteTurns(tx, "session_id = ?", id); err != nil {
			return err
		}
		return deleteResponses(tx, "session_id = ?", id, &f.Responses)
	})
	if err != nil {
		return f, fmt.Errorf("store: forgetting session %s: %w", id, err)
	}
	d.met.turns.WithLabelValues("forgotten").Add(float64(f.Turns))
	return f, d.scrub()
}

// Purge deletes the records of turns received before cutoff (retention),
// as ForgetSession does, and the responses stored before it.
func (d *DB) Purge(cutoff time.Time) (Forgotten, error) {
	var f Forgotten
	err := d.enqueue("purge", true, false, func(tx *sql.Tx) error {
		var err error
		if f, err = deleteTurns(tx, "received < ?", cutoff.UnixMilli()); err != nil {
			return err
		}
		return deleteResponses(tx, "created < ?", cutoff.UnixMilli(), &f.Responses)
	})
	if err != nil {
		return f, fmt.Errorf("store: purging records before %s: %w", cutoff.Format(time.RFC3339), err)
	}
	if f.Turns > 0 || f.Responses > 0 {
		d.met.turns.WithLabelValues("purged").Add(float64(f.Turns))
		return f, d.scrub()
	}
	return f, nil
}

func deleteTurns(tx *sql.Tx, where string, arg any) (Forgotten, error) {
	var f Forgotten
	sub := "SELECT id FROM turns WHERE " + where
	for _, x := range []struct {
		n     *int
		query string
	}{
		{&f.Feedback, "DELETE FROM feedback WHERE turn_id IN (" + sub + ")"},
		{&f.Samples, "DELETE FROM samples WHERE turn_id IN (" + sub + ")"},
		{&f.Turns, "DELETE FROM turns WHERE " + where},
	} {
		res, err := tx.Exec(x.query, arg)
		if err != nil {
			return f, err
		}
		n, _ := res.RowsAffected()
		*x.n = int(n)
	}
	return f, nil
}

// scrub moves the WAL into the database file and truncates it, so that
// deleted rows leave no copy behind.
func (d *DB) scrub() error {
	if _, err := d.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("store: %s: checkpoint after delete: %w", d.path, err)
	}
	return nil
}

// Stats summarises the store.
type Stats struct {
	Path     string         `json:"path"`
	Bytes    int64          `json:"bytes"`
	Sessions int            `json:"sessions"`
	Turns    map[string]int `json:"turns"`
	Samples  map[string]int `json:"samples"`
	Dropped  map[string]int `json:"dropped"`
	Feedback int            `json:"feedback"`
	// Hints counts the scored turns whose hint judge wrote a hint (the
	// latest scoring of each turn), by the sample's status.
	Hints       map[string]int `json:"hints"`
	Steps       map[string]int `json:"steps"`
	LastVersion uint64         `json:"last_version"`
	Oldest      *time.Time     `json:"oldest_turn,omitempty"`
	Newest      *time.Time     `json:"newest_turn,omitempty"`
}

// Stats counts turns, samples, steps by status.
func (d *DB) Stats() (Stats, error) {
	d.refreshSize()
	s := Stats{Path: d.path, Bytes: d.Bytes(), Turns: map[string]int{}, Samples: map[string]int{}, Dropped: map[string]int{}, Hints: map[string]int{}, Steps: map[string]int{}}
	group := func(query string, into map[string]int) error {
		rows, err := d.db.Query(query)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				return err
			}
			into[k] = n
		}
		return rows.Err()
	}
	for _, g := range []struct {
		q    string
		into map[string]int
	}{
		{"SELECT status, COUNT(*) FROM turns GROUP BY status", s.Turns},
		{"SELECT status, COUNT(*) FROM samples GROUP BY status", s.Samples},
		{"SELECT reason, COUNT(*) FROM samples WHERE status = 'dropped' GROUP BY reason", s.Dropped},
		{"SELECT status, COUNT(*) FROM samples WHERE hint != '' AND kind != 'rollout' GROUP BY status", s.Hints},
		{"SELECT status, COUNT(*) FROM steps GROUP BY status", s.Steps},
	} {
		if err := group(g.q, g.into); err != nil {
			return s, fmt.Errorf("store: stats: %w", err)
		}
	}
	var oldest, newest sql.NullInt64
	if err := d.db.QueryRow("SELECT COUNT(DISTINCT session_id), MIN(received), MAX(received) FROM turns").Scan(&s.Sessions, &oldest, &newest); err != nil {
		return s, fmt.Errorf("store: stats: %w", err)
	}
	if oldest.Valid {
		o, n := time.UnixMilli(oldest.Int64).UTC(), time.UnixMilli(newest.Int64).UTC()
		s.Oldest, s.Newest = &o, &n
	}
	if err := d.db.QueryRow("SELECT COUNT(*) FROM feedback").Scan(&s.Feedback); err != nil {
		return s, fmt.Errorf("store: stats: %w", err)
	}
	var err error
	s.LastVersion, err = d.LastVersion()
	return s, err
}

// ExportRecord is one line of Export: a scored turn in the conversational
// form that TRL's trainers read (prompt and completion as message lists;
// label for KTO; messages for SFT) and OpenRLHF reads through its
// --input_key / --output_key / --label_key options, with the signal that
// clawrl derived from it.
type ExportRecord struct {
	ID         string              `json:"id"`
	SessionID  string              `json:"session_id"`
	Turn       int                 `json:"turn"`
	Prompt     []tokenizer.Message `json:"prompt"`
	Completion []tokenizer.Message `json:"completion"`
	Messages   []tokenizer.Message `json:"messages"`
	Tools      []json.RawMessage   `json:"tools,omitempty"`
	NextState  []tokenizer.Message `json:"next_state,omitempty"`
	// Label is the KTO label: true for a reward of +1, false for -1;
	// absent when the reward is 0.
	Label    *bool   `json:"label,omitempty"`
	Reward   int     `json:"reward"`
	Source   string  `json:"source,omitempty"`
	Votes    []int   `json:"votes"`
	Hint     string  `json:"hint,omitempty"`
	Kind     string  `json:"kind"`
	Status   string  `json:"status"`
	Version  uint64  `json:"version"`
	Feedback []Thumb `json:"feedback,omitempty"`
	// ResponseTokenIDs and TeacherAdvantages (teacher log-prob minus the
	// rollout log-prob, per response token) are present for distillation
	// samples whose tokens were kept.
	ResponseTokenIDs  []int32   `json:"response_token_ids,omitempty"`
	TeacherAdvantages []float32 `json:"teacher_advantages,omitempty"`
}

// Thumb is exported feedback.
type Thumb struct {
	Thumb int    `json:"thumb"`
	Text  string `json:"text,omitempty"`
}

// Export writes one JSON line per sample (the latest generation of each
// scored turn), oldest first, and returns how many it wrote. Hinted
// rollouts (the teacher's own responses) are not exported: a line is a
// turn the user saw.
func (d *DB) Export(w io.Writer) (int, error) {
	rows, err := d.db.Query(`SELECT s.id, t.session_id, t.idx, t.body, t.next_state, s.reward, s.source, s.votes, s.hint, s.kind, s.status,
		s.version, s.teacher, t.id, t.response, t.logprobs
		FROM samples s JOIN turns t ON t.id = s.turn_id
		WHERE s.gen = t.gen AND s.kind != 'rollout' ORDER BY t.received, s.id`)
	if err != nil {
		return 0, fmt.Errorf("store: export: %w", err)
	}
	defer rows.Close()
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	n := 0
	for rows.Next() {
		var r ExportRecord
		var raw, next, teacher, response, logprobs []byte
		var votes, turnID string
		var version int64
		if err := rows.Scan(&r.ID, &r.SessionID, &r.Turn, &raw, &next, &r.Reward, &r.Source, &votes, &r.Hint, &r.Kind, &r.Status,
			&version, &teacher, &turnID, &response, &logprobs); err != nil {
			return n, fmt.Errorf("store: export: %w", err)
		}
		var body turnBody
		if err := json.Unmarshal(raw, &body); err != nil {
			return n, fmt.Errorf("store: export: turn %s: %w", turnID, err)
		}
		r.Version = uint64(version)
		_ = json.Unmarshal([]byte(votes), &r.Votes)
		r.Prompt, r.Completion, r.Tools = body.Messages, []tokenizer.Message{body.Reply}, body.Tools
		if next != nil {
			if err := json.Unmarshal(next, &r.NextState); err != nil {
				return n, fmt.Errorf("store: export: turn %s: next state: %w", turnID, err)
			}
		}
		r.Messages = append(append([]tokenizer.Message(nil), body.Messages...), body.Reply)
		if r.Reward != 0 {
			l := r.Reward > 0
			r.Label = &l
		}
		if t := decodeFloat32s(teacher); t != nil && logprobs != nil {
			lp := decodeFloat32s(logprobs)
			if len(lp) == len(t) {
				r.ResponseTokenIDs = decodeInt32s(response)
				r.TeacherAdvantages = make([]float32, len(t))
				for i := range t {
					r.TeacherAdvantages[i] = t[i] - lp[i]
				}
			}
		}
		fbs, err := d.feedbackOf(turnID)
		if err != nil {
			return n, err
		}
		for _, fb := range fbs {
			r.Feedback = append(r.Feedback, Thumb{Thumb: fb.Thumb, Text: fb.Text})
		}
		if err := enc.Encode(r); err != nil {
			return n, fmt.Errorf("store: export: %w", err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("store: export: %w", err)
	}
	return n, bw.Flush()
}

// Meta returns the value of a key of the store's meta table ("" when it
// has none).
func (d *DB) Meta(key string) (string, error) {
	var v string
	err := d.db.QueryRow("SELECT value FROM meta WHERE key = ?", key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: meta %s: %w", key, err)
	}
	return v, nil
}

// SetMeta sets a key of the store's meta table and waits for the commit.
func (d *DB) SetMeta(key, value string) error {
	return d.enqueue("meta", true, false, func(tx *sql.Tx) error {
		_, err := tx.Exec("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
		return err
	})
}
