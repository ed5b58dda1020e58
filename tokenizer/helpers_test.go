package tokenizer

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// smallCorpus is a mixed corpus for training the test tokenizer: prose,
// code, numbers and a few scripts.
func smallCorpus() []string {
	docs := strings.SplitAfter(proseText(64<<10, 11), "\n\n")
	docs = append(docs,
		"package main\n\nfunc main() {\n\tfmt.Println(\"hello, world\")\n}\n",
		"def f(x):\n    return {\"a\": [1, 2, 3], \"b\": None}\n",
		"Les élèves étudient à l'école. Ça va très bien, merci !",
		"你好，世界！这是一个测试。",
		"The year 2024 had 366 days; 3.14159 is π.",
		"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n",
	)
	return docs
}

// chatML is a ChatML template in the style of Qwen's, with tools.
const chatML = `{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if not (message.role == 'system' and loop.first) %}
{{- '<|im_start|>' + message.role + '\n' + message.content }}
{%- if message.tool_calls %}{% for tc in message.tool_calls %}
<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}</tool_call>
{%- endfor %}{% endif %}
{{- '<|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`

var small struct {
	once sync.Once
	tok  *Tokenizer
	err  error
}

// smallTokenizer is a 1000-token tokenizer trained on smallCorpus, with
// ChatML special tokens and chat template. It is built once per test run.
func smallTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	small.once.Do(func() {
		small.tok, small.err = Train(slices.Values(smallCorpus()), TrainOptions{
			VocabSize:     1000,
			SpecialTokens: []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"},
			EOS:           "<|im_end|>",
			PAD:           "<|endoftext|>",
			ChatTemplate:  chatML,
		})
	})
	if small.err != nil {
		tb.Fatalf("train small tokenizer: %v", small.err)
	}
	return small.tok
}

// editJSON decodes a tokenizer.json, lets edit change it, and encodes it
// again.
func editJSON(tb testing.TB, data []byte, edit func(m map[string]any)) []byte {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		tb.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// hasToken reports whether ids contains id.
func hasToken(ids []int32, id int32) bool { return slices.Contains(ids, id) }

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// streamDecoded feeds ids to a StreamDecoder and returns what it gives,
// failing when a piece is not valid UTF-8.
func streamDecoded(tb testing.TB, tok *Tokenizer, ids []int32) string {
	tb.Helper()
	d := tok.NewStreamDecoder()
	var sb strings.Builder
	for _, id := range ids {
		piece := d.Add(id)
		if !utf8.ValidString(piece) {
			tb.Fatalf("stream piece %q is not valid UTF-8", piece)
		}
		sb.WriteString(piece)
	}
	sb.WriteString(d.Flush())
	return sb.String()
}
