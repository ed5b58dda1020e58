package grammar

import (
	"fmt"
	"math"
	"regexp/syntax"
	"slices"
	"sync"
	"unicode/utf8"
)

// pattern is a JSON Schema regular expression ("pattern", the keys of
// "patternProperties") as a prefix checker: whether some string that
// starts with the text so far matches, whether the text itself matches,
// and the fewest bytes that make it match. JSON Schema patterns search
// (they are not anchored unless they say ^ or $), so the expression runs
// as .*(?:P).* over the whole text. It is a Thompson simulation of Go's
// compiled program over the text's runes; word boundaries are refused at
// compile time (they need the rune after the text).
type pattern struct {
	src  string
	prog *syntax.Prog
	// live[pc]: the match instruction can be reached from pc past the
	// text's start (ignoring what the runes on the way must be).
	live []bool
	// cost[pc]: for a rune instruction, the bytes of the shortest rune it
	// takes that a JSON string holds unescaped.
	cost []int

	// runs caches run's results by text: generation extends a text a
	// byte at a time and tries many next bytes, so each run is one step
	// from a cached one. A pattern is shared by the choices of a request.
	mu       sync.Mutex
	runs     map[string][]uint32
	runBytes int
}

// maxRunBytes bounds the text the cache of runs holds (it is emptied
// when full).
const maxRunBytes = 1 << 20

func compilePattern(src string) (*pattern, error) {
	re, err := syntax.Parse(src, syntax.Perl)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", src, err)
	}
	dotStar := &syntax.Regexp{Op: syntax.OpStar, Sub: []*syntax.Regexp{{Op: syntax.OpAnyChar}}}
	whole := &syntax.Regexp{Op: syntax.OpConcat, Sub: []*syntax.Regexp{dotStar, re, dotStar}}
	prog, err := syntax.Compile(whole.Simplify())
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", src, err)
	}
	p := &pattern{src: src, prog: prog, live: make([]bool, len(prog.Inst)), cost: make([]int, len(prog.Inst))}
	for pc := range prog.Inst {
		in := &prog.Inst[pc]
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			p.cost[pc] = plainRuneBytes(in)
		}
		if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&(syntax.EmptyWordBoundary|syntax.EmptyNoWordBoundary) != 0 {
			return nil, fmt.Errorf("pattern %q: word boundaries (\\b, \\B) are not supported by constrained decoding", src)
		}
	}
	// Reverse reachability from the match instruction.
	for changed := true; changed; {
		changed = false
		for pc, in := range prog.Inst {
			if p.live[pc] {
				continue
			}
			ok := in.Op == syntax.InstMatch || p.live[in.Out]
			switch in.Op {
			case syntax.InstAlt, syntax.InstAltMatch:
				ok = ok || p.live[in.Arg]
			case syntax.InstFail:
				ok = false
			case syntax.InstEmptyWidth:
				// Past the start (where the closure already went through
				// them), ^ and \A never hold again.
				if syntax.EmptyOp(in.Arg)&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 {
					ok = false
				}
			}
			if ok {
				p.live[pc] = true
				changed = true
			}
		}
	}
	return p, nil
}

// closure adds pc and what it reaches without a rune to set; at is the
// rune position (0: the text's start). Instructions that need the text's
// end ($) stay in the set as they are.
func (p *pattern) closure(set []uint32, pc uint32, at int) []uint32 {
	if slices.Contains(set, pc) {
		return set
	}
	in := &p.prog.Inst[pc]
	if in.Op == syntax.InstEmptyWidth && syntax.EmptyOp(in.Arg)&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 && at != 0 {
		return set // ^ holds at the start only
	}
	set = append(set, pc)
	switch in.Op {
	case syntax.InstAlt, syntax.InstAltMatch:
		set = p.closure(set, in.Out, at)
		set = p.closure(set, in.Arg, at)
	case syntax.InstCapture, syntax.InstNop:
		set = p.closure(set, in.Out, at)
	case syntax.InstEmptyWidth:
		op := syntax.EmptyOp(in.Arg)
		if op&(syntax.EmptyEndText|syntax.EmptyEndLine) != 0 {
			return set // decided at the end
		}
		set = p.closure(set, in.Out, at)
	}
	return set
}

// run returns the instructions live after the complete runes of s (a
// trailing partial UTF-8 sequence is ignored). The result is shared: do
// not change it.
func (p *pattern) run(s string) []uint32 {
	for i := len(s) - 1; i >= 0 && i >= len(s)-3; i-- { // drop a partial rune
		if s[i] < 0x80 {
			break
		}
		if s[i] >= 0xC0 {
			if !utf8.FullRuneInString(s[i:]) {
				s = s[:i]
			}
			break
		}
	}
	p.mu.Lock()
	set, ok := p.runs[s]
	p.mu.Unlock()
	if ok {
		return set
	}
	if s == "" {
		set = p.closure(nil, uint32(p.prog.Start), 0)
	} else {
		r, size := utf8.DecodeLastRuneInString(s)
		prev := p.run(s[:len(s)-size])
		at := utf8.RuneCountInString(s)
		for _, pc := range prev {
			in := &p.prog.Inst[pc]
			switch in.Op {
			case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
				if in.MatchRune(r) {
					set = p.closure(set, in.Out, at)
				}
			}
		}
	}
	p.mu.Lock()
	if p.runs == nil || p.runBytes+len(s) > maxRunBytes {
		p.runs, p.runBytes = map[string][]uint32{}, 0
	}
	p.runs[s] = set
	p.runBytes += len(s) + 4*len(set)
	p.mu.Unlock()
	return set
}

// viable reports whether some text that starts with s matches. s may end
// inside a UTF-8 sequence: then some rune that starts with those bytes
// must keep it viable.
func (p *pattern) viable(s string) bool {
	whole, lo, hi := splitPartial(s)
	set := p.run(whole)
	for _, pc := range set {
		if hi < 0 {
			if p.live[pc] {
				return true
			}
			continue
		}
		in := &p.prog.Inst[pc]
		switch in.Op {
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			if p.live[in.Out] && runesMeet(in, lo, hi) {
				return true
			}
		}
	}
	return false
}

// splitPartial splits s into its complete runes and, when it ends inside
// a UTF-8 sequence, the range of runes that sequence may still become
// (hi < 0: it does not).
func splitPartial(s string) (whole string, lo, hi rune) {
	for k := 1; k <= 3 && k <= len(s); k++ {
		b := s[len(s)-k]
		if b < 0x80 || b >= 0xC0 { // an ASCII byte or a lead byte
			if b < 0xC0 || utf8.FullRuneInString(s[len(s)-k:]) {
				break
			}
			tail := s[len(s)-k:]
			size := 2
			switch {
			case b >= 0xF0:
				size = 4
			case b >= 0xE0:
				size = 3
			}
			// The rune's bits so far, then the rest free.
			var bits rune
			switch size {
			case 2:
				bits = rune(b & 0x1F)
			case 3:
				bits = rune(b & 0x0F)
			default:
				bits = rune(b & 0x07)
			}
			for i := 1; i < len(tail); i++ {
				bits = bits<<6 | rune(tail[i]&0x3F)
			}
			free := 6 * (size - len(tail))
			lo, hi = bits<<free, min(bits<<free|(1<<free-1), utf8.MaxRune)
			return s[:len(s)-k], max(lo, [5]rune{2: 0x80, 3: 0x800, 4: 0x10000}[size]), hi // no overlong forms
		}
	}
	return s, 0, -1
}

// runesMeet reports whether rune instruction in accepts some rune in
// [lo, hi].
func runesMeet(in *syntax.Inst, lo, hi rune) bool {
	switch in.Op {
	case syntax.InstRuneAny:
		return true
	case syntax.InstRuneAnyNotNL:
		return lo != '\n' || hi != '\n'
	case syntax.InstRune1:
		return in.Rune[0] >= lo && in.Rune[0] <= hi
	}
	if len(in.Rune) == 1 { // one rune, maybe folded
		for r := lo; r <= hi && r-lo < 4096; r++ {
			if in.MatchRune(r) {
				return true
			}
		}
		return false
	}
	for i := 0; i+1 < len(in.Rune); i += 2 {
		if in.Rune[i] <= hi && in.Rune[i+1] >= lo {
			return true
		}
	}
	return false
}

// matches reports whether s matches.
func (p *pattern) matches(s string) bool {
	return p.endMatch(p.run(s), s == "")
}

// endMatch reports whether set reaches the match instruction at the end
// of the text; start says the text is empty (^ holds).
func (p *pattern) endMatch(set []uint32, start bool) bool {
	seen := map[uint32]bool{}
	var reach func(pc uint32) bool
	reach = func(pc uint32) bool {
		if seen[pc] {
			return false
		}
		seen[pc] = true
		in := &p.prog.Inst[pc]
		switch in.Op {
		case syntax.InstMatch:
			return true
		case syntax.InstAlt, syntax.InstAltMatch:
			return reach(in.Out) || reach(in.Arg)
		case syntax.InstEmptyWidth:
			// At the end every end-of-text condition holds.
			if syntax.EmptyOp(in.Arg)&(syntax.EmptyBeginText|syntax.EmptyBeginLine) != 0 && !start {
				return false
			}
			return reach(in.Out)
		case syntax.InstCapture, syntax.InstNop:
			return reach(in.Out)
		}
		return false
	}
	for _, pc := range set {
		if reach(pc) {
			return true
		}
	}
	return false
}

// shortest is the fewest bytes that, appended to s, make it match, using
// runes a JSON string holds without an escape (math.MaxInt32 when none
// do).
func (p *pattern) shortest(s string) int {
	set := p.run(s)
	if p.endMatch(set, s == "") {
		return 0
	}
	// Dijkstra over instructions: a rune instruction costs the bytes of
	// its cheapest plain rune; the rest cost nothing.
	const inf = math.MaxInt32
	dist := make([]int, len(p.prog.Inst))
	for i := range dist {
		dist[i] = inf
	}
	for _, pc := range set {
		dist[pc] = 0
	}
	done := make([]bool, len(dist))
	for {
		best, at := inf, -1
		for pc, d := range dist {
			if !done[pc] && d < best {
				best, at = d, pc
			}
		}
		if at < 0 {
			return inf
		}
		done[at] = true
		in := &p.prog.Inst[at]
		relax := func(pc uint32, cost int) {
			if cost < inf && best+cost < dist[pc] {
				dist[pc] = best + cost
			}
		}
		switch in.Op {
		case syntax.InstMatch:
			return best
		case syntax.InstAlt, syntax.InstAltMatch:
			relax(in.Out, 0)
			relax(in.Arg, 0)
		case syntax.InstCapture, syntax.InstNop:
			relax(in.Out, 0)
		case syntax.InstEmptyWidth:
			// $ holds only at the end, where nothing more is written.
			op := syntax.EmptyOp(in.Arg)
			if op&(syntax.EmptyEndText|syntax.EmptyEndLine) != 0 {
				if p.endMatch([]uint32{in.Out}, s == "" && best == 0) {
					return best
				}
				continue
			}
			if op&(syntax.EmptyBeginText|syntax.EmptyBeginLine) == 0 {
				relax(in.Out, 0)
			}
		case syntax.InstRune, syntax.InstRune1, syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			relax(in.Out, p.cost[at])
		}
	}
}

// plainRuneBytes is the UTF-8 length of the shortest rune in, a rune
// instruction, accepts that a JSON string holds unescaped.
func plainRuneBytes(in *syntax.Inst) int {
	for _, r := range []rune{'a', '0', 'A', ' ', '-', '_', '.'} {
		if in.MatchRune(r) {
			return 1
		}
	}
	for r := rune(0x20); r < 0x800; r++ {
		if r != '"' && r != '\\' && in.MatchRune(r) {
			return utf8.RuneLen(r)
		}
	}
	for r := rune(0x800); r <= utf8.MaxRune; r += 0x3f {
		if in.MatchRune(r) {
			return utf8.RuneLen(r)
		}
	}
	return math.MaxInt32
}
