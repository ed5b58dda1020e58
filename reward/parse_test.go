package reward

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/clawrl/clawrl/tokenizer"
)

func TestParseVote(t *testing.T) {
	tests := []struct {
		name string
		text string
		vote int
		ok   bool
	}{
		{"one", `The user moved on. \boxed{1}`, 1, true},
		{"minus one", `They corrected it. \boxed{-1}`, -1, true},
		{"zero", `Unclear. \boxed{0}`, 0, true},
		{"plus one", `\boxed{+1}`, 1, true},
		{"unicode minus", "\\boxed{\u22121}", -1, true},
		{"spaces inside", `\boxed{ -1 }`, -1, true},
		{"newlines inside", "\\boxed{\n1\n}", 1, true},
		{"last of several counts", `Maybe \boxed{1}? No: \boxed{-1}`, -1, true},
		{"last of three", `\boxed{0} \boxed{-1} \boxed{1}`, 1, true},
		{"none", `The reply was fine.`, 0, false},
		{"empty text", ``, 0, false},
		{"two is malformed", `\boxed{2}`, 0, false},
		{"empty box", `\boxed{}`, 0, false},
		{"word in box", `\boxed{yes}`, 0, false},
		{"nested braces", `\boxed{{1}}`, 0, false},
		{"text macro", `\boxed{\text{1}}`, 0, false},
		{"malformed last box does not fall back", `\boxed{1} then \boxed{2}`, 0, false},
		{"unclosed box is not a box", `\boxed{1} and finally \boxed{-1`, 1, true},
		{"unclosed outer, closed inner", `\boxed{ \boxed{-1}`, -1, true},
		{"stray closing brace", `\boxed{1}}`, 1, true},
		{"box in fence ignored", "\\boxed{-1}\n```\n\\boxed{1}\n```\n", -1, true},
		{"only box in fence", "```text\n\\boxed{1}\n```", 0, false},
		{"tilde fence", "\\boxed{0}\n~~~\n\\boxed{1}\n~~~\n", 0, true},
		{"indented fence", "\\boxed{1}\n  ```\n  \\boxed{-1}\n  ```\n", 1, true},
		{"unclosed fence runs to end", "\\boxed{1}\n```\n\\boxed{-1}\n", 1, true},
		{"box after fence counts", "```\n\\boxed{1}\n```\nVerdict: \\boxed{-1}", -1, true},
		{"longer fence needs longer close", "\\boxed{0}\n````\n```\n\\boxed{1}\n````\n", 0, true},
		{"inline code ignored", "The format is `\\boxed{1}`; mine is \\boxed{-1}", -1, true},
		{"inline code last", "Verdict \\boxed{0}, not `\\boxed{1}`", 0, true},
		{"one-line triple backticks are inline", "```\\boxed{1}``` \\boxed{-1}", -1, true},
		{"unmatched backtick is text", "it`s \\boxed{1}", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vote, ok := ParseVote(tt.text)
			if vote != tt.vote || ok != tt.ok {
				t.Errorf("ParseVote(%q) = %d, %v; want %d, %v", tt.text, vote, ok, tt.vote, tt.ok)
			}
		})
	}
}

func TestParseHint(t *testing.T) {
	const hint = "Ask which file the user means before editing."
	tests := []struct {
		name string
		text string
		want HintVote
	}{
		{"accept", "Reasoning.\n[HINT_START]\n" + hint + "\n[HINT_END]\n\\boxed{1}", HintVote{true, true, hint}},
		{"decline", "The reply was fine. \\boxed{0}", HintVote{Valid: true}},
		{"decline with a block", "[HINT_START]" + hint + "[HINT_END] on second thought no. \\boxed{0}", HintVote{Valid: true}},
		{"missing end marker", "[HINT_START]\n" + hint + "\n\\boxed{1}", HintVote{}},
		{"two blocks run together", "[HINT_START] Answer with a list. [HINT_START] " + hint + " [HINT_END]\n\\boxed{1}", HintVote{}},
		{"missing start marker", hint + "\n[HINT_END]\n\\boxed{1}", HintVote{}},
		{"no box", "[HINT_START]" + hint + "[HINT_END]", HintVote{}},
		{"minus one box", "[HINT_START]" + hint + "[HINT_END] \\boxed{-1}", HintVote{}},
		{"box two", "[HINT_START]" + hint + "[HINT_END] \\boxed{2}", HintVote{}},
		{"ten characters is too short", "[HINT_START]0123456789[HINT_END]\\boxed{1}", HintVote{}},
		{"eleven characters", "[HINT_START]01234567890[HINT_END]\\boxed{1}", HintVote{true, true, "01234567890"}},
		{"short after trimming", "[HINT_START]   short   \n\n [HINT_END]\\boxed{1}", HintVote{}},
		{"whitespace collapsed", "[HINT_START]\n\n  Check   the\n  path\tfirst.  \n[HINT_END]\n\\boxed{1}", HintVote{true, true, "Check the path first."}},
		{"spaces and case in markers", "[ hint_start ]\n" + hint + "\n[\nHINT_END ]\n\\boxed{1}", HintVote{true, true, hint}},
		{"last block wins", "[HINT_START]First hint, long enough.[HINT_END] [HINT_START]" + hint + "[HINT_END] \\boxed{1}", HintVote{true, true, hint}},
		{"box inside the hint does not count", "[HINT_START]Answer with \\boxed{1} style output.[HINT_END] \\boxed{0}", HintVote{Valid: true}},
		{"box only inside the hint", "[HINT_START]Answer with \\boxed{1} style output.[HINT_END]", HintVote{}},
		{"code in hint kept", "[HINT_START]Run `go vet ./...` before replying.[HINT_END]\\boxed{1}", HintVote{true, true, "Run `go vet ./...` before replying."}},
		{"box in fence ignored", "[HINT_START]" + hint + "[HINT_END]\n```\n\\boxed{0}\n```\n\\boxed{1}", HintVote{true, true, hint}},
		{"empty", "", HintVote{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseHint(tt.text); got != tt.want {
				t.Errorf("ParseHint(%q) = %+v; want %+v", tt.text, got, tt.want)
			}
		})
	}
}

func TestMajority(t *testing.T) {
	tests := []struct {
		votes  []int
		reward int
		tie    bool
	}{
		{nil, 0, false},
		{[]int{1}, 1, false},
		{[]int{-1}, -1, false},
		{[]int{1, 1, -1}, 1, false},
		{[]int{-1, 0, -1}, -1, false},
		{[]int{0, 0, 1}, 0, false},
		{[]int{1, -1}, 0, true},
		{[]int{1, 0}, 0, true},
		{[]int{1, -1, 0}, 0, true},
		{[]int{1, 1, -1, -1, 0}, 0, true},
		{[]int{1, 1, -1, 0}, 1, false},
		{[]int{5, 1}, 1, false}, // out-of-range values are ignored
	}
	for _, tt := range tests {
		reward, tie := Majority(tt.votes)
		if reward != tt.reward || tie != tt.tie {
			t.Errorf("Majority(%v) = %d, %v; want %d, %v", tt.votes, reward, tie, tt.reward, tt.tie)
		}
	}
}

func TestSelectHint(t *testing.T) {
	hints := []string{"Check the path first.", "Use ISO dates.", "Ask which of the two config files the user means.", "Keep it short."}
	tests := []struct {
		rule HintRule
		want string
	}{
		{"", hints[2]},
		{HintLongest, hints[2]},
		{HintShortest, hints[1]}, // "Use ISO dates." and "Keep it short." tie at 14: the first wins
	}
	for _, tt := range tests {
		if got := SelectHint(hints, tt.rule); got != tt.want {
			t.Errorf("SelectHint(%q) = %q; want %q", tt.rule, got, tt.want)
		}
	}
	if got := SelectHint(nil, HintLongest); got != "" {
		t.Errorf("SelectHint(nil) = %q; want empty", got)
	}
}

func FuzzParseVote(f *testing.F) {
	for _, s := range []string{`\boxed{1}`, `\boxed{-1}`, "```\n\\boxed{1}\n```", "`\\boxed{0}`", `\boxed{{}}`, `\boxed{`, "~~~~\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := ParseVote(s)
		if v < -1 || v > 1 || (!ok && v != 0) {
			t.Fatalf("ParseVote(%q) = %d, %v", s, v, ok)
		}
		if ok && !strings.Contains(s, boxOpen) {
			t.Fatalf("ParseVote(%q) found a vote without a box", s)
		}
		// Appending a clean verdict on its own line outside code decides,
		// unless the text leaves a fence open.
		if _, fenced := fenceOpenAtEnd(s); !fenced {
			if v, ok := ParseVote(s + "\n\\boxed{-1}"); !ok || v != -1 {
				t.Fatalf("ParseVote(%q + verdict) = %d, %v", s, v, ok)
			}
		}
	})
}

// fenceOpenAtEnd reports whether s ends inside a fenced code block.
func fenceOpenAtEnd(s string) (string, bool) {
	var fence string
	for line := range strings.SplitAfterSeq(s, "\n") {
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if closesFence(trimmed, fence) {
				fence = ""
			}
			continue
		}
		fence = openFence(trimmed)
	}
	return fence, fence != ""
}

func FuzzParseHint(f *testing.F) {
	for _, s := range []string{"[HINT_START]Check the path first.[HINT_END]\\boxed{1}", "[HINT_START]x", "\\boxed{0}", "[ hint_end ][HINT_START]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := ParseHint(s)
		if h.Accept && (!h.Valid || utf8.RuneCountInString(h.Hint) <= MinHintRunes) {
			t.Fatalf("ParseHint(%q) = %+v: accepted a bad hint", s, h)
		}
		if !h.Accept && h.Hint != "" {
			t.Fatalf("ParseHint(%q) = %+v: hint without accept", s, h)
		}
		if h.Hint != strings.Join(strings.Fields(h.Hint), " ") {
			t.Fatalf("ParseHint(%q) hint %q is not whitespace-normalised", s, h.Hint)
		}
	})
}

func TestGrounded(t *testing.T) {
	for _, c := range []struct {
		hint, evidence string
		want           bool
	}{
		{"Write your whole answer in lowercase letters.", "Respond entirely in lower case.", true},
		// "letter" is in every instruction about case: it grounds neither
		// a lowercase nor an uppercase hint (the bundled judge wrote the
		// lowercase one after "Small letters crept in.", an uppercase
		// correction).
		{"Write your whole answer in lowercase letters.", "Keep every letter of your response small, no capitals at all.", false},
		{"Write your whole answer in lowercase letters.", "Small letters crept in. Shout your whole response in upper case.", false},
		// Words shared only with the next request do not ground a hint
		// (HintEvidence leaves it out); numbers and quoted words do.
		{"End your answer with the word winter.", "Present your response as an enumerated list.", false},
		{"Answer in at most 5 words.", "Your response must not exceed 5 words.", true},
		{"Answer in at most 5 words.", "Your response must not exceed 50 words.", false},
		{"Start your answer with \"OK!\".", "Every response should begin with \"OK!\".", true},
		{"Start your answer with \"Here you go:\".", "Here is what I think of you.", false},
		{"Answer in JSON, as an object with the key \"answer\".", "Keep every letter of your response small, no capitals at all.", false},
		{"Answer in JSON, as an object with the key \"answer\".", "Please put every part of your response on its own dash-bulleted line.", false},
		{"End your answer with the word pencil.", "From now on, close each response with the word pencil.", true},
		{"The read_file call failed with an error; check its arguments before calling it.", `{"error": "file not found: notes.txt"} read_file`, true},
		{"The user wants dates in ISO 8601; convert them before answering.", "No, I meant the dates as YYYY-MM-DD.", true},
		{"Be more careful.", "Thanks!", false},
		{"", "anything", false},
	} {
		if got := Grounded(c.hint, c.evidence); got != c.want {
			t.Errorf("Grounded(%q, %q) = %v, want %v", c.hint, c.evidence, got, c.want)
		}
	}
}

func TestHintEvidence(t *testing.T) {
	for _, c := range []struct {
		next []tokenizer.Message
		fb   string
		want string
	}{
		{[]tokenizer.Message{{Role: "user", Content: "No, in bullets please.\n\nWrite the word winter 5 times."}}, "", "No, in bullets please. \n"},
		{[]tokenizer.Message{{Role: "user", Content: "No.\n\nIn bullets please.\n\nWhat is 7 + 5?"}}, "", "No.\n\nIn bullets please. \n"},
		{[]tokenizer.Message{{Role: "user", Content: "Use bullets. What is 7 + 5?"}}, "", "Use bullets. What is 7 + 5? \n"},
		// Tool results count whole, with the tool's name; feedback too.
		{[]tokenizer.Message{{Role: "tool", Name: "read_file", Content: "error\n\nfile not found"}}, "too long\n\nreally", "error\n\nfile not found read_file\ntoo long\n\nreally"},
	} {
		if got := HintEvidence(&Turn{NextState: c.next}, c.fb); got != c.want {
			t.Errorf("HintEvidence(%v, %q) = %q, want %q", c.next, c.fb, got, c.want)
		}
	}
}

func TestSelectHintAgree(t *testing.T) {
	for _, c := range []struct {
		hints []string
		want  string
	}{
		{[]string{"Write your whole answer in lowercase letters.", "Answer in JSON, as an object with the key \"answer\".", "Write your whole answer in lowercase letters."},
			"Write your whole answer in lowercase letters."},
		{[]string{"Write your whole answer in lowercase letters.", "Answer in JSON, as an object with the key \"answer\".", "End your answer with the word apple."}, ""},
		{[]string{"Use only lowercase letters.", "Use only lowercase letters in your reply."}, "Use only lowercase letters."},
		{[]string{"One hint alone."}, ""},
		{nil, ""},
	} {
		if got := SelectHint(c.hints, HintAgree); got != c.want {
			t.Errorf("SelectHint(%q, agree) = %q, want %q", c.hints, got, c.want)
		}
	}
}
