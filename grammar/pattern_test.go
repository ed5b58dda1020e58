package grammar

import (
	"regexp"
	"testing"
	"unicode/utf8"
)

var testPatterns = []string{`^[A-Z_][A-Z0-9_]*$`, `ab+c`, `^(foo|bar)\d{2}`, `x$`, `^$`, `é+`, `(?i)^ok`, `^[^a-z]{2,3}$`, `a|^b`, `.`}

// pattern agrees with Go's regexp on whole texts, a text's prefixes are
// viable whenever the text matches, and shortest gives a length that
// some completion reaches.
func TestPattern(t *testing.T) {
	texts := []string{"", "A", "AB_1", "a", "abbc", "xxabcx", "foo12", "bar1", "1foo12", "x", "ax", "xa", "é", "aé", "OK!", "Ok", "AB", "ABCD", "1é", "b", "cb", "ca"}
	for _, src := range testPatterns {
		p, err := compilePattern(src)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(src)
		for _, s := range texts {
			if got, want := p.matches(s), re.MatchString(s); got != want {
				t.Errorf("%s: matches(%q) = %v, want %v", src, s, got, want)
			}
			if re.MatchString(s) {
				for i := 0; i <= len(s); i++ {
					if !p.viable(s[:i]) {
						t.Errorf("%s: %q matches but its prefix %q is not viable", src, s, s[:i])
					}
				}
			}
		}
		if n := p.shortest(""); n > 5 {
			t.Errorf("%s: shortest match %d bytes", src, n)
		}
	}
	p, _ := compilePattern(`^[A-Z]+$`)
	for _, c := range []struct {
		s      string
		viable bool
		short  int
	}{{"", true, 1}, {"AB", true, 0}, {"A:", false, infLen}, {"a", false, infLen}, {"\xc3", false, infLen}} {
		if v := p.viable(c.s); v != c.viable {
			t.Errorf("viable(%q) = %v", c.s, v)
		}
		if c.viable {
			if n := p.shortest(c.s); n != c.short {
				t.Errorf("shortest(%q) = %d, want %d", c.s, n, c.short)
			}
		}
	}
	e, _ := compilePattern(`^é`)
	if !e.viable("\xc3") || e.viable("\xe2") {
		t.Error("a partial UTF-8 sequence is judged by the runes it may become")
	}
}

// FuzzPattern: pattern matches exactly where regexp does, and every
// prefix of a matching text is viable.
func FuzzPattern(f *testing.F) {
	for i, src := range testPatterns {
		f.Add(i, "AB_1")
		f.Add(i, "foo12é")
		f.Add(i, src)
	}
	f.Fuzz(func(t *testing.T, which int, s string) {
		src := testPatterns[(which%len(testPatterns)+len(testPatterns))%len(testPatterns)]
		if !utf8.ValidString(s) {
			return
		}
		p, err := compilePattern(src)
		if err != nil {
			t.Fatal(err)
		}
		want := regexp.MustCompile(src).MatchString(s)
		if p.matches(s) != want {
			t.Fatalf("%s: matches(%q) = %v, want %v", src, s, !want, want)
		}
		if want {
			for i := 0; i <= len(s); i++ {
				if !p.viable(s[:i]) {
					t.Fatalf("%s: %q matches but its prefix %q is not viable", src, s, s[:i])
				}
			}
		}
	})
}
