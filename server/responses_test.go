package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/clawrl/clawrl/rollout"
)

func weatherFunction() responses.ToolUnionParam {
	return responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name:        "get_weather",
		Description: openai.String("Current weather of a city"),
		Parameters:  map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		Strict:      openai.Bool(false),
	}}
}

func TestResponsesNonStreaming(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{text: "Bonjour!", cached: 4, version: 3} }
	var httpResp *http.Response
	resp, err := e.client.Responses.New(testCtx(t), responses.ResponseNewParams{
		Model:           "clawrl-test",
		Instructions:    openai.String("Answer in French."),
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")},
		MaxOutputTokens: openai.Int(50),
		Temperature:     openai.Float(0.5),
	}, option.WithResponseInto(&httpResp))
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "Bonjour!" || resp.Status != "completed" || !strings.HasPrefix(resp.ID, "resp_") {
		t.Fatalf("response = %s", resp.RawJSON())
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "message" || resp.Output[0].Role != "assistant" {
		t.Fatalf("output = %+v", resp.Output)
	}
	u := resp.Usage
	req := e.gen.requests()[0]
	if int(u.InputTokens) != len(req.Prompt) || u.OutputTokens == 0 || u.TotalTokens != u.InputTokens+u.OutputTokens ||
		u.InputTokensDetails.CachedTokens != 4 {
		t.Fatalf("usage = %s", u.RawJSON())
	}
	if req.MaxTokens != 50 || req.Sampling.Temperature != 0.5 {
		t.Fatalf("request = %+v", req)
	}
	prompt := e.gen.tok.Decode(req.Prompt)
	if !strings.HasPrefix(prompt, "<|im_start|>system\nAnswer in French.<|im_end|>") {
		t.Fatalf("prompt = %q", prompt)
	}
	if httpResp.Header.Get("X-Weight-Version") != "3" {
		t.Fatalf("X-Weight-Version = %q", httpResp.Header.Get("X-Weight-Version"))
	}
}

func TestResponsesItemsAndFunctionCalls(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>"}
	}
	input := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(`{"city":"Paris"}`, "call1", "get_weather"),
		{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
			CallID: openai.String("call1"),
			Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: openai.String("sunny")},
		}},
		responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
			{OfInputText: &responses.ResponseInputTextParam{Text: "And Oslo?"}},
		}, responses.EasyInputMessageRoleUser),
	}
	resp, err := e.client.Responses.New(testCtx(t), responses.ResponseNewParams{
		Model: "clawrl-test",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: input},
		Tools: []responses.ToolUnionParam{weatherFunction()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "function_call" {
		t.Fatalf("output = %s", resp.RawJSON())
	}
	fc := resp.Output[0].AsFunctionCall()
	if fc.Name != "get_weather" || fc.Arguments != `{"city": "Oslo"}` || !alnumID.MatchString(fc.CallID) {
		t.Fatalf("call = %s", fc.RawJSON())
	}
	prompt := e.gen.tok.Decode(e.gen.requests()[0].Prompt)
	for _, want := range []string{`"name": "get_weather"`, "<tool_call>", "tool\nsunny", "user\nAnd Oslo?"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q: %q", want, prompt)
		}
	}
}

func TestResponsesStreaming(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: "<think>plan</think>Checking.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>"}
	}
	stream := e.client.Responses.NewStreaming(testCtx(t), responses.ResponseNewParams{
		Model: "clawrl-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Rome?")},
		Tools: []responses.ToolUnionParam{weatherFunction()},
	})
	var types []string
	var text, args, reasoning strings.Builder
	var final responses.Response
	seq := int64(-1)
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber != seq+1 {
			t.Fatalf("sequence %d after %d", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		if len(types) == 0 || types[len(types)-1] != ev.Type {
			types = append(types, ev.Type)
		}
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.reasoning_text.delta":
			reasoning.WriteString(ev.Delta)
		case "response.completed":
			final = ev.AsResponseCompleted().Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"response.created", "response.in_progress",
		"response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.done", "response.output_item.done",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
		"response.output_item.done", "response.completed",
	}
	if strings.Join(types, " ") != strings.Join(want, " ") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(types, "\n"), strings.Join(want, "\n"))
	}
	if text.String() != "Checking." || args.String() != `{"city": "Rome"}` || reasoning.String() != "plan" {
		t.Fatalf("text %q args %q reasoning %q", text.String(), args.String(), reasoning.String())
	}
	if final.Status != "completed" || len(final.Output) != 3 || final.OutputText() != "Checking." || final.Usage.OutputTokens == 0 {
		t.Fatalf("final = %s", final.RawJSON())
	}
	if fc := final.Output[2].AsFunctionCall(); fc.Arguments != `{"city": "Rome"}` || fc.Name != "get_weather" {
		t.Fatalf("final call = %s", fc.RawJSON())
	}
}

func TestResponsesIncomplete(t *testing.T) {
	e := newEnv(t)
	e.gen.reply = func(string, rollout.Request) script { return script{endless: true} }
	resp, err := e.client.Responses.New(testCtx(t), responses.ResponseNewParams{
		Model:           "clawrl-test",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("go on forever")},
		MaxOutputTokens: openai.Int(4),
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != "incomplete" || resp.IncompleteDetails.Reason != "max_output_tokens" || resp.Usage.OutputTokens != 4 {
		t.Fatalf("response = %s", resp.RawJSON())
	}
}
