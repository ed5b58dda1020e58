package tokenizer

import "unicode/utf8"

// StreamDecoder turns a stream of token ids into text as it is generated. A
// token may end in the middle of a multi-byte UTF-8 character (one emoji is
// often several tokens); the decoder holds such an incomplete character back
// until the tokens that complete it arrive, so that every piece it returns
// is whole characters. Bytes that can never become valid UTF-8 are passed
// through at once rather than held.
//
// The concatenation of everything Add and Flush return equals Decode of the
// same ids. A StreamDecoder is for one stream and one goroutine.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte // the tail of an incomplete character, at most 3 bytes
	strip   int    // leading spaces still to strip (see Decode)
}

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, strip: t.stripLead}
}

// Add decodes one more id and returns the text it completes, which may be
// empty. An id that has no token is skipped, as in Decode.
func (d *StreamDecoder) Add(id int32) string {
	if !d.t.valid(id) {
		return ""
	}
	raw := d.t.raw[id]
	if d.strip > 0 {
		n := len(raw)
		raw = stripLeading(raw, d.strip)
		d.strip -= n - len(raw)
		if len(raw) > 0 {
			d.strip = 0 // the text has begun
		}
	}
	buf := append(d.pending, raw...)
	keep := incompleteTail(buf)
	out := string(buf[:len(buf)-keep])
	d.pending = append(d.pending[:0], buf[len(buf)-keep:]...)
	return out
}

// Flush returns whatever is held back (an incomplete character at the end of
// the stream, as raw bytes) and resets the decoder.
func (d *StreamDecoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// incompleteTail returns how many bytes at the end of b are the start of a
// UTF-8 character that more bytes could still complete.
func incompleteTail(b []byte) int {
	// A character is at most 4 bytes, so its start is among the last 3.
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < utf8.RuneSelf {
			return 0 // ASCII: nothing after it can be pending
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(b[len(b)-k:]) {
				return 0
			}
			return k
		}
	}
	return 0
}
