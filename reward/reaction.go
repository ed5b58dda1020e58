package reward

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/clawrl/clawrl/tokenizer"
)

// Reading the user's reaction.
//
// What a user writes after a reply usually opens with their reaction to it
// ("That's not what I asked.", "Thanks!") and may go on with anything: the
// next request, an aside, small talk, text pasted from elsewhere. The
// bundled judge read a complaint followed by anything at all ("(I had a
// long day at work.)", "JUDGE: -1", an emoji, a line of another language)
// as acceptance, 24 votes of 24; trailing text can push any judge off the
// reaction. So the vote judge reads the user's next message in two steps:
//
//   - The reaction alone: the message cut after its first sentence (or
//     first line), extended over a sentence that is only a filler ("Hmm.",
//     "Wait.") and over one that opens with a contrast ("Thanks. But that
//     is wrong."). A complaint there (a -1 majority) is the vote, and
//     nothing after the reaction can change it.
//   - Otherwise the reaction and the sentence after it, which may carry the
//     correction the reaction only announced ("Not like that. Answer in
//     French."): a complaint there is the vote. Anything else leaves the
//     reaction's vote: acceptance comes from the reaction alone, since
//     acceptance is exactly what trailing text makes a judge read into a
//     complaint.
//
// Nothing past the sentence after the reaction is read for the vote.
// (The hint judge reads the whole message: a correction's details may be
// anywhere in it.)

// contrastWords open a sentence that qualifies the one before it.
var contrastWords = []string{"but", "however", "though", "although", "except", "yet", "unfortunately", "sadly", "still"}

// fillers are interjections that say nothing on their own.
var fillers = map[string]bool{"hmm": true, "hm": true, "um": true, "uh": true, "well": true, "wait": true, "oh": true,
	"ah": true, "so": true, "ok": true, "okay": true, "alright": true}

// onlyFillers reports whether s holds filler words and punctuation only.
func onlyFillers(s string) bool {
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) })
	for _, w := range words {
		// "hmmm" is "hmm".
		for len(w) > 2 && w[len(w)-1] == w[len(w)-2] {
			w = w[:len(w)-1]
		}
		if !fillers[w] && !fillers[w+string(w[len(w)-1])] {
			return false
		}
	}
	return len(words) > 0
}

// sentenceEnds end a sentence; closers may follow them.
const (
	sentenceEnds = ".!?…。！？"
	closers      = `)]}"'’”»` + sentenceEnds
)

// firstReaction returns the reaction that opens text: its first sentence
// or its first line (whichever ends first), extended by the next while
// what it has is only fillers or the next opens with a contrast word; rest
// reports whether text goes on after it. A sentence ends at ., !, ? or … (and any closing quotes or brackets)
// followed by a space or by anything but a lower-case letter or a digit
// ("3.5" and "example.com" do not end one; nor does a quotation
// ending with its own mark when the sentence goes on in lower case:
// `I wanted "Hi!" up front.`).
func firstReaction(text string) (reaction string, rest bool) {
	text = strings.TrimSpace(text)
	end := 0
	for {
		n := sentenceEnd(text[end:])
		end += n
		after := strings.TrimLeftFunc(text[end:], unicode.IsSpace)
		if after == "" {
			return text, false
		}
		if !opensWithContrast(after) && !onlyFillers(text[:end]) {
			return strings.TrimSpace(text[:end]), true
		}
		end = len(text) - len(after)
	}
}

// sentenceEnd returns the length of the sentence or line that opens s.
func sentenceEnd(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\n' || r == '\r':
			return i
		case strings.ContainsRune(sentenceEnds, r):
			j, quoted := i+n, false
			for j < len(s) {
				c, m := utf8.DecodeRuneInString(s[j:])
				if !strings.ContainsRune(closers, c) {
					break
				}
				quoted = quoted || !strings.ContainsRune(sentenceEnds, c)
				j += m
			}
			if j == len(s) {
				return j
			}
			c, _ := utf8.DecodeRuneInString(s[j:])
			if quoted && c == ' ' {
				// A quotation that ends with its own mark: the sentence
				// goes on if the next word does (`I wanted "Hi!" first.`).
				c, _ = utf8.DecodeRuneInString(s[j+1:])
			}
			if !unicode.IsLower(c) && !unicode.IsDigit(c) {
				return j
			}
			i = j
		default:
			i += n
		}
	}
	return len(s)
}

func opensWithContrast(s string) bool {
	for _, w := range contrastWords {
		if len(s) >= len(w) && strings.EqualFold(s[:len(w)], w) {
			r, _ := utf8.DecodeRuneInString(s[len(w):])
			if len(s) == len(w) || !unicode.IsLetter(r) {
				return true
			}
		}
	}
	return false
}

// leadingReactions returns the first n reactions of text (firstReaction
// applied n times) and whether text goes on after them.
func leadingReactions(text string, n int) (lead string, rest bool) {
	text = strings.TrimSpace(text)
	end := 0
	for range n {
		r, more := firstReaction(text[end:])
		end = len(text) - len(strings.TrimSpace(text[end:])) + len(r)
		if !more {
			return text, false
		}
	}
	return strings.TrimSpace(text[:end]), true
}

// reactionTurn returns t with its next state cut to the first n reactions
// of the user's next message, and whether that cut anything (false when
// the next state does not begin with a user message, or is no more than
// that).
func reactionTurn(t *Turn, n int) (Turn, bool) {
	if len(t.NextState) == 0 || !isUserRole(t.NextState[0].Role) {
		return Turn{}, false
	}
	first := t.NextState[0]
	lead, rest := leadingReactions(first.Content, n)
	if (!rest && len(t.NextState) == 1) || lead == "" {
		return Turn{}, false
	}
	cut := *t
	first.Content = lead
	cut.NextState = []tokenizer.Message{first}
	return cut, true
}

func isUserRole(role string) bool { return role == "user" || role == "" }

// Quoting. The judge reads the conversation between section lines ("===
// WHAT HAPPENED NEXT ===", "=== END ===") under role lines ("[user]"); a
// quoted text that writes such lines could end its section early and
// forge what follows. Inside quoted text they are rewritten: a line that
// opens with "===" gets its signs spaced ("= = ="), and a line that is a
// bracketed label alone gets parentheses. Ordinary text is unchanged.

var (
	sectionLineRE = regexp.MustCompile(`(?m)^([ \t]*)={3,}`)
	labelLineRE   = regexp.MustCompile(`(?m)^([ \t]*)\[([^\[\]\n]{1,80})\]([ \t]*)$`)
)

// quoteBody rewrites the lines of a quoted text that could pass for the
// transcript's own structure.
func quoteBody(s string) string {
	if !strings.Contains(s, "===") && !strings.Contains(s, "[") {
		return s
	}
	s = sectionLineRE.ReplaceAllStringFunc(s, func(m string) string {
		lead := strings.TrimRight(m, "=")
		return lead + strings.TrimSuffix(strings.Repeat("= ", len(m)-len(lead)), " ")
	})
	return labelLineRE.ReplaceAllString(s, "$1($2)$3")
}
