package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	weatherParams = map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string", "maxLength": 24},
		"unit": map[string]any{"type": "string", "enum": []any{"celsius", "fahrenheit"}},
		"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 14}},
		"required": []any{"city", "unit"}, "additionalProperties": false}
	emailParams = map[string]any{"type": "object", "properties": map[string]any{
		"to":      map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": 30}, "minItems": 1, "maxItems": 2},
		"subject": map[string]any{"type": "string", "maxLength": 40}, "urgent": map[string]any{"type": "boolean"}},
		"required": []any{"to", "subject", "urgent"}}
	answerSchema = map[string]any{"type": "object", "properties": map[string]any{
		"answer": map[string]any{"type": "string", "maxLength": 40}, "confidence": map[string]any{"type": "integer", "minimum": 0, "maximum": 100}},
		"required": []any{"answer", "confidence"}, "additionalProperties": false}
)

func validator(t *testing.T, schema map[string]any) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", schema); err != nil {
		t.Fatal(err)
	}
	v, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func validJSON(v *jsonschema.Schema, text string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return v.Validate(inst)
}

// Constrained decoding on the bundled model through the official Go SDK:
// a forced function call, "required", response_format json_schema and
// json_object each give 20 of 20 valid results over 20 seeds at
// temperature 1 (a forced call used to be valid in 1 of 20).
func TestConstrainedDecodingSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bundled model")
	}
	addr, stop := startServe(t, "")
	defer stop()
	url := "http://" + addr
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	ctx := context.Background()
	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) == 0 {
		t.Fatalf("models: %v", err)
	}
	model := models.Data[0].ID
	tools := []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_weather", Parameters: weatherParams}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "send_email", Parameters: emailParams}),
	}
	vs := map[string]*jsonschema.Schema{"get_weather": validator(t, weatherParams), "send_email": validator(t, emailParams)}
	answer := validator(t, answerSchema)
	var multi atomic.Int64 // extra calls in parallel "required" replies
	object := validator(t, map[string]any{"type": "object"})

	for _, c := range []struct {
		name   string
		params func(p *openai.ChatCompletionNewParams)
		check  func(m openai.ChatCompletionMessage) error
	}{
		{"forced function", func(p *openai.ChatCompletionNewParams) {
			p.Tools = tools
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
				Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "send_email"}}}
		}, func(m openai.ChatCompletionMessage) error {
			if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "send_email" {
				return fmt.Errorf("tool calls %+v", m.ToolCalls)
			}
			return validJSON(vs["send_email"], m.ToolCalls[0].Function.Arguments)
		}},
		{"required", func(p *openai.ChatCompletionNewParams) {
			p.Tools = tools
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		}, func(m openai.ChatCompletionMessage) error {
			// parallel_tool_calls (the default): one call or more, each
			// valid.
			if len(m.ToolCalls) == 0 {
				return fmt.Errorf("no tool call: %q", m.Content)
			}
			multi.Add(int64(len(m.ToolCalls) - 1))
			for _, c := range m.ToolCalls {
				if vs[c.Function.Name] == nil {
					return fmt.Errorf("undeclared tool %q", c.Function.Name)
				}
				if err := validJSON(vs[c.Function.Name], c.Function.Arguments); err != nil {
					return err
				}
			}
			return nil
		}},
		{"required, one call", func(p *openai.ChatCompletionNewParams) {
			p.Tools = tools
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
			p.ParallelToolCalls = openai.Bool(false)
		}, func(m openai.ChatCompletionMessage) error {
			if len(m.ToolCalls) != 1 || vs[m.ToolCalls[0].Function.Name] == nil {
				return fmt.Errorf("tool calls %+v", m.ToolCalls)
			}
			return validJSON(vs[m.ToolCalls[0].Function.Name], m.ToolCalls[0].Function.Arguments)
		}},
		{"json_schema", func(p *openai.ChatCompletionNewParams) {
			p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: answerSchema, Strict: openai.Bool(true)}}}
		}, func(m openai.ChatCompletionMessage) error { return validJSON(answer, m.Content) }},
		{"json_object", func(p *openai.ChatCompletionNewParams) {
			p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
		}, func(m openai.ChatCompletionMessage) error { return validJSON(object, m.Content) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			valid, cut := 0, 0
			for seed := range int64(20) {
				p := openai.ChatCompletionNewParams{Model: model, Seed: openai.Int(seed), Temperature: openai.Float(1), MaxTokens: openai.Int(200),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Email Bob about the weather in Paris, in JSON.")}}
				c.params(&p)
				resp, err := client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if err := c.check(resp.Choices[0].Message); err != nil {
					// A free-form document (json_object) can run into
					// max_tokens, as with OpenAI: finish_reason "length".
					if c.name == "json_object" && resp.Choices[0].FinishReason == "length" {
						cut++
						continue
					}
					t.Errorf("seed %d: %v (finish %s, content %q)", seed, err, resp.Choices[0].FinishReason, resp.Choices[0].Message.Content)
					continue
				}
				valid++
			}
			t.Logf("%s: %d of 20 valid, %d cut by max_tokens", c.name, valid, cut)
			if cut > 3 {
				t.Errorf("%d of 20 documents cut by max_tokens", cut)
			}
		})
	}

	t.Logf("required with parallel calls: %d extra calls over 20 replies", multi.Load())

	// The Responses API's text.format, and schemas constrained decoding
	// cannot follow: a 400 naming the keyword.
	post := func(path, body string) (int, string) {
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	schema, _ := json.Marshal(answerSchema)
	code, body := post("/v1/responses", fmt.Sprintf(`{"model":%q,"input":"What is 2+2?","temperature":1,"seed":3,"max_output_tokens":120,`+
		`"text":{"format":{"type":"json_schema","name":"answer","schema":%s,"strict":true}}}`, model, schema))
	var r struct {
		Output []struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &r) != nil || len(r.Output) == 0 || len(r.Output[0].Content) == 0 {
		t.Fatalf("responses: %d %s", code, body)
	}
	if err := validJSON(answer, r.Output[0].Content[0].Text); err != nil {
		t.Errorf("responses text.format: %v: %q", err, r.Output[0].Content[0].Text)
	}
	for _, bad := range []struct{ body, want string }{
		{fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","uniqueItems":true}}}}`, model), "uniqueItems"},
		{fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"schema":{}}}}`, model), "response_format.json_schema.name"},
		{fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"yaml"}}`, model), "response_format.type"},
		{fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"$ref":"#/x"}}}}}],"tool_choice":"required"}`, model), "$ref"},
	} {
		if code, body := post("/v1/chat/completions", bad.body); code != 400 || !strings.Contains(body, bad.want) {
			t.Errorf("%s: %d %s", bad.want, code, body)
		}
	}
	// An unsupported keyword does not matter when the call is not forced.
	if code, body := post("/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"hi"}],`+
		`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"$ref":"#/x"}}}}}]}`, model)); code != 200 {
		t.Errorf("auto tools with $ref: %d %s", code, body)
	}
}
