package corpus

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/clawrl/clawrl/tokenizer"
)

// Encoded is a conversation as token ids, with the positions trained on.
type Encoded struct {
	IDs []int32
	// Train[i] says token i is a training target: a token of an assistant
	// reply (its closing <|im_end|> included) that is not context only.
	Train []bool
}

// Targets counts the trained tokens.
func (e Encoded) Targets() int {
	n := 0
	for _, t := range e.Train {
		if t {
			n++
		}
	}
	return n
}

// Render renders a conversation through the chat template.
func Render(tok *tokenizer.Tokenizer, ex Example, addGenerationPrompt bool) (string, error) {
	return tok.ApplyChatTemplate(tokenizer.ChatRequest{Messages: ex.Messages, Tools: ex.Tools, AddGenerationPrompt: addGenerationPrompt})
}

// Encode renders ex through the chat template and tokenizes it the way the
// server sees it: each assistant reply is tokenized on its own, after a
// prompt that ends with the generation prompt "<|im_start|>assistant\n",
// as the model meets it when it generates; the reply's tokens (through
// <|im_end|>) are the targets. The text after the last reply is dropped.
func Encode(tok *tokenizer.Tokenizer, ex Example) (Encoded, error) {
	full, err := Render(tok, ex, false)
	if err != nil {
		return Encoded{}, err
	}
	var enc Encoded
	add := func(text string, train bool) {
		ids := tok.Encode(text)
		enc.IDs = append(enc.IDs, ids...)
		for range ids {
			enc.Train = append(enc.Train, train)
		}
	}
	pos := 0
	for i, m := range ex.Messages {
		if m.Role != "assistant" {
			continue
		}
		before := Example{Messages: ex.Messages[:i], Tools: ex.Tools}
		through := Example{Messages: ex.Messages[:i+1], Tools: ex.Tools}
		p, err := Render(tok, before, true)
		if err != nil {
			return Encoded{}, err
		}
		f, err := Render(tok, through, false)
		if err != nil {
			return Encoded{}, err
		}
		if !strings.HasPrefix(f, p) || !strings.HasPrefix(full, f) || len(p) < pos || !strings.HasSuffix(f, EOS+"\n") {
			return Encoded{}, fmt.Errorf("pretrain: the chat template does not render message %d as a continuation of the ones before it", i)
		}
		add(full[pos:len(p)], false)
		end := len(f) - 1 // keep the reply's <|im_end|>, not the newline after it
		add(full[len(p):end], !slices.Contains(ex.Untrained, i))
		pos = end
	}
	if pos == 0 {
		return Encoded{}, fmt.Errorf("pretrain: conversation of category %s has no assistant message", ex.Category)
	}
	return enc, nil
}

// Prompt returns the messages before the first assistant message of ex,
// with its tools: the request an evaluation sends.
func Prompt(ex Example) Example {
	for i, m := range ex.Messages {
		if m.Role == "assistant" {
			return Example{Category: ex.Category, Messages: slices.Clone(ex.Messages[:i]), Tools: ex.Tools, Key: ex.Key, Want: ex.Want}
		}
	}
	return ex
}

// FirstReply is the first assistant message of ex.
func FirstReply(ex Example) (tokenizer.Message, bool) {
	for _, m := range ex.Messages {
		if m.Role == "assistant" {
			return m, true
		}
	}
	return tokenizer.Message{}, false
}

// HeldOutEncoded encodes n held-out conversations drawn with seed, the
// categories in turn: a fixed text of the model's own distribution that
// it never trained on, for scoring (log-prob drift, perplexity).
func HeldOutEncoded(tok *tokenizer.Tokenizer, n int, seed uint64) ([]Encoded, error) {
	g := NewGenerator(nil)
	r := rand.New(rand.NewPCG(seed, 0))
	cats := g.Categories()
	out := make([]Encoded, 0, n)
	for i := range n {
		enc, err := Encode(tok, g.HeldOutExample(r, cats[i%len(cats)]))
		if err != nil {
			return nil, err
		}
		out = append(out, enc)
	}
	return out, nil
}
