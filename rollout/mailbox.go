package rollout

import (
	"context"
	"sync"
)

// mailbox carries one generation's events from the scheduler to the
// caller's channel. The scheduler must never wait on a slow reader, so it
// appends to an in-memory queue (bounded by the request's MaxTokens) and a
// forwarding goroutine, owned by the mailbox, moves events to the channel at
// the reader's pace. The goroutine ends after delivering the final event, or
// when the request's context ends (then it stops delivering and closes).
type mailbox struct {
	out chan Event

	mu     sync.Mutex
	queue  []Event
	closed bool          // the final event has been posted
	wake   chan struct{} // capacity 1: "queue changed"
}

func newMailbox() *mailbox {
	return &mailbox{out: make(chan Event, 16), wake: make(chan struct{}, 1)}
}

// start launches the forwarding goroutine; events posted before are kept.
func (m *mailbox) start(ctx context.Context) { go m.forward(ctx) }

// post queues ev; it never blocks. The final event (Finish set) must be the
// last one posted.
func (m *mailbox) post(ev Event) {
	m.mu.Lock()
	if !m.closed {
		m.queue = append(m.queue, ev)
		m.closed = ev.Finish != ""
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mailbox) forward(ctx context.Context) {
	defer close(m.out)
	var batch []Event
	for {
		m.mu.Lock()
		batch, m.queue = m.queue, batch[:0]
		done := m.closed
		m.mu.Unlock()
		for _, ev := range batch {
			select {
			case m.out <- ev:
			case <-ctx.Done():
				// The reader has gone; deliver the final event if there is
				// room, so a reader that is still there sees how it ended.
				m.drainFinal()
				return
			}
		}
		if done && len(batch) > 0 && batch[len(batch)-1].Finish != "" {
			return
		}
		select {
		case <-m.wake:
		case <-ctx.Done():
			m.drainFinal()
			return
		}
	}
}

// drainFinal waits for the scheduler's final event (it always posts one
// after a cancellation) and offers it without blocking.
func (m *mailbox) drainFinal() {
	for {
		m.mu.Lock()
		var final *Event
		if m.closed && len(m.queue) > 0 {
			final = &m.queue[len(m.queue)-1]
		}
		done := m.closed
		m.mu.Unlock()
		if done {
			if final != nil {
				select {
				case m.out <- *final:
				default:
				}
			}
			return
		}
		<-m.wake
	}
}
