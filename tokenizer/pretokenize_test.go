package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode"
)

func pieces(m matcher, s string) []string {
	var out []string
	m.find(s, func(start, end int) { out = append(out, s[start:end]) })
	return out
}

func TestQwenMatcher(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello world", []string{"Hello", " world"}},
		{"I'm here, aren't you?", []string{"I", "'m", " here", ",", " aren", "'t", " you", "?"}},
		{"IT'S 'Re 'ſ", []string{"IT", "'S", " '", "Re", " '", "ſ"}},
		{"'sa", []string{"'s", "a"}},
		{"12345", []string{"1", "2", "3", "4", "5"}},
		{" 12", []string{" ", "1", "2"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a   \n\n  b", []string{"a", "   \n\n", " ", " b"}},
		{"x  ", []string{"x", "  "}},
		{"x \t", []string{"x", " \t"}},
		{"\tfoo", []string{"\tfoo"}},
		{"\u00a0foo", []string{"\u00a0foo"}},
		{"!!!\n\nx", []string{"!!!\n\n", "x"}},
		{" ...\r\n", []string{" ...\r\n"}},
		{" \n", []string{" \n"}},
		{"a\r\n\r\nb", []string{"a", "\r\n\r\n", "b"}},
		{"$x", []string{"$x"}},
		{"\nx", []string{"\n", "x"}},
		{"你好，世界", []string{"你好", "，世界"}},
		{"👍🏽ok", []string{"👍🏽", "ok"}},
		{"\xffab", []string{"\xffab"}}, // an invalid byte reads as U+FFFD, a symbol
		{"a\xff\xfe", []string{"a", "\xff\xfe"}},
	} {
		if got := pieces(qwenMatcher{maxDigits: 1}, c.in); !slices.Equal(got, c.want) {
			t.Errorf("split %q = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLlama3Digits(t *testing.T) {
	got := pieces(qwenMatcher{maxDigits: 3}, "1234567 ab12")
	want := []string{"123", "456", "7", " ab", "12"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestGPT2Matcher(t *testing.T) {
	got := pieces(gpt2Matcher{}, "Hello world's  123 ok!! 'S\n\n x")
	want := []string{"Hello", " world", "'s", " ", " 123", " ok", "!!", " '", "S", "\n\n", " x"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestCharClassesMatchRegexp2 checks, for every rune, that the classes the
// hand-written matchers use agree with regexp2's \s, \p{L} and \p{N}.
func TestCharClassesMatchRegexp2(t *testing.T) {
	if testing.Short() {
		t.Skip("walks all of Unicode")
	}
	for _, c := range []struct {
		pattern string
		class   uint8
	}{{`^\s$`, clsSpace}, {`^\p{L}$`, clsLetter}, {`^\p{N}$`, clsNumber}} {
		m, err := newRegexMatcher(c.pattern)
		if err != nil {
			t.Fatal(err)
		}
		for r := rune(0); r <= unicode.MaxRune; r += 1 + r/0x4000 { // dense low, sampled high
			if r >= 0xD800 && r <= 0xDFFF {
				continue
			}
			s := string(r)
			got := len(pieces(m, s)) == 1
			if want := classOfRune(r)&c.class != 0; got != want {
				t.Errorf("%U: regexp2 %s = %v, hand-written = %v", r, c.pattern, got, want)
			}
		}
	}
}

// matcherSeeds are inputs that reach every branch of the patterns.
var matcherSeeds = []string{
	"", " ", "a", "1", "!", "\n", "\r\n", "'s", "'S", "'ſ", "'re", "'RE", "'ll", "'x",
	"Hello, world! I'm here.  Two  spaces\n\n\tTab 12345 6789",
	"   \n  \n\n  x  ", "x   ", "a\u00a0b\u3000c\u2028d\u0085e\ufeff",
	"你好，世界！カタカナ 한국어 مرحبا", "👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽", "e\u0301 A\u030A",
	"<|im_start|>user\n{\"a\": [1, 2]}<|im_end|>", "$$\\frac{a}{b}$$", "\xff\xfe\xc3",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n", "    def f(x):\n        return x ** 2\n",
	"...\n\n---\r\n", " ?!\n", "١٢٣ ①② Ⅻ", strings.Repeat(" ", 70) + "x",
}

// FuzzPreTokenizers checks that the hand-written matchers split exactly as
// regexp2 does with the same patterns.
func FuzzPreTokenizers(f *testing.F) {
	for _, s := range matcherSeeds {
		f.Add(s)
	}
	type pair struct {
		name string
		hand matcher
		re   regexMatcher
	}
	var pairs []pair
	for _, c := range []struct {
		name, pattern string
		hand          matcher
	}{
		{"qwen2", PatternQwen2, qwenMatcher{maxDigits: 1}},
		{"llama3", PatternLlama3, qwenMatcher{maxDigits: 3}},
		{"gpt2", patternGPT2, gpt2Matcher{}},
	} {
		re, err := newRegexMatcher(c.pattern)
		if err != nil {
			f.Fatal(err)
		}
		pairs = append(pairs, pair{c.name, c.hand, re})
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range pairs {
			got, want := pieces(p.hand, s), pieces(p.re, s)
			if !slices.Equal(got, want) {
				t.Fatalf("%s split of %q:\nhand    %q\nregexp2 %q", p.name, s, got, want)
			}
		}
	})
}

func TestSplitBehaviors(t *testing.T) {
	// The pattern finds words and punctuation; with invert they are what is
	// kept, and the spaces between are the delimiters.
	re, err := newRegexMatcher(`\w+|[^\w\s]+`)
	if err != nil {
		t.Fatal(err)
	}
	const in = "How are you doing?"
	for _, c := range []struct {
		behavior string
		invert   bool
		want     []string
	}{
		{behaviorRemoved, true, []string{"How", "are", "you", "doing", "?"}},
		{behaviorIsolated, true, []string{"How", " ", "are", " ", "you", " ", "doing", "?"}},
		{behaviorMergedWithPrevious, true, []string{"How ", "are ", "you ", "doing", "?"}},
		{behaviorMergedWithNext, true, []string{"How", " are", " you", " doing", "?"}},
		{behaviorContiguous, true, []string{"How", " ", "are", " ", "you", " ", "doing?"}},
		{behaviorRemoved, false, []string{" ", " ", " "}},
		{behaviorIsolated, false, []string{"How", " ", "are", " ", "you", " ", "doing", "?"}},
	} {
		var got []string
		splitStep{m: re, behavior: c.behavior, invert: c.invert}.apply(in, func(p string) { got = append(got, p) })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s invert=%v: got %q, want %q", c.behavior, c.invert, got, c.want)
		}
	}
}

func TestOtherPreTokenizers(t *testing.T) {
	collect := func(s preStep, in string) []string {
		var out []string
		s.apply(in, func(p string) { out = append(out, p) })
		return out
	}
	for _, c := range []struct {
		name string
		step preStep
		in   string
		want []string
	}{
		{"digits", digitsStep{}, "Hey 123 friend!", []string{"Hey ", "123", " friend!"}},
		{"digits individual", digitsStep{individual: true}, "a12b", []string{"a", "1", "2", "b"}},
		{"bytelevel prefix", byteLevelStep{addPrefixSpace: true}, "Hello", []string{" Hello"}},
		{"bytelevel prefix kept", byteLevelStep{addPrefixSpace: true}, " Hello", []string{" Hello"}},
		{"bytelevel regex", byteLevelStep{addPrefixSpace: true, split: gpt2Matcher{}}, "Hi there", []string{" Hi", " there"}},
		{"literal", splitStep{m: literalMatcher{"--"}, behavior: behaviorIsolated}, "a--b----c", []string{"a", "--", "b", "--", "--", "c"}},
		{"sequence", sequence{digitsStep{}, splitStep{m: literalMatcher{" "}, behavior: behaviorRemoved}}, "ab 12 c", []string{"ab", "12", "c"}},
	} {
		if got := collect(c.step, c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}
