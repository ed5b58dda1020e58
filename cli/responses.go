package cli

import (
	"encoding/json"
	"errors"

	"github.com/clawrl/clawrl/server"
	"github.com/clawrl/clawrl/store"
)

// responseStore adapts the store to the server's ResponseStore: the
// daemon keeps Responses API responses durably, under the same retention
// as turns.
type responseStore struct{ db *store.DB }

func (s responseStore) PutResponse(r server.StoredResponse) error {
	return s.db.PutResponse(store.Response(r))
}

func (s responseStore) Response(id string) (server.StoredResponse, error) {
	r, err := s.db.Response(id)
	return server.StoredResponse(r), notFound(err)
}

func (s responseStore) ResponseItem(id string) (json.RawMessage, string, error) {
	item, owner, err := s.db.ResponseItem(id)
	return item, owner, notFound(err)
}

func (s responseStore) DeleteResponse(id string) (bool, error) { return s.db.DeleteResponse(id) }

// notFound turns the store's ErrNotFound into the server's.
func notFound(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return server.ErrResponseNotFound
	}
	return err
}
