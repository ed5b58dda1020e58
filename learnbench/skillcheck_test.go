package learnbench

import (
	"strings"
	"testing"

	"github.com/clawrl/clawrl/rollout"
)

// A guard skill probe passes when the reply is right and finished: a right
// answer followed by a run-on to max_tokens fails.
func TestGuardProbePasses(t *testing.T) {
	june := Probe{Check: func(text, tool string) bool { return strings.Contains(text, "June") }}
	weather := Probe{Check: func(text, tool string) bool { return tool == "get_weather" }}
	for _, tc := range []struct {
		name   string
		p      Probe
		text   string
		finish rollout.FinishReason
		want   bool
	}{
		{"right, stopped", june, "The 6th month is June.", rollout.FinishStop, true},
		{"wrong, stopped", june, "The 6th month is March.", rollout.FinishStop, false},
		{"right, then run on to the limit", june, "The 6th month is June.\n\n-- Alice\n\n-- Alice\n\n-- Alice", rollout.FinishLength, false},
		{"tool call, stopped", weather, `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`, rollout.FinishStop, true},
		{"no tool call", weather, "It is sunny.", rollout.FinishStop, false},
	} {
		if got := probePasses(tc.p, tc.text, tc.finish); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
