package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Lossy returns s with every ill-formed part replaced by U+FFFD, one per
// maximal subpart as the Unicode standard recommends (§3.9, "U+FFFD
// substitution of maximal subparts") and as Hugging Face's tokenizers
// decode (Rust's String::from_utf8_lossy): a lead byte followed by the
// valid continuation bytes it can take, cut short, is one U+FFFD; any
// other bad byte is one U+FFFD. Valid text is returned as it is.
func Lossy(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size > 1 {
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// DecodeLossy is Decode with Lossy applied: the text a client is sent.
func (t *Tokenizer) DecodeLossy(ids []int32) string { return Lossy(t.Decode(ids)) }

// maximalSubpart is the length of the ill-formed prefix of s (which starts
// with a byte that does not begin a valid character) that one U+FFFD
// replaces: the lead byte and the continuation bytes that could still have
// completed it.
func maximalSubpart(s string) int {
	c := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // the valid range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1 // not a lead byte: C0, C1, F5..FF or a stray continuation
	}
	n := 1
	for k := 0; k < need && n < len(s); k++ {
		b := s[n]
		if k == 0 && (b < lo || b > hi) || k > 0 && (b < 0x80 || b > 0xBF) {
			break
		}
		n++
	}
	return n
}
