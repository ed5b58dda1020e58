package reward

import (
	"context"
	"errors"

	"github.com/clawrl/clawrl/tokenizer"
)

// Backend samples completions of a chat from a judge model.
type Backend interface {
	// Complete returns up to req.N completions of req.Messages. It may
	// return fewer when some failed; an error means it has none. Errors
	// that retrying cannot fix are marked with Permanent.
	Complete(ctx context.Context, req Request) ([]string, error)
}

// Request is one judge call: N samples of a reply to Messages.
type Request struct {
	Messages    []tokenizer.Message
	N           int
	Temperature float32
	MaxTokens   int
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying (a bad request, a prompt that
// does not fit, a closed generator). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
