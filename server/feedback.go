package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/clawrl/clawrl/session"
)

// feedbackRequest is the body of POST /v1/feedback.
type feedbackRequest struct {
	ResponseID string          `json:"response_id"`
	SessionID  string          `json:"session_id"`
	Turn       *int            `json:"turn"`
	Choice     int             `json:"choice"`
	Thumb      json.RawMessage `json:"thumb"`
	Text       string          `json:"text"`
	// Model is accepted and ignored: clients that send it with every
	// request may send it here too.
	Model string `json:"model"`
}

// parseThumb reads a thumb: +1/-1 as a number or a string, or up/down.
func parseThumb(raw json.RawMessage) (int, *apiError) {
	if isNull(raw) {
		return 0, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, invalid("thumb", "invalid_type", "Invalid 'thumb'.")
	}
	var s string
	switch x := v.(type) {
	case float64:
		s = strconv.FormatFloat(x, 'f', -1, 64)
	case string:
		s = strings.ToLower(strings.TrimSpace(x))
	case bool:
		s = strconv.FormatBool(x)
	}
	switch s {
	case "1", "+1", "up", "thumbs_up", "true", "👍":
		return 1, nil
	case "-1", "down", "thumbs_down", "false", "👎":
		return -1, nil
	}
	return 0, invalid("thumb", "invalid_value", "Invalid 'thumb': use +1 or -1 (or \"up\" / \"down\").")
}

func (s *Server) handleFeedback(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	var req feedbackRequest
	if e := decodeBodyStrict(r, 1<<20, &req); e != nil {
		writeError(w, e)
		return
	}
	thumb, e := parseThumb(req.Thumb)
	if e != nil {
		writeError(w, e)
		return
	}
	text := strings.TrimSpace(req.Text)
	switch {
	case thumb == 0 && text == "":
		writeError(w, invalid("thumb", "missing_required_parameter", "Give a thumb (+1 or -1), a text, or both."))
		return
	case req.ResponseID == "" && (req.SessionID == "" || req.Turn == nil):
		writeError(w, invalid("response_id", "missing_required_parameter", "Name the turn by response_id, or by session_id and turn."))
		return
	}
	who := owner(r)
	fr := session.FeedbackRequest{Owner: who, ResponseID: req.ResponseID, SessionID: s.sessionID(who, req.SessionID), Choice: req.Choice, Thumb: thumb, Text: text}
	if req.Turn != nil {
		fr.Turn = *req.Turn
	}
	fb, err := s.tracker.AddFeedback(fr)
	if errors.Is(err, session.ErrUnknownTurn) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "response_id", Code: "turn_not_found",
			Message: "No recorded turn matches: it is unknown, was not recorded for training, or its session has ended."})
		return
	}
	if err != nil {
		writeError(w, internalError(err))
		return
	}
	sid := fb.SessionID // the stored id: hashed when the client gave it
	if req.SessionID != "" {
		sid = req.SessionID
	}
	writeJSON(w, map[string]any{
		"id": fb.ID, "object": "feedback", "response_id": fb.ResponseID, "session_id": sid,
		"turn": fb.TurnIndex, "choice": fb.Choice, "thumb": fb.Thumb, "text": fb.Text,
	})
}

// handleForgetSession deletes everything stored of a session: the tracker
// forgets it (its pending turns are not emitted) and the store deletes its
// turns, feedback and samples.
func (s *Server) handleForgetSession(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if strings.TrimSpace(id) == "" {
		writeError(w, invalid("id", "missing_required_parameter", "Name the session: DELETE /v1/sessions/{id}."))
		return
	}
	if s.opts.Data == nil {
		writeError(w, &apiError{Status: http.StatusNotImplemented, Type: typeInvalidRequest, Code: "not_implemented",
			Message: "This server keeps no store of sessions to delete."})
		return
	}
	sid := s.sessionID(owner(r), id)
	inMemory := s.tracker.Forget(sid)
	f, err := s.opts.Data.ForgetSession(sid)
	if err != nil {
		writeError(w, internalError(err))
		return
	}
	if !inMemory && f.Turns == 0 && f.Feedback == 0 {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "id", Code: "session_not_found",
			Message: "No session with this id is remembered or stored."})
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "session.deleted", "deleted": true,
		"turns": f.Turns, "feedback": f.Feedback, "samples": f.Samples})
}

// RestoreTurns gives the session tracker turns that were waiting for their
// next state when the daemon last stopped (see session.Tracker.Restore).
func (s *Server) RestoreTurns(turns []*session.Turn) { s.tracker.Restore(turns) }

// ErrUnknownVersion is wrapped by an Admin that has no checkpoint of the
// version asked for.
var ErrUnknownVersion = errors.New("no checkpoint of that version")

// handleRollback is POST /admin/rollback {"version": N}: the weights of
// checkpoint N become current as a new version. It needs an admin key
// (server.admin_keys), never an API key.
func (s *Server) handleRollback(w http.ResponseWriter, r *http.Request) {
	if len(s.admin) == 0 {
		writeError(w, &apiError{Status: http.StatusForbidden, Type: typeInvalidRequest, Code: "admin_disabled",
			Message: "The admin routes are off: set server.admin_keys to use them."})
		return
	}
	if match, given := keyMatches(r, s.admin); !match {
		msg := "Incorrect admin key provided."
		if !given {
			msg = "Provide an admin key in the Authorization header as 'Bearer KEY'."
		}
		writeError(w, &apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: codeInvalidAPIKey, Message: msg})
		return
	}
	var req struct {
		Version *uint64 `json:"version"`
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if e := decodeBody(r, 1<<16, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Version == nil || *req.Version == 0 {
		writeError(w, invalid("version", "missing_required_parameter", "Name the version to roll back to: {\"version\": N}."))
		return
	}
	if s.opts.Admin == nil {
		writeError(w, &apiError{Status: http.StatusNotImplemented, Type: typeInvalidRequest, Code: "not_implemented",
			Message: "This server cannot roll back (training is off)."})
		return
	}
	v, err := s.opts.Admin.Rollback(r.Context(), *req.Version)
	switch {
	case errors.Is(err, ErrUnknownVersion):
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "version", Code: "version_not_found",
			Message: err.Error()})
		return
	case err != nil:
		writeError(w, internalError(err))
		return
	}
	writeJSON(w, map[string]any{"object": "rollback", "rolled_back_to": *req.Version, "weight_version": v})
}
