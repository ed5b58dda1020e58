package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// preStep is one pre-tokenizer of a tokenizer.json pipeline: it cuts a piece
// of text into smaller pieces, in order, calling emit for each non-empty one.
type preStep interface {
	apply(s string, emit func(string))
}

// sequence runs its steps one after the other, feeding every piece of a step
// into the next.
type sequence []preStep

func (q sequence) apply(s string, emit func(string)) {
	switch len(q) {
	case 0:
		if s != "" {
			emit(s)
		}
	case 1:
		q[0].apply(s, emit)
	default:
		rest := q[1:]
		q[0].apply(s, func(p string) { rest.apply(p, emit) })
	}
}

// Split delimiter behaviours, as tokenizer.json spells them.
const (
	behaviorRemoved            = "Removed"
	behaviorIsolated           = "Isolated"
	behaviorMergedWithPrevious = "MergedWithPrevious"
	behaviorMergedWithNext     = "MergedWithNext"
	behaviorContiguous         = "Contiguous"
)

// splitStep is the Split pre-tokenizer.
type splitStep struct {
	m        matcher
	behavior string
	invert   bool
}

type segment struct {
	start, end int
	match      bool
}

func (p splitStep) apply(s string, emit func(string)) {
	if p.behavior == behaviorIsolated && !p.invert {
		// The common case, without building a segment list.
		last := 0
		p.m.find(s, func(start, end int) {
			if start > last {
				emit(s[last:start])
			}
			emit(s[start:end])
			last = end
		})
		if last < len(s) {
			emit(s[last:])
		}
		return
	}

	var segs []segment
	last := 0
	p.m.find(s, func(start, end int) {
		if start > last {
			segs = append(segs, segment{last, start, p.invert})
		}
		segs = append(segs, segment{start, end, !p.invert})
		last = end
	})
	if last < len(s) {
		segs = append(segs, segment{last, len(s), p.invert})
	}

	var out []segment
	switch p.behavior {
	case behaviorRemoved:
		for _, g := range segs {
			if !g.match {
				out = append(out, g)
			}
		}
	case behaviorIsolated:
		out = segs
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, g := range segs {
			if g.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = g.end
			} else {
				out = append(out, g)
			}
			prevMatch = g.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			g := segs[i]
			if g.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = g.start
			} else {
				out = append(out, g)
			}
			prevMatch = g.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case behaviorContiguous:
		prevMatch := false
		for _, g := range segs {
			if g.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = g.end
			} else {
				out = append(out, g)
			}
			prevMatch = g.match
		}
	}
	for _, g := range out {
		if g.end > g.start {
			emit(s[g.start:g.end])
		}
	}
}

// byteLevelStep is the ByteLevel pre-tokenizer. The mapping of bytes to
// printable runes needs no work here (the model works on raw bytes), so
// what is left is the optional prefix space and the optional GPT-2 split.
type byteLevelStep struct {
	addPrefixSpace bool
	split          matcher // nil unless use_regex
}

func (b byteLevelStep) apply(s string, emit func(string)) {
	if b.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if b.split == nil {
		if s != "" {
			emit(s)
		}
		return
	}
	splitStep{m: b.split, behavior: behaviorIsolated}.apply(s, emit)
}

// digitsStep is the Digits pre-tokenizer: runs of numeric runes (\p{N}, as
// Rust's char::is_numeric) are isolated, one rune at a time when individual
// is set.
type digitsStep struct{ individual bool }

func (d digitsStep) apply(s string, emit func(string)) {
	last := 0
	for i := 0; i < len(s); {
		c, n := classAt(s, i)
		if c&clsNumber == 0 {
			i += n
			continue
		}
		if i > last {
			emit(s[last:i])
		}
		j := i + n
		if !d.individual {
			j = scanClass(s, j, clsNumber)
		}
		emit(s[i:j])
		last, i = j, j
	}
	if last < len(s) {
		emit(s[last:])
	}
}

// normalizer rewrites text before pre-tokenization: its steps in order. A
// nil normalizer leaves text unchanged.
type normalizer []normStep

// normStep is one normalizer of a tokenizer.json pipeline.
type normStep interface {
	normalize(s string) string
}

func (n normalizer) normalize(s string) string {
	for _, f := range n {
		s = f.normalize(s)
	}
	return s
}

// isForm reports whether n is exactly the Unicode normalization form f.
func (n normalizer) isForm(f norm.Form) bool {
	g, ok := n.onlyStep().(formStep)
	return ok && g.f == f
}

func (n normalizer) onlyStep() normStep {
	if len(n) != 1 {
		return nil
	}
	return n[0]
}

// formStep is a Unicode normalization form (NFC, NFD, NFKC, NFKD).
type formStep struct{ f norm.Form }

func (f formStep) normalize(s string) string {
	if f.f.IsNormalString(s) {
		return s
	}
	return f.f.String(s)
}

// prependStep is the Prepend normalizer: it puts its text before any
// non-empty piece (SentencePiece's "▁" before the first word).
type prependStep struct{ prefix string }

func (p prependStep) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// replaceStep is the Replace normalizer with a literal pattern (spaces
// as "▁" in SentencePiece models).
type replaceStep struct{ old, new string }

func (r replaceStep) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }
