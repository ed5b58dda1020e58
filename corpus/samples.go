package corpus

import (
	"encoding/json"

	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

func toolByName(name string) *toolDef {
	for _, t := range toolDefs {
		if t.name == name {
			return t
		}
	}
	panic("corpus: no tool " + name)
}

// SampleConversations are the fixed prompts whose replies the report shows.
func SampleConversations() []Example {
	weather := toolByName("get_weather").definition()
	read := toolByName("read_file").definition()
	calc := toolByName("calculator").definition()
	judge := reward.JudgeMessages(&reward.Turn{
		Messages:  []tokenizer.Message{user("What is 8 + 5?")},
		Response:  assistant("8 + 5 = 12."),
		NextState: []tokenizer.Message{user("That's wrong, 8 + 5 is 13.")},
	}, "", reward.DefaultLimits())
	return []Example{
		{Messages: []tokenizer.Message{user("Hi!")}},
		{Messages: []tokenizer.Message{user("Who are you?")}},
		{Messages: []tokenizer.Message{user("What is 7 + 5?")}},
		{Messages: []tokenizer.Message{user("What is 23 + 48?")}},
		{Messages: []tokenizer.Message{user("What is 9 × 8?")}},
		{Messages: []tokenizer.Message{user("How many minutes are in 3 hours?")}},
		{Messages: []tokenizer.Message{user("What day comes after Friday?")}},
		{Messages: []tokenizer.Message{user("Spell cat backwards.")}},
		{Messages: []tokenizer.Message{user("List 3 fruits as bullet points.")}},
		{Messages: []tokenizer.Message{user("Give me a JSON object with name Ada, age 36 and city London.")}},
		{Messages: []tokenizer.Message{user("What is the capital of France?")}},
		{Messages: []tokenizer.Message{user("What is 8 + 5?"), assistant("8 + 5 = 12."), user("That's wrong.")}},
		{Messages: []tokenizer.Message{user("What's the weather in Lisbon?")}, Tools: []json.RawMessage{weather, read}},
		{Messages: []tokenizer.Message{user("Show me the contents of notes.txt.")}, Tools: []json.RawMessage{weather, read, calc}},
		{Messages: []tokenizer.Message{user("What's the weather in Oslo?"),
			{Role: "assistant", ToolCalls: []tokenizer.ToolCall{toolCall("get_weather", obj{{"location", "Oslo"}})}},
			{Role: "tool", Content: `{"location": "Oslo", "temperature": 4, "unit": "celsius", "condition": "snowy"}`}}, Tools: []json.RawMessage{weather}},
		{Messages: judge},
	}
}
