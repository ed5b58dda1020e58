package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLossy(t *testing.T) {
	const R = "\uFFFD"
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"café 😀", "café 😀"},
		{"\xff", R},
		{"a\xffb", "a" + R + "b"},
		{"\xf0\x9f\x98", R},         // a cut-short emoji: one maximal subpart
		{"\xf0\x9f\x98a", R + "a"},  // the same, followed by text
		{"\xe0\x80", R + R},         // E0 takes A0..BF second: two parts
		{"\xed\xa0\x80", R + R + R}, // a surrogate: ED takes 80..9F
		{"\xc0\xaf", R + R},         // overlong: C0 never leads
		{"\xf4\x90\x80\x80", R + R + R + R},
		{"\xf5\x80", R + R},
		{"\x80\x80", R + R},
		{"\xe2\x82", R},                   // cut short
		{"\xe2\x82\xe2\x82\xac", R + "€"}, // a cut-short € then a whole one
		{"\xc3\x28", R + "("},             // a bad continuation is not consumed
		{"\xf1\x80\x80", R},               // three of four bytes
		{"Unicode 3.9: \x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64", "Unicode 3.9: a" + R + R + R + "b" + R + "c" + R + R + "d"},
	}
	for _, tt := range tests {
		if got := Lossy(tt.in); got != tt.want {
			t.Errorf("Lossy(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzLossy(f *testing.F) {
	for _, s := range []string{"", "a", "\xf0\x9f\x98", "\xed\xa0\x80x", "😀\xff€"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Lossy(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Lossy(%q) = %q is not valid UTF-8", s, out)
		}
		if utf8.ValidString(s) && out != s {
			t.Fatalf("valid %q changed to %q", s, out)
		}
		if Lossy(out) != out {
			t.Fatalf("not idempotent on %q", s)
		}
		// Never more replacements than bad bytes, never fewer than runs of them.
		if n := strings.Count(out, "\uFFFD") - strings.Count(s, "\uFFFD"); n > len(s) || (!utf8.ValidString(s) && n < 1) {
			t.Fatalf("%q: %d replacements", s, n)
		}
	})
}
