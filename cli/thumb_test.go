package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestThumbOnLastAnswerTrains is the README's feedback example as a user
// runs it: one question, one answer, a thumb down, and nothing more said.
// The thumb is a complete signal: the answer trains without waiting for a
// next message, X-Session-Done or the idle timeout, and without waiting
// for a full batch: with the default batch_size (4) and max_wait set to
// an hour, trainer.feedback_wait (default 5s) steps on the lone thumb.
func TestThumbOnLastAnswerTrains(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  max_wait: 1h\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\nsessions:\n  idle_timeout: 1h\ndata:\n  dir: %s\n",
		filepath.Join(dir, "data"))), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	chatWithThumbs(t, d, "last", "Name a color.", 1, -1, "", nil)
	text := d.metricsUntil(t, 2*time.Minute, func(text string) bool { return metricValue(text, "clawrl_weight_version") >= 2 })
	if v := metricValue(text, "clawrl_weight_version"); v < 2 {
		t.Fatalf("a thumb on the session's last answer did not train within 2 minutes (version %v)\n%s", v, d.log)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log)
	}
}
