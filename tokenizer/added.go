package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens: a string matched
// in the text before BPE runs and encoded as one id.
type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text, leftmost first and longest at
// the same position, as Hugging Face tokenizers does.
type addedMatcher struct {
	tokens []addedToken
	first  [256]bool // bytes that start some token
	nodes  []trieNode
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into tokens, or -1
}

// newAddedMatcher indexes tokens under the given keys (their content, or
// their normalized content). It returns nil for no tokens.
func newAddedMatcher(tokens []addedToken, keys []string) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{tokens: tokens, nodes: []trieNode{{token: -1}}}
	for ti, key := range keys {
		if key == "" {
			continue
		}
		m.first[key[0]] = true
		n := int32(0)
		for i := 0; i < len(key); i++ {
			child, ok := m.nodes[n].next[key[i]]
			if !ok {
				child = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{token: -1})
				if m.nodes[n].next == nil {
					m.nodes[n].next = make(map[byte]int32)
				}
				m.nodes[n].next[key[i]] = child
			}
			n = child
		}
		if m.nodes[n].token < 0 {
			m.nodes[n].token = int32(ti)
		}
	}
	return m
}

// longestAt returns the longest token that starts at s[i].
func (m *addedMatcher) longestAt(s string, i int) (tok int32, end int) {
	tok, n := -1, int32(0)
	for j := i; j < len(s); j++ {
		child, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = child
		if t := m.nodes[n].token; t >= 0 {
			tok, end = t, j+1
		}
	}
	return tok, end
}

// split cuts s into text and added tokens, calling text for each non-empty
// stretch of plain text and token for each token id, in order. With
// skipSpecial, tokens marked special are left in the text.
//
// A token with single_word set only matches where it is not glued to a word
// character on either side; lstrip and rstrip make a match swallow the
// whitespace on its left or right. A rejected match is passed over whole.
func (m *addedMatcher) split(s string, skipSpecial bool, text func(string), token func(int32)) {
	if m == nil {
		if s != "" {
			text(s)
		}
		return
	}
	done := 0 // s[:done] has been handed out
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti, end := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		t := &m.tokens[ti]
		start := i
		if (skipSpecial && t.Special) ||
			(t.SingleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[end:]))) {
			i = end
			continue
		}
		if t.LStrip {
			start = max(done, start-trailingSpace(s[:start]))
		}
		if t.RStrip {
			end += leadingSpace(s[end:])
		}
		if start > done {
			text(s[done:start])
		}
		token(t.ID)
		done, i = end, end
	}
	if done < len(s) {
		text(s[done:])
	}
}

// isWordChar reports whether r is a \w character: a letter, a mark, a
// decimal digit or connector punctuation.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r)
}

func endsWithWordChar(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// trailingSpace returns the byte length of the whitespace that ends s.
func trailingSpace(s string) int {
	n := 0
	for len(s) > n {
		r, size := utf8.DecodeLastRuneInString(s[:len(s)-n])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}

// leadingSpace returns the byte length of the whitespace that starts s.
func leadingSpace(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}
