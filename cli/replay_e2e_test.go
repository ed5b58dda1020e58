package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReplayServe runs the real binary with trainer.replay on: the bundled
// model replays its own pretraining corpus beside users' thumbs, and a
// replay file with a bad line stops the start with its path, line and
// reason.
func TestReplayServe(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  batch_size: 2\n  max_wait: 0s\n  replay:\n    samples: 3\n    weight: 0.5\n  guard:\n    skill_probes: 0\n"+
		"reward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", filepath.Join(dir, "data"))), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	defer d.kill()
	if !strings.Contains(d.log.String(), `"from":"the bundled pretraining corpus","samples":3`) {
		t.Errorf("the startup log does not say replay is on:\n%s", d.log)
	}
	// Three turns of one session: the first two get their next state and
	// a thumb, so they train; the third stays open.
	history := []map[string]string{{"role": "user", "content": "Name a fruit."}}
	for i := range 3 {
		code, m, _ := d.post(t, "/v1/chat/completions", "replay", nil, map[string]any{"model": servedModel(d.url), "messages": history, "max_tokens": 8})
		if code != 200 {
			t.Fatalf("chat: %d %v", code, m)
		}
		if i < 2 {
			if code, m, _ := d.post(t, "/v1/feedback", "", nil, map[string]any{"response_id": m["id"], "thumb": 1}); code != 200 {
				t.Fatalf("feedback: %d %v", code, m)
			}
		}
		reply := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		history = append(history, map[string]string{"role": "assistant", "content": reply},
			map[string]string{"role": "user", "content": fmt.Sprintf("Another one, please (%d).", i)})
	}
	metric := metricValue
	text := d.metricsUntil(t, 60*time.Second, func(text string) bool { return metric(text, "clawrl_weight_version") >= 2 })
	if v := metric(text, "clawrl_weight_version"); v < 2 {
		t.Fatalf("serving version %v: nothing trained\n%s", v, d.log)
	}
	// The step learnt the two thumbs and three replayed examples.
	if n := metric(text, "clawrl_loop_replay_samples_total"); n != 3 {
		t.Errorf("%v replay samples, want 3", n)
	}
	if n := metric(text, `clawrl_train_step{stat="samples"}`); n != 5 {
		t.Errorf("the step trained %v samples, want 2 thumbs + 3 replayed", n)
	}
	if err := d.stop(); err != nil {
		t.Errorf("SIGTERM: %v\n%s", err, d.log)
	}

	// A replay file with a bad line: the daemon does not start, and says
	// which line and why.
	bad := filepath.Join(dir, "replay.jsonl")
	os.WriteFile(bad, []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Hello!"}]}`+"\n"+
		`{"messages":[{"role":"user","content":"hi"}]}`+"\n"), 0o600)
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  replay:\n    samples: 2\n    data: %s\nreward:\n  votes: 1\ndata:\n  dir: %s\n", bad, filepath.Join(dir, "data2"))), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "serve", "--config", cfg, "--port", strconv.Itoa(freePort(t))).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "trainer.replay.data") || !strings.Contains(string(out), bad+":2: a conversation needs") {
		t.Errorf("a bad replay file: %v\n%s", err, out)
	}
}
