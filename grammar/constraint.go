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

	// budget is how many tokens the generation may still write (-1: not
	// known). A token is allowed only if the bytes the document still
	// needs after it fit in the tokens left after it (one kept for the
	// stop token; every token writes at least a byte), so that a document
	// finishes before max_tokens when it still can.
	budget    int
	posReady  bool // closing is computed for this position
	closing   bool // the budget binds here
	remaining int  // m.MinRemaining() here
}

// closingWindow is how close (in bytes) the budget must come to what the
// document still needs before the budget is checked token by token: no
// token adds more than this to it.
const closingWindow = 256

// SetBudget tells the constraint how many tokens the generation may still
// write, this one included.
func (c *Constraint) SetBudget(tokens int) {
	if tokens != c.budget {
		c.budget, c.posReady = tokens, false
	}
}

// position decides, once per position, whether the budget binds: it is
// near what the document needs, and some single byte keeps the document
// within it (when none does, the estimate is too pessimistic here and the
// budget is ignored).
func (c *Constraint) position() {
	if c.posReady {
		return
	}
	c.posReady, c.closing = true, false
	if c.budget < 0 {
		return
	}
	c.remaining = c.m.MinRemaining()
	if c.budget-2 >= c.remaining+closingWindow {
		return
	}
	for x := range 256 {
		if c.try([]byte{byte(x)}) && c.fits() {
			c.closing = true
			return
		}
	}
}

// fits reports whether the scratch matcher (after a trial token) leaves
// the document completable in the tokens left.
func (c *Constraint) fits() bool {
	return c.scratch.Done() || c.scratch.MinRemaining() <= c.budget-2
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
	c.position()
	if len(b) == 1 && !c.closing {
		return true
	}
	if !c.try(b) {
		return false
	}
	return !c.closing || c.fits()
}

// Accept moves past tok, which Allow accepted.
func (c *Constraint) Accept(tok int32) {
	c.firstSet, c.posReady = false, false
	if slices.Contains(c.stops, tok) {
		return
	}
	if tok >= 0 && int(tok) < len(c.vocab) {
		c.m.FeedBytes(c.vocab[tok])
	}
}

// Done reports whether the generation so far is complete.
func (c *Constraint) Done() bool { return c.m.Done() }

// try reports whether m accepts b, on the scratch copy.
func (c *Constraint) try(b []byte) bool {
	c.m.copyInto(&c.scratch)
	return c.scratch.FeedBytes(b)
}

// NewConstraint starts g over vocab; stops are the generation's stop
// tokens.
func NewConstraint(g *Grammar, vocab Vocab, stops []int32) *Constraint {
	return &Constraint{m: g.Start(), vocab: vocab, stops: stops, budget: -1}
}
