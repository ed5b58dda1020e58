package store

import (
	"fmt"
	"time"
)

// ThumbOutcome is what became of one accepted thumb (feedback with a
// thumb): the sample its turn got for the scoring generation the thumb
// started, and the training steps that went by meanwhile.
type ThumbOutcome struct {
	FeedbackID string
	TurnID     string
	Received   time.Time
	// Status is the sample's (trained, queued, dropped, nosignal), or,
	// when the turn has no sample of its current generation yet,
	// "unscored" (TurnStatus says where the turn is: ready, open, failed,
	// redacted; "" when it was forgotten).
	Status     string
	TurnStatus string
	Reason     string // a dropped sample's reason
	Source     string // the sample's reward source (feedback: the thumb decided)
	// StepsBefore is, for a trained sample, the number of training steps
	// that started after the thumb and before the step that trained it
	// (0: the first step that could take it did).
	StepsBefore int
	// StepsSince is, for a sample not trained, the number of training
	// steps that started after the thumb.
	StepsSince int
}

// stepTime is a recorded step: its row id and when it started (its
// record's time less its stats' seconds).
type stepTime struct {
	id    int64
	start int64 // unix milliseconds
}

// steps returns every recorded step (applied, lost or rolled back: each
// was a step the trainer took), oldest first.
func (d *DB) stepTimes() ([]stepTime, error) {
	rows, err := d.db.Query(`SELECT id, created - CAST(COALESCE(json_extract(stats, '$.seconds'), 0) * 1000 AS INTEGER) FROM steps ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: steps: %w", err)
	}
	defer rows.Close()
	var out []stepTime
	for rows.Next() {
		var s stepTime
		if err := rows.Scan(&s.id, &s.start); err != nil {
			return nil, fmt.Errorf("store: steps: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// ThumbOutcomes returns the outcome of every accepted thumb, oldest
// first: whether its turn's sample trained, and within how many steps
// (steps that started before the thumb could not have taken it and are
// not counted).
func (d *DB) ThumbOutcomes() ([]ThumbOutcome, error) {
	steps, err := d.stepTimes()
	if err != nil {
		return nil, err
	}
	rows, err := d.db.Query(`SELECT f.id, f.turn_id, f.received, COALESCE(t.status, ''), COALESCE(s.status, ''), COALESCE(s.reason, ''),
		COALESCE(s.source, ''), COALESCE(s.step_id, 0)
		FROM feedback f LEFT JOIN turns t ON t.id = f.turn_id
		LEFT JOIN samples s ON s.turn_id = f.turn_id AND s.gen = t.gen AND s.kind != ?
		WHERE f.thumb != 0 ORDER BY f.received, f.id`, KindRollout)
	if err != nil {
		return nil, fmt.Errorf("store: thumb outcomes: %w", err)
	}
	defer rows.Close()
	var out []ThumbOutcome
	for rows.Next() {
		var o ThumbOutcome
		var received, stepID int64
		if err := rows.Scan(&o.FeedbackID, &o.TurnID, &received, &o.TurnStatus, &o.Status, &o.Reason, &o.Source, &stepID); err != nil {
			return nil, fmt.Errorf("store: thumb outcomes: %w", err)
		}
		o.Received = time.UnixMilli(received)
		if o.Status == "" {
			o.Status = "unscored"
		}
		n := 0
		for _, s := range steps {
			if o.Status == SampleTrained && s.id >= stepID {
				break
			}
			if s.start >= received {
				n++
			}
		}
		if o.Status == SampleTrained {
			o.StepsBefore = n
		} else {
			o.StepsSince = n
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// JudgedSample is a turn's sample whose scoring called the judge (votes,
// or a hint that the hint judge wrote), as the store keeps it.
type JudgedSample struct {
	ID      string
	Version uint64    // the version that generated the turn
	Created time.Time // when its score was stored
	Source  string
	Hint    bool
	Status  string
	Reason  string
}

// JudgedSamples returns the turns' samples (not the hinted rollouts) that
// the judge scored (source judge or judge_failed) or wrote a hint for,
// oldest first. A hint judge that wrote no hint leaves no trace here.
func (d *DB) JudgedSamples() ([]JudgedSample, error) {
	rows, err := d.db.Query(`SELECT id, version, created, source, hint != '', status, reason FROM samples
		WHERE kind != ? AND (source IN ('judge', 'judge_failed') OR hint != '') ORDER BY created, id`, KindRollout)
	if err != nil {
		return nil, fmt.Errorf("store: judged samples: %w", err)
	}
	defer rows.Close()
	var out []JudgedSample
	for rows.Next() {
		var s JudgedSample
		var version, created int64
		if err := rows.Scan(&s.ID, &version, &created, &s.Source, &s.Hint, &s.Status, &s.Reason); err != nil {
			return nil, fmt.Errorf("store: judged samples: %w", err)
		}
		s.Version, s.Created = uint64(version), time.UnixMilli(created)
		out = append(out, s)
	}
	return out, rows.Err()
}
