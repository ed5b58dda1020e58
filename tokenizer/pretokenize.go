package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// Split patterns with a hand-written matcher. A tokenizer.json whose Split
// pattern is exactly one of these strings never runs the regexp engine; any
// other pattern runs through regexp2, which supports the look-ahead these
// patterns use and which Go's regexp lacks.
const (
	// PatternQwen2 is the pre-tokenizer pattern of Qwen2, Qwen2.5 and Qwen3:
	// numbers are split into single digits. It is the default for Train.
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternLlama3 is the pattern of Llama 3 (and of OpenAI's cl100k):
	// numbers are split into groups of up to three digits.
	PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternGPT2 is the pattern a ByteLevel pre-tokenizer applies when its
	// use_regex option is on.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// matcher finds the successive, non-overlapping, non-empty matches of a
// pattern, leftmost first, as a regexp engine would.
type matcher interface {
	find(s string, fn func(start, end int))
}

// newMatcher returns the hand-written matcher for a known pattern and a
// regexp2 matcher for any other.
func newMatcher(pattern string) (matcher, error) {
	switch pattern {
	case PatternQwen2:
		return qwenMatcher{maxDigits: 1}, nil
	case PatternLlama3:
		return qwenMatcher{maxDigits: 3}, nil
	case patternGPT2:
		return gpt2Matcher{}, nil
	}
	return newRegexMatcher(pattern)
}

// regexMatcher runs a pattern through regexp2.
type regexMatcher struct {
	re      *regexp2.Regexp
	pattern string
}

func newRegexMatcher(pattern string) (regexMatcher, error) {
	// Tokenizer patterns are Oniguruma (Rust) syntax; regexp2's default
	// .NET-like mode reads them the same way, and its \s, \p{L} and \p{N}
	// classes agree with Go's unicode package (tested). The backtracking
	// stack is unbounded so that long whitespace runs cannot fail a match.
	re, err := regexp2.Compile(pattern, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return regexMatcher{}, fmt.Errorf("compile split pattern %q: %w", pattern, err)
	}
	return regexMatcher{re: re, pattern: pattern}, nil
}

func (m regexMatcher) find(s string, fn func(start, end int)) {
	locs, err := m.re.FindAllStringIndex(s, -1)
	if err != nil {
		// Only a timeout or stack limit can fail a match, and neither is set;
		// should one happen, the text is left unsplit rather than dropped.
		return
	}
	for _, loc := range locs {
		if loc[1] > loc[0] {
			fn(loc[0], loc[1])
		}
	}
}

// literalMatcher splits on a fixed string (a Split pattern given as
// {"String": ...}).
type literalMatcher struct{ lit string }

func (m literalMatcher) find(s string, fn func(start, end int)) {
	if m.lit == "" {
		return
	}
	off := 0
	for {
		i := strings.Index(s[off:], m.lit)
		if i < 0 {
			return
		}
		fn(off+i, off+i+len(m.lit))
		off += i + len(m.lit)
	}
}

// Character classes used by the hand-written matchers. Invalid UTF-8 bytes
// decode to U+FFFD, a symbol, exactly as the regexp engine sees them.
const (
	clsLetter  = 1 << iota // \p{L}
	clsNumber              // \p{N}
	clsSpace               // \s (Unicode White_Space, as unicode.IsSpace)
	clsNewline             // \r or \n (also clsSpace)
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for c := 0; c < utf8.RuneSelf; c++ {
		asciiClass[c] = classOfRune(rune(c))
	}
}

func classOfRune(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsSpace | clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return 0
}

// classAt returns the class of the rune starting at s[i] and its size.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return classOfRune(r), size
}

// scanClass advances from i over runes whose class intersects want.
func scanClass(s string, i int, want uint8) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// scanSymbols advances over runes of [^\s\p{L}\p{N}].
func scanSymbols(s string, i int) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c != 0 {
			break
		}
		i += n
	}
	return i
}

// contraction returns the length of a contraction suffix ('s, 't, 're, 've,
// 'm, 'll, 'd) at the start of s, where s[0] is the apostrophe, or 0.
// With fold set, letters match case-insensitively under Unicode simple case
// folding, as (?i:...) does: S and U+017F (long s) match s.
func contraction(s string, fold bool) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	lower := func(i int) (byte, int) { // folded letter at s[i] and its size
		if i >= len(s) {
			return 0, 0
		}
		c := s[i]
		if !fold {
			return c, 1
		}
		if 'A' <= c && c <= 'Z' {
			return c + ('a' - 'A'), 1
		}
		if c == 0xC5 && i+1 < len(s) && s[i+1] == 0xBF { // U+017F LATIN SMALL LETTER LONG S
			return 's', 2
		}
		return c, 1
	}
	c1, n1 := lower(1)
	switch c1 {
	case 's', 't', 'm', 'd':
		return 1 + n1
	case 'r', 'v', 'l':
		c2, n2 := lower(1 + n1)
		if (c1 == 'r' || c1 == 'v') && c2 == 'e' || c1 == 'l' && c2 == 'l' {
			return 1 + n1 + n2
		}
	}
	return 0
}

// spaceTail matches the whitespace alternatives shared by all three
// patterns at s[i], a whitespace rune: with newlines set, \s*[\r\n]+ first;
// then \s+(?!\S), then \s+.
func spaceTail(s string, i int, newlines bool) int {
	end, lastNL := i, -1
	for end < len(s) {
		c, n := classAt(s, end)
		if c&clsSpace == 0 {
			break
		}
		if c&clsNewline != 0 {
			lastNL = end
		}
		end += n
	}
	if newlines && lastNL >= 0 {
		// \s* backtracks to the last line break of the run; [\r\n]+ takes it.
		return lastNL + 1
	}
	if end == len(s) {
		return end
	}
	// \s+(?!\S): give back the last rune, so that the run stops before
	// the space that leads the next word.
	_, last := utf8.DecodeLastRuneInString(s[i:end])
	if end-last > i {
		return end - last
	}
	return end
}

// qwenMatcher is the hand-written form of PatternQwen2 (maxDigits 1) and
// PatternLlama3 (maxDigits 3).
type qwenMatcher struct{ maxDigits int }

func (m qwenMatcher) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		j := m.matchAt(s, i)
		fn(i, j)
		i = j
	}
}

// matchAt returns the end of the match that starts at s[i]. Every rune
// begins a match of these patterns, so matches tile the input.
func (m qwenMatcher) matchAt(s string, i int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if n := contraction(s[i:], true); n > 0 {
			return i + n
		}
	}
	c0, n0 := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&clsLetter != 0 {
		return scanClass(s, i+n0, clsLetter)
	}
	if c0&(clsNewline|clsNumber) == 0 && i+n0 < len(s) {
		if c1, n1 := classAt(s, i+n0); c1&clsLetter != 0 {
			return scanClass(s, i+n0+n1, clsLetter)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c0&clsNumber != 0 {
		j := i + n0
		for k := 1; k < m.maxDigits && j < len(s); k++ {
			c, n := classAt(s, j)
			if c&clsNumber == 0 {
				break
			}
			j += n
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if s[i] == ' ' {
		j++
	}
	if j < len(s) {
		if c, n := classAt(s, j); c == 0 {
			j = scanSymbols(s, j+n)
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
	}
	// Only whitespace is left.
	return spaceTail(s, i, true)
}

// gpt2Matcher is the hand-written form of patternGPT2.
type gpt2Matcher struct{}

func (gpt2Matcher) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		j := gpt2MatchAt(s, i)
		fn(i, j)
		i = j
	}
}

func gpt2MatchAt(s string, i int) int {
	if s[i] == '\'' {
		if n := contraction(s[i:], false); n > 0 {
			return i + n
		}
	}
	// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a
	// run of one class.
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		j++
	}
	c, n := classAt(s, j)
	switch {
	case c&clsLetter != 0:
		return scanClass(s, j+n, clsLetter)
	case c&clsNumber != 0:
		return scanClass(s, j+n, clsNumber)
	case c == 0:
		return scanSymbols(s, j+n)
	}
	return spaceTail(s, i, false)
}
