// Package ratelog logs warnings that can repeat once per event (a judge
// that keeps failing, a full disk, a backlog) at most once per interval
// and key, with a count of those held back: a busy daemon's log says what
// is wrong without one line per request.
package ratelog

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Limiter logs repeated warnings at most once per interval and key,
// with the count of those it held back, instead of one line per event.
type Limiter struct {
	log      zerolog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// New returns a limiter that logs through log.
func New(log zerolog.Logger, interval time.Duration) *Limiter {
	return &Limiter{log: log, interval: interval, last: map[string]time.Time{}, held: map[string]int{}}
}

// Warn logs msg with err under key, unless a warning of the same key was
// logged less than an interval ago; then it only counts it, and the next
// line logged for key says how many were held back.
func (r *Limiter) Warn(key string, err error, msg string) {
	now := time.Now()
	r.mu.Lock()
	if t, ok := r.last[key]; ok && now.Sub(t) < r.interval {
		r.held[key]++
		r.mu.Unlock()
		return
	}
	held := r.held[key]
	r.last[key], r.held[key] = now, 0
	r.mu.Unlock()
	ev := r.log.Warn().Err(err)
	if held > 0 {
		ev = ev.Int("repeats", held).Dur("in_last", r.interval)
	}
	ev.Msg(msg)
}
