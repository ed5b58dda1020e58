package grammar

import "slices"

// Vocab maps token ids to the bytes they stand for (special tokens to
// their text).
type Vocab [][]byte

// Constraint is a generation's grammar over a vocabulary, as the
// scheduler's sampler uses it: Allow says whether a token may come next,
// Accept moves past the token chosen. Stop tokens are allowed only once
// the grammar is complete, and once it is only they are. Not safe for
// concurrent use: each generation owns one.
type Constraint struct {
	m     *Matcher
	vocab Vocab
	stops []int32
	// first caches, for the current position, which bytes may come next:
	// a token whose first byte may not is refused without a trial.
	first    [256]bool
	firstSet bool
	scratch  Matcher // trials run on a copy of m kept here
}

// try reports whether m accepts b, on the scratch copy.
func (c *Constraint) try(b []byte) bool {
	c.m.copyInto(&c.scratch)
	return c.scratch.FeedBytes(b)
}

// NewConstraint starts g over vocab; stops are the generation's stop
// tokens.
func NewConstraint(g *Grammar, vocab Vocab, stops []int32) *Constraint {
	return &Constraint{m: g.Start(), vocab: vocab, stops: stops}
}

// Allow reports whether tok may come next. It does not change the
// constraint's position (it caches what the position allows).
func (c *Constraint) Allow(tok int32) bool {
	if slices.Contains(c.stops, tok) {
		return c.m.Done()
	}
	if tok < 0 || int(tok) >= len(c.vocab) || len(c.vocab[tok]) == 0 {
		return false
	}
	b := c.vocab[tok]
	if !c.firstSet {
		for x := range 256 {
			c.first[x] = c.try([]byte{byte(x)})
		}
		c.firstSet = true
	}
	if !c.first[b[0]] {
		return false
	}
	if len(b) == 1 {
		return true
	}
	return c.try(b)
}

// Accept moves past tok, which Allow accepted.
func (c *Constraint) Accept(tok int32) {
	c.firstSet = false
	if slices.Contains(c.stops, tok) {
		return
	}
	if tok >= 0 && int(tok) < len(c.vocab) {
		c.m.FeedBytes(c.vocab[tok])
	}
}

// Done reports whether the generation so far is complete.
func (c *Constraint) Done() bool { return c.m.Done() }
