package corpus

import (
	"fmt"
	"math/rand/v2"

	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// Held-out cases for the evaluation of the judge, drawn as the corpus
// draws its training cases: what pretrain's evaluator and the benches ask
// the vote and hint judges, with the answer each should give.

// User is a user message.
func User(s string) tokenizer.Message { return user(s) }

// HintCases draws n corrections of a reply's form as the hint judge sees
// them, each with the hint it should write (the instruction's canonical
// phrasing).
func HintCases(rng *rand.Rand, n int) (exs []Example, want []string) {
	for len(exs) < n {
		c := genJudgeCase(rng)
		if c.class != evFormFix {
			continue
		}
		exs = append(exs, Example{Messages: reward.HintMessages(&c.turn, c.feedback, reward.DefaultLimits())})
		want = append(want, c.hint)
	}
	return exs, want
}

// SessionCases draws n session turns for the vote judge, then n corrected
// ones for the hint judge, the corrections in held-out phrasings. want[i]
// is the vote ("1", "0", "-1") for i < n and the hint after.
func SessionCases(rng *rand.Rand, n int) (exs []Example, want []string) {
	for range n {
		c := genSessionCase(rng, instruct.HeldOut)
		exs = append(exs, Example{Messages: reward.JudgeMessages(&c.turn, "", reward.DefaultLimits())})
		want = append(want, fmt.Sprint(evidence[c.class].vote))
	}
	for len(exs) < 2*n {
		c := genSessionCase(rng, instruct.HeldOut)
		if c.class != evFormFix {
			continue
		}
		exs = append(exs, Example{Messages: reward.HintMessages(&c.turn, "", reward.DefaultLimits())})
		want = append(want, c.hint)
	}
	return exs, want
}
