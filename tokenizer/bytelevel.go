package tokenizer

// The byte-level alphabet maps each of the 256 byte values to a printable
// rune, so that any byte string can be written as a vocabulary entry in
// tokenizer.json. Printable Latin-1 bytes map to themselves; the rest (control
// bytes, space, DEL, NBSP, soft hyphen) map to U+0100 upwards, in byte order.
var (
	byteToRune [256]rune
	runeToByte = make(map[rune]byte, 256)
)

func init() {
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = next
			next++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode turns a byte-level vocabulary entry back into raw bytes.
// ok is false when the entry holds a rune outside the alphabet (an added
// token such as "<|im_start|>" is fine, one with a literal space is not).
func byteLevelDecode(s string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(s))
	for _, r := range s {
		b, found := runeToByte[r]
		if !found {
			return nil, false
		}
		raw = append(raw, b)
	}
	return raw, true
}
