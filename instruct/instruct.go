// Package instruct is a catalog of verifiable instructions in the spirit of
// IFEval: "end every answer with the word X", "answer in lowercase",
// "answer as a bulleted list", "sign off with -- NAME", each with a check
// that decides whether a reply follows it, a transformation that makes a
// plain reply follow it, and ways a person phrases it: as an instruction (a
// system prompt or a hint), as a correction of a reply that did not follow
// it, and as praise of one that did.
//
// The bundled model's pretraining corpus (package pretrain) teaches the
// model to follow the instructions of the Trained kinds in their Train
// phrasings; `clawrl bench learn` holds a preference from this catalog and
// checks the model's replies with the same Check. Phrasings and kinds are
// split so that the evaluation can ask what training never showed:
// HeldOut phrasings of trained kinds, and the Unseen kinds, which the
// corpus never contains.
package instruct

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Kind names a family of instructions.
type Kind string

// The kinds. Arg is the word, phrase, name or number an instruction
// carries, where it carries one.
const (
	EndWord     Kind = "end_word"     // the reply's last word is Arg
	StartPhrase Kind = "start_phrase" // the reply starts with Arg
	IncludeWord Kind = "include_word" // the reply contains the word Arg
	AvoidWord   Kind = "avoid_word"   // the reply does not contain the word Arg
	Lowercase   Kind = "lowercase"    // no capital letters
	Uppercase   Kind = "uppercase"    // no small letters
	Bullets     Kind = "bullets"      // every line is a "- " bullet
	Numbered    Kind = "numbered"     // lines numbered 1., 2., ...
	JSONObject  Kind = "json"         // the whole reply is a JSON object {"answer": ...}
	SignOff     Kind = "sign_off"     // the last line is "-- Arg"
	Exclaim     Kind = "exclaim"      // the reply ends with "!"
	NoCommas    Kind = "no_commas"    // no comma anywhere
	MaxWords    Kind = "max_words"    // at most Arg words

	// Unseen kinds: never in the pretraining corpus.
	Quotes     Kind = "quotes"     // the whole reply is wrapped in double quotes
	PostScript Kind = "postscript" // the reply ends with a line "P.S. Arg"
	Title      Kind = "title"      // the reply starts with a title <<Arg>>
)

// Trained are the kinds the pretraining corpus teaches.
var Trained = []Kind{EndWord, StartPhrase, IncludeWord, AvoidWord, Lowercase, Uppercase, Bullets, Numbered, JSONObject,
	SignOff, Exclaim, NoCommas, MaxWords}

// Unseen are the kinds the corpus never shows, for an honest measure of
// what the model does with an instruction it was never taught.
var Unseen = []Kind{Quotes, PostScript, Title}

// Kinds lists every kind, trained first.
func Kinds() []Kind { return append(append([]Kind{}, Trained...), Unseen...) }

// Constraint is one instruction: a kind and its argument.
type Constraint struct {
	Kind Kind
	Arg  string
}

// String is a short label: "end_word=banana".
func (c Constraint) String() string {
	if c.Arg == "" {
		return string(c.Kind)
	}
	return string(c.Kind) + "=" + c.Arg
}

// Parse reads a constraint written as String writes it.
func Parse(s string) (Constraint, error) {
	k, arg, _ := strings.Cut(s, "=")
	c := Constraint{Kind: Kind(k), Arg: arg}
	return c, c.Validate()
}

// Validate reports an unknown kind or a missing or malformed argument.
func (c Constraint) Validate() error {
	spec, ok := specs[c.Kind]
	if !ok {
		return fmt.Errorf("instruct: unknown kind %q (known: %s)", c.Kind, kindList())
	}
	switch {
	case spec.arg == argNone && c.Arg != "":
		return fmt.Errorf("instruct: %s takes no argument, got %q", c.Kind, c.Arg)
	case spec.arg != argNone && strings.TrimSpace(c.Arg) == "":
		return fmt.Errorf("instruct: %s needs an argument (%s=...)", c.Kind, c.Kind)
	case spec.arg == argWord && !isWord(c.Arg):
		return fmt.Errorf("instruct: %s needs one word of letters, got %q", c.Kind, c.Arg)
	case spec.arg == argNumber:
		if n, err := strconv.Atoi(c.Arg); err != nil || n < 1 {
			return fmt.Errorf("instruct: %s needs a positive number, got %q", c.Kind, c.Arg)
		}
	}
	return nil
}

func kindList() string {
	var s []string
	for _, k := range Kinds() {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

func isWord(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// IsTrained reports whether the corpus teaches c's kind.
func (c Constraint) IsTrained() bool {
	for _, k := range Trained {
		if k == c.Kind {
			return true
		}
	}
	return false
}

// ---- checks --------------------------------------------------------------

var wordRE = regexp.MustCompile(`[\p{L}\p{N}']+`)

// words returns the reply's words, lower-cased.
func words(s string) []string {
	ws := wordRE.FindAllString(s, -1)
	for i, w := range ws {
		ws[i] = strings.ToLower(strings.Trim(w, "'"))
	}
	return ws
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

var numberedRE = regexp.MustCompile(`^(\d+)\.\s+\S`)

// Check reports whether reply follows c.
func (c Constraint) Check(reply string) bool {
	s := strings.TrimSpace(reply)
	if s == "" {
		return false
	}
	arg := strings.ToLower(strings.TrimSpace(c.Arg))
	switch c.Kind {
	case EndWord:
		ws := words(s)
		return len(ws) > 0 && ws[len(ws)-1] == arg
	case StartPhrase:
		return len(s) >= len(c.Arg) && strings.EqualFold(s[:len(c.Arg)], c.Arg)
	case IncludeWord:
		for _, w := range words(s) {
			if w == arg {
				return true
			}
		}
		return false
	case AvoidWord:
		for _, w := range words(s) {
			if w == arg {
				return false
			}
		}
		return true
	case Lowercase:
		return hasLetter(s) && s == strings.ToLower(s)
	case Uppercase:
		return hasLetter(s) && s == strings.ToUpper(s)
	case Bullets:
		for _, l := range lines(s) {
			if !strings.HasPrefix(l, "- ") && !strings.HasPrefix(l, "* ") {
				return false
			}
		}
		return true
	case Numbered:
		for i, l := range lines(s) {
			m := numberedRE.FindStringSubmatch(l)
			if m == nil || m[1] != strconv.Itoa(i+1) {
				return false
			}
		}
		return true
	case JSONObject:
		var v map[string]any
		return json.Unmarshal([]byte(s), &v) == nil
	case SignOff:
		ls := lines(s)
		return len(ls) >= 2 && strings.EqualFold(ls[len(ls)-1], "-- "+strings.TrimSpace(c.Arg))
	case Exclaim:
		return strings.HasSuffix(s, "!")
	case NoCommas:
		return !strings.Contains(s, ",")
	case MaxWords:
		n, _ := strconv.Atoi(c.Arg)
		return len(words(s)) <= n
	case Quotes:
		return len(s) >= 2 && strings.HasPrefix(s, `"`) && strings.HasSuffix(s, `"`)
	case PostScript:
		ls := lines(s)
		return len(ls) >= 2 && strings.HasPrefix(ls[len(ls)-1], "P.S.")
	case Title:
		return strings.HasPrefix(s, "<<") && strings.Contains(s[2:], ">>")
	}
	return false
}

func hasLetter(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) {
			return true
		}
	}
	return false
}

// ---- making a reply follow ----------------------------------------------

var sentenceRE = regexp.MustCompile(`[^.!?]+[.!?]*`)

// items splits a reply into list items: its lines, or else its sentences.
func items(s string) []string {
	var out []string
	for _, l := range lines(s) {
		l = strings.TrimLeft(l, "-*• ")
		if m := numberedRE.FindStringIndex(l); m != nil {
			l = strings.TrimSpace(l[strings.Index(l, ".")+1:])
		}
		if l != "" {
			out = append(out, l)
		}
	}
	if len(out) == 1 {
		var ss []string
		for _, x := range sentenceRE.FindAllString(out[0], -1) {
			if x = strings.TrimSpace(x); x != "" {
				ss = append(ss, x)
			}
		}
		if len(ss) > 1 {
			out = ss
		}
	}
	return out
}

// Apply returns reply changed to follow c, as the corpus teaches it. It
// returns false when it cannot (AvoidWord of a word the reply needs,
// MaxWords below the reply's length): such a pair is not used.
func (c Constraint) Apply(reply string) (string, bool) {
	s := strings.TrimSpace(reply)
	if s == "" {
		return "", false
	}
	var out string
	switch c.Kind {
	case EndWord:
		out = s + " " + c.Arg
	case StartPhrase:
		out = c.Arg + " " + s
	case IncludeWord:
		if c.Check(s) {
			out = s
		} else {
			out = s + " (" + c.Arg + ")"
		}
	case AvoidWord, MaxWords, NoCommas:
		if c.Kind == NoCommas {
			s = strings.ReplaceAll(strings.ReplaceAll(s, ", ", " "), ",", " ")
		}
		out = s
	case Lowercase:
		out = strings.ToLower(s)
	case Uppercase:
		out = strings.ToUpper(s)
	case Bullets, Numbered:
		its := items(s)
		for i, it := range its {
			if i > 0 {
				out += "\n"
			}
			if c.Kind == Bullets {
				out += "- " + it
			} else {
				out += strconv.Itoa(i+1) + ". " + it
			}
		}
	case JSONObject:
		b, _ := json.Marshal(map[string]string{"answer": s})
		out = string(b)
	case SignOff:
		out = s + "\n\n-- " + c.Arg
	case Exclaim:
		out = strings.TrimRight(s, ".!?") + "!"
	case Quotes:
		out = `"` + s + `"`
	case PostScript:
		out = s + "\n\nP.S. " + c.Arg
	case Title:
		out = "<<" + c.Arg + ">>\n" + s
	default:
		return "", false
	}
	return out, c.Check(out)
}

// Compatible reports whether two constraints can hold together in the
// corpus's combinations (they touch different parts of a reply).
func Compatible(a, b Constraint) bool {
	if a.Kind == b.Kind {
		return false
	}
	group := func(k Kind) int {
		switch k {
		case EndWord, SignOff, Exclaim, PostScript:
			return 1 // the end
		case StartPhrase, Title:
			return 2 // the start
		case Lowercase, Uppercase:
			return 3 // the letters
		case Bullets, Numbered, JSONObject, Quotes:
			return 4 // the shape
		}
		return 0
	}
	ga, gb := group(a.Kind), group(b.Kind)
	if ga == 4 || gb == 4 || ga == 0 && gb == 0 { // a shape wraps everything: alone
		return false
	}
	return ga != gb
}

// ---- phrasings -----------------------------------------------------------

// Split selects phrasings: those the corpus trains on, or those held out
// for evaluation.
type Split int

// The splits.
const (
	Train Split = iota
	HeldOut
)

type argKind int

const (
	argNone argKind = iota
	argWord
	argPhrase
	argName
	argNumber
	argSentence
	argTitle
)

type spec struct {
	arg argKind
	// instructions: imperative sentences with %[1]s for Arg (a hint, a
	// system prompt line); the first of each split is the canonical one.
	train, heldOut []string
	// complaints say what the reply did wrong, before the instruction in a
	// correction: complaints for the Train split (the pretraining corpus),
	// heldOutComplaints for the HeldOut one (the evaluation and `clawrl
	// bench learn`'s user), so that a held-out correction is held out
	// whole.
	complaints, heldOutComplaints []string
}

var specs = map[Kind]spec{
	EndWord: {arg: argWord,
		train: []string{"End your answer with the word %[1]s.", "Always finish your reply with the word \"%[1]s\".",
			"Make %[1]s the last word of your answer.", "Your answer must end with the word %[1]s.", "Finish every answer with the word %[1]s.",
			"Use %[1]s as the final word of each reply.", "Put %[1]s at the end of your answer.", "Conclude your reply with the word %[1]s.", "Wrap up every answer with the word %[1]s."},
		heldOut:           []string{"Close each response with the word %[1]s.", "Put the word %[1]s at the very end of every reply."},
		complaints:        []string{"You didn't end with %[1]s.", "Your answer did not end with the word %[1]s.", "You forgot the %[1]s at the end."},
		heldOutComplaints: []string{"The final word should have been %[1]s.", "No %[1]s at the close again."}},
	StartPhrase: {arg: argPhrase,
		train: []string{"Start your answer with \"%[1]s\".", "Begin your reply with the words \"%[1]s\".",
			"Your answer must start with \"%[1]s\".", "Always open your reply with \"%[1]s\".",
			"Open with the words \"%[1]s\".", "Put \"%[1]s\" at the start of your reply.", "Say \"%[1]s\" first, then answer."},
		heldOut:           []string{"Every response should begin with \"%[1]s\".", "Lead with \"%[1]s\" before anything else."},
		complaints:        []string{"You didn't start with \"%[1]s\".", "Your reply should have begun with \"%[1]s\"."},
		heldOutComplaints: []string{"The opening was wrong; I wanted \"%[1]s\" up front."}},
	IncludeWord: {arg: argWord,
		train: []string{"Include the word %[1]s in your answer.", "Use the word \"%[1]s\" somewhere in your reply.",
			"Your answer must contain the word %[1]s.",
			"Mention the word %[1]s in your reply.", "Work the word %[1]s into your answer.", "Have the word %[1]s somewhere in each reply."},
		heldOut:           []string{"Make sure the word %[1]s appears in every response."},
		complaints:        []string{"You didn't use the word %[1]s.", "The word %[1]s was missing."},
		heldOutComplaints: []string{"%[1]s never showed up in there."}},
	AvoidWord: {arg: argWord,
		train: []string{"Do not use the word %[1]s.", "Never say the word \"%[1]s\" in your answer.", "Avoid the word %[1]s.",
			"Keep the word %[1]s out of your answer.", "Skip the word %[1]s."},
		heldOut:           []string{"Leave the word %[1]s out of your responses."},
		complaints:        []string{"You used the word %[1]s.", "I don't want to see the word %[1]s."},
		heldOutComplaints: []string{"%[1]s appeared again."}},
	Lowercase: {arg: argNone,
		train: []string{"Write your whole answer in lowercase letters.", "Use only lowercase letters in your reply.",
			"Answer in all lowercase, with no capital letters.", "Do not use any capital letters.",
			"Use small letters only, no uppercase.", "Do not capitalize anything in your reply.", "Type your reply without a single capital letter.", "Lowercase everything you write."},
		heldOut:           []string{"Respond entirely in lower case.", "Keep every letter of your response small, no capitals at all."},
		complaints:        []string{"You used capital letters.", "That had capitals in it."},
		heldOutComplaints: []string{"Those big letters again.", "Nothing should be capitalized."}},
	Uppercase: {arg: argNone,
		train: []string{"Write your whole answer in capital letters.", "Use only uppercase letters in your reply.",
			"Answer in all caps.", "Write everything in uppercase.",
			"Use capital letters only.", "Capitalize every letter of your reply.", "Type your whole reply in caps."},
		heldOut:           []string{"Respond entirely in CAPITALS.", "Shout your whole response in upper case."},
		complaints:        []string{"That wasn't in capital letters.", "You didn't write in all caps."},
		heldOutComplaints: []string{"Not everything was shouted.", "Small letters crept in."}},
	Bullets: {arg: argNone,
		train: []string{"Format your answer as a bulleted list.", "Answer with bullet points, each line starting with \"- \".",
			"Write your reply as a list of bullet points.",
			"Give your answer as bullet points.", "Break your reply into lines that start with \"- \".", "Use a dash list for your answer."},
		heldOut:           []string{"Put every part of your response on its own dash-bulleted line."},
		complaints:        []string{"That wasn't a bulleted list.", "You didn't use bullet points."},
		heldOutComplaints: []string{"Those should have been separate dashed points.", "I asked for a list, not a paragraph."}},
	Numbered: {arg: argNone,
		train: []string{"Format your answer as a numbered list.", "Answer with a numbered list: 1., 2., and so on.", "Number each line of your reply.",
			"List your answer as 1., 2., 3.", "Give your reply as numbered points.", "Put your answer in a numbered list."},
		heldOut:           []string{"Present your response as an enumerated list starting at 1."},
		complaints:        []string{"That wasn't a numbered list.", "You didn't number the lines."},
		heldOutComplaints: []string{"Where are the numbers for each point?"}},
	JSONObject: {arg: argNone,
		train: []string{"Answer in JSON, as an object with the key \"answer\".", "Reply only with a JSON object like {\"answer\": ...}.",
			"Wrap your answer in a JSON object.",
			"Return your answer as JSON with an \"answer\" key.", "Give me the reply as a JSON object."},
		heldOut:           []string{"Your whole response must be valid JSON: one object holding the answer."},
		complaints:        []string{"That wasn't JSON.", "I need the reply as a JSON object."},
		heldOutComplaints: []string{"A parser could not read that."}},
	SignOff: {arg: argName,
		train: []string{"End your answer with a last line \"-- %[1]s\".", "Sign off every reply with \"-- %[1]s\" on its own line.",
			"Add the signature \"-- %[1]s\" at the end of your answer.",
			"Finish each reply with a line that says \"-- %[1]s\".", "Sign your answers \"-- %[1]s\" at the bottom.", "Put \"-- %[1]s\" on the last line of every answer."},
		heldOut:           []string{"Close with your signature line, -- %[1]s."},
		complaints:        []string{"You forgot the signature.", "There was no \"-- %[1]s\" at the end."},
		heldOutComplaints: []string{"Your name was missing at the bottom.", "Unsigned again."}},
	Exclaim: {arg: argNone,
		train: []string{"End your answer with an exclamation mark.", "Finish your reply with \"!\".",
			"Your answer must end with an exclamation mark.",
			"Close your reply with an exclamation mark.", "Make your answer end in \"!\"."},
		heldOut:           []string{"Make the final character of each response an exclamation point."},
		complaints:        []string{"That didn't end with an exclamation mark.", "Where is the exclamation mark at the end?"},
		heldOutComplaints: []string{"The ending was too flat."}},
	NoCommas: {arg: argNone,
		train: []string{"Do not use any commas in your answer.", "Write your reply without commas.", "Avoid commas entirely.",
			"Leave out all commas.", "Use no commas at all in your reply."},
		heldOut:           []string{"Not a single comma may appear in your response."},
		complaints:        []string{"You used commas.", "There was a comma in your answer."},
		heldOutComplaints: []string{"Commas again."}},
	MaxWords: {arg: argNumber,
		train: []string{"Answer in at most %[1]s words.", "Keep your reply under %[1]s words.", "Use no more than %[1]s words.",
			"Reply in %[1]s words or fewer.", "Say it in no more than %[1]s words.", "Limit your answer to %[1]s words."},
		heldOut:           []string{"Your response must not exceed %[1]s words."},
		complaints:        []string{"That was too long.", "You used more than %[1]s words."},
		heldOutComplaints: []string{"Far too wordy."}},
	Quotes: {arg: argNone,
		train:             []string{"Wrap your whole answer in double quotation marks.", "Put your entire reply inside double quotes."},
		heldOut:           []string{"Enclose your response in double quotes."},
		complaints:        []string{"Your answer wasn't in quotes."},
		heldOutComplaints: []string{"The quotation marks were missing."}},
	PostScript: {arg: argSentence,
		train:             []string{"End your answer with a postscript line \"P.S. %[1]s\".", "Add \"P.S. %[1]s\" as the last line of your reply."},
		heldOut:           []string{"Finish with a P.S. that says: %[1]s"},
		complaints:        []string{"You forgot the P.S."},
		heldOutComplaints: []string{"No P.S. at the end."}},
	Title: {arg: argTitle,
		train:             []string{"Start your answer with a title in double angular brackets: <<%[1]s>>.", "Give your reply the title <<%[1]s>> on its first line."},
		heldOut:           []string{"Put the title <<%[1]s>> at the top of your response."},
		complaints:        []string{"You left out the title."},
		heldOutComplaints: []string{"There was no heading in brackets."}},
}

func (c Constraint) spec() spec {
	s, ok := specs[c.Kind]
	if !ok {
		panic("instruct: unknown kind " + string(c.Kind))
	}
	return s
}

func (c Constraint) format(tmpl string) string {
	if strings.Contains(tmpl, "%[1]s") {
		return fmt.Sprintf(tmpl, c.Arg)
	}
	return tmpl
}

// Phrasings lists c's instruction sentences of a split.
func (c Constraint) Phrasings(split Split) []string {
	sp := c.spec()
	src := sp.train
	if split == HeldOut {
		src = sp.heldOut
	}
	out := make([]string, len(src))
	for i, t := range src {
		out[i] = c.format(t)
	}
	return out
}

// Instruction is c as one instruction sentence: the canonical one of the
// split when r is nil, else a random one.
func (c Constraint) Instruction(r *rand.Rand, split Split) string {
	ps := c.Phrasings(split)
	if r == nil {
		return ps[0]
	}
	return ps[r.IntN(len(ps))]
}

// Standing turns an instruction for one answer into one for every answer
// ("End your answer with..." → "From now on, end your answers with...")
// by a prefix, as a person states a lasting preference.
func Standing(instruction string) string {
	return "From now on, " + lowerFirst(instruction)
}

// correctionLeads open a correction.
var correctionLeads = []string{"No.", "Not like that.", "Hmm, not quite.", "That's not what I want.", "Please fix that.", "Wrong format.",
	"I told you before.", "Again:", "Careful."}

// Correction is how a user corrects a reply that did not follow c: an
// optional lead, an optional complaint, then "Please " and the instruction
// (of the split's phrasings; the complaint of the split's list too). The
// instruction sentence is always there, so a hint can be written from it.
func (c Constraint) Correction(r *rand.Rand, split Split) string {
	sp := c.spec()
	var parts []string
	if r.IntN(2) == 0 {
		parts = append(parts, correctionLeads[r.IntN(len(correctionLeads))])
	}
	complaints := sp.complaints
	if split == HeldOut {
		complaints = sp.heldOutComplaints
	}
	if r.IntN(2) == 0 && len(complaints) > 0 {
		parts = append(parts, c.format(complaints[r.IntN(len(complaints))]))
	}
	instr := c.Instruction(r, split)
	switch r.IntN(3) {
	case 0:
		instr = "Please " + lowerFirst(instr)
	case 1:
		instr = Standing(instr)
	}
	return strings.Join(append(parts, instr), " ")
}

// praises accept a reply.
var praises = []string{"Great, thanks!", "Perfect, that's exactly how I like it.", "Nice, thank you.", "Good answer.", "That's right, thanks!",
	"Exactly what I wanted.", "Thanks, well done.", "Looks good.", "Great!", "Perfect."}

// Praise is how a user accepts a reply.
func Praise(r *rand.Rand) string { return praises[r.IntN(len(praises))] }

// Praises lists every praise.
func Praises() []string { return append([]string{}, praises...) }

func lowerFirst(s string) string {
	if s == "" || strings.HasPrefix(s, "\"") {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// ---- arguments -----------------------------------------------------------

// Arguments for random constraints, split like phrasings: the corpus draws
// Train arguments, the evaluation HeldOut ones.
var (
	trainWords   = strings.Fields("banana apple friend okay done cheers indeed amen sunshine river tomato rocket pencil garden silver ocean thunder purple coffee winter maple zebra")
	heldOutWords = strings.Fields("pineapple lantern velvet meadow falcon")
	trainPhrases = []string{"Sure!", "Certainly.", "Great question!", "Here you go:", "Answer:", "OK!", "Well,", "Hello friend,", "Good news:",
		"In short:", "Let me see.", "Yes!", "Alright,", "Here is my answer:"}
	heldOutPhrases = []string{"Ahoy!", "Dear user,", "Quick answer:"}
	trainNames     = strings.Fields("Alice Bob Carol Dave Eve Frank Grace Heidi Ivan Judy Oscar Sam Trent Victor Wendy")
	heldOutNames   = strings.Fields("Zoe Mallory Quinn")
	sentences      = []string{"Have a nice day.", "Talk soon.", "Stay curious.", "Thanks for asking."}
	titles         = []string{"Answer", "My Reply", "Notes", "Summary"}
)

// Random returns a constraint of kind k with a random argument of the
// split.
func Random(r *rand.Rand, k Kind, split Split) Constraint {
	pickS := func(train, held []string) string {
		if split == HeldOut {
			return held[r.IntN(len(held))]
		}
		return train[r.IntN(len(train))]
	}
	c := Constraint{Kind: k}
	switch specs[k].arg {
	case argWord:
		c.Arg = pickS(trainWords, heldOutWords)
	case argPhrase:
		c.Arg = pickS(trainPhrases, heldOutPhrases)
	case argName:
		c.Arg = pickS(trainNames, heldOutNames)
	case argNumber:
		c.Arg = strconv.Itoa(3 + r.IntN(10))
	case argSentence:
		c.Arg = sentences[r.IntN(len(sentences))]
	case argTitle:
		c.Arg = titles[r.IntN(len(titles))]
	}
	return c
}

// ---- reading an instruction back ----------------------------------------

// phrasingRE is one instruction sentence as a pattern: the argument, where
// the sentence carries one, captured.
type phrasingRE struct {
	kind Kind
	re   *regexp.Regexp
}

var phrasingREs = func() []phrasingRE {
	var out []phrasingRE
	for _, k := range Kinds() {
		sp := specs[k]
		for _, tmpl := range append(append([]string{}, sp.train...), sp.heldOut...) {
			// A sentence that ends with its argument keeps the argument's
			// own full stop; any other may lose its last one.
			pat, end := regexp.QuoteMeta(strings.TrimSuffix(tmpl, ".")), `\.?$`
			if strings.HasSuffix(tmpl, "%[1]s") {
				pat, end = regexp.QuoteMeta(tmpl), `$`
			}
			pat = strings.ReplaceAll(pat, regexp.QuoteMeta("%[1]s"), `(.+?)`)
			out = append(out, phrasingRE{kind: k, re: regexp.MustCompile(`(?i)^(?:from now on, |please )?` + pat + end)})
		}
	}
	return out
}()

// Identify reads an instruction sentence back: which of the catalog's
// instructions it is (any split, stated for one answer or as a standing
// preference, the case of its first letter aside), with its argument. It
// reports false for any other text, so that a judge's hint can be graded
// against the preference a user held.
func Identify(sentence string) (Constraint, bool) {
	s := strings.TrimSpace(sentence)
	for _, p := range phrasingREs {
		m := p.re.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		c := Constraint{Kind: p.kind}
		if len(m) > 1 {
			c.Arg = m[1]
		}
		if c.Validate() == nil {
			return c, true
		}
	}
	return Constraint{}, false
}
