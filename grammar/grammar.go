package grammar

import (
	"math"
	"slices"
)

// Part is a piece of a grammar: literal text, or (Schema set) one JSON
// value of a schema.
type Part struct {
	Text   string
	Schema *Schema
}

// Grammar is a choice of sequences of parts: what a whole generation may
// be. For a forced tool call it is the JSON arguments and the closing
// text; for "required" one alternative per declared tool, each starting
// with its name.
type Grammar struct {
	Alts [][]Part
}

// Matcher is a generation's position in a Grammar: the alternatives still
// live.
type Matcher struct {
	alts []alt
}

type alt struct {
	parts []Part
	i     int    // current part
	off   int    // bytes of a literal part matched
	js    *State // a JSON part's state (nil until it starts)
}

// Start returns a matcher at the beginning of g.
func (g *Grammar) Start() *Matcher {
	m := &Matcher{}
	for _, ps := range g.Alts {
		m.alts = append(m.alts, alt{parts: ps})
	}
	return m
}

// Clone returns an independent copy.
func (m *Matcher) Clone() *Matcher {
	c := &Matcher{alts: slices.Clone(m.alts)}
	for i := range c.alts {
		if c.alts[i].js != nil {
			c.alts[i].js = c.alts[i].js.Clone()
		}
	}
	return c
}

// copyInto makes dst a copy of m, reusing dst's memory (its JSON states).
func (m *Matcher) copyInto(dst *Matcher) {
	old := dst.alts[:cap(dst.alts)]
	dst.alts = dst.alts[:0]
	for i, a := range m.alts {
		if a.js != nil {
			var js *State
			if i < len(old) {
				js = old[i].js
			}
			if js == nil || js == a.js {
				js = &State{}
			}
			a.js.copyInto(js)
			a.js = js
		}
		dst.alts = append(dst.alts, a)
	}
}

// Done reports whether the bytes so far are a whole generation of the
// grammar.
func (m *Matcher) Done() bool {
	for i := range m.alts {
		if m.alts[i].complete() {
			return true
		}
	}
	return false
}

// complete reports whether a has consumed every part (a trailing JSON
// value counts when its state is Done).
func (a *alt) complete() bool {
	i, off, js := a.i, a.off, a.js
	for i < len(a.parts) {
		p := a.parts[i]
		if p.Schema != nil {
			if js == nil || !js.Done() {
				return false
			}
		} else if off < len(p.Text) {
			return false
		}
		i, off, js = i+1, 0, nil
	}
	return true
}

// Feed extends the generation by byte c; false when no alternative
// accepts it (the matcher is then unusable).
func (m *Matcher) Feed(c byte) bool {
	live := m.alts[:0]
	for _, a := range m.alts {
		if a.feed(c) {
			live = append(live, a)
		}
	}
	m.alts = live
	return len(live) > 0
}

// FeedBytes feeds every byte of b.
func (m *Matcher) FeedBytes(b []byte) bool {
	for _, c := range b {
		if !m.Feed(c) {
			return false
		}
	}
	return true
}

func (a *alt) feed(c byte) bool {
	for a.i < len(a.parts) {
		p := a.parts[a.i]
		if p.Schema == nil {
			if a.off < len(p.Text) {
				if p.Text[a.off] != c {
					return false
				}
				a.off++
				if a.off == len(p.Text) {
					a.i, a.off = a.i+1, 0
				}
				return true
			}
			a.i, a.off = a.i+1, 0
			continue
		}
		if a.js == nil {
			a.js = NewState(p.Schema)
		}
		if !a.js.Done() {
			// The value goes on: c is its byte or nothing's.
			return a.js.Feed(c)
		}
		try := a.js.Clone()
		if try.Feed(c) {
			a.js = try
			return true
		}
		if !a.js.Done() {
			return false
		}
		// The value is complete and c is not part of it: the next part.
		a.i, a.off, a.js = a.i+1, 0, nil
	}
	return false
}

// MinRemaining is the fewest bytes that complete the generation from
// here, over the live alternatives.
func (m *Matcher) MinRemaining() int {
	best := math.MaxInt32
	for i := range m.alts {
		best = min(best, m.alts[i].minRemaining())
	}
	return best
}

func (a *alt) minRemaining() int {
	n := 0
	for i := a.i; i < len(a.parts); i++ {
		p := a.parts[i]
		switch {
		case p.Schema == nil && i == a.i:
			n += len(p.Text) - a.off
		case p.Schema == nil:
			n += len(p.Text)
		case i == a.i && a.js != nil:
			n += a.js.MinRemaining()
		default:
			n += p.Schema.shortest
		}
	}
	return n
}
