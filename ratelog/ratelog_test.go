package ratelog

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestLimiter(t *testing.T) {
	var buf bytes.Buffer
	l := New(zerolog.New(&buf), 50*time.Millisecond)
	for range 100 {
		l.Warn("a", errors.New("boom"), "a failed")
	}
	l.Warn("b", errors.New("other"), "b failed")
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for 100 a + 1 b, want 2:\n%s", n, buf.String())
	}
	time.Sleep(60 * time.Millisecond)
	l.Warn("a", errors.New("boom"), "a failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"repeats":99`) {
		t.Errorf("the next line does not count the 99 held back: %s", last)
	}
}
