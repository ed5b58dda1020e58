package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func testResponse(id, owner, sess string, created time.Time, text string) Response {
	msg := "msg_" + id
	return Response{
		ID: id, Owner: owner, SessionID: sess, Created: created,
		Input:  json.RawMessage(`[{"type":"message","role":"user","content":"What is the weather?"}]`),
		Output: json.RawMessage(`[{"type":"message","id":"` + msg + `","role":"assistant","content":[{"type":"output_text","text":"` + text + `"}]},{"type":"function_call","id":"fc_` + id + `","call_id":"call_1","name":"get_weather","arguments":"{}"}]`),
		Body:   json.RawMessage(`{"id":"` + id + `","object":"response"}`),
	}
}

// Responses are stored durably with their output items by id; a delete,
// the retention purge and forgetting their session remove them and their
// items, and leave no copy of their text in the files.
func TestResponses(t *testing.T) {
	dir := t.TempDir()
	db := open(t, dir, Options{})
	now := time.Now()
	for _, r := range []Response{
		testResponse("resp_a", "ownerA", "s1", now, "Sunny in Oslo"),
		testResponse("resp_b", "ownerB", "s2", now.Add(-40*24*time.Hour), "Rainy in Bergen"),
		testResponse("resp_c", "ownerA", "s3", now, "Windy in Tromsø"),
	} {
		if err := db.PutResponse(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, dir, Options{}) // they survive a restart
	r, err := db.Response("resp_a")
	if err != nil || r.Owner != "ownerA" || r.SessionID != "s1" || !bytes.Contains(r.Output, []byte("Sunny")) || r.Created.UnixMilli() != now.UnixMilli() {
		t.Fatalf("response: %+v %v", r, err)
	}
	item, owner, err := db.ResponseItem("fc_resp_a")
	if err != nil || owner != "ownerA" || !bytes.Contains(item, []byte(`"call_id":"call_1"`)) {
		t.Fatalf("item: %s %s %v", item, owner, err)
	}
	if _, err := db.Response("resp_x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing response: %v", err)
	}
	if _, _, err := db.ResponseItem("msg_x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a missing item: %v", err)
	}

	// Retention: resp_b is 40 days old.
	f, err := db.Purge(now.Add(-30 * 24 * time.Hour))
	if err != nil || f.Responses != 1 {
		t.Fatalf("purge: %+v %v", f, err)
	}
	if _, err := db.Response("resp_b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("purged response still there: %v", err)
	}
	if _, _, err := db.ResponseItem("msg_resp_b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("purged item still there: %v", err)
	}
	// Forgetting a session.
	if f, err := db.ForgetSession("s3"); err != nil || f.Responses != 1 {
		t.Fatalf("forget: %+v %v", f, err)
	}
	// A delete.
	if ok, err := db.DeleteResponse("resp_a"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if ok, _ := db.DeleteResponse("resp_a"); ok {
		t.Error("deleted twice")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{FileName, FileName + "-wal"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		for _, text := range []string{"Sunny in Oslo", "Rainy in Bergen", "Windy in Troms"} {
			if bytes.Contains(b, []byte(text)) {
				t.Errorf("%s still holds %q", name, text)
			}
		}
	}
}

// Past the disk budget responses are not stored, and the caller is told.
func TestResponsesBudget(t *testing.T) {
	db := open(t, t.TempDir(), Options{MaxBytes: 1})
	err := db.PutResponse(testResponse("resp_a", "", "", time.Now(), "x"))
	if !errors.Is(err, ErrBudget) {
		t.Fatalf("over the budget: %v", err)
	}
	if _, err := db.Response("resp_a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("stored over the budget: %v", err)
	}
}
