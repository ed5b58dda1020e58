package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/clawrl/clawrl/tokenizer"
)

// digest identifies a normalised message, or a chain of them.
type digest [sha256.Size]byte

// hasher computes message digests; it reuses one SHA-256 state.
type hasher struct {
	h    hash.Hash
	buf  []byte
	text []byte
}

func newHasher() *hasher { return &hasher{h: sha256.New()} }

// message returns the digest of m's normalised form: its role, its
// whitespace-collapsed content (an assistant's leading <think> block
// removed), and for each tool call its name and canonical arguments.
// Tool-call ids, tool_call_id, reasoning and names do not count: clients
// rewrite or drop them.
func (hs *hasher) message(m tokenizer.Message) digest {
	hs.h.Reset()
	role := strings.ToLower(m.Role)
	if role == "developer" {
		role = "system"
	}
	hs.field(role)
	content := m.Content
	if role == "assistant" {
		content = stripThink(content)
	}
	hs.text = appendCollapsed(hs.text[:0], asJSONText(content))
	hs.fieldBytes(hs.text)
	for _, tc := range m.ToolCalls {
		hs.field("\x00call")
		hs.field(strings.TrimSpace(tc.Function.Name))
		hs.field(canonicalArgs(tc.Function.Arguments))
	}
	var d digest
	hs.h.Sum(d[:0])
	return d
}

// field writes s with its length, so that fields cannot run into each other.
func (hs *hasher) field(s string) {
	hs.buf = binary.AppendUvarint(hs.buf[:0], uint64(len(s)))
	hs.buf = append(hs.buf, s...)
	hs.h.Write(hs.buf)
}

func (hs *hasher) fieldBytes(b []byte) {
	hs.buf = binary.AppendUvarint(hs.buf[:0], uint64(len(b)))
	hs.h.Write(hs.buf)
	hs.h.Write(b)
}

// link returns the digest of a chain extended by one message digest.
func (hs *hasher) link(prev, next digest) digest {
	hs.h.Reset()
	hs.h.Write(prev[:])
	hs.h.Write(next[:])
	var d digest
	hs.h.Sum(d[:0])
	return d
}

// chain returns c with c[0] the chain of owner (the empty chain for no
// owner) and c[i+1] the digest of msgs[:i+1]; len(c) == len(msgs)+1. The
// owner starts the chain, so that one owner's conversation never matches
// another's, however alike.
func (hs *hasher) chain(owner string, msgs []tokenizer.Message) []digest {
	c := make([]digest, len(msgs)+1)
	if owner != "" {
		hs.h.Reset()
		hs.field("owner")
		hs.field(owner)
		hs.h.Sum(c[0][:0])
	}
	for i, m := range msgs {
		c[i+1] = hs.link(c[i], hs.message(m))
	}
	return c
}

// stripThink removes a leading <think>...</think> block, which some clients
// send back inside the content.
func stripThink(s string) string {
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	if !strings.HasPrefix(t, "<think>") {
		return s
	}
	if i := strings.Index(t, "</think>"); i >= 0 {
		return t[i+len("</think>"):]
	}
	return s
}

// appendCollapsed appends s to dst with leading and trailing white space
// removed and every inner run of white space turned into one space.
func appendCollapsed(dst []byte, s string) []byte {
	dst = slices.Grow(dst, len(s))
	start := len(dst)
	word := -1 // start of the current run of non-space bytes
	for i := 0; i < len(s); {
		c := s[i]
		size := 1
		var isSpace bool
		if c < utf8.RuneSelf {
			isSpace = c == ' ' || ('\t' <= c && c <= '\r')
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			isSpace = unicode.IsSpace(r)
		}
		switch {
		case isSpace && word >= 0:
			if len(dst) > start {
				dst = append(dst, ' ')
			}
			dst = append(dst, s[word:i]...)
			word = -1
		case !isSpace && word < 0:
			word = i
		}
		i += size
	}
	if word >= 0 {
		if len(dst) > start {
			dst = append(dst, ' ')
		}
		dst = append(dst, s[word:]...)
	}
	return dst
}

// asJSONText is s as a client reads it back from a JSON response: every
// byte that is not part of valid UTF-8 becomes U+FFFD, as encoding/json
// writes it. A reply the model sampled with invalid bytes then matches the
// history the client sends back.
func asJSONText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// canonicalArgs renders tool-call arguments (a JSON object, or a JSON string
// holding one) as compact JSON with sorted keys; text that is not JSON is
// only trimmed.
func canonicalArgs(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "{}"
	}
	text := raw
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		text = []byte(strings.TrimSpace(s))
		if len(text) == 0 {
			return "{}"
		}
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return string(text)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(text)
	}
	return string(out)
}
