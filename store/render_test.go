package store

import (
	"testing"

	"github.com/clawrl/clawrl/tokenizer"
)

// TestRenderSpecKept: a turn's template variables and prefill (with its
// messages and tools, the render spec the teacher renders from) come back
// with it when it is ready to score.
func TestRenderSpecKept(t *testing.T) {
	db := open(t, t.TempDir(), Options{})
	turn := testTurn("r1", "s", 0, "weather?")
	turn.TemplateVars = map[string]any{"enable_thinking": false, "n": 3}
	turn.Prefill = "<tool_call>\n{\"name\": \""
	record(t, db, turn, []tokenizer.Message{{Role: "user", Content: "thanks"}})
	ready, err := db.ReadyTurns(1, nil)
	if err != nil || len(ready) != 1 {
		t.Fatalf("ready %v, %v", ready, err)
	}
	r := ready[0]
	if r.Prefill != turn.Prefill || r.TemplateVars["enable_thinking"] != false || r.TemplateVars["n"] != float64(3) {
		t.Errorf("render spec back: prefill %q, vars %v", r.Prefill, r.TemplateVars)
	}
}
