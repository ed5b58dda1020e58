package store

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

const (
	redactTestJWT = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." +
		"eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ." +
		"SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	redactTestPEM = "-----BEGIN RSA PRIVATE KEY-----\n" +
		"MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n" +
		"VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n" +
		"-----END RSA PRIVATE KEY-----"
)

type redactCase struct {
	name, in, want string
	n              int
}

var redactCases = []redactCase{
	// provider API keys
	{"openai", "key sk-abcdefghijklmnopqrstuvwxyz123456 here", "key [REDACTED:api_key] here", 1},
	{"openai project", "OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLmN0pQrStUvWxYz_12-34", "OPENAI_API_KEY=[REDACTED:api_key]", 1},
	{"anthropic", "use sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_AA.", "use [REDACTED:api_key].", 1},
	{"github classic", "ghp_Ik2zwEQHfwcepYyNGfB51YbmwxAscRuzOl8G", "[REDACTED:api_key]", 1},
	{"github kinds", "gho_Ik2zwEQHfwcepYyNGfB51Ybmwx ghu_Ik2zwEQHfwcepYyNGfB51Ybmwx ghs_Ik2zwEQHfwcepYyNGfB51Ybmwx ghr_Ik2zwEQHfwcepYyNGfB51Ybmwx",
		"[REDACTED:api_key] [REDACTED:api_key] [REDACTED:api_key] [REDACTED:api_key]", 4},
	{"github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "[REDACTED:api_key]", 1},
	{"slack", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx and xoxp-1234-5678-abcdef", "[REDACTED:api_key] and [REDACTED:api_key]", 2},
	{"google", "?key=AIzaSyD-1234567890abcdefghijklmnopqrstu&q=x", "?key=[REDACTED:api_key]&q=x", 1},
	{"aws", "AKIAIOSFODNN7EXAMPLE / ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_key] / [REDACTED:aws_key]", 2},
	{"stripe", "sk_live_4eC39HqLyjWDarjtT1zdp7dc rk_live_4eC39HqLyjWDarjtT1zdp7dc", "[REDACTED:api_key] [REDACTED:api_key]", 2},
	{"huggingface", "HF: hf_ubbb8ayn1b7o259owoo3sb09glshv616mt", "HF: [REDACTED:api_key]", 1},
	{"key in json", `{"api_key": "sk-abcdefghijklmnopqrstuvwxyz123456"}`, `{"api_key": "[REDACTED:api_key]"}`, 1},

	// assignments: the value goes, the name stays
	{"api_key=", "api_key=abc123def456", "api_key=[REDACTED:api_key]", 1},
	{"apikey:", "apikey: abcdef123", "apikey: [REDACTED:api_key]", 1},
	{"json api_key", `{"api_key": "q9w8e7r6", "n": 1}`, `{"api_key": "[REDACTED:api_key]", "n": 1}`, 1},
	{"header", "X-Api-Key: abcdef0123456789", "X-Api-Key: [REDACTED:api_key]", 1},
	{"token=", "token=abc123xyz", "token=[REDACTED:token]", 1},
	{"access_token", "GET /cb?access_token=ya29.a0AfH6SMBx&state=1", "GET /cb?access_token=[REDACTED:token]&state=1", 1},
	{"secret=", "secret=s3cr3t", "secret=[REDACTED:secret]", 1},
	{"client_secret", "client_secret: 'abc def'", "client_secret: '[REDACTED:secret]'", 1},
	{"password=", "password=hunter2", "password=[REDACTED:password]", 1},
	{"env password", `DB_PASSWORD="correct horse battery"`, `DB_PASSWORD="[REDACTED:password]"`, 1},
	{"flag password", "mysql -u root --password=hunter2 db", "mysql -u root --password=[REDACTED:password] db", 1},
	{"go password", `password := "hunter2"`, `password := "[REDACTED:password]"`, 1},
	{"python annotated", `password: str = "hunter2"`, `password: str = "[REDACTED:password]"`, 1},
	{"aws secret", "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "export AWS_SECRET_ACCESS_KEY=[REDACTED:api_key]", 1},
	{"escaped json", `{"cmd":"curl -d '{\"password\": \"hunter2\"}'"}`, `{"cmd":"curl -d '{\"password\": \"[REDACTED:password]\"}'"}`, 1},
	{"escape inside value", `{"password": "a\"b\\c"}`, `{"password": "[REDACTED:password]"}`, 1},
	{"yaml", "db:\n  password: p4ss w0rd\n", "db:\n  password: [REDACTED:password] w0rd\n", 1},

	// bearer and Authorization
	{"authorization bearer", "Authorization: Bearer abcdef0123456789ABCDEF", "Authorization: Bearer [REDACTED:bearer]", 1},
	{"bearer alone", "curl -H 'Bearer abcdefghijklmnop1234' x", "curl -H 'Bearer [REDACTED:bearer]' x", 1},
	{"short bearer in header", `"Authorization": "Bearer t0k3n-99"`, `"Authorization": "Bearer [REDACTED:bearer]"`, 1},
	{"basic", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED:basic_auth]", 1},
	{"token scheme", "authorization: token abc123def", "authorization: token [REDACTED:token]", 1},
	{"bearer jwt", "Authorization: Bearer " + redactTestJWT, "Authorization: Bearer [REDACTED:jwt]", 1},

	// JWT, private keys, URLs
	{"jwt", "session=" + redactTestJWT + "; path=/", "session=[REDACTED:jwt]; path=/", 1},
	{"pem", "key:\n" + redactTestPEM + "\nthanks", "key:\n[REDACTED:private_key]\nthanks", 1},
	{"pem openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----", "[REDACTED:private_key]", 1},
	{"pem truncated", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n\nwhat is wrong with it?",
		"[REDACTED:private_key]\n\nwhat is wrong with it?", 1},
	{"pem truncated encrypted", "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\nxJPIsnJsoQfXfmFyRkBYkCvUtWYbLzkT",
		"[REDACTED:private_key]", 1},
	{"pem one line", "-----BEGIN PRIVATE KEY----- MIIEvQIBADANBgkqhkiG9w0BAQEFAASC BKcwggSjAgEAAoIBAQC7 is it ok?",
		"[REDACTED:private_key] is it ok?", 1},
	{"pem in json", `{"key": "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIIrY\n-----END EC PRIVATE KEY-----\n"}`, `{"key": "[REDACTED:private_key]\n"}`, 1},
	{"url password", "postgres://admin:s3cret@db.internal:5432/app", "postgres://admin:[REDACTED:password]@db.internal:5432/app", 1},
	{"url user", "ssh://git@host.example.com/repo and https://bob@example.com/", "", 0},
	{"email in url", "https://example.com/invite?to=bob@example.com", "https://example.com/invite?to=[REDACTED:email]", 1},

	// e-mail
	{"email", "mail alice.smith+tag@example.co.uk now", "mail [REDACTED:email] now", 1},
	{"email unicode", "écrire à josé@exemple.fr.", "écrire à [REDACTED:email].", 1},
	{"email in json", `{"to":"bob@example.com"}`, `{"to":"[REDACTED:email]"}`, 1},

	// cards
	{"card spaces", "card 4111 1111 1111 1111 exp 12/27", "card [REDACTED:card] exp 12/27", 1},
	{"card dashes", "4111-1111-1111-1111", "[REDACTED:card]", 1},
	{"card plain", "number:5555555555554444.", "number:[REDACTED:card].", 1},
	{"card amex", "amex 378282246310005 or 3782 822463 10005", "amex [REDACTED:card] or [REDACTED:card]", 2},
	{"card discover", "6011111111111117", "[REDACTED:card]", 1},
	{"card then cvv", "4111 1111 1111 1111 123", "[REDACTED:card] 123", 1},
	{"card after number", "qty 2 4111 1111 1111 1111", "qty 2 [REDACTED:card]", 1},
	{"card cjk", "卡号4111111111111111。", "卡号[REDACTED:card]。", 1},

	// several at once, overlapping
	{"several", "mail a@b.io, key AKIAIOSFODNN7EXAMPLE, card 4111111111111111", "mail [REDACTED:email], key [REDACTED:aws_key], card [REDACTED:card]", 3},
	{"email glued to card", "x@y.com4111111111111111", "[REDACTED:email][REDACTED:card]", 2},

	// near misses: left alone
	{"task-force", "the task-force met at the desk-lamp-aaaaaaaaaaaaaaaaaaaaaaaa", "", 0},
	{"short sk", "sk-1 and sk-short and risk-averse", "", 0},
	{"bearer prose", "The Bearer scheme is defined in RFC 6750; the bearer of a token may use it.", "", 0},
	{"bearer word", "Bearer internationalization", "", 0},
	{"luhn fails", "card 4111 1111 1111 1112", "", 0},
	{"order id", "order 1234567890123456 shipped", "", 0},
	{"glued id", "ORD-4111111111111111 id4111111111111111 4111111111111111x", "", 0},
	{"phone", "call +8613812345678 or +1 415 555 0123", "", 0},
	{"timestamps", "ts=1712345678907 ns=1712345678901234563", "", 0},
	{"decimal", "pi is 3.4111111111111111 and 4111111111111111.5", "", 0},
	{"zeros", "0000 0000 0000 0000 and 4444444444444444", "", 0},
	{"dates", "2024-01-15 12:30:45 and 2024-01-15-2024-01-16", "", 0},
	{"too long", "41111111111111111111111", "", 0},
	{"uuid", "123e4567-e89b-12d3-a456-426614174000 da39a3ee5e6b4b0d3255bfef95601890afd80709", "", 0},
	{"aws short", "AKIAIOSFODNN7EXAMPL and ASIA PACIFIC", "", 0},
	{"jwt-ish", "eyJ and eyJhbGciOiJIUzI1NiJ9", "", 0},
	{"pem public", "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A\n-----END PUBLIC KEY-----", "", 0},
	{"git remote", "git clone git@github.com:clawrl/clawrl.git", "", 0},
	{"not emails", "@property, user@localhost, pkg@1.2.3, icon@2x.png", "", 0},
	{"llm tokens", `{"token": " the", "logprob": -0.5} {"token": 15496} eos_token: "</s>" max_tokens=100 pad_token="<pad>"`, "", 0},
	{"code", `token = tokenizer.encode(text)[0]; token = tokens[0]; if token == "" {}; token := r.Header.Get("X")`, "", 0},
	{"env references", `password = os.environ["DB_PASSWORD"]; api_key=os.getenv("OPENAI_API_KEY"); token: ${{ secrets.GITHUB_TOKEN }}`, "", 0},
	{"types and nulls", "password: str\napi_key = None\nsecret: true\ntoken: string", "", 0},
	{"placeholders", `api_key="YOUR_API_KEY" password: "<your password>" secret=xxxxxxxx token=*** api-key: ...`, "", 0},
	{"string ends", `print("password: " + pw) ["password:", 12, "x"]`, "", 0},
	{"empty values", `password= api_key="" token:`, "", 0},
	{"already redacted", "[REDACTED:email] password=[REDACTED:password] Bearer [REDACTED:bearer] \"api_key\": \"[REDACTED:api_key]\"", "", 0},
	{"prose", "The password policy asks for a secret phrase; tokens are counted per request.", "", 0},
	{"empty", "", "", 0},
}

func TestRedact(t *testing.T) {
	for _, c := range redactCases {
		t.Run(c.name, func(t *testing.T) {
			want := c.want
			if c.n == 0 {
				want = c.in
			}
			got, n := Redact(c.in)
			if got != want || n != c.n {
				t.Errorf("Redact(%q)\n got %q, %d\nwant %q, %d", c.in, got, n, want, c.n)
			}
			// the pre-check only skips work: without it the result is the same
			if all, an := redactWith(c.in, redactAll); all != got || an != n {
				t.Errorf("without pre-check: %q, %d; with: %q, %d", all, an, got, n)
			}
		})
	}
}

func redactAll(string) uint64 { return 1<<rdCount - 1 }

func TestRedactIdempotent(t *testing.T) {
	var all strings.Builder
	for _, c := range redactCases {
		all.WriteString(c.in)
		all.WriteString("\n")
	}
	for _, in := range append(redactInputs(), all.String(), redactBenchText(true)) {
		once, _ := Redact(in)
		twice, n := Redact(once)
		if twice != once || n != 0 {
			t.Errorf("Redact(Redact(%q)) = %q, %d; want %q, 0", in, twice, n, once)
		}
	}
}

// TestRedactJSON checks that redacting JSON text keeps it valid.
func TestRedactJSON(t *testing.T) {
	for _, in := range []string{
		`{"password": "a\"b\\c", "to": "bob@example.com"}`,
		`{"cmd": "curl -H \"Authorization: Bearer abcdefghijklmnop1234\" -d '{\"api_key\": \"q9w8e7r6\"}'"}`,
		`{"command": "export DB_PASSWORD=hunter2\\\nexport TOKEN=\"abc123def\""}`,
		`{"key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcw"}`,
		`{"url": "postgres://u:p%40ss@h/db", "card": "4111 1111 1111 1111", "jwt": "` + redactTestJWT + `"}`,
		`{"text": "password:", "n": 12, "m": "left alone"}`,
	} {
		if !json.Valid([]byte(in)) {
			t.Fatalf("bad test input %s", in)
		}
		out, n := Redact(in)
		if n == 0 && !strings.Contains(in, "left alone") || !json.Valid([]byte(out)) {
			t.Errorf("Redact(%s) = %s, %d: want valid JSON and a replacement", in, out, n)
		}
	}
}

func TestRedactInvalidUTF8(t *testing.T) {
	in := "\xff\xfepassword=\xc3\xffx1 sk-abcdefghijklmnopqrstuvwxyz\xff \xffa@b.com\xff \xe2\x82"
	want := "\xff\xfepassword=[REDACTED:password] [REDACTED:api_key]\xff \xff[REDACTED:email]\xff \xe2\x82"
	if out, n := Redact(in); out != want || n != 3 {
		t.Errorf("Redact(%q) = %q, %d", in, out, n)
	}
}

func redactInputs() []string {
	var ins []string
	for _, c := range redactCases {
		ins = append(ins, c.in)
	}
	return ins
}

// redactSecrets returns what the rules find in s, by rule, with the number
// of times each was found.
func redactSecrets(s string) []map[string]int {
	var found []map[string]int
	for i := range redactRules {
		m := map[string]int{}
		for _, sp := range redactRules[i].spans(s, i, nil) {
			m[s[sp.start:sp.end]]++
		}
		found = append(found, m)
	}
	return found
}

// redactSpansFull is what r finds searching all of s with r.full, the
// plain way that r.spans is a shortcut for; each match is judged by the
// same rule (span) as there.
func redactSpansFull(r *redactRule, s string) []redactSpan {
	var dst []redactSpan
	for _, m := range r.full.FindAllStringSubmatchIndex(s, -1) {
		dst = r.span(s, m, 0, dst)
	}
	return dst
}

// redactCheckSpans checks that each rule finds at its triggers what a
// search of the whole text finds.
func redactCheckSpans(t *testing.T, s string) {
	t.Helper()
	for i := range redactRules {
		r := &redactRules[i]
		if r.full == nil {
			continue
		}
		got, want := r.spans(s, 0, nil), redactSpansFull(r, s)
		if !slices.Equal(got, want) {
			t.Fatalf("rule %s on %q: at triggers %v, searching %v", r.name, s, got, want)
		}
	}
}

func TestRedactTriggers(t *testing.T) {
	for _, in := range append(redactInputs(), redactBenchText(true)) {
		redactCheckSpans(t, in)
	}
}

// redactOccurrences counts the possibly overlapping occurrences of sub in s.
func redactOccurrences(s, sub string) int {
	n := 0
	for i := 0; ; {
		j := strings.Index(s[i:], sub)
		if j < 0 {
			return n
		}
		n++
		i += j + 1
	}
}

// redactStripPlaceholders replaces each placeholder in s by a NUL byte.
func redactStripPlaceholders(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "[REDACTED:")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		b.WriteByte(0)
		s = s[i+j+1:]
	}
}

func FuzzRedact(f *testing.F) {
	for _, in := range redactInputs() {
		f.Add(in)
	}
	f.Add(redactBenchText(true))
	f.Fuzz(func(t *testing.T, in string) {
		out, n := Redact(in)
		if (n == 0) != (out == in) {
			t.Fatalf("Redact(%q) = %q, %d: count and change disagree", in, out, n)
		}
		if again, m := Redact(out); again != out || m != 0 {
			t.Fatalf("not idempotent: Redact(%q) = %q; again %q, %d", in, out, again, m)
		}
		if all, an := redactWith(in, redactAll); all != out || an != n {
			t.Fatalf("pre-check changed the result for %q: %q, %d; without it %q, %d", in, out, n, all, an)
		}
		redactCheckSpans(t, in)
		if utf8.ValidString(in) && !utf8.ValidString(out) {
			t.Fatalf("Redact(%q) = %q: invalid UTF-8", in, out)
		}
		// every secret the rules find in the input is gone, unless the same
		// text also stands somewhere it is no secret
		rest := redactStripPlaceholders(out)
		for _, m := range redactSecrets(in) {
			for sec, k := range m {
				if redactOccurrences(in, sec) <= k && !strings.Contains(sec, "\x00") && strings.Contains(rest, sec) {
					t.Fatalf("Redact(%q) = %q keeps secret %q", in, out, sec)
				}
			}
		}
	})
}

// redactBenchText is about 4 KB of ordinary prose and code; with secrets,
// four of its lines hold one each.
func redactBenchText(secrets bool) string {
	para := `The scheduler keeps a queue of pending jobs and hands them to workers as
they become free. Each worker reports back when it is done, and the
scheduler records how long the job took so that it can estimate the next
one. If a worker crashes, its job goes back to the queue after a timeout.
We tried a few designs before this one; the simplest that survived load
testing was a single goroutine that owns the queue.

    func (s *Scheduler) Next(ctx context.Context) (*Job, error) {
        select {
        case j := <-s.queue:
            s.started[j.ID] = time.Now()
            return j, nil
        case <-ctx.Done():
            return nil, ctx.Err()
        }
    }

Can you review this and tell me whether the timeout handling is right?
I am also not sure about naming: should it be "Next" or "Take"? Thanks!
`
	var b strings.Builder
	for b.Len() < 4096-len(para) {
		b.WriteString(para)
	}
	b.WriteString(para[:4096-b.Len()])
	s := b.String()
	if secrets {
		lines := strings.Split(s, "\n")
		lines[3] += " My key is sk-abcdefghijklmnopqrstuvwxyz123456."
		lines[20] += " Write to alice@example.com."
		lines[40] += " Card 4111 1111 1111 1111."
		lines[60] += " Authorization: Bearer abcdef0123456789ABCDEF"
		s = strings.Join(lines, "\n")
	}
	return s
}

func TestRedactBenchText(t *testing.T) {
	clean, dirty := redactBenchText(false), redactBenchText(true)
	if m := redactCandidates(clean); m != 0 {
		t.Errorf("clean text starts rules %b", m)
	}
	if _, n := Redact(clean); n != 0 {
		t.Errorf("clean text: %d replacements", n)
	}
	if _, n := Redact(dirty); n != 4 {
		t.Errorf("text with secrets: %d replacements, want 4", n)
	}
}

func BenchmarkRedact(b *testing.B) {
	for _, bc := range []struct {
		name string
		text string
	}{
		{"clean", redactBenchText(false)},
		{"secrets", redactBenchText(true)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			for b.Loop() {
				Redact(bc.text)
			}
		})
	}
}
