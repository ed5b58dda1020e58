package corpus

import (
	"slices"

	"github.com/clawrl/clawrl/tokenizer"
)

// Special tokens of the bundled model's vocabulary, in id order after the
// merged tokens. <|im_end|> ends a turn (EOS); <|endoftext|> pads.
// <tool_call> and </tool_call> are ordinary text, as in Qwen2.5: the
// server finds them in the generated text.
var SpecialTokens = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

const (
	// EOS ends an assistant turn.
	EOS = "<|im_end|>"
	// PAD pads.
	PAD = "<|endoftext|>"
)

// DefaultSystem is the system prompt the template uses when a
// conversation has none.
const DefaultSystem = "You are a helpful assistant."

// ChatTemplate is the bundled model's chat template: ChatML in the layout
// of Qwen2.5's, tools included. Tool definitions go into the system
// message inside <tools></tools>; an assistant calls a tool with
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> (what the
// server's Hermes/Qwen parser reads); tool results come back as a user
// turn of <tool_response> blocks. Arguments given as a JSON string (the
// OpenAI wire form) are written as they are, objects through tojson.
const ChatTemplate = `{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- '` + DefaultSystem + `' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\n` + DefaultSystem + `<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}`

// TokenizerOptions are the options of the bundled vocabulary's training.
func TokenizerOptions(vocab int) tokenizer.TrainOptions {
	return tokenizer.TrainOptions{
		VocabSize:     vocab,
		SpecialTokens: slices.Clone(SpecialTokens),
		EOS:           EOS,
		PAD:           PAD,
		ChatTemplate:  ChatTemplate,
		MinFrequency:  2,
	}
}

// NewRenderer returns a tokenizer of bytes and the special tokens alone,
// with the chat template: enough to render conversations to text before
// the real vocabulary exists (the text is the same under any vocabulary).
func NewRenderer() (*tokenizer.Tokenizer, error) {
	return tokenizer.Train(slices.Values([]string{""}), TokenizerOptions(256+len(SpecialTokens)))
}
