package session

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// IDs scopes session ids to their owners and hashes them at rest.
//
// With API keys, every session belongs to the key that created it: the
// server turns the session ids a client gives (X-Session-Id, the body's
// session_id, user or prompt_cache_key) into ids scoped to its key before
// they reach the Tracker or the store, so another key naming the same id
// names another session, and a key that names a session it does not own
// gets the answer for one that does not exist. Without keys there is one
// owner: everyone shares every session, as on a laptop.
//
// At rest the ids clients give are keyed hashes (HMAC-SHA256 under Key),
// unless Hash is off: an e-mail address sent as `user` never lands in the
// database or in `clawrl data export`. Ids the server made (an inferred
// session's) are random and stored as they are.
//
// A session's id is owner + id: owner is "" without keys, or "k" + 10 hex
// digits of an HMAC of the key + "." with them (Owner); id is "h-" + 32
// hex digits of an HMAC of the client's id (or the client's id itself with
// Hash off), or "sess-..." for an inferred session. A client that sends
// back an id the server gave it (an inferred session's, from the
// X-Session-Id header) addresses that session.
type IDs struct {
	// Key is the secret of the hashes; the daemon keeps it in the data
	// directory so that a restart finds its sessions again.
	Key []byte
	// Hash stores the ids clients give as keyed hashes.
	Hash bool
}

// Owner is the session-id prefix of the API key whose SHA-256 is keyHash.
func (s IDs) Owner(keyHash [sha256.Size]byte) string {
	mac := hmac.New(sha256.New, s.Key)
	mac.Write([]byte("owner\x00"))
	mac.Write(keyHash[:])
	return "k" + hex.EncodeToString(mac.Sum(nil))[:10] + "."
}

// issued matches the ids the server makes, after the owner prefix.
var issued = regexp.MustCompile(`^(sess-[0-9a-f]+|h-[0-9a-f]{32})$`)

// Scope turns the session id raw that a client of owner gave into the
// session's id ("" stays "").
func (s IDs) Scope(owner, raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return ""
	}
	if rest, ok := strings.CutPrefix(raw, owner); ok && issued.MatchString(rest) {
		return raw // an id the server gave this owner
	}
	if !s.Hash {
		return owner + raw
	}
	mac := hmac.New(sha256.New, s.Key)
	mac.Write([]byte(owner))
	mac.Write([]byte{0})
	mac.Write([]byte(raw))
	return owner + "h-" + hex.EncodeToString(mac.Sum(nil))[:32]
}
