package corpus

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

func renderer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := NewRenderer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testTexts stands in for the Debian packages' text.
func testTexts() *Texts {
	return &Texts{
		Fortunes: []string{"A journey of a thousand miles begins with a single step.", "Never trust a computer you can't throw out a window."},
		Jargon:   [][2]string{{"foo", "A sample name for absolutely anything."}, {"kludge", "A clever programming trick intended to solve a problem quickly."}},
		Verses:   [][2]string{{"Genesis 1:3", "And God said, Let there be light: and there was light."}},
	}
}

func TestCorpusDeterministic(t *testing.T) {
	tok := renderer(t)
	gen := func(seed uint64) []string {
		g := NewGenerator(testTexts())
		r := rand.New(rand.NewPCG(seed, 1))
		var out []string
		for range 300 {
			s, err := Render(tok, g.Next(r), false)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	a, b, c := gen(1), gen(1), gen(2)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different corpora")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds gave the same corpus")
	}
}

func TestCorpusCategories(t *testing.T) {
	tok := renderer(t)
	g := NewGenerator(testTexts())
	if got := g.Categories(); !slices.Equal(got, Categories) {
		t.Fatalf("categories %v, want %v", got, Categories)
	}
	if got := NewGenerator(nil).Categories(); slices.Contains(got, CatText) || len(got) != len(Categories)-1 {
		t.Errorf("without text, only the text category should be left out: %v", got)
	}
	check := map[string]func(t *testing.T, ex Example){
		CatArithmetic: func(t *testing.T, ex Example) {
			m, _ := FirstReply(ex)
			if ex.Want == "" || LastInteger(m.Content) != ex.Want {
				t.Errorf("answer %q does not end with %s", m.Content, ex.Want)
			}
		},
		CatTools: func(t *testing.T, ex Example) {
			if len(ex.Tools) == 0 {
				t.Fatal("no tools offered")
			}
			m, _ := FirstReply(ex)
			if ex.Want == "" {
				return // a request that needs no tool
			}
			if len(m.ToolCalls) == 0 || m.ToolCalls[0].Function.Name != ex.Want {
				t.Fatalf("first reply %+v does not call %s", m, ex.Want)
			}
			offered := false
			for _, d := range ex.Tools {
				offered = offered || strings.Contains(string(d), `"name":"`+ex.Want+`"`)
			}
			if !offered {
				t.Errorf("%s is called but not offered", ex.Want)
			}
			// The rendered reply is a call the parser reads back.
			full, err := Render(tok, Example{Messages: ex.Messages[:slices.IndexFunc(ex.Messages, func(m tokenizer.Message) bool { return m.Role == "assistant" })+1], Tools: ex.Tools}, false)
			if err != nil {
				t.Fatal(err)
			}
			c, ok := ParseToolCall(full[strings.LastIndex(full, "<|im_start|>assistant"):])
			if !ok || c.Name != ex.Want || !JSONEqual(c.Arguments, m.ToolCalls[0].Function.Arguments) {
				t.Errorf("rendered call does not parse back: %+v %v", c, ok)
			}
		},
		CatCorrection: func(t *testing.T, ex Example) {
			for _, i := range ex.Untrained {
				if ex.Messages[i].Role != "assistant" {
					t.Errorf("untrained message %d is a %s message", i, ex.Messages[i].Role)
				}
			}
		},
		CatJudgeSession: func(t *testing.T, ex Example) {
			m, _ := FirstReply(ex)
			if strings.Contains(ex.Key, "|hint") {
				h := reward.ParseHint(m.Content)
				if !h.Valid || h.Accept != (ex.Want == evFormFix) {
					t.Errorf("hint answer %q for a %s turn", m.Content, ex.Want)
				}
				return
			}
			if v, ok := reward.ParseVote(m.Content); !ok || fmt.Sprint(v) != ex.Want {
				t.Errorf("verdict %q, want %s", m.Content, ex.Want)
			}
		},
		CatJudge: func(t *testing.T, ex Example) {
			m, _ := FirstReply(ex)
			if _, ok := reward.ParseVote(m.Content); !ok {
				t.Errorf("verdict %q does not parse", m.Content)
			}
			if !strings.Contains(ex.Messages[0].Content, "boxed") {
				t.Error("not the judge's system prompt")
			}
		},
	}
	for _, cat := range Categories {
		t.Run(cat, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 7))
			sawUntrained := false
			for range 60 {
				ex := g.Train(r, cat)
				if ex.Category != cat || ex.Key == "" || HeldOut(ex.Key) {
					t.Fatalf("example %+v: wrong category, no key, or held out", ex)
				}
				e, err := Encode(tok, ex)
				if err != nil {
					t.Fatal(err)
				}
				if e.Targets() == 0 || len(e.IDs) != len(e.Train) {
					t.Fatalf("no targets in %+v", ex)
				}
				sawUntrained = sawUntrained || len(ex.Untrained) > 0
				if f := check[cat]; f != nil {
					f(t, ex)
				}
			}
			if cat == CatCorrection && !sawUntrained {
				t.Error("no correction of a wrong answer in 60 examples")
			}
		})
	}
}

func TestHeldOutSplit(t *testing.T) {
	g := NewGenerator(nil)
	r := rand.New(rand.NewPCG(3, 3))
	for range 200 {
		ex := g.Next(r)
		if HeldOut(ex.Key) {
			t.Fatalf("training example with a held-out key: %s", ex.Key)
		}
		h := g.HeldOutExample(r, CatArithmetic)
		if !HeldOut(h.Key) || !strings.HasPrefix(h.Key, "arith:") || h.Want == "" {
			t.Fatalf("held-out arithmetic example %+v", h)
		}
	}
	for range 2000 {
		if x := randArith(r); HeldOut(x.key()) {
			t.Fatalf("randArith drew held-out %s", x.key())
		}
	}
}

// TestEncode checks that the tokens are the rendered text (less the
// newline after the last reply) and that the targets are exactly the
// assistant replies.
func TestEncode(t *testing.T) {
	tok := renderer(t)
	ex := Example{Messages: []tokenizer.Message{user("What is 2 + 2?"), assistant("2 + 2 = 5."), user("Wrong."), assistant("Sorry: 2 + 2 = 4.")}, Untrained: []int{1}}
	e, err := Encode(tok, ex)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := Render(tok, ex, false)
	if got := tok.Decode(e.IDs); got != strings.TrimSuffix(full, "\n") {
		t.Fatalf("tokens decode to %q, want %q", got, full)
	}
	var trained []int32
	for i, id := range e.IDs {
		if e.Train[i] {
			trained = append(trained, id)
		}
	}
	if got := tok.Decode(trained); got != "Sorry: 2 + 2 = 4.<|im_end|>" {
		t.Fatalf("targets %q", got)
	}
}

func TestParsers(t *testing.T) {
	for s, want := range map[string]string{"7 + 5 = 12.": "12", "3 - 9 = −6": "-6", "no number": "", "a 1 b 22": "22"} {
		if got := LastInteger(s); got != want {
			t.Errorf("LastInteger(%q) = %q, want %q", s, got, want)
		}
	}
	for s, ok := range map[string]bool{
		"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>": true,
		"<tool_call>{\"name\": \"f\", \"arguments\": \"x\"}</tool_call>":          false,
		"<tool_call>{\"name\": \"f\", \"arguments\": {}</tool_call>":              false,
		"<tool_call>{\"name\": \"f\", \"arguments\": {}}":                         false,
		"no call": false,
	} {
		if _, got := ParseToolCall(s); got != ok {
			t.Errorf("ParseToolCall(%q) = %v, want %v", s, got, ok)
		}
	}
}

// A session turn: the judged reply keeps to the preference exactly when
// the person's next message is praise; a correction's hint is the
// preference's canonical instruction, whatever phrasing the person used.
func TestSessionCases(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	classes := map[string]int{}
	for range 300 {
		for _, split := range []instruct.Split{instruct.Train, instruct.HeldOut} {
			c := genSessionCase(r, split)
			classes[c.class]++
			next := c.turn.NextState[0].Content
			followed := c.pref.Check(c.turn.Response.Content)
			if followed != (c.class == evPraise) {
				t.Fatalf("reply %q follows %s: %v, but the class is %s", c.turn.Response.Content, c.pref, followed, c.class)
			}
			if c.class == evFormFix && c.hint != c.pref.Instruction(nil, instruct.Train) {
				t.Fatalf("hint %q for %s", c.hint, c.pref)
			}
			if c.class == evPraise && c.hint != "" {
				t.Fatalf("a hint %q after praise %q", c.hint, next)
			}
			last := c.turn.Messages[len(c.turn.Messages)-1]
			if last.Role != "user" || c.turn.Response.Role != "assistant" {
				t.Fatalf("turn shape %+v", c.turn)
			}
		}
	}
	if classes[evPraise] < 100 || classes[evFormFix] < 200 {
		t.Errorf("classes %v", classes)
	}
}

func TestSetMix(t *testing.T) {
	g := NewGenerator(nil)
	if err := g.SetMix(map[string]float64{CatJudgeSession: 1, CatGreeting: 0}); err != nil {
		t.Fatal(err)
	}
	for _, c := range Categories {
		if c != CatJudgeSession && c != CatText {
			if err := g.SetMix(map[string]float64{c: 0}); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		if ex := g.Next(r); ex.Category != CatJudgeSession {
			t.Fatalf("drew %s from a mix of %s only", ex.Category, CatJudgeSession)
		}
	}
	for _, bad := range []map[string]float64{{"nope": 1}, {CatJudge: -1}, {CatJudge: math.NaN()}, {CatJudgeSession: 0}} {
		if err := NewGenerator(nil).SetMix(bad); err == nil && bad[CatJudgeSession] != 0 {
			t.Errorf("mix %v accepted", bad)
		}
	}
	all := map[string]float64{}
	for _, c := range Categories {
		all[c] = 0
	}
	if err := NewGenerator(nil).SetMix(all); err == nil {
		t.Error("a mix without any category was accepted")
	}
}
