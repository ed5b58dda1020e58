package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
)

// Stored responses. Unless a request says store: false, a Responses API
// response is kept (Options.Responses, the durable store in the daemon):
// its input as given, its output items and the response object, under
// the owner tag of the API key that created it. A later request
// continues it with previous_response_id (the stored chain's input and
// output come before the new input), or replays its output items with
// {"type": "item_reference", "id": ...} (the Vercel AI SDK's default),
// and GET and DELETE /v1/responses/{id} read and delete it. A response,
// or an item, that another key created is answered as one that does not
// exist. Retention and forgetting a session delete them with the turns.

// ResponseStore keeps Responses API responses.
type ResponseStore interface {
	PutResponse(r StoredResponse) error
	// Response returns ErrResponseNotFound when it holds no such response.
	Response(id string) (StoredResponse, error)
	// ResponseItem returns an output item by id and the owner of its
	// response, or ErrResponseNotFound.
	ResponseItem(id string) (item json.RawMessage, owner string, err error)
	DeleteResponse(id string) (bool, error)
}

// StoredResponse is a kept response.
type StoredResponse struct {
	ID        string
	Owner     string // the creating key's owner tag ("" without API keys)
	SessionID string // the session its turn went to ("" when not recorded)
	Previous  string // the previous_response_id it continued
	Created   time.Time
	Input     json.RawMessage // the input items as given (a JSON array)
	Output    json.RawMessage // its output items (a JSON array)
	Body      json.RawMessage // the response object
}

// ErrResponseNotFound is a ResponseStore's answer for what it does not
// hold.
var ErrResponseNotFound = errors.New("server: response not found")

// responseVisible reports whether the sender of r may read a response
// (or an item of one) that owner created: the same API key's owner tag.
// It is the one ownership check of stored responses.
func responseVisible(r *http.Request, owner string) bool { return owner == responseOwner(r) }

// responseOwner is the owner tag that the responses r creates are kept
// under.
func responseOwner(r *http.Request) string { return owner(r) }

// maxChain bounds how many responses a previous_response_id chain may
// hold.
const maxChain = 1000

// expandInput resolves what a Responses request's input refers to: the
// chain of previous_response_id (each response's input, then its output)
// before the input, and item references replaced by the stored items. It
// returns the input as given, as an array (what a stored response keeps),
// and sets req.Input to the whole conversation's items.
func (s *Server) expandInput(r *http.Request, req *responsesRequest) (given json.RawMessage, e *apiError) {
	in := bytes.TrimSpace(req.Input)
	switch {
	case len(in) > 0 && in[0] == '"':
		var text string
		if json.Unmarshal(in, &text) == nil {
			given, _ = json.Marshal([]map[string]string{{"type": "message", "role": "user", "content": text}})
		}
	case len(in) > 0 && in[0] == '[':
		given = in
	}
	if given == nil && (req.PreviousResponseID == "" || !isNull(req.Input)) {
		return nil, nil // nothing to resolve, or an input conversation() refuses
	}
	if s.opts.Responses == nil {
		if req.PreviousResponseID != "" {
			return nil, invalid("previous_response_id", "unsupported_parameter",
				"previous_response_id is not supported: this server keeps no responses; send the whole input.")
		}
	}
	items := []json.RawMessage{}
	if req.PreviousResponseID != "" {
		chain, e := s.responseChain(r, req.PreviousResponseID)
		if e != nil {
			return nil, e
		}
		items = chain
	}
	if given != nil {
		var own []json.RawMessage
		if err := json.Unmarshal(given, &own); err != nil {
			return given, nil // conversation() reports it
		}
		own, e := s.resolveReferences(r, own, "input")
		if e != nil {
			return nil, e
		}
		items = append(items, own...)
	}
	full, err := json.Marshal(items)
	if err != nil {
		return nil, invalid("input", "invalid_value", "Invalid input: %v", err)
	}
	req.Input = full
	return given, nil
}

// responseChain is the items of the chain of stored responses that ends
// at id: for each, oldest first, its input (references resolved) and its
// output.
func (s *Server) responseChain(r *http.Request, id string) ([]json.RawMessage, *apiError) {
	var chain []StoredResponse
	for at := id; at != "" && len(chain) < maxChain; {
		sr, err := s.opts.Responses.Response(at)
		if err == nil && !responseVisible(r, sr.Owner) {
			err = ErrResponseNotFound
		}
		if err != nil {
			if !errors.Is(err, ErrResponseNotFound) {
				s.log.Error().Err(err).Str("id", at).Msg("reading a stored response")
				return nil, internalError(err)
			}
			msg := fmt.Sprintf("Previous response with id '%s' not found.", at)
			if at != id {
				msg = fmt.Sprintf("Previous response with id '%s' continues response '%s', which is no longer stored (data.retention_days, or deleted).", id, at)
			}
			return nil, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: "previous_response_id",
				Code: "previous_response_not_found", Message: msg}
		}
		chain = append(chain, sr)
		at = sr.Previous
	}
	var items []json.RawMessage
	for i := len(chain) - 1; i >= 0; i-- {
		var in, out []json.RawMessage
		if err := json.Unmarshal(chain[i].Input, &in); err != nil {
			return nil, internalError(fmt.Errorf("stored response %s: input: %w", chain[i].ID, err))
		}
		if err := json.Unmarshal(chain[i].Output, &out); err != nil {
			return nil, internalError(fmt.Errorf("stored response %s: output: %w", chain[i].ID, err))
		}
		in, e := s.resolveReferences(r, in, "previous_response_id")
		if e != nil {
			return nil, e
		}
		items = append(append(items, in...), out...)
	}
	return items, nil
}

// resolveReferences replaces the item references among items by the
// stored items they name.
func (s *Server) resolveReferences(r *http.Request, items []json.RawMessage, param string) ([]json.RawMessage, *apiError) {
	out := make([]json.RawMessage, 0, len(items))
	for i, raw := range items {
		var ref struct {
			Type string `json:"type"`
			ID   string `json:"id"`
			Role string `json:"role"`
		}
		_ = json.Unmarshal(raw, &ref)
		// An item reference: {"type": "item_reference", "id": ...}, the
		// type optional.
		if ref.Type != "item_reference" && (ref.Type != "" || ref.Role != "" || ref.ID == "") {
			out = append(out, raw)
			continue
		}
		p := fmt.Sprintf("%s[%d]", param, i)
		if ref.ID == "" {
			return nil, invalid(p+".id", "missing_required_parameter", "Missing required parameter: '%s.id'.", p)
		}
		if s.opts.Responses == nil {
			return nil, invalid(p, "unsupported_parameter", "Item references are not supported: this server keeps no responses; send the items.")
		}
		item, owner, err := s.opts.Responses.ResponseItem(ref.ID)
		if err == nil && !responseVisible(r, owner) {
			err = ErrResponseNotFound
		}
		if err != nil {
			if !errors.Is(err, ErrResponseNotFound) {
				s.log.Error().Err(err).Str("id", ref.ID).Msg("reading a stored response item")
				return nil, internalError(err)
			}
			return nil, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: p, Code: "item_not_found",
				Message: fmt.Sprintf("Item with id '%s' not found.", ref.ID)}
		}
		out = append(out, item)
	}
	return out, nil
}

// keepResponse stores a finished response (its output items and the
// object as returned), unless it is not to be kept. It runs before the
// response's last bytes, so that a client continuing at once finds it.
func (rc *responseCall) keepResponse(resp responseObject) {
	if !rc.keep {
		return
	}
	out, err := json.Marshal(resp.Output)
	if err == nil {
		resp.User = "" // identifiers are not kept as sent
		var body []byte
		if body, err = json.Marshal(resp); err == nil {
			err = rc.s.opts.Responses.PutResponse(StoredResponse{ID: resp.ID, Owner: rc.owner, SessionID: rc.session,
				Previous: rc.req.PreviousResponseID, Created: rc.received, Input: rc.given, Output: out, Body: body})
		}
	}
	if err != nil {
		rc.s.log.Warn().Err(err).Str("id", resp.ID).Msg("storing the response failed: previous_response_id and item references to it will not resolve")
	}
}

// handleGetResponse is GET /v1/responses/{id}: a stored response.
func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	sr, e := s.storedResponse(r, id)
	if e != nil {
		writeError(w, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(sr.Body, '\n'))
}

// handleDeleteResponse is DELETE /v1/responses/{id}.
func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, e := s.storedResponse(r, id); e != nil {
		writeError(w, e)
		return
	}
	ok, err := s.opts.Responses.DeleteResponse(id)
	if err != nil {
		writeError(w, internalError(err))
		return
	}
	if !ok {
		writeError(w, responseNotFound(id))
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "response", "deleted": true})
}

// storedResponse reads a stored response the sender of r may see.
func (s *Server) storedResponse(r *http.Request, id string) (StoredResponse, *apiError) {
	if s.opts.Responses == nil {
		return StoredResponse{}, responseNotFound(id)
	}
	sr, err := s.opts.Responses.Response(id)
	if err == nil && !responseVisible(r, sr.Owner) {
		err = ErrResponseNotFound
	}
	switch {
	case errors.Is(err, ErrResponseNotFound):
		return sr, responseNotFound(id)
	case err != nil:
		return sr, internalError(err)
	}
	return sr, nil
}

func responseNotFound(id string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Message: fmt.Sprintf("Response with id '%s' not found.", id)}
}
