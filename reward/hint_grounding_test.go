package reward_test

// Hint grounding measured on the held-out corrections of package instruct:
// the bundled hint judge reads turns answered as `clawrl bench learn`'s
// user answers them (a correction in held-out words, or praise, mostly
// followed by the next question), and each hint it writes is graded right
// when it states the user's preference. A grounding rule is a filter on
// those hints: its precision is the share of the hints it passes that are
// right, its recall the share of right hints it passes.
//
// CLAWRL_HINT_SWEEP=1 runs the bundled judge and reports the rules
// (CLAWRL_HINT_SWEEP_WRITE=1 also rewrites testdata/heldout_hints.json);
// TestHintGroundingHeldOut grades the rules on the recorded hints, so the
// rule is pinned without the model.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// recordedHint is one hint vote of the bundled judge on a held-out turn.
type recordedHint struct {
	Pref string `json:"pref"`
	// Turn numbers the judged turn (the hints of one turn share it).
	Turn       int    `json:"turn"`
	Correction bool   `json:"correction"` // the user corrected (else praised)
	Question   string `json:"question"`   // what the user asked
	Reply      string `json:"reply"`      // the reply judged
	Next       string `json:"next"`       // the user's next message
	Hint       string `json:"hint"`
	Right      bool   `json:"right"` // the hint states the preference
	// Useful: the hint is an instruction of the catalog (instruct.Identify)
	// that, applied to the reply, satisfies the preference (an end-word
	// hint for an include-word preference is useful, not right).
	Useful bool `json:"useful"`
}

const hintsFile = "testdata/heldout_hints.json"

// hintTurns draws n turns per kind of instruct's catalog, answered as bench
// learn's user answers: three in four corrected in held-out words (the
// reply does not follow the preference), the rest praised (it does); three
// in four followed by the next question after a blank line.
func hintTurns(n int, seed uint64) []recordedHint {
	r := rand.New(rand.NewPCG(seed, 0x41))
	var out []recordedHint
	for _, k := range instruct.Kinds() {
		for i := range n {
			pref := instruct.Random(r, k, instruct.Train)
			var h recordedHint
			for range 200 {
				q, a, _ := corpus.PlainQuestion(r, false)
				h = recordedHint{Pref: pref.String(), Turn: len(out), Correction: i%4 != 3, Question: q}
				if h.Correction {
					if pref.Check(a) {
						continue
					}
					h.Reply, h.Next = a, pref.Correction(r, instruct.HeldOut)
				} else {
					fixed, ok := pref.Apply(a)
					if !ok {
						continue
					}
					h.Reply, h.Next = fixed, instruct.Praise(r)
				}
				break
			}
			if i%4 != 1 {
				q, _, _ := corpus.PlainQuestion(r, false)
				h.Next += "\n\n" + q
			}
			out = append(out, h)
		}
	}
	return out
}

// hintStates reports whether hint states pref: it is one of pref's
// instruction sentences (any split, as a standing preference too), words
// and case aside.
func hintStates(hint string, pref instruct.Constraint) bool {
	h := normHint(hint)
	for _, split := range []instruct.Split{instruct.Train, instruct.HeldOut} {
		for _, p := range pref.Phrasings(split) {
			if n := normHint(p); h == n || h == normHint(instruct.Standing(p)) {
				return true
			}
		}
	}
	return false
}

// hintUseful reports whether following hint would make reply satisfy
// pref: the hint is a catalog instruction, and the reply made to follow it
// follows pref.
func hintUseful(hint, reply string, pref instruct.Constraint) bool {
	c, ok := instruct.Identify(hint)
	if !ok {
		return false
	}
	if c.Check(reply) {
		return pref.Check(reply)
	}
	fixed, ok := c.Apply(reply)
	return ok && pref.Check(fixed)
}

func normHint(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '-'
	}), " ")
}

// TestBundledHintSweep runs the bundled hint judge on held-out turns and
// reports every grounding rule's precision and recall.
func TestBundledHintSweep(t *testing.T) {
	if os.Getenv("CLAWRL_HINT_SWEEP") == "" {
		t.Skip("CLAWRL_HINT_SWEEP=1 runs the bundled hint judge")
	}
	n, seed := 12, uint64(1)
	if v, err := strconv.Atoi(os.Getenv("CLAWRL_HINT_TURNS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.ParseUint(os.Getenv("CLAWRL_HINT_SEED"), 10, 64); err == nil {
		seed = v
	}
	dir, err := bundled.Dir()
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Defaults()
	cfg.Model.KVCacheMB = 512
	cfg.Rollout.MaxBatch, cfg.Rollout.QueueSize = 32, 512
	e, err := engine.Open(cfg, engine.Options{Model: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	judge, err := reward.NewLocalBackend(e.Scheduler(), e.Tokenizer(), reward.LocalOptions{StopTokens: e.StopTokens(), Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	rc := reward.DefaultConfig()
	turns := hintTurns(n, seed)
	hints := make([][]recordedHint, len(turns))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	errs := make([]error, len(turns))
	for i, h := range turns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			turn := reward.Turn{Messages: []tokenizer.Message{{Role: "user", Content: h.Question}},
				Response: tokenizer.Message{Role: "assistant", Content: h.Reply}, NextState: []tokenizer.Message{{Role: "user", Content: h.Next}}}
			texts, err := judge.Complete(context.Background(), reward.Request{Messages: reward.HintMessages(&turn, "", rc.Limits),
				N: rc.HintVotes, Temperature: rc.Temperature, MaxTokens: rc.HintMaxTokens})
			if err != nil {
				errs[i] = err
				return
			}
			pref, _ := instruct.Parse(h.Pref)
			for _, text := range texts {
				if hv := reward.ParseHint(text); hv.Valid && hv.Accept && len([]rune(hv.Hint)) <= rc.MaxHintChars {
					x := h
					x.Hint, x.Right, x.Useful = hv.Hint, hintStates(hv.Hint, pref), hintUseful(hv.Hint, h.Reply, pref)
					hints[i] = append(hints[i], x)
				}
			}
		}()
	}
	wg.Wait()
	var all []recordedHint
	for i := range turns {
		if errs[i] != nil {
			t.Fatalf("turn %d: %v", i, errs[i])
		}
		all = append(all, hints[i]...)
	}
	t.Logf("%d turns (%d per kind, seed %d), %d hints written", len(turns), n, seed, len(all))
	for _, rule := range groundingRules {
		logRule(t, rule, all)
	}
	if os.Getenv("CLAWRL_HINT_VERBOSE") != "" {
		for _, h := range all {
			if !h.Right {
				t.Logf("wrong (%s, kept %v): %q after %q", h.Pref, groundingRules[2].keep(h.Hint, h.Next), h.Hint, h.Next)
			}
		}
	}
	if os.Getenv("CLAWRL_HINT_SWEEP_WRITE") != "" {
		b, err := json.MarshalIndent(all, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.FromSlash(hintsFile), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// groundingRule is a hint filter under measurement.
type groundingRule struct {
	name string
	keep func(hint, evidence string) bool
}

var groundingRules = []groundingRule{
	{"none (every hint)", func(string, string) bool { return true }},
	{"v1: any one content word shared", groundedV1},
	{"reward.Grounded", func(hint, next string) bool {
		return reward.Grounded(hint, reward.HintEvidence(&reward.Turn{NextState: []tokenizer.Message{{Role: "user", Content: next}}}, ""))
	}},
}

// grading is a rule's outcome on recorded hints: per hint vote, and per
// turn (the hint the scorer keeps: the longest of the turn's hints that
// pass).
type grading struct {
	hints, right, passed, passedRight           int
	useful, passedUseful                        int
	turnsRight, turnsKept, turnsKeptRight, nTur int
	wrongKept                                   []recordedHint
}

func (g grading) precision() float64 { return ratio(g.passedRight, g.passed) }
func (g grading) recall() float64    { return ratio(g.passedRight, g.right) }
func (g grading) turnPrecision() float64 {
	return ratio(g.turnsKeptRight, g.turnsKept)
}
func (g grading) turnRecall() float64 { return ratio(g.turnsKeptRight, g.turnsRight) }

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func grade(rule groundingRule, hs []recordedHint) grading {
	var g grading
	byTurn := map[int][]recordedHint{}
	var order []int
	for _, h := range hs {
		g.hints++
		if h.Right {
			g.right++
		}
		if h.Useful {
			g.useful++
		}
		if _, ok := byTurn[h.Turn]; !ok {
			order = append(order, h.Turn)
		}
		byTurn[h.Turn] = append(byTurn[h.Turn], h)
		if rule.keep(h.Hint, h.Next) {
			g.passed++
			if h.Useful {
				g.passedUseful++
			}
			if h.Right {
				g.passedRight++
			} else {
				g.wrongKept = append(g.wrongKept, h)
			}
		}
	}
	for _, turn := range order {
		g.nTur++
		var kept []string
		anyRight := false
		for _, h := range byTurn[turn] {
			anyRight = anyRight || h.Right
			if rule.keep(h.Hint, h.Next) {
				kept = append(kept, h.Hint)
			}
		}
		if anyRight {
			g.turnsRight++
		}
		if sel := reward.SelectHint(kept, reward.HintLongest); sel != "" {
			g.turnsKept++
			for _, h := range byTurn[turn] {
				if h.Hint == sel && h.Right {
					g.turnsKeptRight++
					break
				}
			}
		}
	}
	return g
}

func logRule(t *testing.T, rule groundingRule, hs []recordedHint) grading {
	t.Helper()
	g := grade(rule, hs)
	t.Logf("%-34s hints: precision %.3f (%d/%d), recall %.3f (%d/%d); useful: precision %.3f (%d/%d), recall %.3f (%d/%d); turns: precision %.3f (%d/%d), recall %.3f (%d/%d)",
		rule.name, g.precision(), g.passedRight, g.passed, g.recall(), g.passedRight, g.right,
		ratio(g.passedUseful, g.passed), g.passedUseful, g.passed, ratio(g.passedUseful, g.useful), g.passedUseful, g.useful,
		g.turnPrecision(), g.turnsKeptRight, g.turnsKept, g.turnRecall(), g.turnsKeptRight, g.turnsRight)
	return g
}

// groundedV1 is the rule before 2026-12-06: a hint passes when any one of
// its content words (four letters or more, not a function word) shares its
// first five letters with a word of the evidence, the whole of the user's
// next message included.
func groundedV1(hint, evidence string) bool {
	stems := map[string]bool{}
	for _, w := range v1Words(evidence) {
		stems[v1Stem(w)] = true
	}
	for _, w := range v1Words(hint) {
		if stems[v1Stem(w)] {
			return true
		}
	}
	return false
}

func v1Stem(w string) string {
	if r := []rune(w); len(r) > 5 {
		return string(r[:5])
	}
	return w
}

var v1Function = strings.Fields("your with that this have from they what when will would should could about there their which before after " +
	"answer answers reply replies response responses user assistant please every always make sure more than only also into them then " +
	"does were been just like some each next time wants want")

func v1Words(s string) []string {
	fn := map[string]bool{}
	for _, w := range v1Function {
		fn[w] = true
	}
	var out []string
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len([]rune(w)) >= 4 && !fn[w] {
			out = append(out, w)
		}
	}
	return out
}

// TestHintGroundingHeldOut grades the grounding rules on the bundled
// judge's recorded hints (testdata/heldout_hints.json, written by the
// sweep above): reward.Grounded must keep fewer wrong hints than the rule
// before it, at a precision of at least 0.9, and keep most right ones.
func TestHintGroundingHeldOut(t *testing.T) {
	b, err := os.ReadFile(filepath.FromSlash(hintsFile))
	if err != nil {
		t.Fatal(err)
	}
	var hs []recordedHint
	if err := json.Unmarshal(b, &hs); err != nil {
		t.Fatal(err)
	}
	if len(hs) < 200 {
		t.Fatalf("%d recorded hints; want a sweep's worth", len(hs))
	}
	// The labels are the catalog's: recompute them.
	for i, h := range hs {
		pref, err := instruct.Parse(h.Pref)
		if err != nil {
			t.Fatal(err)
		}
		if got := hintStates(h.Hint, pref); got != h.Right {
			t.Errorf("hint %d %q for %s: recorded right=%v, graded %v", i, h.Hint, h.Pref, h.Right, got)
		}
	}
	gs := map[string]grading{}
	for _, rule := range groundingRules {
		gs[rule.name] = logRule(t, rule, hs)
	}
	v1, now := gs["v1: any one content word shared"], gs["reward.Grounded"]
	if now.precision() < v1.precision()+0.05 {
		t.Errorf("reward.Grounded keeps hints at precision %.3f, the rule before it %.3f; want 5 points more", now.precision(), v1.precision())
	}
	if now.passed-now.passedRight >= v1.passed-v1.passedRight {
		t.Errorf("reward.Grounded keeps %d wrong hints, the rule before it %d; want fewer", now.passed-now.passedRight, v1.passed-v1.passedRight)
	}
	if now.recall() < 0.9 {
		t.Errorf("reward.Grounded keeps %.3f of the right hints; want at least 0.9", now.recall())
	}
	byKind(t, groundingRules[1], hs)
	byKind(t, groundingRules[2], hs)
	if testing.Verbose() {
		for _, h := range now.wrongKept {
			t.Logf("kept, wrong (%s): %q after %q", h.Pref, h.Hint, fmt.Sprintf("%.80s", h.Next))
		}
	}
}

// byKind logs, per kind of preference, the hints a rule keeps (right and
// wrong) and drops (right and wrong).
func byKind(t *testing.T, rule groundingRule, hs []recordedHint) {
	t.Helper()
	type row struct{ keptRight, keptWrong, droppedRight, droppedWrong int }
	rows := map[string]*row{}
	for _, h := range hs {
		k, _, _ := strings.Cut(h.Pref, "=")
		if rows[k] == nil {
			rows[k] = &row{}
		}
		r, kept := rows[k], rule.keep(h.Hint, h.Next)
		switch {
		case kept && h.Right:
			r.keptRight++
		case kept:
			r.keptWrong++
		case h.Right:
			r.droppedRight++
		default:
			r.droppedWrong++
		}
	}
	for _, k := range instruct.Kinds() {
		if r := rows[string(k)]; r != nil {
			t.Logf("%-34s %-13s kept %3d right %3d wrong; dropped %3d right %3d wrong", rule.name, k, r.keptRight, r.keptWrong, r.droppedRight, r.droppedWrong)
		}
	}
}
