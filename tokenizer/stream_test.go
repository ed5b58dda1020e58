package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestStreamDecoder(t *testing.T) {
	tok := smallTokenizer(t)
	bytesOf := func(s string) []int32 { // one byte token per byte
		ids := make([]int32, len(s))
		for i := range len(s) {
			ids[i] = tok.model.byteID[s[i]]
		}
		return ids
	}
	for _, c := range []struct {
		name   string
		ids    []int32
		pieces []string // what each Add returns, then Flush
	}{
		{"ascii", bytesOf("ab"), []string{"a", "b", ""}},
		{"emoji by bytes", bytesOf("a👍b"), []string{"a", "", "", "", "👍", "b", ""}},
		{"two byte char", bytesOf("é"), []string{"", "é", ""}},
		{"cut at the end", bytesOf("x\xe2\x82"), []string{"x", "", "", "\xe2\x82"}},
		{"invalid byte passes at once", bytesOf("\xffz"), []string{"\xff", "z", ""}},
		{"lone continuation", bytesOf("\x82a"), []string{"\x82", "a", ""}},
		{"bad second byte", bytesOf("\xe2A"), []string{"", "\xe2A", ""}},
		{"out of range skipped", []int32{'h', -1, 99999, 'i'}, []string{"h", "", "", "i", ""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := tok.NewStreamDecoder()
			var got []string
			for _, id := range c.ids {
				got = append(got, d.Add(id))
			}
			got = append(got, d.Flush())
			if !slices.Equal(got, c.pieces) {
				t.Errorf("pieces %q, want %q", got, c.pieces)
			}
			if joined := strings.Join(got, ""); joined != tok.Decode(c.ids) {
				t.Errorf("joined %q != Decode %q", joined, tok.Decode(c.ids))
			}
		})
	}
}

func TestStreamDecoderRealTokens(t *testing.T) {
	tok := smallTokenizer(t)
	text := "Emoji 👨‍👩‍👧‍👦 and 你好 and é — fine.<|im_end|>"
	ids := tok.Encode(text)
	d := tok.NewStreamDecoder()
	var sb strings.Builder
	for _, id := range ids {
		p := d.Add(id)
		if !utf8.ValidString(p) {
			t.Fatalf("piece %q is not valid UTF-8", p)
		}
		sb.WriteString(p)
	}
	sb.WriteString(d.Flush())
	if sb.String() != text {
		t.Errorf("stream = %q, want %q", sb.String(), text)
	}
}
