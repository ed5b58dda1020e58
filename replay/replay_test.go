package replay

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/trainer"
)

var (
	tokOnce sync.Once
	tokVal  *tokenizer.Tokenizer
	tokErr  error
)

// bundledTok is the bundled model's tokenizer, with its chat template.
func bundledTok(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	tokOnce.Do(func() {
		var dir string
		if dir, tokErr = bundled.Dir(); tokErr == nil {
			tokVal, tokErr = tokenizer.Load(dir)
		}
	})
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return tokVal
}

func TestCorpus(t *testing.T) {
	tok := bundledTok(t)
	eos, _ := tok.EOS()
	opts := Options{Weight: 0.5, MaxTokens: 1024, Seed: 3}
	s, err := Corpus(tok, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Samples(16, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 16 {
		t.Fatalf("%d samples; want 16", len(got))
	}
	for i, smp := range got {
		prompt := tok.Decode(smp.Prompt)
		if smp.Version != 7 || len(smp.Response) == 0 || smp.Tokens() > opts.MaxTokens {
			t.Errorf("sample %d: version %d, %d response tokens, %d in all", i, smp.Version, len(smp.Response), smp.Tokens())
		}
		// The reply is learnt after the generation prompt, through its
		// closing token, as the model meets it when it generates.
		if !strings.HasSuffix(prompt, "<|im_start|>assistant\n") || smp.Response[len(smp.Response)-1] != eos {
			t.Errorf("sample %d: prompt ends %q, response %q", i, prompt[max(0, len(prompt)-30):], tok.Decode(smp.Response))
		}
		if len(smp.Advantages) != len(smp.Response) || !smp.Supervised || smp.RolloutLogProbs != nil || smp.Reward != 0 || smp.TeacherLogProbs != nil {
			t.Errorf("sample %d: not a plain supervised sample: %+v", i, smp)
		}
		for _, a := range smp.Advantages {
			if a != 0.5 {
				t.Fatalf("sample %d: advantage %v; want the weight 0.5", i, a)
			}
		}
		// The judge runs the base's frozen weights: its prompts are not
		// replayed into the policy.
		if strings.Contains(prompt, "\\boxed") || strings.Contains(prompt, "[HINT_START]") {
			t.Errorf("sample %d replays a judge prompt: %q", i, prompt)
		}
	}
	// Deterministic for a seed and a version; another version (a later
	// step, or the first step after a restart) draws other examples.
	s2, _ := Corpus(tok, nil, opts)
	again, _ := s2.Samples(16, 7)
	if !reflect.DeepEqual(got, again) {
		t.Error("two sources with one seed drew different samples")
	}
	replies := func(smps []trainer.Sample) (out []string) {
		for _, smp := range smps {
			out = append(out, tok.Decode(smp.Response))
		}
		return out
	}
	if next, _ := s2.Samples(16, 8); reflect.DeepEqual(replies(got), replies(next)) {
		t.Error("version 8 replays version 7's examples")
	}
	// Bad options and mixes are refused.
	for _, o := range []Options{{Weight: 0, MaxTokens: 100}, {Weight: -1, MaxTokens: 100}, {Weight: 1, MaxTokens: 0}} {
		if _, err := Corpus(tok, nil, o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if _, err := Corpus(tok, map[string]float64{"nope": 1}, opts); err == nil {
		t.Error("an unknown category was accepted")
	}
	if _, err := Corpus(tok, nil, Options{Weight: 1, MaxTokens: 4}); err == nil || !strings.Contains(err.Error(), "4 tokens") {
		t.Errorf("a budget nothing fits in: %v", err)
	}
}

func TestFile(t *testing.T) {
	tok := bundledTok(t)
	dir := t.TempDir()
	good := `{"messages":[{"role":"user","content":"What is 2 + 3?"},{"role":"assistant","content":"2 + 3 = 5."}]}

{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}
`
	path := filepath.Join(dir, "good.jsonl")
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := File(path, tok, Options{Weight: 1, MaxTokens: 2048, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Samples(4, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Each pass replays every line once.
	seen := map[string]int{}
	for _, smp := range got {
		seen[tok.Decode(smp.Response)]++
	}
	if len(seen) != 2 || seen["2 + 3 = 5.<|im_end|>"] != 2 {
		t.Errorf("replayed %v; want both lines twice", seen)
	}
	for r := range seen {
		if r != "2 + 3 = 5.<|im_end|>" && !strings.Contains(r, "get_weather") {
			t.Errorf("the tool call's reply is %q", r)
		}
	}

	bad := []struct{ name, text, want string }{
		{"empty", "\n\n", "no conversations"},
		{"not json", "hello\n", ":1: not a"},
		{"unknown field", `{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}],"x":1}` + "\n", ":1: not a"},
		{"no reply", `{"messages":[{"role":"user","content":"a"}]}` + "\n", ":1: a conversation needs"},
		{"ends with user", `{"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"b"}]}` + "\n", `:1: the last message is "user"`},
		{"bad role", "\n" + `{"messages":[{"role":"robot","content":"a"},{"role":"assistant","content":"b"}]}` + "\n", `:2: message 0: unknown role "robot"`},
		{"too long", `{"messages":[{"role":"user","content":"` + strings.Repeat("word ", 3000) + `"},{"role":"assistant","content":"b"}]}` + "\n", ":1: "},
	}
	for _, c := range bad {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".jsonl")
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := File(p, tok, Options{Weight: 1, MaxTokens: 2048})
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s and %q", c.name, err, p, c.want)
		}
	}
	if _, err := File(filepath.Join(dir, "missing.jsonl"), tok, Options{Weight: 1, MaxTokens: 2048}); err == nil {
		t.Error("a missing file was accepted")
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{}"}}]}]}`))
	f.Add([]byte(`{"messages":null}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ex, err := parseLine(line)
		if err != nil {
			return
		}
		if len(ex.Messages) < 2 || ex.Messages[len(ex.Messages)-1].Role != "assistant" {
			t.Fatalf("accepted %q as %+v", line, ex)
		}
	})
}
