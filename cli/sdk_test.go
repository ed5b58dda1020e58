package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The official Go SDK against every endpoint: chat (plain, streamed with
// usage, n, logprobs, a multi-turn replay of the model's own answers),
// completions, responses (plain and streamed), models, and the errors it
// maps (404 for an unknown model, 400 naming the parameter).
func TestOpenAIGoSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bundled model")
	}
	addr, stop := startServe(t, "")
	defer stop()
	client := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx := context.Background()
	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 {
		t.Fatalf("models: %+v %v", models, err)
	}
	model := models.Data[0].ID
	if m, err := client.Models.Get(ctx, model); err != nil || m.ID != model {
		t.Errorf("models.get: %+v %v", m, err)
	}

	// Chat: n choices with logprobs, then a replay of the history with the
	// model's own answers (their text exactly as the SDK decoded it).
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a helpful assistant."), openai.UserMessage("What is 2 + 3?")}
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs, N: openai.Int(2),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2), MaxTokens: openai.Int(24), Seed: openai.Int(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 2 || resp.Usage.CompletionTokens == 0 || resp.Object != "chat.completion" {
		t.Fatalf("chat: %+v", resp)
	}
	for _, c := range resp.Choices {
		if len(c.Logprobs.Content) == 0 || len(c.Logprobs.Content[0].TopLogprobs) != 2 {
			t.Errorf("choice %d logprobs %+v", c.Index, c.Logprobs)
		}
	}
	msgs = append(msgs, resp.Choices[0].Message.ToParam(), openai.UserMessage("Thanks! And 4 + 4?"))
	resp2, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs, MaxTokens: openai.Int(24)})
	if err != nil || len(resp2.Choices) != 1 {
		t.Fatalf("replayed history: %v", err)
	}

	// Streaming, accumulated by the SDK, with the usage chunk.
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs[:2], MaxTokens: openai.Int(24),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content == "" || acc.Usage.TotalTokens == 0 {
		t.Errorf("streamed chat: %+v", acc.ChatCompletion)
	}

	// Completions.
	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8)})
	if err != nil || len(comp.Choices) != 1 || comp.Usage.CompletionTokens == 0 {
		t.Fatalf("completions: %+v %v", comp, err)
	}

	// Responses, plain and streamed.
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: shared.ResponsesModel(model),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi!")}, MaxOutputTokens: openai.Int(24)})
	if err != nil || r.Status != "completed" || r.OutputText() == "" {
		t.Fatalf("responses: %+v %v", r, err)
	}
	rs := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: shared.ResponsesModel(model),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hi!")}, MaxOutputTokens: openai.Int(24)})
	var deltas strings.Builder
	completed := false
	for rs.Next() {
		ev := rs.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas.WriteString(ev.Delta)
		case "response.completed":
			completed = true
		}
	}
	if err := rs.Err(); err != nil || !completed || deltas.Len() == 0 {
		t.Errorf("streamed responses: completed %v, text %q, %v", completed, deltas.String(), err)
	}

	// Errors as the SDK maps them.
	var apiErr *openai.Error
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model", Messages: msgs[:2]})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Errorf("unknown model: %v", err)
	}
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs[:2], Temperature: openai.Float(3)})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "temperature" {
		t.Errorf("temperature 3: %v", err)
	}
}
