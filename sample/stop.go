package sample

import "strings"

// StopMatcher finds stop strings in streamed text. Text that might be the
// start of a stop string is held back until it is known not to be, so a
// client never sees any part of a stop string.
type StopMatcher struct {
	stops   []string
	pending strings.Builder
}

// NewStopMatcher returns a matcher for the given stop strings (empty ones
// are ignored).
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Push adds newly decoded text. It returns the text that is now safe to
// emit, and whether a stop string was found (then emit is everything before
// it and the generation should end).
func (m *StopMatcher) Push(text string) (emit string, stopped bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	m.pending.WriteString(text)
	buf := m.pending.String()
	cut := -1
	for _, s := range m.stops {
		if i := strings.Index(buf, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		m.pending.Reset()
		return buf[:cut], true
	}
	// Hold back the longest suffix of buf that is a proper prefix of a stop.
	hold := 0
	for _, s := range m.stops {
		for l := min(len(s)-1, len(buf)); l > hold; l-- {
			if strings.HasSuffix(buf, s[:l]) {
				hold = l
				break
			}
		}
	}
	emit = buf[:len(buf)-hold]
	m.pending.Reset()
	m.pending.WriteString(buf[len(buf)-hold:])
	return emit, false
}

// Flush returns the held-back text at the end of a generation that did not
// stop on a stop string.
func (m *StopMatcher) Flush() string {
	s := m.pending.String()
	m.pending.Reset()
	return s
}
