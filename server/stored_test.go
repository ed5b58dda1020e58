package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/rollout"
)

// memResponses is an in-memory ResponseStore.
type memResponses struct {
	mu    sync.Mutex
	resps map[string]StoredResponse
}

func (m *memResponses) PutResponse(r StoredResponse) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.resps == nil {
		m.resps = map[string]StoredResponse{}
	}
	m.resps[r.ID] = r
	return nil
}

func (m *memResponses) Response(id string) (StoredResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.resps[id]
	if !ok {
		return r, ErrResponseNotFound
	}
	return r, nil
}

func (m *memResponses) ResponseItem(id string) (json.RawMessage, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.resps {
		var items []json.RawMessage
		json.Unmarshal(r.Output, &items)
		for _, it := range items {
			var x struct{ ID string }
			json.Unmarshal(it, &x)
			if x.ID == id {
				return it, r.Owner, nil
			}
		}
	}
	return nil, "", ErrResponseNotFound
}

func (m *memResponses) DeleteResponse(id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.resps[id]
	delete(m.resps, id)
	return ok, nil
}

const respWeatherTool = `{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}`

type respOut struct {
	ID     string `json:"id"`
	Store  bool   `json:"store"`
	Output []struct {
		Type   string `json:"type"`
		ID     string `json:"id"`
		CallID string `json:"call_id"`
		Name   string `json:"name"`
	} `json:"output"`
}

// Responses are kept unless store is false: a later request replays
// their output with item_reference (as the Vercel AI SDK's default
// provider does) or continues them with previous_response_id, and the
// model sees the whole conversation; another API key's references and
// reads are answered as missing ones.
func TestStoredResponses(t *testing.T) {
	mem := &memResponses{}
	e := newEnv(t, func(o *Options) { o.Responses, o.APIKeys = mem, []string{"key-a", "key-b"} })
	n := 0
	e.gen.reply = func(string, rollout.Request) script {
		n++
		if n == 1 {
			return script{text: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"}
		}
		return script{text: fmt.Sprintf("Reply number %d.", n)}
	}
	keyA, keyB := []string{"Authorization", "Bearer key-a"}, []string{"Authorization", "Bearer key-b"}
	post := func(key []string, body string) (int, string) {
		resp, out := e.post("/v1/responses", body, key...)
		return resp.StatusCode, out
	}
	lastPrompt := func() string {
		reqs := e.gen.requests()
		return e.srv.tok.Decode(reqs[len(reqs)-1].Prompt)
	}

	// Turn 1: a tool call.
	code, body := post(keyA, `{"model":"clawrl-test","input":"Weather in Paris?","tools":[`+respWeatherTool+`]}`)
	var r1 respOut
	if code != 200 || json.Unmarshal([]byte(body), &r1) != nil || len(r1.Output) != 1 || r1.Output[0].Type != "function_call" || !r1.Store {
		t.Fatalf("turn 1: %d %s", code, body)
	}
	fc := r1.Output[0]

	// Turn 2, as the Vercel AI SDK replays it: the call by reference,
	// then its output.
	turn2 := fmt.Sprintf(`{"model":"clawrl-test","tools":[%s],"input":[{"role":"user","content":"Weather in Paris?"},`+
		`{"type":"item_reference","id":%q},{"type":"function_call_output","call_id":%q,"output":"sunny, 24 C"}]}`, respWeatherTool, fc.ID, fc.CallID)
	code, body = post(keyA, turn2)
	var r2 respOut
	if code != 200 || json.Unmarshal([]byte(body), &r2) != nil || len(r2.Output) != 1 || r2.Output[0].Type != "message" {
		t.Fatalf("turn 2: %d %s", code, body)
	}
	if p := lastPrompt(); !strings.Contains(p, `"name": "get_weather"`) || !strings.Contains(p, "sunny, 24 C") || !strings.Contains(p, "Paris") {
		t.Errorf("turn 2 prompt lacks the referenced call:\n%s", p)
	}

	// Turn 3: previous_response_id continues turn 2 (which holds turn 1
	// by reference).
	code, body = post(keyA, `{"model":"clawrl-test","previous_response_id":"`+r2.ID+`","input":"Thanks!"}`)
	if code != 200 {
		t.Fatalf("turn 3: %d %s", code, body)
	}
	p := lastPrompt()
	for _, want := range []string{"Weather in Paris?", `"name": "get_weather"`, "sunny, 24 C", "Reply number 2.", "Thanks!"} {
		if !strings.Contains(p, want) {
			t.Errorf("turn 3 prompt lacks %q:\n%s", want, p)
		}
	}
	if strings.Index(p, "Reply number 2.") > strings.Index(p, "Thanks!") {
		t.Errorf("turn 3 prompt out of order:\n%s", p)
	}

	// Another key sees none of it.
	for _, c := range []struct{ body, want string }{
		{turn2, "item_not_found"},
		{`{"model":"clawrl-test","previous_response_id":"` + r2.ID + `","input":"hi"}`, "previous_response_not_found"},
	} {
		if code, body := post(keyB, c.body); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("key b: %d %s, want %s", code, body, c.want)
		}
	}
	if resp, body := e.do(http.MethodGet, "/v1/responses/"+r1.ID, "", keyB...); resp.StatusCode != 404 {
		t.Errorf("key b reads key a's response: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do(http.MethodDelete, "/v1/responses/"+r1.ID, "", keyB...); resp.StatusCode != 404 {
		t.Errorf("key b deletes key a's response: %d %s", resp.StatusCode, body)
	}
	if resp, body := e.do(http.MethodGet, "/v1/responses/"+r1.ID, "", keyA...); resp.StatusCode != 200 || !strings.Contains(body, fc.ID) {
		t.Errorf("key a reads its response: %d %s", resp.StatusCode, body)
	}

	// store: false is honoured.
	code, body = post(keyA, `{"model":"clawrl-test","input":"Not to keep","store":false}`)
	var r4 respOut
	if code != 200 || json.Unmarshal([]byte(body), &r4) != nil || r4.Store {
		t.Fatalf("store false: %d %s", code, body)
	}
	if _, err := mem.Response(r4.ID); err == nil {
		t.Error("a response with store: false was kept")
	}
	if code, body := post(keyA, `{"model":"clawrl-test","previous_response_id":"`+r4.ID+`","input":"hi"}`); code != 400 {
		t.Errorf("continuing a response not kept: %d %s", code, body)
	}

	// Deleted, it is gone.
	if resp, body := e.do(http.MethodDelete, "/v1/responses/"+r1.ID, "", keyA...); resp.StatusCode != 200 || !strings.Contains(body, `"deleted":true`) {
		t.Errorf("delete: %d %s", resp.StatusCode, body)
	}
	if resp, _ := e.do(http.MethodGet, "/v1/responses/"+r1.ID, "", keyA...); resp.StatusCode != 404 {
		t.Errorf("a deleted response is still read: %d", resp.StatusCode)
	}
	if code, body := post(keyA, `{"model":"clawrl-test","previous_response_id":"`+r2.ID+`","input":"hi"}`); code != 400 || !strings.Contains(body, "item_not_found") {
		t.Errorf("a chain through a deleted response: %d %s", code, body)
	}
}

// A streamed response is kept with the item ids its events gave.
func TestStoredStreamedResponse(t *testing.T) {
	mem := &memResponses{}
	e := newEnv(t, func(o *Options) { o.Responses = mem })
	e.gen.reply = func(string, rollout.Request) script {
		return script{text: "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"}
	}
	resp, body := e.post("/v1/responses", `{"model":"clawrl-test","stream":true,"input":"Weather in Oslo?","tools":[`+respWeatherTool+`]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var id string
	var itemIDs []string
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type     string `json:"type"`
			Item     struct{ ID string }
			Response struct{ ID string }
		}
		json.Unmarshal([]byte(data), &ev)
		switch ev.Type {
		case "response.created":
			id = ev.Response.ID
		case "response.output_item.added":
			itemIDs = append(itemIDs, ev.Item.ID)
		}
	}
	if len(itemIDs) != 2 {
		t.Fatalf("items %v in %s", itemIDs, body)
	}
	sr, err := mem.Response(id)
	if err != nil {
		t.Fatalf("the streamed response was not kept: %v", err)
	}
	for _, it := range itemIDs {
		if !strings.Contains(string(sr.Output), it) {
			t.Errorf("kept output %s lacks item %s", sr.Output, it)
		}
	}
	if !strings.Contains(string(sr.Input), "Weather in Oslo?") {
		t.Errorf("kept input %s", sr.Input)
	}
}

// Without a store, references are refused with a message that says why.
func TestResponseReferencesWithoutStore(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{
		`{"model":"clawrl-test","input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":"hi"}]}`,
		`{"model":"clawrl-test","previous_response_id":"resp_1","input":"hi"}`,
	} {
		if resp, out := e.post("/v1/responses", body); resp.StatusCode != 400 || !strings.Contains(out, "keeps no responses") {
			t.Errorf("%s: %d %s", body, resp.StatusCode, out)
		}
	}
}

// An input of the wrong type is refused with a previous_response_id too.
func TestPreviousResponseBadInput(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Responses = &memResponses{} })
	resp, body := e.post("/v1/responses", `{"model":"clawrl-test","input":"Hello"}`)
	var r respOut
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &r) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if resp, body := e.post("/v1/responses", `{"model":"clawrl-test","previous_response_id":"`+r.ID+`","input":{"x":1}}`); resp.StatusCode != 400 || !strings.Contains(body, `"param":"input"`) {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}
