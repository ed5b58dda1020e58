package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Sample statuses.
const (
	SampleQueued   = "queued"   // waiting for a training step
	SampleTrained  = "trained"  // in an applied step
	SampleDropped  = "dropped"  // never to train; reason says why
	SampleNoSignal = "nosignal" // scored 0 with no hint: nothing to train
)

// Sample is a scored turn as the store keeps it.
type Sample struct {
	ID      string // turn id "#" gen
	TurnID  string
	Gen     int
	Version uint64 // the version that generated the turn
	Kind    string // binary, distill, both, none
	Reward  int
	Source  string
	Votes   []int
	Hint    string
	// Teacher holds the teacher's log-probs of the response tokens.
	Teacher []float32
	Created time.Time
	// Rollouts are responses the teacher generated under the hint (kind
	// KindRollout), each kept as a sample of its own, id
	// RolloutID(turn, gen, i), with the same status rules as this one.
	Rollouts []Rollout

	// Filled when read back for training: the turn's tokens, the model's
	// own log-probs of the response (LogProbs), those under the
	// distribution each token was drawn from (SampleLogProbs: the
	// behaviour policy; nil for a turn recorded before they were kept) and
	// which tokens a grammar forced (Forced; nil: none). A hinted rollout
	// has its own response and none of them.
	Prompt, Response []int32
	LogProbs         []float32
	SampleLogProbs   []float32
	Forced           []bool
}

// KindRollout is the kind of a hinted-rollout sample: its response is the
// teacher's, not the turn's, and it has no behaviour log-probs.
const KindRollout = "rollout"

// Rollout is a response the teacher generated under a hint.
type Rollout struct {
	Tokens  []int32
	Teacher []float32 // the teacher's log-prob of each token
	// Version is the policy version that generated it; 0 for a frozen
	// teacher (the checkpoint's weights are no version of the lineage):
	// such a rollout dates from the turn it corrects and is stored with
	// its sample's Version, so that it ages in steps like the turn.
	Version uint64
}

// RolloutID is the id of rollout i of a turn's sample of generation gen.
func RolloutID(turnID string, gen, i int) string { return fmt.Sprintf("%s#%d/r%d", turnID, gen, i) }

// SampleID is the id of a turn's sample of scoring generation gen.
func SampleID(turnID string, gen int) string { return fmt.Sprintf("%s#%d", turnID, gen) }

// AddSample records the result of scoring a turn (generation s.Gen) and
// marks the turn scored, in one transaction, and waits for the commit. A
// sample with nothing to train is kept as nosignal (export still has its
// votes). A result for an older generation than the turn's (feedback came
// while it was scored) is kept as dropped/superseded and the turn stays
// ready; a newer sample drops the turn's untrained older ones.
func (d *DB) AddSample(s Sample) error {
	return d.enqueue("sample", true, true, func(tx *sql.Tx) error {
		var gen int
		err := tx.QueryRow("SELECT gen FROM turns WHERE id = ?", s.TurnID).Scan(&gen)
		if errors.Is(err, sql.ErrNoRows) {
			return nil // forgotten meanwhile
		}
		if err != nil {
			return err
		}
		status, reason := SampleQueued, ""
		switch {
		case s.Gen < gen:
			status, reason = SampleDropped, "superseded"
		case s.Kind == "none" || s.Kind == "":
			status = SampleNoSignal
		}
		votes, _ := json.Marshal(s.Votes)
		if s.Votes == nil {
			votes = []byte("[]")
		}
		id := SampleID(s.TurnID, s.Gen)
		if _, err := tx.Exec(`INSERT INTO samples(id, turn_id, gen, created, version, kind, reward, source, votes, hint, teacher, status, reason)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
			id, s.TurnID, s.Gen, d.now(), int64(s.Version), s.Kind, s.Reward, s.Source, string(votes), s.Hint,
			encodeFloat32s(s.Teacher), status, reason); err != nil {
			return err
		}
		d.met.samples.WithLabelValues(status).Inc()
		rstatus := status
		if rstatus == SampleNoSignal {
			rstatus = SampleQueued
		}
		for i, r := range s.Rollouts {
			if len(r.Tokens) == 0 || len(r.Teacher) != len(r.Tokens) {
				return fmt.Errorf("store: sample %s: rollout %d has %d tokens and %d teacher log-probs", id, i, len(r.Tokens), len(r.Teacher))
			}
			if r.Version == 0 {
				r.Version = s.Version // a frozen teacher's: dated by its turn
			}
			if _, err := tx.Exec(`INSERT INTO samples(id, turn_id, gen, created, version, kind, reward, source, votes, hint, teacher, status, reason, response)
				VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`,
				RolloutID(s.TurnID, s.Gen, i), s.TurnID, s.Gen, d.now(), int64(r.Version), KindRollout, s.Source, string(votes), s.Hint,
				encodeFloat32s(r.Teacher), rstatus, reason, encodeInt32s(r.Tokens)); err != nil {
				return err
			}
			d.met.samples.WithLabelValues(rstatus).Inc()
		}
		if s.Gen < gen {
			return nil
		}
		if _, err := tx.Exec(`UPDATE samples SET status = 'dropped', reason = 'superseded'
			WHERE turn_id = ? AND gen < ? AND status = 'queued'`, s.TurnID, s.Gen); err != nil {
			return err
		}
		_, err = tx.Exec("UPDATE turns SET status = 'scored' WHERE id = ? AND gen = ?", s.TurnID, s.Gen)
		return err
	})
}

// DropStale marks the queued samples of every version for which stale
// reports true as dropped (reason stale) and returns how many. The caller
// decides staleness (in optimizer steps of the lineage, not in version
// numbers: see trainer.Lineage). Samples the judge scored are dropped
// rather than re-scored: their behaviour log-probs belong to weights too
// far from the ones being trained for the importance weights to correct,
// and fresher turns keep coming. Samples that explicit feedback decided
// (source feedback) are kept: they are rare and the user's own word, so
// the trainer takes them against the current policy instead (see the
// loop).
func (d *DB) DropStale(stale func(version uint64) bool) (int, error) {
	// The versions first, read outside the writer: most calls find none
	// stale and write nothing.
	rows, err := d.db.Query("SELECT DISTINCT version FROM samples WHERE status = 'queued' AND source != 'feedback'")
	if err != nil {
		return 0, fmt.Errorf("store: stale samples: %w", err)
	}
	var old []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return 0, fmt.Errorf("store: stale samples: %w", err)
		}
		if stale(uint64(v)) {
			old = append(old, v)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(old) == 0 {
		return 0, err
	}
	var n int64
	err = d.enqueue("stale", true, false, func(tx *sql.Tx) error {
		for _, v := range old {
			res, err := tx.Exec("UPDATE samples SET status = 'dropped', reason = 'stale' WHERE status = 'queued' AND version = ? AND source != 'feedback'", v)
			if err != nil {
				return err
			}
			k, _ := res.RowsAffected()
			n += k
		}
		return nil
	})
	if n > 0 {
		d.met.samples.WithLabelValues("dropped_stale").Add(float64(n))
	}
	return int(n), err
}

// Queued returns up to limit queued samples, with their turns' tokens,
// and the time the oldest queued sample was created (zero when none is
// queued). Samples that a thumb decided (source feedback) come first: a
// person's thumb is the signal the loop exists for, and it should train
// in the next step, not behind the judge's samples. Then newest
// generating version first, newest first: under sustained load those are
// the ones closest to the policy (older ones train in a lull, or go
// stale).
func (d *DB) Queued(limit int) ([]Sample, time.Time, error) {
	var oldest sql.NullInt64
	if err := d.db.QueryRow("SELECT MIN(created) FROM samples WHERE status = 'queued'").Scan(&oldest); err != nil {
		return nil, time.Time{}, fmt.Errorf("store: queued samples: %w", err)
	}
	if !oldest.Valid {
		return nil, time.Time{}, nil
	}
	// The ids first (the samples table alone), then the chosen samples
	// with their turns' tokens: a backlog of queued samples costs a
	// sort of small rows, not of every turn's tokens.
	rows, err := d.db.Query(`SELECT id FROM samples WHERE status = 'queued'
		ORDER BY source = 'feedback' DESC, version DESC, created DESC LIMIT ?`, limit)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: queued samples: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, time.Time{}, fmt.Errorf("store: queued samples: %w", err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("store: queued samples: %w", err)
	}
	out := make([]Sample, 0, len(ids))
	for _, id := range ids {
		var s Sample
		var version, created int64
		var votes string
		var teacher, prompt, response, logprobs, slogprobs, forced []byte
		err := d.db.QueryRow(`SELECT s.id, s.turn_id, s.gen, s.version, s.kind, s.reward, s.source, s.votes, s.hint, s.teacher, s.created,
			t.prompt, COALESCE(s.response, t.response), CASE WHEN s.response IS NULL THEN t.logprobs END,
			CASE WHEN s.response IS NULL THEN t.sample_logprobs END, CASE WHEN s.response IS NULL THEN t.forced END
			FROM samples s JOIN turns t ON t.id = s.turn_id WHERE s.id = ? AND s.status = 'queued'`, id).Scan(
			&s.ID, &s.TurnID, &s.Gen, &version, &s.Kind, &s.Reward, &s.Source, &votes, &s.Hint, &teacher, &created,
			&prompt, &response, &logprobs, &slogprobs, &forced)
		if errors.Is(err, sql.ErrNoRows) {
			continue // dropped or forgotten meanwhile
		}
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("store: queued sample %s: %w", id, err)
		}
		s.Version, s.Created = uint64(version), time.UnixMilli(created)
		_ = json.Unmarshal([]byte(votes), &s.Votes)
		s.Teacher = decodeFloat32s(teacher)
		s.Prompt, s.Response, s.LogProbs = decodeInt32s(prompt), decodeInt32s(response), decodeFloat32s(logprobs)
		s.SampleLogProbs, s.Forced = decodeFloat32s(slogprobs), decodeBools(forced)
		out = append(out, s)
	}
	return out, time.UnixMilli(oldest.Int64), nil
}

// QueuedAhead counts the queued samples that Queued would hand out
// before a judged sample of version v: those a thumb decided and those of
// version v or newer.
func (d *DB) QueuedAhead(v uint64) (int, error) {
	var n int
	if err := d.db.QueryRow("SELECT COUNT(*) FROM samples WHERE status = 'queued' AND (source = 'feedback' OR version >= ?)", int64(v)).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: queued samples: %w", err)
	}
	return n, nil
}

// SourceUnscored is the source of a sample recorded for a turn that was
// not scored (SkipTurn): no judge read it.
const SourceUnscored = "unscored"

// SkipTurn records that a ready turn (generation gen, generated by
// version) is not scored because its sample could not train (reason,
// e.g. stale_unscored: its version is already more than max_staleness
// steps behind the trainer): a dropped sample with that reason and no
// votes, and the turn leaves the ready turns. Feedback that comes later
// makes it ready again, as for a scored turn. It waits for the commit.
func (d *DB) SkipTurn(turnID string, gen int, version uint64, reason string) error {
	return d.enqueue("skip", true, false, func(tx *sql.Tx) error {
		res, err := tx.Exec("UPDATE turns SET status = 'scored' WHERE id = ? AND gen = ? AND status = 'ready'", turnID, gen)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return nil // scored, forgotten or given feedback meanwhile
		}
		if _, err := tx.Exec(`INSERT INTO samples(id, turn_id, gen, created, version, kind, reward, source, votes, hint, status, reason)
			VALUES (?, ?, ?, ?, ?, 'none', 0, ?, '[]', '', 'dropped', ?) ON CONFLICT(id) DO NOTHING`,
			SampleID(turnID, gen), turnID, gen, d.now(), int64(version), SourceUnscored, reason); err != nil {
			return err
		}
		d.met.samples.WithLabelValues("dropped_" + reason).Inc()
		return nil
	})
}

// Step is an applied training step as the store records it.
type Step struct {
	Step    int64  // the trainer's step count after it
	Version uint64 // the version it publishes
	Parent  uint64
	Samples []string
	Loss    float64
	// Stats are the trainer's numbers for the step by name (kl,
	// entropy, grad_norm, lr, ...: the loop names them), kept for the
	// dashboard; NaN and infinite values are left out.
	Stats map[string]float64
}

// encodeStats is the JSON object of a step's stats, without the values
// JSON cannot hold.
func encodeStats(stats map[string]float64) string {
	finite := make(map[string]float64, len(stats))
	for k, v := range stats {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			finite[k] = v
		}
	}
	b, err := json.Marshal(finite)
	if err != nil { // a map of finite numbers: cannot happen
		return "{}"
	}
	return string(b)
}

// CommitStep records an applied step, the version it will publish and the
// samples it trained, in one transaction, and waits for the commit: a
// sample is trained in exactly one applied step. Call it after the
// optimizer step and before publishing, so that a version number that was
// ever served is in the store (numbers never repeat).
func (d *DB) CommitStep(s Step) error {
	return d.enqueue("step", true, false, func(tx *sql.Tx) error {
		ids, _ := json.Marshal(s.Samples)
		res, err := tx.Exec("INSERT INTO steps(step, version, created, samples, loss, status, stats) VALUES (?, ?, ?, ?, ?, 'applied', ?)",
			s.Step, int64(s.Version), d.now(), string(ids), s.Loss, encodeStats(s.Stats))
		if err != nil {
			return err
		}
		stepID, err := res.LastInsertId()
		if err != nil {
			return err
		}
		for _, id := range s.Samples {
			r, err := tx.Exec("UPDATE samples SET status = 'trained', step_id = ? WHERE id = ? AND status = 'queued'", stepID, id)
			if err != nil {
				return err
			}
			if n, _ := r.RowsAffected(); n != 1 {
				return fmt.Errorf("store: step %d: sample %s is not queued (trained twice?)", s.Step, id)
			}
		}
		d.met.samples.WithLabelValues(SampleTrained).Add(float64(len(s.Samples)))
		return insertVersion(tx, s.Version, s.Parent, s.Step, "", d.now())
	})
}

// DropSamples marks queued samples as dropped with a reason (a step that
// was skipped for a non-finite loss, a sample the trainer refused).
func (d *DB) DropSamples(ids []string, reason string) error {
	return d.enqueue("drop", true, false, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.Exec("UPDATE samples SET status = 'dropped', reason = ? WHERE id = ? AND status = 'queued'", truncate(reason, 200), id); err != nil {
				return err
			}
		}
		d.met.samples.WithLabelValues("dropped_" + strings.Fields(reason + " x")[0]).Add(float64(len(ids)))
		return nil
	})
}

// RecordVersion records a version that was published without a step (the
// base model, a resumed checkpoint, a rollback), so that its number is
// never issued again.
func (d *DB) RecordVersion(number, parent uint64, step int64, note string) error {
	return d.enqueue("version", true, false, func(tx *sql.Tx) error {
		return insertVersion(tx, number, parent, step, note, d.now())
	})
}

func insertVersion(tx *sql.Tx, number, parent uint64, step int64, note string, now int64) error {
	_, err := tx.Exec(`INSERT INTO versions(number, parent, step, created, note) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT(number) DO NOTHING`, int64(number), int64(parent), step, now, note)
	return err
}

// VersionRecord is a version as the store records it: the version it was
// trained or restored from (0: none) and the trainer's optimizer step
// count at it.
type VersionRecord struct {
	Number, Parent uint64
	Step           int64
	Created        time.Time // when it was recorded: the trainer's version from then on
}

// Versions returns every recorded version, oldest first: the lineage that
// staleness is measured on (trainer.Lineage).
func (d *DB) Versions() ([]VersionRecord, error) {
	rows, err := d.db.Query("SELECT number, parent, step, created FROM versions ORDER BY number")
	if err != nil {
		return nil, fmt.Errorf("store: versions: %w", err)
	}
	defer rows.Close()
	var out []VersionRecord
	for rows.Next() {
		var n, p, c int64
		var v VersionRecord
		if err := rows.Scan(&n, &p, &v.Step, &c); err != nil {
			return nil, fmt.Errorf("store: versions: %w", err)
		}
		v.Number, v.Parent, v.Created = uint64(n), uint64(p), time.UnixMilli(c)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: versions: %w", err)
	}
	return out, nil
}

// LastVersion is the largest version number the store has seen issued (0
// for none).
func (d *DB) LastVersion() (uint64, error) {
	var n sql.NullInt64
	if err := d.db.QueryRow("SELECT MAX(number) FROM versions").Scan(&n); err != nil {
		return 0, fmt.Errorf("store: versions: %w", err)
	}
	return uint64(n.Int64), nil
}

// Resumed is what Resume found.
type Resumed struct {
	LostSteps      int // applied steps after the checkpoint, now marked lost (or rolled_back)
	Requeued       int // their samples, queued again (dropped after a rollback)
	LastStep       int64
	ReadyTurns     int
	QueuedSamples  int
	OpenTurns      int
	LastVersion    uint64
	CheckpointStep int64
}

// Resume reconciles the store with the checkpoint the daemon resumes from
// (the trainer's step count at that checkpoint): steps applied after it
// were lost with the process, so they are marked lost and their samples
// queued again, to be trained exactly once on the resumed weights. With
// rolledBack (the checkpoint is a rollback: those steps were undone on
// purpose) they are marked rolled_back and their samples dropped.
func (d *DB) Resume(checkpointStep int64, rolledBack bool) (Resumed, error) {
	r := Resumed{CheckpointStep: checkpointStep}
	sampleSet, stepStatus := "status = 'queued', step_id = NULL", "lost"
	if rolledBack {
		sampleSet, stepStatus = "status = 'dropped', reason = 'rolled_back'", "rolled_back"
	}
	err := d.enqueue("resume", true, true, func(tx *sql.Tx) error {
		res, err := tx.Exec("UPDATE samples SET "+sampleSet+" WHERE status = 'trained' AND step_id IN (SELECT id FROM steps WHERE status = 'applied' AND step > ?)", checkpointStep)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		r.Requeued = int(n)
		res, err = tx.Exec("UPDATE steps SET status = ? WHERE status = 'applied' AND step > ?", stepStatus, checkpointStep)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		r.LostSteps = int(n)
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("store: resume: %w", err)
	}
	q := func(query string, dst any) {
		if err == nil {
			err = d.db.QueryRow(query).Scan(dst)
		}
	}
	var last sql.NullInt64
	q("SELECT MAX(step) FROM steps WHERE status = 'applied'", &last)
	q("SELECT COUNT(*) FROM turns WHERE status = 'ready'", &r.ReadyTurns)
	q("SELECT COUNT(*) FROM turns WHERE status = 'open'", &r.OpenTurns)
	q("SELECT COUNT(*) FROM samples WHERE status = 'queued'", &r.QueuedSamples)
	r.LastStep = last.Int64
	if err == nil {
		r.LastVersion, err = d.LastVersion()
	}
	if r.Requeued > 0 && !rolledBack {
		d.met.samples.WithLabelValues("requeued").Add(float64(r.Requeued))
	}
	return r, err
}

// encodeBools stores flags one byte each; nil (and all false) as NULL.
func encodeBools(v []bool) []byte {
	if !slices.Contains(v, true) {
		return nil
	}
	b := make([]byte, len(v))
	for i, x := range v {
		if x {
			b[i] = 1
		}
	}
	return b
}

func decodeBools(b []byte) []bool {
	if b == nil {
		return nil
	}
	v := make([]bool, len(b))
	for i, x := range b {
		v[i] = x != 0
	}
	return v
}
