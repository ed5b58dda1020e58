package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// History is what the dashboard plots: the newest training steps (with
// the trainer's numbers for each), weight versions (a rollback's note says
// why) and scored turns, oldest first. It holds no conversation text.
type History struct {
	Steps    []StepPoint    `json:"steps"`
	Versions []VersionPoint `json:"versions"`
	Rewards  []RewardPoint  `json:"rewards"`
}

// StepPoint is one optimizer step.
type StepPoint struct {
	Step    int64     `json:"step"`
	Version uint64    `json:"version"`
	Time    time.Time `json:"time"`
	Loss    float64   `json:"loss"`
	Status  string    `json:"status"` // applied, lost (a crash) or rolled_back
	Samples int       `json:"samples"`
	// Rollouts counts the hinted-rollout samples among them.
	Rollouts int `json:"rollouts"`
	// Reward is the mean reward of its samples of users' turns (not the
	// hinted rollouts); nil when it trained none.
	Reward *float64 `json:"reward,omitempty"`
	// Stats are the trainer's numbers for the step (Step.Stats); empty
	// for a step recorded before they were kept.
	Stats map[string]float64 `json:"stats"`
}

// VersionPoint is one weight version.
type VersionPoint struct {
	Number uint64    `json:"number"`
	Parent uint64    `json:"parent"`
	Step   int64     `json:"step"`
	Time   time.Time `json:"time"`
	Note   string    `json:"note,omitempty"`
}

// RewardPoint is the reward of one scored user turn (its latest scoring).
type RewardPoint struct {
	Time    time.Time `json:"time"`
	Reward  int       `json:"reward"`
	Source  string    `json:"source,omitempty"`
	Version uint64    `json:"version"`
}

// The History queries: each takes the limit; the indexes samples_step and
// samples_created keep them from reading every sample.
const (
	historySteps = `SELECT st.step, st.version, st.created, st.loss, st.status, st.stats,
			COUNT(s.id), COALESCE(SUM(s.kind = 'rollout'), 0), AVG(CASE WHEN s.kind != 'rollout' THEN s.reward END)
		FROM (SELECT * FROM steps ORDER BY id DESC LIMIT ?) st LEFT JOIN samples s ON s.step_id = st.id
		GROUP BY st.id ORDER BY st.id DESC`
	historyRewards = `SELECT s.created, s.reward, s.source, s.version FROM samples s JOIN turns t ON t.id = s.turn_id
		WHERE s.kind != 'rollout' AND s.gen = t.gen ORDER BY s.created DESC, s.id DESC LIMIT ?`
)

// History returns the newest limit steps, versions and scored turns
// (limit ≤ 0: 200 each).
func (d *DB) History(limit int) (History, error) {
	if limit <= 0 {
		limit = 200
	}
	h := History{Steps: []StepPoint{}, Versions: []VersionPoint{}, Rewards: []RewardPoint{}}
	query := func(what, q string, scan func(*sql.Rows) error) error {
		rows, err := d.db.Query(q, limit)
		if err != nil {
			return fmt.Errorf("store: history: %s: %w", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return fmt.Errorf("store: history: %s: %w", what, err)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("store: history: %s: %w", what, err)
		}
		return nil
	}
	err := query("steps", historySteps, func(rows *sql.Rows) error {
		var p StepPoint
		var created int64
		var reward sql.NullFloat64
		var stats string
		if err := rows.Scan(&p.Step, &p.Version, &created, &p.Loss, &p.Status, &stats, &p.Samples, &p.Rollouts, &reward); err != nil {
			return err
		}
		p.Time = time.UnixMilli(created).UTC()
		if json.Unmarshal([]byte(stats), &p.Stats) != nil || p.Stats == nil {
			p.Stats = map[string]float64{} // unreadable: shown as none rather than hiding the history
		}
		if reward.Valid {
			p.Reward = &reward.Float64
		}
		h.Steps = append(h.Steps, p)
		return nil
	})
	if err != nil {
		return h, err
	}
	err = query("versions", "SELECT number, parent, step, created, note FROM versions ORDER BY number DESC LIMIT ?", func(rows *sql.Rows) error {
		var p VersionPoint
		var created int64
		if err := rows.Scan(&p.Number, &p.Parent, &p.Step, &created, &p.Note); err != nil {
			return err
		}
		p.Time = time.UnixMilli(created).UTC()
		h.Versions = append(h.Versions, p)
		return nil
	})
	if err != nil {
		return h, err
	}
	err = query("rewards", historyRewards, func(rows *sql.Rows) error {
		var p RewardPoint
		var created int64
		if err := rows.Scan(&created, &p.Reward, &p.Source, &p.Version); err != nil {
			return err
		}
		p.Time = time.UnixMilli(created).UTC()
		h.Rewards = append(h.Rewards, p)
		return nil
	})
	if err != nil {
		return h, err
	}
	reverse(h.Steps)
	reverse(h.Versions)
	reverse(h.Rewards)
	return h, nil
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}
