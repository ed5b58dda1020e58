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
	if !s.servesModel(id) {
		writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: "The model '" + id + "' does not exist."})
		return
	}
	writeJSON(w, s.model())
}

// servesModel reports whether a request's model names the served model:
// its id, or one of Options.ModelAliases ("*" accepts any name).
func (s *Server) servesModel(name string) bool {
	if name == s.opts.ModelID {
		return true
	}
	for _, a := range s.opts.ModelAliases {
		if a == "*" || a == name {
			return true
		}
	}
	return false
}

// checkModel refuses a request without a model (400) or naming another
// model (404 model_not_found), as OpenAI does.
func (s *Server) checkModel(name string) *apiError {
	switch {
	case name == "":
		return invalid("model", "missing_required_parameter", "You must provide a model parameter (this server serves '%s').", s.opts.ModelID)
	case !s.servesModel(name):
		return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Param: "model", Code: "model_not_found",
			Message: "The model '" + name + "' does not exist: this server serves '" + s.opts.ModelID +
				"' (server.model_aliases adds other names; \"*\" accepts any)."}
	}
	return nil
}
