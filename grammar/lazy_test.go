package grammar

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// A lazy constraint over a vocabulary that can write text, reasoning
// tags and the trigger (whole, or split over tokens): every random
// generation holds only valid calls of the declared tools after each
// trigger outside a reasoning block, the text around them is free, and a
// trigger inside a reasoning block starts nothing.
func TestLazyCalls(t *testing.T) {
	s, v := compileBoth(t, testSchemas["weather"])
	g := &Grammar{}
	for _, name := range []string{"get_weather", "get_time"} {
		g.Alts = append(g.Alts, []Part{{Text: "\n{\"name\": \"" + name + "\", \"arguments\": "}, {Schema: s}, {Text: "}\n</tool_call>"}})
	}
	words := []string{"<tool_call>", "<tool", "_call>", "<think>", "</think>", "Hello", " world", "\n", `{"name": "`, "get_weather", "get_time",
		"send_email", `", "arguments": `, `{"city": "`, "Paris", `"}`, "}\n</tool_call>", `, "days": 3`, " ", `"`, "}", "<", ">", "é"}
	var vocab Vocab
	for _, w := range words {
		vocab = append(vocab, []byte(w))
	}
	for c := byte(' '); c < 0x7f; c++ {
		vocab = append(vocab, []byte{c})
	}
	stop := int32(len(vocab))
	vocab = append(vocab, nil)
	r := rand.New(rand.NewPCG(5, 5))
	calls, thinkTriggers := 0, 0
	for run := range 150 {
		reasoning := run%5 == 0
		l := NewLazy("<tool_call>", g, vocab, []int32{stop}, reasoning)
		var out []byte
		for step := 0; step < 300; step++ {
			l.SetBudget(300 - step)
			var ok []int32
			for tok := range int32(len(vocab)) {
				if l.Allow(tok) {
					ok = append(ok, tok)
				}
			}
			if len(ok) == 0 {
				t.Fatalf("no token allowed after %q", out)
			}
			// Favour the words, so that calls and tags happen.
			tok := ok[r.IntN(len(ok))]
			if r.IntN(2) == 0 {
				for _, cand := range r.Perm(len(words)) {
					if l.Allow(int32(cand)) {
						tok = int32(cand)
						break
					}
				}
			}
			if tok == stop {
				if l.Triggered() {
					t.Fatalf("stop allowed inside a call: %q", out)
				}
				if step > 20 {
					break
				}
				continue
			}
			l.Accept(tok)
			out = append(out, vocab[tok]...)
		}
		if l.Triggered() {
			continue // the budget ran out inside a call
		}
		// Check every call outside reasoning.
		text := string(out)
		think := reasoning
		for {
			i := strings.Index(text, "<tool_call>")
			if i < 0 {
				break
			}
			think = thinkAt([]byte(text[:i]), think)
			rest := text[i+len("<tool_call>"):]
			if think {
				thinkTriggers++
				text = rest
				continue
			}
			body, after, found := strings.Cut(rest, "}\n</tool_call>")
			if !found {
				t.Fatalf("an unclosed call in %q", out)
			}
			name, args, _ := strings.Cut(strings.TrimPrefix(body, "\n{\"name\": \""), "\", \"arguments\": ")
			if name != "get_weather" && name != "get_time" {
				t.Fatalf("call of %q in %q", name, out)
			}
			if err := validate(v, args); err != nil {
				t.Fatalf("arguments %q in %q: %v", args, out, err)
			}
			calls++
			think = false
			text = after
		}
		if n := l.Calls(); n < 0 {
			t.Fatal(n)
		}
	}
	t.Logf("%d valid calls, %d triggers inside reasoning", calls, thinkTriggers)
	if calls < 30 || thinkTriggers == 0 {
		t.Errorf("%d calls and %d triggers inside reasoning over 150 generations: the test does not exercise them", calls, thinkTriggers)
	}
}

// A token that holds the trigger and the start of a call is allowed only
// when the grammar takes its rest; the stop token is refused inside a
// call and allowed outside.
func TestLazyTriggerToken(t *testing.T) {
	s, _ := Compile([]byte(`{"type":"object"}`))
	g := &Grammar{Alts: [][]Part{{{Text: "\n{\"name\": \"f\", \"arguments\": "}, {Schema: s}, {Text: "}\n</tool_call>"}}}}
	vocab := Vocab{[]byte("<tool_call>\n{\"name\": \"f"), []byte("<tool_call>\n{\"name\": \"g"), []byte("hi"), nil}
	l := NewLazy("<tool_call>", g, vocab, []int32{3}, false)
	if !l.Allow(0) || l.Allow(1) || !l.Allow(2) || !l.Allow(3) {
		t.Fatal("before the trigger")
	}
	l.Accept(0)
	if !l.Triggered() || l.Allow(3) || l.Allow(2) {
		t.Fatal("inside the call")
	}
	l.SetBudget(3)
	l2 := NewLazy("<tool_call>", g, vocab, []int32{3}, false)
	l2.SetBudget(3)
	if l2.Allow(0) {
		t.Error("a trigger with no room left for the call is allowed")
	}
}
