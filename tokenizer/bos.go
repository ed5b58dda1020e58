package tokenizer

import "encoding/json"

// A raw prompt (a completion's text, `generate` without --chat) is
// encoded as Hugging Face encodes with add_special_tokens=True and as
// llama.cpp tokenizes a prompt: with the BOS token first when the
// tokenizer adds one (Llama 2, Mistral and Llama 3 do; Qwen does not). A
// chat template writes its own BOS, so EncodeChat adds none.

// AddsBOS reports whether a raw prompt gets the BOS token first.
func (t *Tokenizer) AddsBOS() bool { return t.addBOS && t.bos.ok }

// EncodePrompt is Encode of a raw prompt: the BOS token first when the
// tokenizer adds one and the text does not already begin with it.
func (t *Tokenizer) EncodePrompt(text string) []int32 {
	ids := t.Encode(text)
	if !t.AddsBOS() || len(ids) > 0 && ids[0] == t.bos.id {
		return ids
	}
	return append([]int32{t.bos.id}, ids...)
}

// postProcessorAddsBOS reports whether a tokenizer.json post-processor
// puts a special token before the text of a single sequence
// (TemplateProcessing, alone or in a Sequence), and which.
func postProcessorAddsBOS(raw json.RawMessage) (token string, ok bool) {
	if isNull(raw) {
		return "", false
	}
	var p struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		} `json:"single"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return "", false
	}
	switch p.Type {
	case "TemplateProcessing":
		if len(p.Single) > 0 && p.Single[0].SpecialToken != nil {
			return p.Single[0].SpecialToken.ID, true
		}
	case "Sequence":
		for _, sub := range p.Processors {
			if tok, ok := postProcessorAddsBOS(sub); ok {
				return tok, true
			}
		}
	}
	return "", false
}
