package learnbench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"unicode"

	"github.com/clawrl/clawrl/corpus"
	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/tokenizer"
)

// User is the simulated user: it holds a hidden preference, asks
// questions from the training split, and answers each reply with praise
// when the reply satisfies the preference and a correction in plain words
// when it does not. It never states the preference up front: the model
// learns it from corrections, as from a person.
type User struct {
	Pref instruct.Constraint
	// Phrasing is the split of the correction's instruction sentence
	// (HeldOut: phrasings the pretraining corpus never used). The complaint
	// a correction may open with comes from instruct's one list either way.
	Phrasing instruct.Split
	r        *rand.Rand
}

// NewUser returns a user with preference pref, deterministic for seed.
func NewUser(pref instruct.Constraint, phrasing instruct.Split, seed uint64) *User {
	return &User{Pref: pref, Phrasing: phrasing, r: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// Question returns the next question the user asks: a plain question of
// the training split (the probes are held out).
func (u *User) Question() string {
	q, _, _ := corpus.PlainQuestion(u.r, false)
	return q
}

// Feedback is the user's reaction to reply: praise when it satisfies the
// preference, else a correction that states the preference, and whether
// it was satisfied.
//
// A reply cut by max_tokens (cut) never satisfies: a person does not
// want an answer that runs on (a learnt closing word repeated until the
// limit ends with that word), and says so.
func (u *User) Feedback(reply string, cut bool) (text string, satisfied bool) {
	switch {
	case cut:
		return runOn[u.r.IntN(len(runOn))], false
	case u.Pref.Check(reply):
		return instruct.Praise(u.r), true
	}
	return u.Pref.Correction(u.r, u.Phrasing), false
}

// Thumb is a thumbs-only user's reaction to reply: +1 when it satisfies
// the preference, -1 otherwise (a reply cut by max_tokens never does), and
// whether it was satisfied. The user says nothing: the preference stays
// hidden in the thumbs.
func (u *User) Thumb(reply string, cut bool) (thumb int, satisfied bool) {
	if !cut && u.Pref.Check(reply) {
		return 1, true
	}
	return -1, false
}

// runOn are complaints about a reply that did not stop.
var runOn = []string{"You keep repeating yourself. That's not what I asked.", "That was far too long and repetitive.",
	"Why do you keep going? That's useless."}

// violates reports whether a plain answer a violates pref in a way a
// reply can mend: it fails the preference, and instruct's Apply makes it
// follow it (for a word limit a shorter answer always can).
func violates(pref instruct.Constraint, a string) bool {
	if pref.Check(a) {
		return false
	}
	_, ok := pref.Apply(a)
	return ok || pref.Kind == instruct.MaxWords
}

// Probe is a held-out prompt the bench sends without training.
type Probe struct {
	Messages []tokenizer.Message
	// Tools are the tool definitions offered (skill probes), or nil.
	Tools []json.RawMessage
	// Check reports whether a reply (its text, and the name of the first
	// tool it called, "" for none) passes.
	Check func(text, tool string) bool
	// Reference is the plain answer of a preference probe (it violates the
	// preference: that is why it was chosen).
	Reference string
	// Kind names a skill probe's kind (arithmetic, tool or plain), for
	// telling which skills a run lost.
	Kind string
}

// PreferenceProbes returns n held-out questions whose plain reference
// answer violates pref and can be made to follow it (by instruct's Apply;
// for a word limit, a shorter answer always can): a reply passes when it
// satisfies pref. Deterministic for seed.
func PreferenceProbes(pref instruct.Constraint, n int, seed uint64) ([]Probe, error) {
	r := rand.New(rand.NewPCG(seed, 0x9b0be))
	seen := map[string]bool{}
	var out []Probe
	for tries := 0; len(out) < n; tries++ {
		if tries > 200*n+1000 {
			return out, fmt.Errorf("learnbench: only %d of %d held-out probes violate %s", len(out), n, pref)
		}
		q, a, _ := corpus.PlainQuestion(r, true)
		if seen[q] || !violates(pref, a) {
			continue
		}
		seen[q] = true
		out = append(out, Probe{
			Messages:  []tokenizer.Message{{Role: "user", Content: q}},
			Reference: a,
			Check:     func(text, _ string) bool { return pref.Check(text) },
		})
	}
	return out, nil
}

// SkillProbes returns skill prompts, a quarter each: arithmetic (held
// out; the reply's last integer must be the answer), tool use (held out;
// the reply must call the right function), plain questions with one right
// answer (held out: capitals, units, comparisons, ...; the reply must
// contain the reference answer, ignoring case and punctuation, so that a
// reply that also follows a learned preference such as a closing word
// still passes) and plain facts the model was taught (FactProbe: a
// capital city, the day or month before or after another; the reply must
// name the answer with its own capitals): what the pretrained model can do
// and training must not break. The facts make a misread correction that
// teaches lowercase or capitals, or that garbles the content along with
// the form ("the capital of brazil is brazil."), show as lost skills.
// Deterministic for seed.
func SkillProbes(n int, seed uint64) []Probe {
	r := rand.New(rand.NewPCG(seed, 0x5c111))
	g := corpus.NewGenerator(nil)
	var out []Probe
	for i := range n {
		switch i % 4 {
		case 2:
			q, a := plainProbe(r)
			want := normText(a)
			out = append(out, Probe{Messages: []tokenizer.Message{{Role: "user", Content: q}}, Reference: a, Kind: "plain",
				Check: func(text, _ string) bool { return strings.Contains(normText(text), want) }})
			continue
		case 3:
			out = append(out, FactProbe(r))
			continue
		}
		cat := corpus.CatArithmetic
		if i%4 == 1 {
			cat = corpus.CatTools
		}
		ex := corpus.Prompt(g.HeldOutExample(r, cat))
		want := ex.Want
		p := Probe{Messages: ex.Messages, Kind: "tool"}
		p.Tools = ex.Tools
		if cat == corpus.CatArithmetic {
			p.Kind = "arithmetic"
			p.Check = func(text, _ string) bool { return corpus.LastInteger(text) == want }
		} else {
			p.Check = func(_, tool string) bool { return tool == want }
		}
		out = append(out, p)
	}
	return out
}

// FactProbe draws a plain fact the bundled model was taught (a capital
// city, the day or month before or after another) as a probe whose reply
// passes when it names the answer exactly, capitals included ("Paris",
// "Tuesday"): "the capital of france is paris." fails, as does "The
// capital of Brazil is Brazil.".
func FactProbe(r *rand.Rand) Probe {
	for {
		q, a, key := corpus.PlainQuestion(r, false)
		want := factAnswer(key, a)
		if want == "" {
			continue
		}
		return factProbe(q, a, want)
	}
}

// factProbe asks q, whose reference answer a names want.
func factProbe(q, a, want string) Probe {
	re := regexp.MustCompile(`(^|[^\pL\pN])` + regexp.QuoteMeta(want) + `($|[^\pL\pN])`)
	return Probe{Messages: []tokenizer.Message{{Role: "user", Content: q}}, Reference: a, Kind: "fact",
		Check: func(text, _ string) bool { return re.MatchString(text) }}
}

// factAnswer is the name a fact's reference answer gives ("The capital of
// France is Paris." → "Paris"; "Tuesday comes after Monday." →
// "Tuesday"), or "" for a question that is not one of FactProbe's.
func factAnswer(key, a string) string {
	switch {
	case strings.HasPrefix(key, "cap:"):
		_, city, ok := strings.Cut(a, " is ")
		if !ok {
			return ""
		}
		return strings.TrimSuffix(city, ".")
	case strings.HasPrefix(key, "day+"), strings.HasPrefix(key, "day-"), strings.HasPrefix(key, "month+"), strings.HasPrefix(key, "month-"):
		name, _, _ := strings.Cut(a, " ")
		return name
	}
	return ""
}

// plainKinds are the kinds of plain question (the key's prefix) with one
// right answer that the bundled model mostly knows; lists drawn at random,
// reversals and sorting are left out.
var plainKinds = map[string]bool{"cap": true, "ant": true, "tf": true, "gt": true, "parity": true, "units": true, "plural": true,
	"only": true, "datefact": true, "bigger": true, "leap": true, "times": true}

// plainProbe draws a held-out plain question of plainKinds and its
// reference answer.
func plainProbe(r *rand.Rand) (q, a string) {
	for {
		q, a, key := corpus.PlainQuestion(r, true)
		if i := strings.IndexAny(key, ":+-"); i > 0 && plainKinds[key[:i]] {
			return q, a
		}
	}
}

// normText lowercases s and keeps its letters and digits, one space
// between runs.
func normText(s string) string {
	var b strings.Builder
	space := false
	for _, c := range strings.ToLower(s) {
		if unicode.IsLetter(c) || unicode.IsDigit(c) {
			b.WriteRune(c)
			space = false
		} else if !space {
			b.WriteByte(' ')
			space = true
		}
	}
	return strings.TrimSpace(b.String())
}

// Scenario is what a simulated user wants over the run: one preference, or
// a preference and later its opposite.
type Scenario struct {
	Name string
	// Phases are the preferences in turn order; each holds for Turns user
	// turns (the last one until the end).
	Phases []Phase
	// Note says what the scenario shows.
	Note string
}

// Phase is a preference held for a number of user turns.
type Phase struct {
	Pref  instruct.Constraint
	Turns int
}

// Scenarios are the named scenarios of --scenario. Most use arguments the
// pretraining instructions used (the bundled model cannot follow a new
// word in context, so nothing could teach it); end_word_new, quotes and
// postscript test what pretraining never showed. The probes are held-out
// questions and the corrections held-out phrasings either way.
func Scenarios() []Scenario {
	c := func(s string) instruct.Constraint {
		k, err := instruct.Parse(s)
		if err != nil {
			panic(err) // the table below is fixed
		}
		return k
	}
	one := func(name, pref, note string) Scenario {
		return Scenario{Name: name, Phases: []Phase{{Pref: c(pref)}}, Note: note}
	}
	return []Scenario{
		one("end_word", "end_word=banana", "end every answer with one word (the issue's example; a word the pretraining instructions used)"),
		one("end_word_new", "end_word=lantern", "end every answer with a word no pretraining instruction used"),
		one("lowercase", "lowercase", "write in lowercase only"),
		one("bullets", "bullets", "answer as a bulleted list"),
		one("sign_off", "sign_off=Alice", "sign every answer with a name"),
		one("short", "max_words=5", "answer in at most five words: a preference the base model meets about half the time when sampling"),
		one("start_phrase", "start_phrase=Sure!", "open every answer with a phrase"),
		one("quotes", "quotes", "wrap the answer in double quotes: a kind the pretraining never asked for"),
		one("postscript", "postscript=Talk soon.", "add a P.S.: a kind the pretraining never asked for"),
		{Name: "switch", Phases: []Phase{{Pref: c("lowercase"), Turns: 32}, {Pref: c("uppercase")}},
			Note: "the user changes their mind halfway: lowercase, then uppercase"},
	}
}

// ScenarioByName returns the named scenario.
func ScenarioByName(name string) (Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("learnbench: no scenario %q (have %s)", name, strings.Join(names, ", "))
}

// PrefAt is the preference in force at user turn t (0-based).
func (s Scenario) PrefAt(t int) instruct.Constraint {
	for _, p := range s.Phases {
		if p.Turns <= 0 || t < p.Turns {
			return p.Pref
		}
		t -= p.Turns
	}
	return s.Phases[len(s.Phases)-1].Pref
}
