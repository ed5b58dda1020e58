package store

import (
	"cmp"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Redact returns s with the secrets it finds replaced by typed
// placeholders, and the number of replacements:
//
//   - API keys of well-known shapes: OpenAI and Anthropic (sk-…, sk-proj-…,
//     sk-ant-…), GitHub (ghp_…, gho_…, ghu_…, ghs_…, ghr_…, github_pat_…),
//     Slack (xoxb-… and kin), Google (AIza…), Stripe (sk_live_…, rk_live_…,
//     and their _test_ twins), Hugging Face (hf_…): [REDACTED:api_key];
//     AWS access key ids (AKIA…, ASIA…): [REDACTED:aws_key];
//   - the value of an assignment to a secret-looking name (api_key=…,
//     "apiKey": "…", client_secret: …, DB_PASSWORD=…, access_token=…), the
//     name kept: [REDACTED:api_key], [REDACTED:secret], [REDACTED:password]
//     or [REDACTED:token] after the name. Values that are plainly not
//     secrets are left alone: code (getenv(…), os.environ[…], $VAR, null,
//     type names such as str), placeholders (YOUR_API_KEY, <token>, xxxx)
//     and, for a bare "token" (a word LLM code uses for other things), a
//     value that does not look like a credential;
//   - the token after "Bearer" (16 characters or more) or after an
//     Authorization header's Bearer, Token or Basic scheme, the scheme
//     kept: [REDACTED:bearer], [REDACTED:token], [REDACTED:basic_auth];
//   - the password in a URL (scheme://user:password@host):
//     [REDACTED:password];
//   - JSON web tokens (eyJ….….…): [REDACTED:jwt];
//   - PEM private key blocks, BEGIN line through END line (or through the
//     base64 lines that follow when the END line is missing):
//     [REDACTED:private_key];
//   - e-mail addresses: [REDACTED:email];
//   - payment card numbers: 13 to 19 digits, together or in groups split
//     by single spaces or dashes (4-4-4-4, 4-6-5, …), that pass the Luhn
//     check and start with 2 to 9 (so millisecond and nanosecond Unix
//     times never qualify), not glued to letters, to a '+' (a phone
//     number) or to a decimal point: [REDACTED:card].
//
// Every rule looks at the same input; where matches overlap they are
// replaced by one placeholder, of the rule listed first above. Replacing
// is repeated on the result until nothing changes (in practice once more
// at most), so Redact(Redact(s)) returns its input with a count of 0.
// Placeholders are never matched again.
//
// Text with nothing that could start a secret costs one scan of its bytes
// and no regular-expression work. Redact is safe for concurrent use,
// accepts any bytes (invalid UTF-8 included) and keeps valid UTF-8 valid.
// A replacement takes no quote and no part of an escape sequence, so
// redacted JSON stays valid unless a private key block starts in one JSON
// string and ends in another.
func Redact(s string) (string, int) {
	return redactWith(s, redactCandidates)
}

// redactMaxPasses bounds the passes over a text; a second pass only finds
// something when a replacement uncovered a match (a card number glued to
// an e-mail address, say).
const redactMaxPasses = 4

func redactWith(s string, candidates func(string) uint64) (string, int) {
	total := 0
	var spans []redactSpan
	for range redactMaxPasses {
		mask := candidates(s)
		if mask == 0 {
			break
		}
		spans = redactFind(s, mask, spans[:0])
		if len(spans) == 0 {
			break
		}
		var n int
		s, n = redactReplace(s, spans)
		total += n
	}
	return s, total
}

// Placeholders.
const (
	redactPhAPIKey     = "[REDACTED:api_key]"
	redactPhAWSKey     = "[REDACTED:aws_key]"
	redactPhSecret     = "[REDACTED:secret]"
	redactPhPassword   = "[REDACTED:password]"
	redactPhToken      = "[REDACTED:token]"
	redactPhBearer     = "[REDACTED:bearer]"
	redactPhBasicAuth  = "[REDACTED:basic_auth]"
	redactPhJWT        = "[REDACTED:jwt]"
	redactPhPrivateKey = "[REDACTED:private_key]"
	redactPhEmail      = "[REDACTED:email]"
	redactPhCard       = "[REDACTED:card]"
)

// redactSpan is a stretch of text to replace by placeholder ph; prio is
// the index of the rule that found it (lower wins an overlap).
type redactSpan struct {
	start, end int
	ph         string
	prio       int
}

// redactRule finds one kind of secret. Most rules are a regular
// expression tried only where a match can start: at each trigger, a
// position its literal occurs at or an '@', "://", ':' or '=' that start
// maps to the start of the text around it. The whole match, or the first
// of groups that took part in it, is replaced. Rules written by hand
// have find instead.
type redactRule struct {
	name   string
	src    string // the pattern, without the \b that word adds
	word   bool   // a match starts a word (\b)
	re     *regexp.Regexp
	full   *regexp.Regexp // src as a search of the whole text: after too many misses, and in tests
	lits   []string       // triggers: where these occur...
	trig   func(s string, yield func(int) bool)
	start  func(s string, t, from int) int // ...mapped to a start (default: the trigger); -1: none
	groups []int
	ph     string
	phOf   func(s string, m []int) string               // placeholder by match, instead of ph
	valid  func(s string, m []int, start, end int) bool // extra checks on the span s[start:end]
	trim   func(s string, start, end int) int           // a new end for the span
	find   func(s string, prio int, dst []redactSpan) []redactSpan
	skip   func(s string, p int) int // after no match at p, none starts before this
}

// Rule indexes: their order is their priority, and bit i of a candidates
// mask says rule i may match.
const (
	rdPEM = iota
	rdJWT
	rdOpenAI
	rdStripe
	rdGitHub
	rdSlack
	rdGoogle
	rdAWS
	rdHF
	rdBearer
	rdAuth
	rdURL
	rdAssign
	rdEmail
	rdCard
	rdCount
)

// redactCI spells an ASCII word so that it matches in any case, without
// (?i): that would also fold in K (the Kelvin sign) and ſ, which the
// byte-wise pre-check does not look for.
func redactCI(word string) string {
	var b strings.Builder
	for i := 0; i < len(word); i++ {
		c := word[i]
		if c >= 'a' && c <= 'z' {
			b.WriteByte('[')
			b.WriteByte(c - 'a' + 'A')
			b.WriteByte(c)
			b.WriteByte(']')
		} else {
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

var redactRules = func() [rdCount]redactRule {
	ci := redactCI
	// An assignment: a name ending in a secret-looking word, maybe quoted,
	// an operator (=, :, :=, =>, or a type annotation ": str ="), then a
	// double-, single- or escaped-double-quoted value, or a bare one.
	assignName := `([A-Za-z0-9_.-]*(?:` +
		ci("api") + `[_-]?` + ci("key") + `|` +
		ci("secret") + `[_-]?(?:` + ci("access") + `[_-]?)?` + ci("key") + `|` +
		ci("access") + `[_-]?` + ci("key") + `|` +
		ci("private") + `[_-]?` + ci("key") + `|` +
		ci("secret") + `|` + ci("token") + `|` +
		ci("passwd") + `|` + ci("password") + `|` + ci("passphrase") + `))`
	assignOp := `(?:\\?["'])?[ \t]*(?::[ \t]*[A-Za-z_][A-Za-z0-9_.\[\]]*[ \t]+=|:=|=>|[:=])[ \t]*`
	assignValue := `(?:"((?:[^"\\\r\n]|\\.)+)"` +
		`|'((?:[^'\\\r\n]|\\.)+)'` +
		`|\\"([^"\\\r\n]+)\\"` +
		"|([^\\s\"'`\\\\,;&<>(){}=][^\\s\"'`\\\\,;&<>(){}]*))"
	r := [rdCount]redactRule{
		rdPEM: {name: "private_key", find: redactPEM, // src only for tests
			src: `-----BEGIN` + redactPEMLabel + `(?:[\s\S]*?-----END` + redactPEMLabel +
				`|` + redactPEMRest.String()[1:] + `)`, ph: redactPhPrivateKey, trim: redactTrimPEM},
		rdJWT: {name: "jwt", ph: redactPhJWT, word: true, lits: []string{"eyJ"}, skip: redactSkipJWT,
			src: `eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*`},
		rdOpenAI: {name: "openai", ph: redactPhAPIKey, word: true, lits: []string{"sk-"},
			src: `sk-[A-Za-z0-9_-]{20,}`},
		rdStripe: {name: "stripe", ph: redactPhAPIKey, word: true, lits: []string{"sk_", "rk_"},
			src: `[rs]k_(?:live|test)_[A-Za-z0-9]{10,}`},
		rdGitHub: {name: "github", ph: redactPhAPIKey, word: true, lits: []string{"gh", "github_pat_"},
			src: `(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})`},
		rdSlack: {name: "slack", ph: redactPhAPIKey, word: true, lits: []string{"xox"},
			src: `xox[abposr]-[A-Za-z0-9-]{10,}`},
		rdGoogle: {name: "google", ph: redactPhAPIKey, word: true, lits: []string{"AIza"},
			src: `AIza[A-Za-z0-9_-]{35,}`},
		rdAWS: {name: "aws", ph: redactPhAWSKey, word: true, lits: []string{"AKIA", "ASIA"},
			src: `(?:AKIA|ASIA)[A-Z0-9]{16}\b`},
		rdHF: {name: "huggingface", ph: redactPhAPIKey, word: true, lits: []string{"hf_"},
			src: `hf_[A-Za-z0-9]{30,}`},
		rdBearer: {name: "bearer", ph: redactPhBearer, word: true, lits: []string{"Bearer", "bearer", "BEARER"},
			groups: []int{1}, valid: redactBearerValid,
			src: `(?:[Bb]earer|BEARER)[ \t]+([A-Za-z0-9._~+/-]{16,}=*)`},
		rdAuth: {name: "authorization", word: true, trig: redactOps(1 << rdAuth), start: redactAuthStart,
			groups: []int{2}, phOf: redactAuthPh,
			src: `(?:` + ci("proxy-") + `)?` + ci("authorization") + `(?:\\?["'])?[ \t]*[:=][ \t]*(?:\\?["'])?` +
				`(` + ci("bearer") + `|` + ci("token") + `|` + ci("basic") + `)[ \t]+([A-Za-z0-9._~+/-]+=*)`},
		rdURL: {name: "url_password", ph: redactPhPassword, word: true, lits: []string{"://"}, start: redactURLStart,
			groups: []int{1},
			src:    `[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@\[\]"'<>\\]*:([^\s/?#@\[\]"'<>\\]+)@`},
		rdAssign: {name: "assignment", word: true, trig: redactOps(1 << rdAssign), start: redactAssignStart,
			groups: []int{2, 3, 4, 5}, phOf: redactAssignPh, valid: redactAssignValid,
			src: assignName + assignOp + assignValue},
		rdEmail: {name: "email", ph: redactPhEmail, lits: []string{"@"}, start: redactEmailStart, valid: redactEmailValid,
			src: `[\p{L}\p{N}._%+-]+@[\p{L}\p{N}-]+(?:\.[\p{L}\p{N}-]+)*\.\p{L}{2,}`},
		rdCard: {name: "card", find: redactCards},
	}
	for i := range r {
		if r[i].src == "" {
			continue
		}
		r[i].re = regexp.MustCompile(`^(?:` + r[i].src + `)`)
		b := ""
		if r[i].word {
			b = `\b`
		}
		r[i].full = regexp.MustCompile(b + `(?:` + r[i].src + `)`)
	}
	return r
}()

// redactFind returns the spans that the rules in mask find in s.
func redactFind(s string, mask uint64, dst []redactSpan) []redactSpan {
	for i := range redactRules {
		if mask&(1<<i) != 0 {
			dst = redactRules[i].spans(s, i, dst)
		}
	}
	return dst
}

// redactMaxMisses is how many triggers of a rule may fail to start a
// match in one text before the rule searches the whole text instead: a
// failed try may read far ahead, so trying at every trigger of a text
// made for it could cost time quadratic in its length.
const redactMaxMisses = 64

// spans appends the spans that r finds in s. They are what r.full finds
// searching s from left to right, but matching only where a match can
// start saves reading most of the text (a search costs 15 to 125 ns a
// byte, a pattern's literal is found at several GB/s).
func (r *redactRule) spans(s string, prio int, dst []redactSpan) []redactSpan {
	if r.find != nil {
		return r.find(s, prio, dst)
	}
	n0, from, misses := len(dst), 0, 0 // from: where the last match ended
	for t := range r.triggers(s) {
		p := -1
		switch {
		case r.start != nil:
			p = r.start(s, t, from)
		case t >= from && (!r.word || redactWordStart(s, t)):
			p = t
		}
		if p < from {
			continue
		}
		m := r.re.FindStringSubmatchIndex(s[p:])
		if m == nil {
			if r.skip != nil {
				from = r.skip(s, p)
			}
			if misses++; misses > redactMaxMisses {
				dst = dst[:n0]
				for _, m := range r.full.FindAllStringSubmatchIndex(s, -1) {
					dst = r.span(s, m, prio, dst)
				}
				return dst
			}
			continue
		}
		for k := range m {
			if m[k] >= 0 {
				m[k] += p
			}
		}
		from = m[1]
		dst = r.span(s, m, prio, dst)
	}
	return dst
}

// span appends the span of match m, if it passes.
func (r *redactRule) span(s string, m []int, prio int, dst []redactSpan) []redactSpan {
	start, end := m[0], m[1]
	if len(r.groups) > 0 {
		start = -1
		for _, g := range r.groups {
			if m[2*g] >= 0 {
				start, end = m[2*g], m[2*g+1]
				break
			}
		}
		if start < 0 {
			return dst
		}
	}
	if r.trim != nil {
		end = r.trim(s, start, end)
	}
	if start == end || redactIsPlaceholder(s[start:end]) || r.valid != nil && !r.valid(s, m, start, end) {
		return dst
	}
	ph := r.ph
	if r.phOf != nil {
		ph = r.phOf(s, m)
	}
	return append(dst, redactSpan{start: start, end: end, ph: ph, prio: prio})
}

// PEM private keys, by hand: a lazy search for the END line from each
// BEGIN line without one would read to the end of the text each time.
var (
	redactPEMBegin = regexp.MustCompile(`^-----BEGIN` + redactPEMLabel)
	redactPEMEnd   = regexp.MustCompile(`-----END` + redactPEMLabel)
	// no END line: what follows on the BEGIN line if it is long base64,
	// then whole lines of base64 or PEM headers
	redactPEMRest = regexp.MustCompile(`^(?:[ \t]+[A-Za-z0-9+/=]{16,})*[ \t]*(?:` +
		redactNL + `(?:` + redactPEMLine + redactNL + `)*(?:` + redactPEMLine + `$)?)?`)
)

const (
	redactPEMLabel = `[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`
	redactNL       = `(?:\r?\n|\\r?\\n)` // a newline, or one escaped in a JSON string
	redactPEMLine  = `[ \t]*(?:(?:Proc-Type|DEK-Info|Comment):[^\r\n\\"]*|[A-Za-z0-9+/=]+)?[ \t]*`
)

func redactPEM(s string, prio int, dst []redactSpan) []redactSpan {
	from := 0
	endFrom, endAt, endLen := -1, -1, 0 // the first END line at or after endFrom
	for i := 0; ; {
		j := strings.Index(s[i:], "-----BEGIN")
		if j < 0 {
			return dst
		}
		p := i + j
		i = p + 1
		if p < from {
			continue
		}
		h := redactPEMBegin.FindStringIndex(s[p:])
		if h == nil {
			continue
		}
		body := p + h[1]
		if endFrom < 0 || endFrom > body || endAt >= 0 && endAt < body {
			endFrom, endAt = body, -1
			if e := redactPEMEnd.FindStringIndex(s[body:]); e != nil {
				endAt, endLen = body+e[0], e[1]-e[0]
			}
		}
		end := 0
		if endAt >= 0 {
			end = endAt + endLen
			from = end
		} else {
			from = body + redactPEMRest.FindStringIndex(s[body:])[1]
			end = redactTrimPEM(s, p, from)
		}
		dst = append(dst, redactSpan{start: p, end: end, ph: redactPhPrivateKey, prio: prio})
		i = from
	}
}

// triggers yields r's triggers in s in increasing order.
func (r *redactRule) triggers(s string) func(yield func(int) bool) {
	if r.trig != nil {
		return func(yield func(int) bool) { r.trig(s, yield) }
	}
	return func(yield func(int) bool) {
		if len(r.lits) == 1 {
			lit := r.lits[0]
			for i := 0; ; i++ {
				j := strings.Index(s[i:], lit)
				if j < 0 || !yield(i+j) {
					return
				}
				i += j
			}
		}
		// several literals: the next occurrence of each, lowest first
		var next [3]int
		for k, lit := range r.lits {
			next[k] = redactIndexFrom(s, lit, 0)
		}
		for {
			k := -1
			for i := range r.lits {
				if next[i] >= 0 && (k < 0 || next[i] < next[k]) {
					k = i
				}
			}
			if k < 0 || !yield(next[k]) {
				return
			}
			next[k] = redactIndexFrom(s, r.lits[k], next[k]+1)
		}
	}
}

func redactIndexFrom(s, lit string, i int) int {
	if j := strings.Index(s[i:], lit); j >= 0 {
		return i + j
	}
	return -1
}

// redactSkipJWT: when no JWT starts at s[p], none starts in the rest of
// its first segment either (that segment would end where this one does,
// followed by the same text).
func redactSkipJWT(s string, p int) int {
	p += len("eyJ")
	for p < len(s) && (redactIsWord(s[p]) || s[p] == '-') {
		p++
	}
	return p
}

// redactWordStart reports whether a word starts at s[i] (\b before it).
func redactWordStart(s string, i int) bool {
	return redactIsWord(s[i]) && (i == 0 || !redactIsWord(s[i-1]))
}

func redactIsWord(c byte) bool { return redactIsAlnum(c) || c == '_' }

// redactOps yields the ':' and '=' whose name before starts a rule of bit.
func redactOps(bit uint64) func(s string, yield func(int) bool) {
	return func(s string, yield func(int) bool) {
		for i := 0; i < len(s); i++ {
			j := strings.IndexAny(s[i:], ":=")
			if j < 0 {
				return
			}
			i += j
			if redactNameBefore(s, i)&bit != 0 && !yield(i) {
				return
			}
		}
	}
}

// redactNameEnd returns where the name before the operator at s[i] ends:
// before the blanks and the quote (maybe escaped) between them.
func redactNameEnd(s string, i int) int {
	for i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
		i--
	}
	if i > 0 && (s[i-1] == '"' || s[i-1] == '\'') {
		i--
		if i > 0 && s[i-1] == '\\' {
			i--
		}
	}
	return i
}

// redactAssignStart maps the operator at s[t] to the start of the name
// before it: its first word character.
func redactAssignStart(s string, t, from int) int {
	end := redactNameEnd(s, t)
	p := end
	for p > from && (redactIsWord(s[p-1]) || s[p-1] == '.' || s[p-1] == '-') {
		p--
	}
	for p < end && !redactIsWord(s[p]) {
		p++
	}
	if p == end || !redactWordStart(s, p) {
		return -1
	}
	return p
}

// redactAuthStart maps the operator at s[t] to the start of the
// [Proxy-]Authorization before it.
func redactAuthStart(s string, t, from int) int {
	p := redactNameEnd(s, t) - len("authorization")
	if p < from {
		return -1
	}
	if q := p - len("proxy-"); q >= from && s[p-1] == '-' && redactFoldSuffix(s[:p-1], "proxy") && redactWordStart(s, q) {
		return q
	}
	if !redactWordStart(s, p) {
		return -1
	}
	return p
}

// redactURLStart maps the "://" at s[t] to the start of the scheme
// before it.
func redactURLStart(s string, t, from int) int {
	p := t
	for p > from && (redactIsAlnum(s[p-1]) || strings.IndexByte("+.-", s[p-1]) >= 0) {
		p--
	}
	for ; p < t; p++ {
		if c := s[p]; (c|0x20 >= 'a' && c|0x20 <= 'z') && redactWordStart(s, p) {
			return p
		}
	}
	return -1
}

// redactEmailStart maps the '@' at s[t] to the start of the local part
// before it.
func redactEmailStart(s string, t, from int) int {
	if t < from {
		return -1
	}
	p := t
	for p > from {
		c, w := utf8.DecodeLastRuneInString(s[from:p])
		if !unicode.IsLetter(c) && !unicode.IsNumber(c) && !strings.ContainsRune("._%+-", c) {
			break
		}
		p -= w
	}
	if p == t {
		return -1
	}
	return p
}

// redactReplace replaces spans (in any order, maybe overlapping) in s;
// overlapping spans become one, with the placeholder of the rule first in
// order. It returns the text and the number of placeholders written.
func redactReplace(s string, spans []redactSpan) (string, int) {
	slices.SortFunc(spans, func(a, b redactSpan) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return cmp.Compare(a.prio, b.prio)
	})
	var b strings.Builder
	b.Grow(len(s) + 16*len(spans))
	last, n := 0, 0
	for i := 0; i < len(spans); {
		cur := spans[i]
		for i++; i < len(spans) && spans[i].start < cur.end; i++ {
			cur.end = max(cur.end, spans[i].end)
			if spans[i].prio < cur.prio {
				cur.prio, cur.ph = spans[i].prio, spans[i].ph
			}
		}
		b.WriteString(s[last:cur.start])
		b.WriteString(cur.ph)
		last = cur.end
		n++
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// redactIsPlaceholder reports whether v is exactly one placeholder.
func redactIsPlaceholder(v string) bool {
	const p = "[REDACTED:"
	return len(v) > len(p)+1 && v[:len(p)] == p && strings.IndexByte(v[len(p):], ']') == len(v)-len(p)-1
}

// redactTrimPEM gives back the line breaks and blanks that end a PEM
// block without its END line.
func redactTrimPEM(s string, start, end int) int {
	for end > start {
		switch {
		case strings.IndexByte(" \t\r\n", s[end-1]) >= 0:
			end--
		case end-start >= 2 && s[end-2] == '\\' && (s[end-1] == 'n' || s[end-1] == 'r'):
			end -= 2
		default:
			return end
		}
	}
	return end
}

func redactBearerValid(s string, _ []int, start, end int) bool {
	// "bearer" followed by a long plain word is prose, not a token
	for i := start; i < end; i++ {
		if c := s[i]; c < 'a' || c > 'z' {
			return true
		}
	}
	return false
}

func redactAuthPh(s string, m []int) string {
	switch s[m[2]] | 0x20 {
	case 'b':
		if m[3]-m[2] == len("basic") {
			return redactPhBasicAuth
		}
		return redactPhBearer
	default:
		return redactPhToken
	}
}

func redactAssignPh(s string, m []int) string {
	name := strings.ToLower(s[m[2]:m[3]])
	switch {
	case strings.Contains(name, "pass"):
		return redactPhPassword
	case strings.HasSuffix(name, "token"):
		return redactPhToken
	case strings.HasSuffix(name, "key"):
		return redactPhAPIKey
	default:
		return redactPhSecret
	}
}

// redactNotSecret are assigned values that are code, not secrets.
var redactNotSecret = map[string]bool{
	"str": true, "string": true, "String": true, "bytes": true, "int": true, "bool": true,
	"boolean": true, "number": true, "any": true, "object": true, "SecretStr": true,
	"None": true, "null": true, "nil": true, "undefined": true, "NULL": true,
	"true": true, "false": true, "True": true, "False": true,
}

func redactAssignValid(s string, m []int, start, end int) bool {
	v := s[start:end]
	if m[10] >= 0 { // bare
		if end < len(s) && s[end] == '(' {
			return false // a call: getenv("X")
		}
		if i := strings.IndexByte(v, '['); i > 0 && v[len(v)-1] == ']' && redactIsIdent(v[:i]) {
			return false // an index: tokens[0], os.environ["X"]
		}
		if start > 0 && (s[start-1] == ' ' || s[start-1] == '\t') && redactIsAssignment(v) {
			return false // password= api_key=x: no value, then the next name
		}
	} else if t := strings.TrimLeft(v, " \t"); t == "" || strings.IndexByte(",:;)]}+", t[0]) >= 0 {
		// the quote was the end of a string, as in "password: " + pw or
		// ["password:", 12, "x"]: what follows is code, not a value
		return false
	}
	if redactNotSecret[v] || v[0] == '$' || v[0] == '%' || v[0] == '{' || v[0] == '<' {
		return false // code, ${VAR}, %(name)s, {{ template }}, <your key>
	}
	alnum, letter, digit, space := false, false, false, false
	filler := true // only x, *, . and the like: a placeholder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9':
			alnum, digit = true, true
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			alnum, letter = true, true
		case c == ' ' || c == '\t':
			space = true
		}
		if !strings.ContainsRune("xX*.-_#", rune(c)) {
			filler = false
		}
	}
	if !alnum || filler {
		return false
	}
	lower := strings.ToLower(v)
	for _, p := range []string{"your", "process.env", "os.environ", "os.getenv", "env."} {
		if strings.HasPrefix(lower, p) {
			return false
		}
	}
	name := s[m[2]:m[3]]
	if redactFoldSuffix(name, "token") {
		// LLM code is full of "token": " the", token = 15496, eos_token:
		// "</s>"; ask for something that looks like a credential.
		return !space && (len(v) >= 20 || len(v) >= 6 && letter && digit)
	}
	return true
}

func redactEmailValid(s string, m []int, start, end int) bool {
	if redactInURLAuthority(s, start) {
		return false // user@host or user:password@host in a URL
	}
	v := s[start:end]
	at := strings.IndexByte(v, '@')
	if v[:at] == "git" {
		return false // git@github.com:owner/repo, an SSH remote
	}
	switch strings.ToLower(v[strings.LastIndexByte(v, '.')+1:]) {
	case "png", "jpg", "jpeg", "gif", "svg", "webp", "ico":
		return false // icon@2x.png
	}
	return true
}

// redactInURLAuthority reports whether s[i:] starts a URL's user
// information: it follows "://", maybe with a user name and ':' between.
func redactInURLAuthority(s string, i int) bool {
	if i > 0 && s[i-1] == ':' {
		j := i - 1
		for j > 0 && strings.IndexByte("/@ \t\r\n", s[j-1]) < 0 {
			j--
		}
		i = j
	}
	return strings.HasSuffix(s[:i], "://")
}

// redactCards finds card numbers: maximal runs of digit groups joined by
// single spaces or dashes, in which a window of whole groups is a card.
func redactCards(s string, prio int, dst []redactSpan) []redactSpan {
	var groups [][2]int
	for i := 0; i < len(s); {
		if !redactIsDigit(s[i]) {
			i++
			continue
		}
		groups = groups[:0]
		j := i
		for {
			g := j
			for j < len(s) && redactIsDigit(s[j]) {
				j++
			}
			groups = append(groups, [2]int{g, j})
			if j+1 < len(s) && (s[j] == ' ' || s[j] == '-') && redactIsDigit(s[j+1]) {
				j++
				continue
			}
			break
		}
		if j-i >= 13 {
			dst = redactCardRun(s, groups, prio, dst)
		}
		i = j
	}
	return dst
}

func redactCardRun(s string, groups [][2]int, prio int, dst []redactSpan) []redactSpan {
	start, end := groups[0][0], groups[len(groups)-1][1]
	// glued to a word, a phone's '+' or a number's decimal point: not a card
	gluedBefore, gluedAfter := false, false
	if start > 0 {
		p := s[start-1]
		var pp byte
		if start > 1 {
			pp = s[start-2]
		}
		gluedBefore = redactIsAlnum(p) || p == '_' || p == '+' ||
			(p == '.' || p == ',') && redactIsDigit(pp) ||
			(p == '-' || p == '.') && redactIsAlnum(pp)
	}
	if end < len(s) {
		q := s[end]
		var qq byte
		if end+1 < len(s) {
			qq = s[end+1]
		}
		gluedAfter = redactIsAlnum(q) || q == '_' ||
			(q == '.' || q == ',') && redactIsDigit(qq) ||
			q == '-' && redactIsAlnum(qq)
	}
	last := len(groups) - 1
	for a := 0; a <= last; a++ {
		if l := groups[a][1] - groups[a][0]; a == 0 && gluedBefore || l != 4 && (l < 13 || l > 19) {
			continue // a card starts with a group of 4, or is one group
		}
		// the longest window of whole groups from a that is a card
		hi, digits := a-1, 0
		for b := a; b <= last; b++ {
			digits += groups[b][1] - groups[b][0]
			if digits > 19 {
				break
			}
			hi = b
		}
		for b := hi; b >= a; b-- {
			if b == last && gluedAfter {
				continue
			}
			if redactIsCard(s, groups[a:b+1]) {
				dst = append(dst, redactSpan{start: groups[a][0], end: groups[b][1], ph: redactPhCard, prio: prio})
				a = b
				break
			}
		}
	}
	return dst
}

// redactIsCard reports whether the digit groups gs of s spell a card
// number: 13 to 19 digits in one group or grouped the way cards are
// printed (first group of 4, then groups of 4 to 6, the last 1 to 6),
// starting with 2 to 9, not one digit repeated, passing the Luhn check.
func redactIsCard(s string, gs [][2]int) bool {
	n := 0
	for k, g := range gs {
		l := g[1] - g[0]
		if len(gs) > 1 && (k == 0 && l != 4 || k > 0 && k < len(gs)-1 && (l < 4 || l > 6) || l > 6) {
			return false
		}
		n += l
	}
	if n < 13 || n > 19 {
		return false
	}
	first := s[gs[0][0]]
	if first < '2' {
		return false
	}
	sum, same, double := 0, true, false
	for k := len(gs) - 1; k >= 0; k-- {
		for i := gs[k][1] - 1; i >= gs[k][0]; i-- {
			d := int(s[i] - '0')
			same = same && s[i] == first
			if double {
				if d *= 2; d > 9 {
					d -= 9
				}
			}
			sum += d
			double = !double
		}
	}
	return !same && sum%10 == 0
}

// redactIsAssignment reports whether v starts with a name and = or :.
func redactIsAssignment(v string) bool {
	i := strings.IndexAny(v, "=:")
	return i > 0 && redactIsIdent(v[:i])
}

// redactIsIdent reports whether v is an identifier or a dotted path of them.
func redactIsIdent(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; !(redactIsAlnum(c) || c == '_' || c == '.' && i > 0) || i == 0 && redactIsDigit(c) {
			return false
		}
	}
	return v != ""
}

func redactIsDigit(c byte) bool { return c >= '0' && c <= '9' }

func redactIsAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// redactFoldSuffix reports whether s ends in suf, a lower-case ASCII
// word, in any case.
func redactFoldSuffix(s, suf string) bool {
	if len(s) < len(suf) {
		return false
	}
	s = s[len(s)-len(suf):]
	for i := 0; i < len(suf); i++ {
		if s[i]|0x20 != suf[i] {
			return false
		}
	}
	return true
}

// Byte classes for the pre-check.
const (
	rcNone = iota
	rcDash
	rcUnderscore
	rcOp
	rcDigit
)

var redactClass = func() (t [256]uint8) {
	t['-'] = rcDash
	t['_'] = rcUnderscore
	t[':'] = rcOp
	t['='] = rcOp
	for c := '0'; c <= '9'; c++ {
		t[c] = rcDigit
	}
	return t
}()

// redactCandidates is the pre-check: a mask of the rules that may match
// in s, each bit set on a necessary condition of its rule (a literal the
// pattern requires, checked with strings.Contains or at a '-', '_', ':',
// '=' or digit found in one pass over the bytes). Most text sets none.
func redactCandidates(s string) uint64 {
	var m uint64
	if strings.Contains(s, "PRIVATE KEY") {
		m |= 1 << rdPEM
	}
	if strings.Contains(s, "eyJ") {
		m |= 1 << rdJWT
	}
	if strings.Contains(s, "AIza") {
		m |= 1 << rdGoogle
	}
	if strings.Contains(s, "AKIA") || strings.Contains(s, "ASIA") {
		m |= 1 << rdAWS
	}
	if strings.Contains(s, "earer") || strings.Contains(s, "EARER") {
		m |= 1 << rdBearer
	}
	if strings.IndexByte(s, '@') >= 0 {
		m |= 1 << rdEmail
		if strings.Contains(s, "://") {
			m |= 1 << rdURL
		}
	}
	for i := 0; i < len(s); i++ {
		switch redactClass[s[i]] {
		case rcNone:
		case rcDash: // sk-…, xoxb-…
			if i >= 2 && s[i-2] == 's' && s[i-1] == 'k' {
				m |= 1 << rdOpenAI
			}
			if i >= 4 && s[i-4:i-1] == "xox" {
				m |= 1 << rdSlack
			}
		case rcUnderscore: // sk_live_…, ghp_…, github_pat_…, hf_…
			if i >= 2 {
				switch s[i-2 : i] {
				case "sk", "rk":
					m |= 1 << rdStripe
				case "hf":
					m |= 1 << rdHF
				}
			}
			if i >= 3 && s[i-3] == 'g' && s[i-2] == 'h' && strings.IndexByte("pousr", s[i-1]) >= 0 ||
				i >= 6 && s[i-6:i] == "github" {
				m |= 1 << rdGitHub
			}
		case rcOp: // name = value, name: value
			m |= redactNameBefore(s, i)
		case rcDigit: // a run of 13 digits or more
			j, digits := i, 0
			for j < len(s) {
				if redactIsDigit(s[j]) {
					digits++
				} else if !(s[j] == ' ' || s[j] == '-') || j+1 >= len(s) || !redactIsDigit(s[j+1]) {
					break
				}
				j++
			}
			if digits >= 13 {
				m |= 1 << rdCard
			}
			i = j - 1
		}
	}
	return m
}

// redactNameBefore looks at the name before the operator at s[i] and
// returns the rules it may start: an assignment to a secret or an
// Authorization header.
func redactNameBefore(s string, i int) uint64 {
	j := i
	for j > 0 && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	if j > 0 && (s[j-1] == '"' || s[j-1] == '\'') {
		j--
		if j > 0 && s[j-1] == '\\' {
			j--
		}
	}
	name := s[:j]
	switch {
	case redactFoldSuffix(name, "token"), redactFoldSuffix(name, "secret"),
		redactFoldSuffix(name, "passwd"), redactFoldSuffix(name, "password"),
		redactFoldSuffix(name, "passphrase"):
		return 1 << rdAssign
	case redactFoldSuffix(name, "authorization"):
		return 1 << rdAuth
	case redactFoldSuffix(name, "key"):
		name = name[:len(name)-3]
		if n := len(name); n > 0 && (name[n-1] == '_' || name[n-1] == '-') {
			name = name[:n-1]
		}
		if redactFoldSuffix(name, "api") || redactFoldSuffix(name, "secret") ||
			redactFoldSuffix(name, "access") || redactFoldSuffix(name, "private") {
			return 1 << rdAssign
		}
	}
	return 0
}
