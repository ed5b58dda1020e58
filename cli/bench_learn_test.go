package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clawrl/clawrl/learnbench"
)

// TestBenchLearn runs `clawrl bench learn` end to end on a tiny random
// model: a daemon per method, the simulated user over HTTP, training steps,
// probes, the table, the PNG and results.json. Whether the model learns is
// the benchmark's business, not this test's.
func TestBenchLearn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, _, err := run(t, "", "testmodel", dir); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	stdout, stderr, err := run(t, "", "bench", "learn", "--model", dir, "--turns", "4", "--session-turns", "2", "--probe-every", "2",
		"--probes", "2", "--skills", "2", "--max-tokens", "8", "--methods", "binary,hinted", "--scenario", "end_word", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"scenario end_word", "| method | turn 0 | turn 2 | turn 4 |", "| binary | ", "| hinted | "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "learn-end_word.png")); err != nil {
		t.Error(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res map[string][]learnbench.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	rs := res["end_word"]
	if len(rs) != 2 {
		t.Fatalf("results for %d methods", len(rs))
	}
	for _, r := range rs {
		if len(r.Points) != 3 || r.Turns != 4 {
			t.Errorf("%s: %d points", r.Method, len(r.Points))
		}
		for _, p := range r.Points {
			// Two probes: a share of 0, 0.5 or 1.
			if p.Satisfaction != 0 && p.Satisfaction != 0.5 && p.Satisfaction != 1 {
				t.Errorf("%s: satisfaction %v", r.Method, p.Satisfaction)
			}
		}
		// Every graded turn reached the judge (a random model's votes do
		// not parse, so nothing need train).
		scored := 0.0
		for k, v := range r.Daemon {
			if strings.HasPrefix(k, "clawrl_reward_turns_total{") {
				scored += v
			}
		}
		if scored < 4 {
			t.Errorf("%s: %v turns scored; want the 4 graded ones (counters %v)", r.Method, scored, r.Daemon)
		}
	}
	for _, bad := range [][]string{
		{"bench", "learn", "--scenario", "nope"},
		{"bench", "learn", "--methods", "magic"},
	} {
		if _, _, err := run(t, "", bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
