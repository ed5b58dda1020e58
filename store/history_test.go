package store

import (
	"fmt"
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
	if err := db.CommitStep(Step{Step: 1, Version: 4, Parent: 3, Loss: 0.5, Samples: ids("r0/0", "r1/0")}); err != nil {
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
