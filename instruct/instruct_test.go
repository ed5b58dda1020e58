package instruct

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		c     Constraint
		reply string
		want  bool
	}{
		{Constraint{EndWord, "banana"}, "The capital is Paris. banana", true},
		{Constraint{EndWord, "banana"}, "The capital is Paris. Banana!", true},
		{Constraint{EndWord, "banana"}, "banana. The capital is Paris.", false},
		{Constraint{EndWord, "banana"}, "", false},
		{Constraint{StartPhrase, "Sure!"}, "sure! It is 4.", true},
		{Constraint{StartPhrase, "Sure!"}, "It is 4. Sure!", false},
		{Constraint{IncludeWord, "river"}, "The River flows.", true},
		{Constraint{IncludeWord, "river"}, "The rivers flow.", false},
		{Constraint{AvoidWord, "river"}, "The rivers flow.", true},
		{Constraint{AvoidWord, "river"}, "A river.", false},
		{Constraint{Lowercase, ""}, "the capital is paris.", true},
		{Constraint{Lowercase, ""}, "The capital is paris.", false},
		{Constraint{Lowercase, ""}, "7 + 5 = 12.", false}, // no letters: not a lowercase answer
		{Constraint{Uppercase, ""}, "THE CAPITAL IS PARIS.", true},
		{Constraint{Uppercase, ""}, "THE CAPITAL IS Paris.", false},
		{Constraint{Bullets, ""}, "- red\n- blue", true},
		{Constraint{Bullets, ""}, "- red\nblue", false},
		{Constraint{Numbered, ""}, "1. red\n2. blue", true},
		{Constraint{Numbered, ""}, "1. red\n3. blue", false},
		{Constraint{JSONObject, ""}, `{"answer": "4"}`, true},
		{Constraint{JSONObject, ""}, `answer: 4`, false},
		{Constraint{JSONObject, ""}, `["4"]`, false},
		{Constraint{SignOff, "Alice"}, "It is 4.\n\n-- Alice", true},
		{Constraint{SignOff, "Alice"}, "-- Alice", false},
		{Constraint{SignOff, "Alice"}, "It is 4. -- Alice", false},
		{Constraint{Exclaim, ""}, "It is 4!", true},
		{Constraint{Exclaim, ""}, "It is 4.", false},
		{Constraint{NoCommas, ""}, "red blue", true},
		{Constraint{NoCommas, ""}, "red, blue", false},
		{Constraint{MaxWords, "3"}, "one two three", true},
		{Constraint{MaxWords, "3"}, "one two three four", false},
		{Constraint{Quotes, ""}, `"It is 4."`, true},
		{Constraint{Quotes, ""}, `It is "4".`, false},
		{Constraint{PostScript, "Talk soon."}, "It is 4.\n\nP.S. Talk soon.", true},
		{Constraint{PostScript, "Talk soon."}, "It is 4.", false},
		{Constraint{Title, "Notes"}, "<<Notes>>\nIt is 4.", true},
		{Constraint{Title, "Notes"}, "It is 4.", false},
	}
	for _, tc := range cases {
		if got := tc.c.Check(tc.reply); got != tc.want {
			t.Errorf("%v.Check(%q) = %v, want %v", tc.c, tc.reply, got, tc.want)
		}
	}
}

// Apply must produce replies that pass Check, for every kind and many
// replies, and leave replies alone where it cannot.
func TestApplyFollows(t *testing.T) {
	replies := []string{"The capital of France is Paris.", "Hello! How can I help you today?", "7 + 5 = 12.",
		"- red\n- blue\n- green", "1. one\n2. two", "red, blue, green", "Yes", `{"name": "Ada"}`}
	r := rand.New(rand.NewPCG(1, 2))
	for _, k := range Kinds() {
		for _, split := range []Split{Train, HeldOut} {
			for _, reply := range replies {
				c := Random(r, k, split)
				if err := c.Validate(); err != nil {
					t.Fatalf("Random gave an invalid constraint: %v", err)
				}
				out, ok := c.Apply(reply)
				if ok && !c.Check(out) {
					t.Errorf("%v.Apply(%q) = %q, which fails Check", c, reply, out)
				}
				letterless := (k == Lowercase || k == Uppercase) && !hasLetter(reply)
				if !ok && k != AvoidWord && k != MaxWords && !letterless {
					t.Errorf("%v.Apply(%q) refused", c, reply)
				}
			}
		}
	}
}

func TestPhrasingsAndCorrections(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, k := range Kinds() {
		c := Random(r, k, Train)
		for _, split := range []Split{Train, HeldOut} {
			ps := c.Phrasings(split)
			if len(ps) == 0 {
				t.Fatalf("%s has no %v phrasings", k, split)
			}
			for _, p := range ps {
				if strings.Contains(p, "%") {
					t.Errorf("%s phrasing %q has an unfilled verb", k, p)
				}
				if c.Arg != "" && !strings.Contains(p, c.Arg) && k != Lowercase {
					t.Errorf("%s phrasing %q does not name its argument %q", k, p, c.Arg)
				}
			}
		}
		// A train phrasing never reappears held out.
		for _, h := range c.Phrasings(HeldOut) {
			for _, tr := range c.Phrasings(Train) {
				if h == tr {
					t.Errorf("%s: %q is in both splits", k, h)
				}
			}
		}
		for range 20 {
			corr := c.Correction(r, Train)
			found := false
			for _, p := range c.Phrasings(Train) {
				if strings.Contains(corr, p[1:len(p)-1]) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s correction %q states none of the instructions", k, corr)
			}
		}
		// Complaints are split too: every kind has held-out ones, the
		// lists share none, and a correction uses its split's.
		sp := c.spec()
		if len(sp.heldOutComplaints) == 0 || len(sp.complaints) == 0 {
			t.Errorf("%s: %d train and %d held-out complaints", k, len(sp.complaints), len(sp.heldOutComplaints))
		}
		for _, h := range sp.heldOutComplaints {
			if slices.Contains(sp.complaints, h) {
				t.Errorf("%s: complaint %q is in both splits", k, h)
			}
		}
		for _, tc := range []struct {
			split      Split
			own, other []string
		}{{Train, sp.complaints, sp.heldOutComplaints}, {HeldOut, sp.heldOutComplaints, sp.complaints}} {
			used := false
			for range 40 {
				corr := c.Correction(r, tc.split)
				for _, o := range tc.other {
					if strings.Contains(corr, c.format(o)) {
						t.Errorf("%s %v correction %q has the other split's complaint %q", k, tc.split, corr, o)
					}
				}
				for _, o := range tc.own {
					used = used || strings.Contains(corr, c.format(o))
				}
			}
			if !used {
				t.Errorf("%s: 40 %v corrections used none of the split's complaints", k, tc.split)
			}
		}
	}
}

func TestParseValidate(t *testing.T) {
	for _, s := range []string{"end_word=banana", "lowercase", "max_words=5", "sign_off=Alice", "start_phrase=Sure thing!"} {
		c, err := Parse(s)
		if err != nil {
			t.Errorf("Parse(%q): %v", s, err)
			continue
		}
		if c.String() != s {
			t.Errorf("Parse(%q).String() = %q", s, c.String())
		}
	}
	for _, s := range []string{"", "nope", "end_word", "end_word=two words", "lowercase=x", "max_words=0", "max_words=x"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func TestCompatible(t *testing.T) {
	if Compatible(Constraint{Kind: EndWord}, Constraint{Kind: SignOff}) {
		t.Error("two constraints on the end are compatible")
	}
	if Compatible(Constraint{Kind: Bullets}, Constraint{Kind: Lowercase}) {
		t.Error("a shape combines")
	}
	if !Compatible(Constraint{Kind: Lowercase}, Constraint{Kind: EndWord}) {
		t.Error("letters and the end do not combine")
	}
}

func TestIdentify(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	// Every phrasing of every kind, both splits, as an instruction and as
	// a standing preference, reads back as itself.
	for _, k := range Kinds() {
		for _, split := range []Split{Train, HeldOut} {
			c := Random(r, k, split)
			for _, p := range c.Phrasings(split) {
				for _, s := range []string{p, Standing(p), "Please " + lowerFirst(p)} {
					got, ok := Identify(s)
					if !ok || got.Kind != c.Kind || !strings.EqualFold(got.Arg, c.Arg) {
						t.Errorf("Identify(%q) = %v, %v; want %v", s, got, ok, c)
					}
				}
			}
		}
	}
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"End your answer with the word banana.", "end_word=banana", true},
		{"end your answer with the word banana", "end_word=banana", true},
		{"Answer in at most 5 words.", "max_words=5", true},
		{"Answer in at most five words.", "", false}, // not a number
		{"Write your whole answer in lowercase letters.", "lowercase", true},
		{"End your answer with the word a numbered list.", "", false}, // not one word
		{"Check the answer carefully before replying.", "", false},
		{"", "", false},
	} {
		got, ok := Identify(tc.in)
		if ok != tc.ok || ok && got.String() != tc.want {
			t.Errorf("Identify(%q) = %v, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
