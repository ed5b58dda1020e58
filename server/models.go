package server

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"
)

// modelObject is an entry of GET /v1/models.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// WeightVersion is the weight version being served (clawrl's own field).
	WeightVersion uint64 `json:"weight_version"`
	// ContextLength is the most prompt plus completion tokens a request
	// may use (clawrl's own field).
	ContextLength int `json:"context_length"`
}

func (s *Server) model() modelObject {
	return modelObject{ID: s.opts.ModelID, Object: "model", Created: s.started.Unix(), OwnedBy: "clawrl",
		WeightVersion: s.opts.Version(), ContextLength: s.opts.ContextLength}
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"object": "list", "data": []modelObject{s.model()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "*") // chi routes on the escaped path when there is one
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	if id != s.opts.ModelID {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: "The model '" + id + "' does not exist."})
		return
	}
	writeJSON(w, s.model())
}
