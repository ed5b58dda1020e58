package learnbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/tokenizer"
)

// Base rates: what the served model does with a preference before any
// training. Reinforcement from thumbs can only select what the model
// sometimes does, so the share of sampled replies that already satisfy a
// preference says whether a thumbs-only user can teach it; a preference
// the model follows when told in a system prompt is one that words can
// teach, if the judge reads them.

// BaseRate is one preference's base rates, each a share of N replies to
// the simulated user's questions, sent with X-No-Train.
type BaseRate struct {
	Pref string `json:"pref"`
	N    int    `json:"n"`
	// Sampled is keyed by temperature ("1.0", "0.7"): replies sampled with
	// no instruction that satisfy the preference (and end before
	// max_tokens).
	Sampled map[string]float64 `json:"sampled"`
	// Needed: replies sampled at temperature 1 with no instruction that
	// satisfy the preference, on N questions of the user's split whose
	// plain answer does not (the kind of question every preference probe
	// asks). A reply that satisfies lowercase because it is "12." says
	// nothing about writing "the capital of france is paris."; this rate
	// is what thumbs can select where the probes look.
	Needed float64 `json:"sampled_where_needed"`
	// SystemHeldOut and SystemTrain: greedy replies with the preference in
	// the system prompt, in the user's held-out instruction sentences
	// (those its corrections use) and in the corpus's canonical one.
	SystemHeldOut float64 `json:"system_held_out"`
	SystemTrain   float64 `json:"system_train"`
}

// BaseRates measures pref's base rates on n of the user's questions
// (deterministic for seed) at each sampling temperature. Requests run a
// few at a time, so that the daemon batches them.
func BaseRates(ctx context.Context, c *Client, pref instruct.Constraint, n int, temps []float64, maxTokens int, seed uint64) (BaseRate, error) {
	if maxTokens <= 0 {
		maxTokens = 96
	}
	u := NewUser(pref, instruct.HeldOut, seed)
	qs := make([]string, n)
	for i := range qs {
		qs[i] = u.Question()
	}
	needed, err := neededQuestions(pref, n, seed)
	if err != nil {
		return BaseRate{}, err
	}
	held, train := pref.Phrasings(instruct.HeldOut), pref.Instruction(nil, instruct.Train)
	type job struct {
		key, system string
		q           int
		temp        float64
		needed      bool
	}
	var jobs []job
	for i := range needed {
		jobs = append(jobs, job{key: "needed", q: i, temp: 1, needed: true})
	}
	for i := range qs {
		for _, t := range temps {
			jobs = append(jobs, job{key: tempKey(t), q: i, temp: t})
		}
		jobs = append(jobs, job{key: "held", system: held[i%len(held)], q: i}, job{key: "train", system: train, q: i})
	}
	pass := map[string]int{}
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			q := qs[j.q]
			if j.needed {
				q = needed[j.q]
			}
			r, err := c.Chat(ctx, ChatRequest{System: j.system, Messages: []tokenizer.Message{{Role: "user", Content: q}},
				NoTrain: true, Temperature: j.temp, MaxTokens: maxTokens, Seed: seed*7919 + uint64(i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if first == nil {
					first = err
				}
			case !r.Cut && pref.Check(r.Text):
				pass[j.key]++
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return BaseRate{}, fmt.Errorf("learnbench: base rate of %s: %w", pref, first)
	}
	br := BaseRate{Pref: pref.String(), N: n, Sampled: map[string]float64{}}
	for _, t := range temps {
		br.Sampled[tempKey(t)] = float64(pass[tempKey(t)]) / float64(n)
	}
	br.SystemHeldOut, br.SystemTrain = float64(pass["held"])/float64(n), float64(pass["train"])/float64(n)
	br.Needed = float64(pass["needed"]) / float64(n)
	return br, nil
}

// neededQuestions returns n questions of the user's (training) split
// whose plain answer violates pref and can be made to follow it: the
// probes' kind of question (see violates), deterministic for seed.
func neededQuestions(pref instruct.Constraint, n int, seed uint64) ([]string, error) {
	r := rand.New(rand.NewPCG(seed, 0x4eed))
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 200*n+1000 {
			return nil, fmt.Errorf("learnbench: only %d of %d questions' answers violate %s", len(out), n, pref)
		}
		q, a, _ := corpus.PlainQuestion(r, false)
		if violates(pref, a) {
			out = append(out, q)
		}
	}
	return out, nil
}

func tempKey(t float64) string { return strconv.FormatFloat(t, 'f', 1, 64) }

// Thumbs-only learnability and system-prompt following, as the issue's
// goals read them: a base rate of roughly 10-60% when sampling at
// temperature 1, and a preference followed (greedy, at least half the
// replies, and at least 25 points above the base rate: told, not met by
// chance) when the system prompt states it canonically, as the judge's
// hint states it to the teacher when the judge reads the user right.
const (
	BaseRateLow, BaseRateHigh = 0.10, 0.60
	FollowsWhenTold           = 0.5
	ToldAboveBase             = 0.25
)

// ThumbsGoal reports whether r's preference falls under the thumbs-only
// goal (a base rate at temperature 1 in [BaseRateLow, BaseRateHigh]).
func (r BaseRate) ThumbsGoal() bool {
	v, ok := r.Sampled["1.0"]
	return ok && v >= BaseRateLow-1e-9 && v <= BaseRateHigh+1e-9
}

// WordedGoal reports whether r's preference falls under the worded goal:
// followed when the system prompt states it (canonically).
func (r BaseRate) WordedGoal() bool {
	return r.SystemTrain >= FollowsWhenTold-1e-9 && r.SystemTrain-r.Sampled["1.0"] >= ToldAboveBase-1e-9
}

// BaseRateTable writes base rates as a table, with the goal each row
// falls under.
func BaseRateTable(w io.Writer, temps []float64, rates []BaseRate) {
	var b strings.Builder
	b.WriteString("| preference | ")
	for _, t := range temps {
		fmt.Fprintf(&b, "sampled, T=%s | ", tempKey(t))
	}
	b.WriteString("sampled, T=1.0, where needed | system prompt, held-out wording (greedy) | system prompt, canonical (greedy) | thumbs-only goal | worded goal |\n|---|")
	for range temps {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|---|\n")
	for _, r := range rates {
		fmt.Fprintf(&b, "| %s | ", r.Pref)
		for _, t := range temps {
			fmt.Fprintf(&b, "%.2f | ", r.Sampled[tempKey(t)])
		}
		thumbs, words := "-", "-"
		if r.ThumbsGoal() {
			thumbs = "yes"
		}
		if r.WordedGoal() {
			words = "yes"
		}
		fmt.Fprintf(&b, "%.2f | %.2f | %.2f | %s | %s |\n", r.Needed, r.SystemHeldOut, r.SystemTrain, thumbs, words)
	}
	fmt.Fprintf(&b, "\nn = %d questions per cell; where needed: questions whose plain answer violates the preference, as every probe's does; thumbs-only goal: base rate at T=1.0 in [%.2f, %.2f]; worded goal: followed with the canonical instruction in the system prompt at least %.2f, and %.2f above the base rate\n",
		firstN(rates), BaseRateLow, BaseRateHigh, FollowsWhenTold, ToldAboveBase)
	io.WriteString(w, b.String())
}

func firstN(rs []BaseRate) int {
	if len(rs) == 0 {
		return 0
	}
	return rs[0].N
}
