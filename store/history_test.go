package store

import (
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/tokenizer"
)

// TestHistory: steps carry their samples' mean reward (users' turns only,
// not hinted rollouts), versions their notes, rewards the latest scoring
// generation of each turn; all oldest first and bounded by the limit.
func TestHistory(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	if h, err := db.History(0); err != nil || len(h.Steps)+len(h.Versions)+len(h.Rewards) != 0 || h.Steps == nil {
		t.Fatalf("empty store: %+v, %v", h, err)
	}
	rewards := []int{1, -1, 1, 1}
	for i, r := range rewards {
		turn := testTurn(fmt.Sprintf("r%d", i), "s", i, "q")
		record(t, db, turn, []tokenizer.Message{{Role: "user", Content: "ok"}})
		s := Sample{TurnID: TurnID(turn.ResponseID, 0), Version: 3, Kind: "binary", Reward: r, Source: "judge"}
		if i == 3 {
			s.Kind, s.Hint = "both", "Be brief."
			s.Rollouts = []Rollout{{Tokens: []int32{7, 8}, Teacher: []float32{-1, -2}, Version: 3}}
		}
		if err := db.AddSample(s); err != nil {
			t.Fatal(err)
		}
	}
	q, _, err := db.Queued(10)
	if err != nil || len(q) != 5 {
		t.Fatalf("queued %d, %v", len(q), err)
	}
	ids := func(want ...string) []string {
		var out []string
		for _, s := range q {
			for _, w := range want {
				if s.TurnID == w {
					out = append(out, s.ID)
				}
			}
		}
		return out
	}
	db.RecordVersion(3, 0, 0, "base: m")
	stats := map[string]float64{"kl": 0.012, "step_kl": 0.03, "entropy": 2.5, "grad_norm": 1.75, "lr": 1e-5, "samples": 2, "nan": math.NaN(), "inf": math.Inf(1)}
	if err := db.CommitStep(Step{Step: 1, Version: 4, Parent: 3, Loss: 0.5, Samples: ids("r0/0", "r1/0"), Stats: stats}); err != nil {
		t.Fatal(err)
	}
	if err := db.CommitStep(Step{Step: 2, Version: 5, Parent: 4, Loss: 0.25, Samples: ids("r2/0", "r3/0")}); err != nil {
		t.Fatal(err)
	}
	db.RecordVersion(6, 4, 1, "rollback to 4")
	h, err := db.History(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Steps) != 2 {
		t.Fatalf("steps %+v", h.Steps)
	}
	s1, s2 := h.Steps[0], h.Steps[1]
	if s1.Step != 1 || s1.Version != 4 || s1.Loss != 0.5 || s1.Samples != 2 || s1.Rollouts != 0 || s1.Reward == nil || *s1.Reward != 0 || s1.Status != "applied" {
		t.Errorf("step 1 %+v", s1)
	}
	if s2.Step != 2 || s2.Samples != 3 || s2.Rollouts != 1 || s2.Reward == nil || *s2.Reward != 1 {
		t.Errorf("step 2 %+v (want 3 samples, 1 rollout, mean reward 1 over the users' turns)", s2)
	}
	// The trainer's numbers come back as they went in, less what JSON
	// cannot hold; a step recorded without them has none (not nil).
	delete(stats, "nan")
	delete(stats, "inf")
	if !maps.Equal(s1.Stats, stats) || s2.Stats == nil || len(s2.Stats) != 0 {
		t.Errorf("stats: step 1 %v, want %v; step 2 %v, want {}", s1.Stats, stats, s2.Stats)
	}
	if len(h.Versions) != 4 || h.Versions[0].Number != 3 || h.Versions[3].Number != 6 || h.Versions[3].Note != "rollback to 4" || h.Versions[3].Parent != 4 {
		t.Errorf("versions %+v", h.Versions)
	}
	if len(h.Rewards) != 4 {
		t.Fatalf("rewards %+v", h.Rewards)
	}
	for i, r := range h.Rewards {
		if r.Reward != rewards[i] || r.Source != "judge" || r.Version != 3 {
			t.Errorf("reward %d: %+v, want %d", i, r, rewards[i])
		}
	}
	if h, _ := db.History(1); len(h.Steps) != 1 || h.Steps[0].Step != 2 || len(h.Versions) != 1 || h.Versions[0].Number != 6 || len(h.Rewards) != 1 {
		t.Errorf("limit 1: %+v", h)
	}
}

// fillHistory writes n scored turns with a sample each, trained four to a
// step, in three statements.
func fillHistory(t testing.TB, db *DB, n int) {
	t.Helper()
	if _, err := db.SQL().Exec(`WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?)
		INSERT INTO turns(id, session_id, idx, choice, response_id, version, status, received, completed, body, prompt, response, logprobs)
		SELECT 'r' || i || '/0', 's' || (i / 8), i % 8, 0, 'r' || i, 1, 'scored', i, i, '{}', x'', x'', x'' FROM k`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().Exec(`WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?)
		INSERT INTO steps(id, step, version, created, samples, loss, status) SELECT i + 1, i + 1, i + 2, i * 4, '[]', 0.5, 'applied' FROM k`, n/4); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SQL().Exec(`WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i + 1 < ?)
		INSERT INTO samples(id, turn_id, gen, created, version, kind, reward, source, votes, hint, status, step_id)
		SELECT 'r' || i || '/0#0', 'r' || i || '/0', 0, i, 1, 'binary', (i % 3) - 1, 'judge', '[]', '', 'trained', i / 4 + 1 FROM k`, n); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryUsesIndexes: on a large store the dashboard's queries walk
// indexes, not every sample (the page asks every 2 s).
func TestHistoryUsesIndexes(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	fillHistory(t, db, 4000)
	h, err := db.History(100)
	if err != nil || len(h.Steps) != 100 || h.Steps[99].Step != 1000 || h.Steps[99].Samples != 4 || len(h.Rewards) != 100 || h.Rewards[99].Time.UnixMilli() != 3999 {
		t.Fatalf("history of a large store: %d steps, %d rewards, %v", len(h.Steps), len(h.Rewards), err)
	}
	plan := func(q string) string {
		rows, err := db.SQL().Query("EXPLAIN QUERY PLAN "+q, 100)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var id, parent, notused int
			var detail string
			rows.Scan(&id, &parent, &notused, &detail)
			b.WriteString(detail + "; ")
		}
		return b.String()
	}
	for _, q := range []struct{ query, index string }{{historySteps, "samples_step"}, {historyRewards, "samples_created"}} {
		if p := plan(q.query); !strings.Contains(p, q.index) {
			t.Errorf("query plan does not use %s: %s", q.index, p)
		}
	}
}

// BenchmarkHistory is one dashboard poll on a store of 100,000 scored
// turns and 25,000 steps.
func BenchmarkHistory(b *testing.B) {
	db := open(b, b.TempDir(), Options{})
	fillHistory(b, db, 100000)
	b.ResetTimer()
	for b.Loop() {
		if _, err := db.History(200); err != nil {
			b.Fatal(err)
		}
	}
}
