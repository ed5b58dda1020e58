package grammar

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
)

// frame kinds
const (
	fValue   = iota // a value is expected: the next non-space byte starts it
	fObject         // inside { }
	fArray          // inside [ ]
	fString         // inside " " (a value or an object key)
	fNumber         // inside a number
	fLiteral        // inside true, false or null
)

// object / array sub-states
const (
	oKeyOrEnd   = iota // after '{': a key or '}'
	oKey               // after ',': a key
	oColon             // after a key: ':'
	oCommaOrEnd        // after a value: ',' or '}'
)

// frame is one open value of the document.
type frame struct {
	kind int
	s    *Schema
	sub  int    // object/array sub-state; number: numState
	seen uint64 // object: properties written (bit i: s.props[i]); over 64 properties: no repeats check beyond
	n    int    // array: items written; string: characters written
	// units: string: UTF-16 code units written, which maxLength bounds
	// (as JavaScript counts: a string within it is within it by code
	// points too; minLength counts code points, n)
	units   int
	space   bool   // one whitespace byte already written at this point
	buf     []byte // string: content so far (raw, for keys and enums); number: text; literal: the word
	key     bool   // string: an object key
	freeKey bool   // key string: any key (an object that declares none)
	cands   []int  // key string: indices of the declared properties still possible
	// object: the schema of the value of the key just read, and the
	// pattern keys written
	vs     *Schema
	pkeys  []string
	esc    int  // string: 0 none, 1 after '\', 2..5 hex digits of \u left +1
	utf    int  // string: UTF-8 continuation bytes still expected
	ulo    byte // string: bounds of the next continuation byte when narrower than 80..BF (0: not)
	uhi    byte
	pos    int // literal: bytes matched; string: the first hex digit of a \u escape
	litAll []string
}

// State is the position of a generation in a document of one Schema:
// the stacks of open frames of the branches still possible (one stack
// unless a choice, anyOf or oneOf, is open). The zero State is not usable;
// use NewState.
type State struct {
	paths []path
	dead  bool
}

// path is one way to read the bytes so far: a stack of open frames.
type path struct {
	stack []frame
	done  bool // the top-level value is complete
}

// maxPaths bounds the branches a State follows at once; beyond it the
// later ones are dropped (what is generated stays valid).
const maxPaths = 64

// NewState starts a document of schema s.
func NewState(s *Schema) *State {
	return &State{paths: []path{{stack: []frame{{kind: fValue, s: s}}}}}
}

// Clone returns an independent copy.
func (st *State) Clone() *State {
	c := &State{dead: st.dead, paths: make([]path, len(st.paths))}
	for i := range st.paths {
		c.paths[i] = st.paths[i].clone()
	}
	return c
}

func (p *path) clone() path {
	c := path{done: p.done, stack: make([]frame, len(p.stack), len(p.stack)+2)}
	copy(c.stack, p.stack)
	for i := range c.stack {
		f := &c.stack[i]
		f.buf = slices.Clone(f.buf)
		f.cands = slices.Clone(f.cands)
		f.pkeys = slices.Clone(f.pkeys)
	}
	return c
}

// copyInto makes dst a copy of st, reusing dst's memory.
func (st *State) copyInto(dst *State) {
	dst.dead = st.dead
	n := len(st.paths)
	if cap(dst.paths) < n {
		dst.paths = append(dst.paths[:cap(dst.paths)], make([]path, n-cap(dst.paths))...)
	}
	dst.paths = dst.paths[:n]
	for i := range st.paths {
		st.paths[i].copyInto(&dst.paths[i])
	}
}

func (p *path) copyInto(dst *path) {
	dst.done = p.done
	n := len(p.stack)
	if cap(dst.stack) < n {
		dst.stack = append(dst.stack[:cap(dst.stack)], make([]frame, n-cap(dst.stack))...)
	}
	dst.stack = dst.stack[:n]
	for i := range p.stack {
		buf, cands, pkeys := dst.stack[i].buf, dst.stack[i].cands, dst.stack[i].pkeys
		src := &p.stack[i]
		dst.stack[i] = *src
		dst.stack[i].buf = append(buf[:0], src.buf...)
		if src.cands == nil {
			dst.stack[i].cands = nil
		} else {
			dst.stack[i].cands = append(cands[:0], src.cands...)
		}
		if src.pkeys == nil {
			dst.stack[i].pkeys = nil
		} else {
			dst.stack[i].pkeys = append(pkeys[:0], src.pkeys...)
		}
	}
}

// Done reports whether the bytes so far are a complete document (a
// trailing number is complete only once something follows it, except at
// the top level, where Done accepts it).
func (st *State) Done() bool {
	if st.dead {
		return false
	}
	for i := range st.paths {
		if st.paths[i].complete() {
			return true
		}
	}
	return false
}

func (p *path) complete() bool {
	if p.done {
		return true
	}
	return len(p.stack) == 1 && p.stack[0].kind == fNumber && numberComplete(&p.stack[0])
}

// Dead reports whether the bytes so far can no longer become a document.
func (st *State) Dead() bool { return st.dead }

// FeedString feeds every byte of s; false (and a dead state) when one is
// refused.
func (st *State) FeedString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !st.Feed(s[i]) {
			return false
		}
	}
	return true
}

// Feed extends the document by byte c; false (and a dead state) when no
// valid document starts with the bytes so far and c.
func (st *State) Feed(c byte) bool {
	if st.dead {
		return false
	}
	var forks []path
	live := 0
	for i := range st.paths {
		if st.paths[i].feed(c, &forks) {
			// Swapped, not copied, so that no two slots share memory and
			// a dead path's stays for reuse (copyInto).
			st.paths[live], st.paths[i] = st.paths[i], st.paths[live]
			live++
		}
	}
	st.paths = append(st.paths[:live], forks...)
	if len(st.paths) == 0 {
		st.dead = true
		return false
	}
	if len(st.paths) > 1 {
		st.merge()
	}
	return true
}

// merge drops paths that equal an earlier one, and those beyond maxPaths.
func (st *State) merge() {
	keep := 0
	for i := range st.paths {
		dup := keep >= maxPaths
		for j := 0; j < keep && !dup; j++ {
			dup = st.paths[j].equal(&st.paths[i])
		}
		if !dup {
			st.paths[keep], st.paths[i] = st.paths[i], st.paths[keep]
			keep++
		}
	}
	st.paths = st.paths[:keep]
}

func (p *path) equal(q *path) bool {
	if p.done != q.done || len(p.stack) != len(q.stack) {
		return false
	}
	for i := range p.stack {
		a, b := &p.stack[i], &q.stack[i]
		if a.kind != b.kind || a.s != b.s || a.sub != b.sub || a.seen != b.seen || a.n != b.n || a.units != b.units || a.space != b.space ||
			a.key != b.key || a.freeKey != b.freeKey || a.esc != b.esc || a.utf != b.utf || a.ulo != b.ulo || a.uhi != b.uhi ||
			a.pos != b.pos || a.vs != b.vs || !bytes.Equal(a.buf, b.buf) || !slices.Equal(a.cands, b.cands) ||
			!slices.Equal(a.litAll, b.litAll) || !slices.Equal(a.pkeys, b.pkeys) {
			return false
		}
	}
	return true
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' }

// whitespace takes c when it is a space or a newline, at most one between
// two tokens: space reports whether c was one, ok whether it is allowed.
func (f *frame) whitespace(c byte) (space, ok bool) {
	if !isSpace(c) {
		f.space = false
		return false, false
	}
	if f.space {
		return true, false
	}
	f.space = true
	return true, true
}

func (st *path) top() *frame { return &st.stack[len(st.stack)-1] }

func (st *path) push(f frame) { st.stack = append(st.stack, f) }

// pop closes the top frame: the parent goes on after a value.
func (st *path) pop() {
	st.stack = st.stack[:len(st.stack)-1]
	if len(st.stack) == 0 {
		st.done = true
		return
	}
	p := st.top()
	p.space = false
	switch p.kind {
	case fObject:
		p.sub = oCommaOrEnd
	case fArray:
		p.n++
		p.sub = 1
	}
}

func (st *path) feed(c byte, forks *[]path) bool {
	if st.done {
		return false // nothing may follow the document
	}
	f := st.top()
	switch f.kind {
	case fValue:
		if space, ok := f.whitespace(c); space {
			return ok
		}
		return st.startValue(c, forks, 0)
	case fObject:
		return st.feedObject(f, c)
	case fArray:
		return st.feedArray(f, c, forks)
	case fString:
		return st.feedString(f, c)
	case fNumber:
		if numberByte(f, c) {
			return st.numberViable(f)
		}
		if !numberComplete(f) || !numberInRange(f) {
			return false
		}
		st.pop()
		if len(st.stack) == 0 {
			return false // the top-level number was complete: nothing follows
		}
		return st.feed(c, forks)
	case fLiteral:
		cont, longer := false, false
		for _, w := range f.litAll {
			if strings.HasPrefix(w, string(f.buf)) && len(w) > len(f.buf) && w[len(f.buf)] == c {
				cont = true
				if len(w) > len(f.buf)+1 {
					longer = true
				}
			}
		}
		if !cont {
			// A complete word ends where no word continues: the byte
			// belongs to the parent.
			if !slices.Contains(f.litAll, string(f.buf)) {
				return false
			}
			st.pop()
			if len(st.stack) == 0 {
				return false
			}
			return st.feed(c, forks)
		}
		f.buf = append(f.buf, c)
		if slices.Contains(f.litAll, string(f.buf)) && !longer {
			st.pop()
		}
		return true
	}
	return false
}

// startValue replaces the fValue frame on top by the value that byte c
// starts. A choice forks the path: each branch that takes c after the
// first goes to forks, the first stays here.
func (st *path) startValue(c byte, forks *[]path, depth int) bool {
	f := st.top()
	s := f.s
	if len(s.anyOf) > 0 {
		if depth > maxDepth {
			return false // a choice of choices without end
		}
		for _, b := range s.anyOf[1:] {
			q := st.clone()
			q.top().s = b
			if q.startValue(c, forks, depth+1) {
				*forks = append(*forks, q)
			}
		}
		f.s = s.anyOf[0]
		return st.startValue(c, forks, depth+1)
	}
	if s.enum != nil && s.strEnum == nil {
		// Enum of non-string values: match the compact JSON texts.
		var opts []string
		for _, e := range s.enum {
			if e[0] == c {
				opts = append(opts, e)
			}
		}
		if len(opts) == 0 {
			return false
		}
		*f = frame{kind: fLiteral, s: s, litAll: opts}
		return st.feed(c, forks)
	}
	if s.strEnum != nil {
		if c != '"' {
			return false
		}
		*f = frame{kind: fString, s: s}
		return true
	}
	switch {
	case c == '{' && s.types&tObject != 0:
		*f = frame{kind: fObject, s: s, sub: oKeyOrEnd}
		return true
	case c == '[' && s.types&tArray != 0:
		*f = frame{kind: fArray, s: s}
		return true
	case c == '"' && (s.types&tString != 0 || s.strEnum != nil):
		*f = frame{kind: fString, s: s}
		return true
	case (c == '-' || (c >= '0' && c <= '9')) && s.types&(tNumber|tInteger) != 0:
		*f = frame{kind: fNumber, s: s}
		if !numberByte(f, c) {
			return false
		}
		return st.numberViable(f)
	case c == 't' && s.types&tBoolean != 0, c == 'f' && s.types&tBoolean != 0, c == 'n' && s.types&tNull != 0:
		var words []string
		if s.types&tBoolean != 0 {
			words = append(words, "true", "false")
		}
		if s.types&tNull != 0 {
			words = append(words, "null")
		}
		*f = frame{kind: fLiteral, s: s, litAll: words}
		return st.feed(c, forks)
	}
	return false
}

func (st *path) feedObject(f *frame, c byte) bool {
	if space, ok := f.whitespace(c); space {
		return ok
	}
	switch f.sub {
	case oKeyOrEnd, oKey:
		if c == '}' && f.sub == oKeyOrEnd {
			return st.closeObject(f)
		}
		if c != '"' {
			return false
		}
		if free(f.s) {
			st.push(frame{kind: fString, key: true, freeKey: true, s: anyString})
			return true
		}
		var cands []int
		for i := range f.s.props {
			if i >= 64 || f.seen&(1<<i) == 0 {
				cands = append(cands, i)
			}
		}
		if len(cands) == 0 && len(f.s.patterns) == 0 {
			return false
		}
		st.push(frame{kind: fString, key: true, cands: cands})
		return true
	case oColon:
		if c != ':' {
			return false
		}
		// The key decided the value's schema.
		if len(st.stack) > maxDepth {
			return false
		}
		st.push(frame{kind: fValue, s: f.vs})
		return true
	case oCommaOrEnd:
		switch c {
		case ',':
			f.sub = oKey
			return free(f.s) || st.keysLeft(f)
		case '}':
			return st.closeObject(f)
		}
	}
	return false
}

// keysLeft reports whether a key is left to write.
func (st *path) keysLeft(f *frame) bool {
	if len(f.s.patterns) > 0 {
		return true
	}
	for i := range f.s.props {
		if i >= 64 || f.seen&(1<<i) == 0 {
			return true
		}
	}
	return false
}

func (st *path) closeObject(f *frame) bool {
	for _, i := range f.s.requiredIdx {
		if i < 64 && f.seen&(1<<i) == 0 {
			return false
		}
	}
	st.pop()
	return true
}

func (st *path) feedArray(f *frame, c byte, forks *[]path) bool {
	if space, ok := f.whitespace(c); space {
		return ok
	}
	switch {
	case c == ']' && f.sub != 2:
		if f.n < f.s.minItems {
			return false
		}
		st.pop()
		return true
	case c == ',' && f.sub == 1:
		if f.s.maxItems >= 0 && f.n >= f.s.maxItems {
			return false
		}
		f.sub = 2
		return true
	case f.sub == 0 || f.sub == 2:
		if f.s.maxItems >= 0 && f.n >= f.s.maxItems {
			return false
		}
		items := f.s.items
		if items == nil {
			items = anySchema
		}
		if len(st.stack) > maxDepth {
			return false
		}
		st.push(frame{kind: fValue, s: items})
		return st.feed(c, forks)
	}
	return false
}

var (
	anySchema = anyValue()
	anyString = func() *Schema {
		s := &Schema{types: tString, maxItems: -1, maxLen: -1}
		measure([]*Schema{s})
		return s
	}()
)

// maxDepth bounds the nesting of generated documents.
const maxDepth = 32

// free reports whether an object schema declares no properties and no
// patterns: any keys, with any values or those of additionalProperties
// (json_object, or {"type": "object"}).
func free(s *Schema) bool { return s.props == nil && s.patterns == nil }

func (st *path) feedString(f *frame, c byte) bool {
	// Escapes and UTF-8 continuation first.
	switch {
	case f.utf > 0:
		lo, hi := byte(0x80), byte(0xBF)
		if f.ulo != 0 { // the second byte of some sequences is narrower (Unicode 3.9)
			lo, hi, f.ulo, f.uhi = f.ulo, f.uhi, 0, 0
		}
		if c < lo || c > hi {
			return false
		}
		f.utf--
		f.buf = append(f.buf, c)
		return st.stringViable(f)
	case f.esc == 1:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			f.esc = 0
			f.buf = append(f.buf, unescape(c))
			f.n++
			f.units++
			return st.stringViable(f)
		case 'u':
			f.esc = 5
			return f.freeKey || !f.key // no \u in keys and enums
		}
		return false
	case f.esc > 1:
		if !strings.ContainsRune("0123456789abcdefABCDEF", rune(c)) {
			return false
		}
		switch f.esc {
		case 5:
			f.pos = int(c) // the first hex digit
		case 4:
			// No surrogate halves (\uD800-\uDFFF): a character beyond the
			// BMP is written as UTF-8, so that lengths count it once.
			if (f.pos == 'd' || f.pos == 'D') && strings.IndexByte("89abcdefABCDEF", c) >= 0 {
				return false
			}
		}
		f.esc--
		if f.esc == 1 {
			f.esc = 0
			f.n++
			f.units++
			f.buf = append(f.buf, '?') // stands for the escaped character
		}
		return st.stringViable(f)
	}
	switch {
	case c == '"':
		return st.closeString(f)
	case c == '\\':
		// Declared keys and string enum values hold no character that
		// needs an escape (Compile refuses them); pattern keys and
		// pattern strings take none (generation keeps to plain text).
		if (f.key && !f.freeKey) || f.s == nil || f.s.strEnum != nil || f.s.pattern != nil {
			return false
		}
		f.esc = 1
		return f.s.maxLen < 0 || f.units < f.s.maxLen
	case c < 0x20:
		return false
	case c >= 0x80:
		switch {
		case c >= 0xC2 && c <= 0xDF:
			f.utf = 1
		case c >= 0xE0 && c <= 0xEF:
			f.utf = 2
			switch c {
			case 0xE0:
				f.ulo, f.uhi = 0xA0, 0xBF
			case 0xED:
				f.ulo, f.uhi = 0x80, 0x9F
			}
		case c >= 0xF0 && c <= 0xF4:
			f.utf = 3
			switch c {
			case 0xF0:
				f.ulo, f.uhi = 0x90, 0xBF
			case 0xF4:
				f.ulo, f.uhi = 0x80, 0x8F
			}
		default:
			return false
		}
		f.n++
		f.units++
		if f.utf == 3 {
			f.units++ // a surrogate pair in UTF-16
		}
		f.buf = append(f.buf, c)
		return st.stringViable(f)
	}
	f.n++
	f.units++
	f.buf = append(f.buf, c)
	return st.stringViable(f)
}

func unescape(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c
}

// stringViable checks a string's content so far against what it may
// become: a key among the candidates, an enum value, a length limit.
func (st *path) stringViable(f *frame) bool {
	if f.key && !f.freeKey {
		parent := &st.stack[len(st.stack)-2]
		keep := f.cands[:0]
		for _, i := range f.cands {
			if strings.HasPrefix(parent.s.props[i].name, string(f.buf)) {
				keep = append(keep, i)
			}
		}
		f.cands = keep
		if len(keep) > 0 {
			return true
		}
		for _, pp := range parent.s.patterns {
			if pp.re.viable(string(f.buf)) {
				return true
			}
		}
		return false
	}
	if f.s.strEnum != nil {
		for _, e := range f.s.strEnum {
			if strings.HasPrefix(e, string(f.buf)) {
				return true
			}
		}
		return false
	}
	if f.s.maxLen >= 0 && f.units > f.s.maxLen {
		return false
	}
	if f.s.pattern != nil && !f.s.pattern.viable(string(f.buf)) {
		return false
	}
	return true
}

func (st *path) closeString(f *frame) bool {
	if f.key {
		parent := &st.stack[len(st.stack)-2]
		vs := st.keySchema(parent, f)
		if vs == nil {
			return false
		}
		parent.vs = vs
		st.stack = st.stack[:len(st.stack)-1]
		parent.sub, parent.space = oColon, false
		return true
	}
	if f.s.strEnum != nil && !slices.Contains(f.s.strEnum, string(f.buf)) {
		return false
	}
	if f.n < f.s.minLen {
		return false
	}
	if f.s.pattern != nil && !f.s.pattern.matches(string(f.buf)) {
		return false
	}
	st.pop()
	return true
}

// keySchema ends the key f of object frame parent: the schema its value
// takes, or nil when the key may not be written (undeclared, matching no
// pattern or two that disagree, or already written).
func (st *path) keySchema(parent, f *frame) *Schema {
	if f.freeKey {
		return valueSchema(parent.s)
	}
	name := string(f.buf)
	for _, i := range f.cands {
		if parent.s.props[i].name == name {
			if i < 64 {
				parent.seen |= 1 << i
			}
			return parent.s.props[i].schema
		}
	}
	if len(parent.s.patterns) == 0 || slices.Contains(parent.pkeys, name) ||
		slices.ContainsFunc(parent.s.props, func(p prop) bool { return p.name == name }) {
		return nil
	}
	var vs *Schema
	for _, pp := range parent.s.patterns {
		if pp.re.matches(name) {
			if vs != nil && vs != pp.schema {
				return nil // the value would have to satisfy both
			}
			vs = pp.schema
		}
	}
	if vs != nil {
		parent.pkeys = append(parent.pkeys, name)
	}
	return vs
}

// Number states.
const (
	nStart = iota // nothing yet
	nMinus        // "-"
	nZero         // "0" or "-0": no more integer digits
	nInt          // integer digits
	nDot          // "."
	nFrac         // fraction digits
	nE            // "e" or "E"
	nESign        // exponent sign
	nExp          // exponent digits
)

// numberByte advances a number by c; false when c cannot continue it.
func numberByte(f *frame, c byte) bool {
	integer := f.s.types&tNumber == 0 || f.s.min != nil || f.s.max != nil
	digit := c >= '0' && c <= '9'
	next := -1
	switch f.sub {
	case nStart:
		switch {
		case c == '-':
			next = nMinus
		case c == '0':
			next = nZero
		case digit:
			next = nInt
		}
	case nMinus:
		switch {
		case c == '0':
			next = nZero
		case digit:
			next = nInt
		}
	case nZero, nInt:
		switch {
		case digit && f.sub == nInt:
			next = nInt
		case c == '.' && !integer:
			next = nDot
		case (c == 'e' || c == 'E') && !integer:
			next = nE
		}
	case nDot, nFrac:
		switch {
		case digit:
			next = nFrac
		case (c == 'e' || c == 'E') && f.sub == nFrac:
			next = nE
		}
	case nE:
		switch {
		case c == '+' || c == '-':
			next = nESign
		case digit:
			next = nExp
		}
	case nESign, nExp:
		if digit && (f.sub == nESign || expDigits(f.buf) < 2) {
			next = nExp
		}
	}
	// At most 24 characters, with room left to complete the number.
	switch {
	case next < 0, len(f.buf) >= 24:
		return false
	case (next == nMinus || next == nDot || next == nESign) && len(f.buf) >= 22, next == nE && len(f.buf) >= 21:
		return false
	}
	f.sub = next
	f.buf = append(f.buf, c)
	return true
}

// expDigits counts the digits after a number's exponent mark.
func expDigits(b []byte) int {
	i := bytes.LastIndexAny(b, "eE+-")
	return len(b) - i - 1
}

func numberComplete(f *frame) bool {
	switch f.sub {
	case nZero, nInt, nFrac, nExp:
		return true
	}
	return false
}

func numberInRange(f *frame) bool {
	v, err := strconv.ParseFloat(string(f.buf), 64)
	if err != nil || math.IsInf(v, 0) {
		return false
	}
	return (f.s.min == nil || v >= *f.s.min) && (f.s.max == nil || v <= *f.s.max)
}

// numberViable reports whether a bounded number (generated as an integer)
// can still end within its bounds: some integer with these leading
// characters lies in [min, max].
func (st *path) numberViable(f *frame) bool {
	if f.s.min == nil && f.s.max == nil {
		return true
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	if f.s.min != nil {
		lo = math.Ceil(*f.s.min)
	}
	if f.s.max != nil {
		hi = math.Floor(*f.s.max)
	}
	text := string(f.buf)
	neg := strings.HasPrefix(text, "-")
	digits := strings.TrimPrefix(text, "-")
	if digits == "" { // "-": any negative integer
		return lo < 0
	}
	p, _ := strconv.ParseFloat(digits, 64)
	// The integers written with these leading digits: p, then p·10^k to
	// p·10^k + 10^k − 1 (none after a leading 0), mirrored when negative.
	for k := 0; k <= 18; k++ {
		scale := math.Pow(10, float64(k))
		a, b := p*scale, p*scale+scale-1
		if neg {
			a, b = -b, -a
		}
		if b >= lo && a <= hi {
			return true
		}
		if digits == "0" || (!neg && a > hi) || (neg && b < lo) {
			break
		}
	}
	return false
}

// MinRemaining is the fewest bytes that complete the document from here
// (closing quotes, required keys with their shortest values, brackets),
// over the branches still possible: with at least that many bytes left to
// write, a generation can always still finish a valid document.
func (st *State) MinRemaining() int {
	if st.dead {
		return math.MaxInt32
	}
	best := math.MaxInt32
	for i := range st.paths {
		best = min(best, st.paths[i].minRemaining())
	}
	return best
}

func (st *path) minRemaining() int {
	if st.done {
		return 0
	}
	total := 0
	for i := len(st.stack) - 1; i >= 0; i-- {
		f := &st.stack[i]
		top := i == len(st.stack)-1
		switch f.kind {
		case fValue:
			total = add(total, f.s.shortest)
		case fString:
			if f.key {
				continue // counted with its object, below
			}
			if f.s.strEnum != nil {
				best := infLen
				for _, e := range f.s.strEnum {
					if strings.HasPrefix(e, string(f.buf)) {
						best = min(best, len(e)-len(f.buf))
					}
				}
				total = add(total, best+1)
				continue
			}
			need := max(0, f.s.minLen-f.n)
			if f.s.pattern != nil {
				need = max(need, f.s.pattern.shortest(string(f.buf)))
			}
			total = add(total, add(1+pendingBytes(f), need))
		case fNumber:
			if !numberComplete(f) {
				total++
			}
		case fLiteral:
			best := infLen
			for _, w := range f.litAll {
				if strings.HasPrefix(w, string(f.buf)) {
					best = min(best, len(w)-len(f.buf))
				}
			}
			total = add(total, best)
		case fObject:
			total = add(total, st.objectRemaining(i, top))
		case fArray:
			sub := f.sub
			if !top {
				sub = 1
			}
			items := f.s.items
			if items == nil {
				items = anySchema
			}
			n := f.n
			if !top {
				n++ // the item on top
			}
			left := max(0, f.s.minItems-n)
			if sub == 2 && left == 0 {
				left = 1
			}
			commas := left // after a value, each item needs its comma
			if sub != 1 && left > 0 {
				commas = left - 1 // after '[' or ',' the first does not
			}
			total = add(total, add(left*min(items.shortest, infLen/(left+1)), commas+1))
		}
	}
	return total
}

// objectRemaining is the fewest bytes that close the object frame at
// index i (its value on top, if any, counted by the caller; a key being
// written counted here).
func (st *path) objectRemaining(i int, top bool) int {
	f := &st.stack[i]
	var key *frame // a key being written, on top of the object
	if i+1 < len(st.stack) && st.stack[i+1].kind == fString && st.stack[i+1].key {
		key = &st.stack[i+1]
	}
	sub := f.sub
	if !top && key == nil {
		sub = oCommaOrEnd // its value on top completes first
	}
	// missing is the shortest text of the required keys left (besides
	// except), each "key":value, with the commas between them and, when
	// lead is set, one before the first.
	missing := func(except int, lead bool) int {
		n, k := 0, 0
		for _, j := range f.s.requiredIdx {
			if j != except && (j >= 64 || f.seen&(1<<j) == 0) {
				n = add(n, len(f.s.props[j].name)+3+f.s.props[j].schema.shortest)
				k++
			}
		}
		if k > 0 {
			n += k - 1
			if lead {
				n++
			}
		}
		return n
	}
	switch {
	case key != nil && key.freeKey: // a free object's key
		return add(pendingBytes(key)+1+1+1, valueSchema(f.s).shortest)
	case key != nil:
		// The shortest way on: finish one candidate key (declared, or
		// matching a pattern), its value, and the required keys left
		// besides it.
		best := infLen
		for _, c := range key.cands {
			p := f.s.props[c]
			best = min(best, add(len(p.name)-len(key.buf)+1+1, add(p.schema.shortest, missing(c, true))))
		}
		for _, pp := range f.s.patterns {
			if sh := pp.re.shortest(string(key.buf)); sh < infLen {
				best = min(best, add(sh+1+1, add(pp.schema.shortest, missing(-1, true))))
			}
		}
		return add(pendingBytes(key)+1, best)
	case sub == oKey: // after a comma: a key must come
		m := missing(-1, false)
		if m == 0 {
			m = minOptionalKey(f)
		}
		return add(m, 1)
	case sub == oColon: // the key's value, then the rest
		return add(1+1, add(f.vs.shortest, missing(-1, true)))
	case sub == oKeyOrEnd:
		return add(missing(-1, false), 1)
	default: // after a value
		return add(missing(-1, true), 1)
	}
}

// valueSchema is the schema of the values of an object that declares no
// keys.
func valueSchema(s *Schema) *Schema {
	if s.addl != nil {
		return s.addl
	}
	return anySchema
}

// pendingBytes is how many bytes a string frame needs before it may close:
// the rest of an escape (1 after a backslash, the hex digits left of a \u)
// and the UTF-8 continuation bytes still expected.
func pendingBytes(f *frame) int {
	n := f.utf
	if f.esc > 0 {
		n += max(f.esc-1, 1)
	}
	return n
}

// minOptionalKey is the shortest "key": value an object may still take.
func minOptionalKey(f *frame) int {
	if free(f.s) {
		return add(2+1, valueSchema(f.s).shortest)
	}
	best := infLen
	for j, p := range f.s.props {
		if j >= 64 || f.seen&(1<<j) == 0 {
			best = min(best, add(len(p.name)+3, p.schema.shortest))
		}
	}
	for _, pp := range f.s.patterns {
		best = min(best, add(add(pp.re.shortest(""), 3), pp.schema.shortest))
	}
	return best
}
