package store

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Stored Responses API responses: what a client continues with
// previous_response_id, or replays item by item with item_reference
// (the Vercel AI SDK does, unless told store: false). Each holds the
// input it was given (as given: references stay references), its output
// items, the response object as it was returned, and who may read it (the
// owner tag of the API key that created it). Their output items are also
// kept by id. They hold the conversation's text as sent, since they exist
// to continue it; retention (Purge) and ForgetSession delete them with
// the turns.
//
// The tables are made at every open when missing, like the read indexes:
// a binary that does not know them reads the rest of the store as before,
// so they need no schema version of their own.
const responsesSchema = `
CREATE TABLE IF NOT EXISTS responses (
	id         TEXT PRIMARY KEY,
	owner      TEXT NOT NULL,           -- the creating key's owner tag ('' without keys)
	session_id TEXT NOT NULL DEFAULT '', -- the session its turn went to ('' when not recorded)
	previous   TEXT NOT NULL DEFAULT '', -- the previous_response_id it continued
	created    INTEGER NOT NULL,        -- unix milliseconds
	input      BLOB NOT NULL,           -- JSON array: the input items it was given
	output     BLOB NOT NULL,           -- JSON array: its output items
	body       BLOB NOT NULL            -- JSON: the response object
);
CREATE INDEX IF NOT EXISTS responses_created ON responses(created);
CREATE INDEX IF NOT EXISTS responses_session ON responses(session_id);
CREATE TABLE IF NOT EXISTS response_items (
	id          TEXT PRIMARY KEY,       -- the item's id (msg_…, fc_…, rs_…)
	response_id TEXT NOT NULL,
	item        BLOB NOT NULL           -- JSON: the output item
);
CREATE INDEX IF NOT EXISTS response_items_response ON response_items(response_id);
`

// Response is a stored Responses API response.
type Response struct {
	ID        string
	Owner     string
	SessionID string
	Previous  string
	Created   time.Time
	Input     json.RawMessage // a JSON array of input items
	Output    json.RawMessage // a JSON array of output items, each with its "id"
	Body      json.RawMessage
}

// ErrNotFound is returned for a response or item the store does not hold.
var ErrNotFound = errors.New("store: not found")

// ErrBudget is returned for a response not stored because the disk
// budget (Options.MaxBytes) is spent.
var ErrBudget = errors.New("store: disk budget reached (data.max_mb)")

// PutResponse stores r (replacing one of the same id) and its output
// items by id, and waits for the commit. Past the disk budget it stores
// nothing (counted) and returns ErrBudget.
func (d *DB) PutResponse(r Response) error {
	if d.overBudget() {
		d.met.refused.WithLabelValues("disk_budget").Inc()
		return fmt.Errorf("store: response %s: %w", r.ID, ErrBudget)
	}
	var items []struct {
		ID string `json:"id"`
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(r.Output, &items); err != nil {
		return fmt.Errorf("store: response %s: output: %w", r.ID, err)
	}
	if err := json.Unmarshal(r.Output, &raws); err != nil {
		return fmt.Errorf("store: response %s: output: %w", r.ID, err)
	}
	err := d.enqueue("response", true, false, func(tx *sql.Tx) error {
		if err := deleteResponses(tx, "id = ?", r.ID, new(int)); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO responses(id, owner, session_id, previous, created, input, output, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Owner, r.SessionID, r.Previous, r.Created.UnixMilli(), []byte(r.Input), []byte(r.Output), []byte(r.Body))
		if err != nil {
			return err
		}
		for i, it := range items {
			if it.ID == "" {
				continue
			}
			if _, err := tx.Exec(`INSERT OR REPLACE INTO response_items(id, response_id, item) VALUES (?, ?, ?)`, it.ID, r.ID, []byte(raws[i])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: storing response %s: %w", r.ID, err)
	}
	return nil
}

// Response returns the stored response id (ErrNotFound when none).
func (d *DB) Response(id string) (Response, error) {
	r := Response{ID: id}
	var created int64
	var input, output, body []byte
	err := d.db.QueryRow(`SELECT owner, session_id, previous, created, input, output, body FROM responses WHERE id = ?`, id).
		Scan(&r.Owner, &r.SessionID, &r.Previous, &created, &input, &output, &body)
	if errors.Is(err, sql.ErrNoRows) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("store: response %s: %w", id, err)
	}
	r.Created, r.Input, r.Output, r.Body = time.UnixMilli(created), input, output, body
	return r, nil
}

// ResponseItem returns a stored output item by its id, with the owner of
// the response that holds it (ErrNotFound when none).
func (d *DB) ResponseItem(id string) (item json.RawMessage, owner string, err error) {
	var b []byte
	err = d.db.QueryRow(`SELECT i.item, r.owner FROM response_items i JOIN responses r ON r.id = i.response_id WHERE i.id = ?`, id).Scan(&b, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", ErrNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("store: response item %s: %w", id, err)
	}
	return b, owner, nil
}

// DeleteResponse deletes a stored response and its items, leaving no
// copy of their text in the files; false when there was none.
func (d *DB) DeleteResponse(id string) (bool, error) {
	var n int
	err := d.enqueue("response_delete", true, false, func(tx *sql.Tx) error {
		return deleteResponses(tx, "id = ?", id, &n)
	})
	if err != nil {
		return false, fmt.Errorf("store: deleting response %s: %w", id, err)
	}
	if n == 0 {
		return false, nil
	}
	return true, d.scrub()
}

// deleteResponses deletes the responses where holds (a condition on
// responses' columns) and their items; n gets how many.
func deleteResponses(tx *sql.Tx, where string, arg any, n *int) error {
	if _, err := tx.Exec("DELETE FROM response_items WHERE response_id IN (SELECT id FROM responses WHERE "+where+")", arg); err != nil {
		return err
	}
	res, err := tx.Exec("DELETE FROM responses WHERE "+where, arg)
	if err != nil {
		return err
	}
	rows, _ := res.RowsAffected()
	*n = int(rows)
	return nil
}
