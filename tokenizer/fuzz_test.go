package tokenizer

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// fuzzTokenizers are the small trained tokenizer and, when their files
// are present, Qwen3's and the SentencePiece one (spm_test.go).
func fuzzTokenizers(f *testing.F) []*Tokenizer {
	toks := []*Tokenizer{smallTokenizer(f)}
	if qwen3Dir() != "" {
		toks = append(toks, qwen3Tokenizer(f))
	}
	if d := spmDir(); d != "" {
		tok, err := Load(d)
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	return toks
}

// FuzzEncodeDecode: encoding never panics and only yields valid ids, and
// decoding gives back any valid NFC text exactly.
func FuzzEncodeDecode(f *testing.F) {
	toks := fuzzTokenizers(f)
	for _, s := range matcherSeeds {
		f.Add(s)
	}
	f.Add("<|im_start|>user\nhi<|im_end|><|endoftext|><think>x</think>")
	f.Fuzz(func(t *testing.T, s string) {
		roundTrips := utf8.ValidString(s) && norm.NFC.IsNormalString(s)
		for _, tok := range toks {
			for i, enc := range []func(string) []int32{tok.Encode, tok.EncodeOrdinary} {
				ids := enc(s)
				for _, id := range ids {
					if !tok.valid(id) {
						t.Fatalf("Encode(%q) yields invalid id %d", s, id)
					}
				}
				exact := roundTrips
				if tok.model.chars {
					// SentencePiece puts a "▁" before each piece of text
					// between special tokens (decoded as a space), and
					// decodes a typed "▁" as a space, as Hugging Face does.
					exact = exact && i == 1 && !strings.Contains(s, metaspace)
				}
				if got := tok.Decode(ids); exact && got != s {
					t.Fatalf("Decode(Encode(%q)) = %q", s, got)
				}
			}
		}
	})
}

// idsFromBytes reads little-endian int32s, so that the fuzzer reaches
// negative, huge and in-range ids alike.
func idsFromBytes(data []byte) []int32 {
	ids := make([]int32, len(data)/4)
	for i := range ids {
		ids[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return ids
}

func idsToBytes(ids ...int32) []byte {
	var b []byte
	for _, id := range ids {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return b
}

// FuzzDecode: any ids, in range or not, decode without panicking;
// DecodeChecked fails exactly when one is out of range; and a StreamDecoder
// fed the same ids yields the same text, in whole characters whenever the
// text is valid UTF-8.
func FuzzDecode(f *testing.F) {
	toks := fuzzTokenizers(f)
	f.Add(idsToBytes(104, 105))
	f.Add(idsToBytes(-1, 0, 255, 1<<30))
	f.Add(idsToBytes(0xF0, 0x9F, 0x91, 0x8D)) // 👍 byte by byte (ids = bytes in the small tokenizer)
	f.Add(idsToBytes(0xE2, 0x82, 0x41))
	f.Fuzz(func(t *testing.T, data []byte) {
		ids := idsFromBytes(data)
		for _, tok := range toks {
			want := tok.Decode(ids)
			invalid := false
			for _, id := range ids {
				invalid = invalid || !tok.valid(id)
			}
			got, err := tok.DecodeChecked(ids)
			if (err != nil) != invalid || (err == nil && got != want) {
				t.Fatalf("DecodeChecked(%v) = %q, %v; Decode = %q", ids, got, err, want)
			}
			d := tok.NewStreamDecoder()
			var sb strings.Builder
			valid := utf8.ValidString(want)
			for _, id := range ids {
				p := d.Add(id)
				if valid && !utf8.ValidString(p) {
					t.Fatalf("stream piece %q of valid text %q is not valid UTF-8", p, want)
				}
				sb.WriteString(p)
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Fatalf("stream decode of %v = %q, Decode = %q", ids, sb.String(), want)
			}
		}
	})
}
