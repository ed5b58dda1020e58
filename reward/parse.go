package reward

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MinHintRunes is the length a hint must exceed, in characters, to be used:
// anything shorter is too vague to teach.
const MinHintRunes = 10

// ParseVote reads a judge vote: the value of the last \boxed{...} in text
// that lies outside Markdown code (fenced blocks opened by ``` or ~~~, and
// inline `code` spans), so that a judge quoting the format or the
// transcript does not vote by accident. An unclosed fence runs to the end
// of the text. The box's content, trimmed, must be 1, +1, -1 (a Unicode
// minus is accepted) or 0; anything else in the last box (\boxed{2},
// \boxed{}, \boxed{{1}}) makes the whole vote invalid rather than falling
// back to an earlier box. A \boxed{ that never closes is not a box.
//
// ok is false when the vote is invalid or there is no box.
func ParseVote(text string) (vote int, ok bool) {
	content, found := lastBox(stripCode(text))
	if !found {
		return 0, false
	}
	return boxValue(content)
}

// boxValue parses a box's content as a vote.
func boxValue(content string) (int, bool) {
	switch strings.TrimSpace(content) {
	case "1", "+1":
		return 1, true
	case "-1", "\u22121":
		return -1, true
	case "0":
		return 0, true
	}
	return 0, false
}

const boxOpen = `\boxed{`

// lastBox returns the content of the last complete \boxed{...} in s;
// braces nest inside it.
func lastBox(s string) (string, bool) {
	if !strings.Contains(s, boxOpen) {
		return "", false
	}
	// One pass pairs every '{' with its '}'.
	match := make(map[int]int)
	var stack []int
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{':
			stack = append(stack, i)
		case '}':
			if n := len(stack); n > 0 {
				match[stack[n-1]] = i
				stack = stack[:n-1]
			}
		}
	}
	for end := len(s); end > 0; {
		i := strings.LastIndex(s[:end], boxOpen)
		if i < 0 {
			return "", false
		}
		open := i + len(boxOpen) - 1
		if close, ok := match[open]; ok {
			return s[open+1 : close], true
		}
		end = i
	}
	return "", false
}

// stripCode removes Markdown code from s: fenced blocks (each becomes a
// newline) and inline code spans (each becomes a space).
func stripCode(s string) string {
	if !strings.ContainsAny(s, "`~") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	var fence string // the opening fence while inside a block
	for line := range strings.SplitAfterSeq(s, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if closesFence(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if f := openFence(trimmed); f != "" {
			fence = f
			b.WriteByte('\n')
			continue
		}
		b.WriteString(stripInlineCode(line))
	}
	return b.String()
}

// openFence returns the fence a line opens (``` or ~~~, or longer), or "".
func openFence(line string) string {
	for _, c := range []byte{'`', '~'} {
		n := 0
		for n < len(line) && line[n] == c {
			n++
		}
		// A backtick fence's info string has no backticks (CommonMark):
		// "```x```" is an inline span, not a fence.
		if n >= 3 && (c != '`' || !strings.Contains(line[n:], "`")) {
			return line[:n]
		}
	}
	return ""
}

// closesFence reports whether line closes a block opened by fence: the
// same character, at least as many times, and nothing else.
func closesFence(line, fence string) bool {
	line = strings.TrimRight(line, " \t\r\n")
	if len(line) < len(fence) {
		return false
	}
	for i := 0; i < len(line); i++ {
		if line[i] != fence[0] {
			return false
		}
	}
	return true
}

// stripInlineCode replaces `code` spans in one line by a space: a run of k
// backticks opens a span that the next run of exactly k backticks closes;
// an unmatched run is literal text.
func stripInlineCode(line string) string {
	if !strings.Contains(line, "`") {
		return line
	}
	var b strings.Builder
	i := 0
	for i < len(line) {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		k := backticks(line, i)
		closeAt := -1
		for j := i + k; j < len(line); {
			if line[j] != '`' {
				j++
				continue
			}
			m := backticks(line, j)
			if m == k {
				closeAt = j
				break
			}
			j += m
		}
		if closeAt < 0 {
			b.WriteString(line[i : i+k])
			i += k
			continue
		}
		b.WriteByte(' ')
		i = closeAt + k
	}
	return b.String()
}

func backticks(s string, i int) int {
	n := 0
	for i+n < len(s) && s[i+n] == '`' {
		n++
	}
	return n
}

var (
	hintStartRE = regexp.MustCompile(`(?i)\[\s*HINT_START\s*\]`)
	hintEndRE   = regexp.MustCompile(`(?i)\[\s*HINT_END\s*\]`)
)

// HintVote is one parsed vote of the hint judge.
type HintVote struct {
	// Valid is false when the vote did not parse: no box, a box other than
	// 0 or 1, or an accepting box without a usable hint.
	Valid bool
	// Accept is true when the judge wrote a usable hint and boxed 1.
	Accept bool
	// Hint is the hint text (whitespace runs collapsed to one space) when
	// Accept is true.
	Hint string
}

// ParseHint reads a hint vote. The format, which the hint prompt asks for:
//
//	...brief reasoning...
//	[HINT_START]
//	one to three sentences
//	[HINT_END]
//	\boxed{1}
//
// or, declining, no markers and \boxed{0}. The markers are matched without
// regard to case or to spaces inside the brackets. The last complete block
// (a start marker followed by an end marker) is the hint; a start marker
// without an end is no hint. The decision is the last box outside the hint
// blocks and outside code (as in ParseVote): \boxed{0} declines (a valid
// vote, whatever the text); \boxed{1} accepts only with a hint longer than
// MinHintRunes characters, and is otherwise invalid, as is any other box or
// none.
func ParseHint(text string) HintVote {
	hint, rest, found := lastHintBlock(text)
	content, ok := lastBox(stripCode(rest))
	if !ok {
		return HintVote{}
	}
	switch strings.TrimSpace(content) {
	case "0":
		return HintVote{Valid: true}
	case "1", "+1":
		if !found || utf8.RuneCountInString(hint) <= MinHintRunes || hintStartRE.MatchString(hint) {
			// No hint, too short, or two blocks run together (a second
			// opening marker inside): not a usable hint.
			return HintVote{}
		}
		return HintVote{Valid: true, Accept: true, Hint: hint}
	}
	return HintVote{}
}

// lastHintBlock finds the last complete hint block. It returns the hint
// (trimmed, whitespace collapsed), the text with every complete block cut
// out, and whether a block was found.
func lastHintBlock(text string) (hint, rest string, found bool) {
	var b strings.Builder
	pos := 0
	for {
		start := hintStartRE.FindStringIndex(text[pos:])
		if start == nil {
			break
		}
		body := pos + start[1]
		end := hintEndRE.FindStringIndex(text[body:])
		if end == nil {
			break
		}
		b.WriteString(text[pos : pos+start[0]])
		b.WriteByte('\n')
		hint = strings.Join(strings.Fields(text[body:body+end[0]]), " ")
		found = true
		pos = body + end[1]
	}
	b.WriteString(text[pos:])
	return hint, b.String(), found
}

// HintRule chooses one hint among those of the accepting votes.
type HintRule string

// Hint selection rules.
const (
	HintLongest  HintRule = "longest"  // the most detailed hint (default)
	HintShortest HintRule = "shortest" // the most focused hint
	// HintAgree keeps a hint only when at least two of the hint votes
	// agree on it (the same words, mostly): a judge that reads a
	// correction reliably says the same thing each time, while a judge
	// that guesses scatters, and a wrong hint teaches the wrong behaviour
	// token by token. Among agreeing hints it takes the one closest to
	// the others.
	HintAgree HintRule = "agree"
)

// SelectHint picks a hint by rule (empty means HintLongest), measuring in
// characters; ties go to the earliest. It returns "" when hints is empty.
func SelectHint(hints []string, rule HintRule) string {
	if rule == HintAgree {
		return agreedHint(hints)
	}
	best, bestLen := "", -1
	for _, h := range hints {
		n := utf8.RuneCountInString(h)
		better := bestLen < 0 || n > bestLen
		if rule == HintShortest {
			better = bestLen < 0 || n < bestLen
		}
		if better {
			best, bestLen = h, n
		}
	}
	return best
}

// Majority folds valid votes (each -1, 0 or +1) into a reward: the value
// with the most votes, or 0 with tie set when two values share the most,
// or 0 when there are no votes.
func Majority(votes []int) (reward int, tie bool) {
	var count [3]int
	n := 0
	for _, v := range votes {
		if v < -1 || v > 1 {
			continue
		}
		count[v+1]++
		n++
	}
	if n == 0 {
		return 0, false
	}
	best, top := 0, -1
	for i, c := range count {
		switch {
		case c > top:
			best, top, tie = i-1, c, false
		case c == top:
			tie = true
		}
	}
	if tie {
		return 0, true
	}
	return best, false
}

// hintAgreement is the word overlap (Jaccard) two hints need to count as
// agreeing.
const hintAgreement = 0.5

// agreedHint returns, among hints that agree with at least one other, the
// one with the most agreement in total; "" when none agree.
func agreedHint(hints []string) string {
	sets := make([]map[string]bool, len(hints))
	for i, h := range hints {
		sets[i] = map[string]bool{}
		for _, w := range strings.FieldsFunc(strings.ToLower(h), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
			sets[i][w] = true
		}
	}
	best, bestScore := "", 0.0
	for i := range hints {
		score, agrees := 0.0, false
		for j := range hints {
			if i == j {
				continue
			}
			inter := 0
			for w := range sets[i] {
				if sets[j][w] {
					inter++
				}
			}
			union := len(sets[i]) + len(sets[j]) - inter
			sim := 1.0
			if union > 0 {
				sim = float64(inter) / float64(union)
			}
			score += sim
			agrees = agrees || sim >= hintAgreement
		}
		if agrees && score > bestScore {
			best, bestScore = hints[i], score
		}
	}
	return best
}

// Grounded reports whether a hint says something the evidence (what
// happened next: the user's reaction, tool results, feedback; see
// HintEvidence) talks about, beyond incidental words: one of the hint's
// grounding tokens is one of the evidence's. A hint's grounding tokens
// are its words of four letters or more that are neither function words
// nor the words any instruction about form uses whatever it asks for
// ("word", "whole", "write", "letters", "line", ...), compared on their
// first five letters; its numbers, compared whole ("at most 5 words"
// after "must not exceed 5 words"); and the words it quotes, of any
// length, less a few of the commonest ("Start with \"OK!\""). A judge
// that does not understand a correction tends to write a hint it has
// written before ("Answer in JSON ..." after "no capitals, please"), and
// such a hint, learnt token by token, teaches the wrong behaviour;
// grounding drops it (reward.hint_grounding).
//
// Measured on the bundled judge's hints on held-out corrections
// (hint_grounding_test.go; 16 turns per kind of instruct's catalog, seeds
// 1, 2, 3): of the hints the rule before this one kept (any one content
// word shared, generic words and the user's next request included),
// 58/55/57% stated the user's preference; of those this one keeps,
// 67/65/66%, and it keeps 96/98/99% of the right hints (96/89/94%
// before). What it still keeps are hints of a related kind that name the
// user's own argument ("End your answer with the word tomato." after
// "leave the word tomato out") or turn a negation around ("Write your
// whole answer in capital letters." after "no capitals at all"), which
// shared words alone cannot tell apart.
func Grounded(hint, evidence string) bool {
	ev := map[string]bool{}
	for _, w := range splitWords(evidence) {
		ev[groundKey(w)] = true
	}
	for _, w := range groundingTokens(hint) {
		if ev[groundKey(w)] {
			return true
		}
	}
	return false
}

// groundKey is how a word is compared: a number whole, a word on its
// first five letters.
func groundKey(w string) string {
	if strings.IndexFunc(w, unicode.IsDigit) >= 0 {
		return w
	}
	if r := []rune(w); len(r) > 5 {
		return string(r[:5])
	}
	return w
}

// functionWords are words too common in hints and messages to ground one.
var functionWords = map[string]bool{"your": true, "with": true, "that": true, "this": true, "have": true, "from": true, "they": true,
	"what": true, "when": true, "will": true, "would": true, "should": true, "could": true, "about": true, "there": true, "their": true,
	"which": true, "here": true, "before": true, "after": true, "answer": true, "answers": true, "reply": true, "replies": true, "response": true,
	"responses": true, "user": true, "assistant": true, "please": true, "every": true, "always": true, "make": true, "sure": true,
	"more": true, "than": true, "only": true, "also": true, "into": true, "them": true, "then": true, "does": true, "were": true,
	"been": true, "just": true, "like": true, "some": true, "each": true, "next": true, "time": true, "wants": true, "want": true}

// formWords are words that instructions about the form of a reply use
// whatever they ask for: "Write your whole answer in lowercase letters."
// and "Respond entirely in CAPITALS, every letter." share only them. A
// hint grounded by one of them alone is grounded by an incidental word.
var formWords = map[string]bool{"word": true, "words": true, "whole": true, "write": true, "written": true, "letter": true,
	"letters": true, "line": true, "lines": true, "text": true, "format": true, "sentence": true, "sentences": true}

// quoteStop are the commonest short words, which a quoted phrase does not
// ground a hint by.
var quoteStop = map[string]bool{"a": true, "an": true, "the": true, "and": true, "or": true, "is": true, "are": true, "be": true,
	"to": true, "of": true, "in": true, "on": true, "at": true, "it": true, "i": true, "you": true, "my": true, "me": true,
	"we": true, "for": true, "this": true, "that": true, "here": true, "your": true}

// groundingTokens are the tokens of a hint that can ground it.
func groundingTokens(hint string) []string {
	var out []string
	for _, w := range splitWords(hint) {
		switch {
		case strings.IndexFunc(w, unicode.IsDigit) >= 0:
			out = append(out, w)
		case len([]rune(w)) >= 4 && !functionWords[w] && !formWords[w]:
			out = append(out, w)
		}
	}
	for _, q := range quoted(hint) {
		for _, w := range splitWords(q) {
			if !quoteStop[w] {
				out = append(out, w)
			}
		}
	}
	return out
}

// quoted returns the stretches of s between double quotes.
func quoted(s string) []string {
	var out []string
	for {
		i := strings.IndexAny(s, "\"“")
		if i < 0 {
			return out
		}
		s = s[i+len(string([]rune(s[i:])[0])):]
		j := strings.IndexAny(s, "\"”")
		if j < 0 {
			return out
		}
		out = append(out, s[:j])
		s = s[j+len(string([]rune(s[j:])[0])):]
	}
}

// splitWords lower-cases s and splits it into runs of letters and digits.
func splitWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}
