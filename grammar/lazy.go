package grammar

import (
	"bytes"
	"slices"
)

// Lazy is a constraint that lets a generation run free until a trigger
// text appears, then holds what follows to a grammar, then lets it run
// free again (watching for the next trigger): a tool call in a reply
// that may also be plain text (tool_choice "auto"), constrained once the
// model opens one, as llama.cpp's lazy grammars are. Triggers inside a
// reasoning block (<think>…</think>) are ignored. While the grammar runs
// the constraint is a Constraint of it; a trigger token is allowed only
// when the grammar accepts the bytes after the trigger in the same token
// and can still finish within the budget. Not safe for concurrent use:
// each generation owns one.
type Lazy struct {
	trigger []byte
	g       *Grammar
	vocab   Vocab
	stops   []int32
	budget  int
	// recent holds the last bytes of the free text, enough to find a
	// trigger or a reasoning tag that spans tokens.
	recent []byte
	think  bool        // inside a reasoning block
	inner  *Constraint // the grammar, while a trigger's call runs
	calls  int         // grammars completed
	trial  Matcher     // scratch for Allow
}

// Reasoning tags: a trigger between them is not one.
var (
	thinkOpen  = []byte("<think>")
	thinkClose = []byte("</think>")
)

// NewLazy returns a lazy constraint of g after trigger over vocab; stops
// are the generation's stop tokens; reasoning says the prompt already
// opened a reasoning block.
func NewLazy(trigger string, g *Grammar, vocab Vocab, stops []int32, reasoning bool) *Lazy {
	return &Lazy{trigger: []byte(trigger), g: g, vocab: vocab, stops: stops, budget: -1, think: reasoning}
}

// SetBudget tells the constraint how many tokens the generation may still
// write, this one included.
func (l *Lazy) SetBudget(tokens int) {
	l.budget = tokens
	if l.inner != nil {
		l.inner.SetBudget(tokens)
	}
}

// Triggered reports whether a grammar is running now.
func (l *Lazy) Triggered() bool { return l.inner != nil }

// Calls is how many triggered grammars have completed.
func (l *Lazy) Calls() int { return l.calls }

// Allow reports whether tok may come next.
func (l *Lazy) Allow(tok int32) bool {
	if l.inner != nil {
		return l.inner.Allow(tok)
	}
	if slices.Contains(l.stops, tok) {
		return true
	}
	if tok < 0 || int(tok) >= len(l.vocab) {
		return false
	}
	b := l.vocab[tok]
	last := l.trigger[len(l.trigger)-1]
	if bytes.IndexByte(b, last) < 0 {
		return true // no trigger ends in it
	}
	at, think := l.scan(b)
	if at < 0 || think {
		return true
	}
	// The grammar starts with the bytes after the trigger.
	m := l.g.Start()
	m.copyInto(&l.trial)
	if !l.trial.FeedBytes(b[at:]) {
		return false
	}
	return l.budget < 0 || l.trial.Done() || l.trial.MinRemaining() <= l.budget-2
}

// scan looks for the trigger ending inside b (after the free text so
// far): at is the offset in b just past it (-1: none), think whether it
// falls inside a reasoning block.
func (l *Lazy) scan(b []byte) (at int, think bool) {
	text := append(slices.Clip(l.recent), b...)
	think = l.think
	from := 0
	for {
		i := bytes.Index(text[from:], l.trigger)
		if i < 0 {
			return -1, false
		}
		end := from + i + len(l.trigger)
		think = thinkAt(text[:from+i], l.think)
		if end > len(l.recent) && !think {
			return end - len(l.recent), false
		}
		from = from + i + 1
	}
}

// thinkAt is whether text, which starts inside a reasoning block when
// open, ends inside one.
func thinkAt(text []byte, open bool) bool {
	o, c := bytes.LastIndex(text, thinkOpen), bytes.LastIndex(text, thinkClose)
	switch {
	case o < 0 && c < 0:
		return open
	default:
		return o > c
	}
}

// Accept moves past tok, which Allow accepted.
func (l *Lazy) Accept(tok int32) {
	if l.inner != nil {
		l.inner.Accept(tok)
		if l.inner.Done() && !l.canGoOn() {
			l.inner = nil
			l.calls++
			l.recent = l.recent[:0]
		}
		return
	}
	if slices.Contains(l.stops, tok) || tok < 0 || int(tok) >= len(l.vocab) {
		return
	}
	b := l.vocab[tok]
	at, think := -1, false
	if bytes.IndexByte(b, l.trigger[len(l.trigger)-1]) >= 0 {
		at, think = l.scan(b)
	}
	if at >= 0 && !think {
		l.inner = NewConstraint(l.g, l.vocab, l.stops)
		l.inner.SetBudget(l.budget)
		l.inner.m.FeedBytes(b[at:])
		l.recent = l.recent[:0]
		if l.inner.Done() && !l.canGoOn() { // the whole call in one token
			l.inner = nil
			l.calls++
		}
		return
	}
	l.recent = append(l.recent, b...)
	l.think = thinkAt(l.recent, l.think)
	// Keep what a trigger or a tag spanning the next token needs.
	keep := max(len(l.trigger), len(thinkClose)) - 1
	if len(l.recent) > 4*keep+64 {
		l.recent = append(l.recent[:0], l.recent[len(l.recent)-keep:]...)
	}
}

// canGoOn reports whether the running grammar, though complete, could
// still take more bytes.
func (l *Lazy) canGoOn() bool {
	m := l.inner.m
	for x := range 256 {
		m.copyInto(&l.trial)
		if l.trial.Feed(byte(x)) {
			return true
		}
	}
	return false
}
