package reward

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/tokenizer"
)

// chatML is the ChatML chat template (without tools), as the test models
// of cmd testmodel use.
const chatML = `{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{%- endif %}`

var (
	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tokErr  error
)

// testTokenizer is a small byte-level BPE with the ChatML template, trained
// once per test binary on a little English, code and chat text.
func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tokOnce.Do(func() {
		base := []string{
			"The quick brown fox jumps over the lazy dog. ",
			"Hello! How can I help you today? ",
			"The user corrected the reply. The reply served the user's intent. ",
			"def add(a, b):\n    return a + b\n",
			`{"name": "get_weather", "arguments": {"city": "Paris"}}` + "\n",
			"You evaluate one reply of an AI assistant. \\boxed{1} \\boxed{-1} \\boxed{0} ",
			"<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n2 + 3 = 5.<|im_end|>\n",
			"[HINT_START] Ask which file the user means. [HINT_END] No, I meant the other one. ",
		}
		var docs []string
		for i := range 200 {
			docs = append(docs, base[i%len(base)]+base[(i*3+1)%len(base)])
		}
		tok, tokErr = tokenizer.Train(slices.Values(docs), tokenizer.TrainOptions{
			VocabSize:     1024,
			SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
			EOS:           "<|im_end|>",
			PAD:           "<|endoftext|>",
			ChatTemplate:  chatML,
		})
		if tokErr != nil {
			tokErr = fmt.Errorf("training the test tokenizer: %w", tokErr)
		}
	})
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return tok
}
