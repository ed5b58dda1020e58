package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"net/http"
)

// Who may touch what: see session.IDs. The auth middleware puts the
// matched key's owner prefix in the request's context; handlers scope the
// session ids clients give with it.

// ownerKey is the request context key of the request's owner prefix.
type ownerKey struct{}

// owner is the session-id prefix of whoever sent r ("" without API keys).
func owner(r *http.Request) string {
	o, _ := r.Context().Value(ownerKey{}).(string)
	return o
}

// withOwner stores the owner prefix of the matched API key in r's context.
func (s *Server) withOwner(r *http.Request, keyHash [sha256.Size]byte) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), ownerKey{}, s.ids.Owner(keyHash)))
}

// sessionID scopes the session id raw that a request of owner gave.
func (s *Server) sessionID(owner, raw string) string { return s.ids.Scope(owner, raw) }

// randomKey is the ID key of a server without a store: ids are hashed
// under a key that dies with the process.
func randomKey() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("server: no randomness for the id key: " + err.Error())
	}
	return k
}
