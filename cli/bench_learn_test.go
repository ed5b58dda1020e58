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
	// A thumbs-only user at a pace: every graded turn gets a thumb, which
	// scores it as feedback, and the bench never waits for training.
	out2 := t.TempDir()
	stdout, stderr, err = run(t, "", "bench", "learn", "--model", dir, "--turns", "4", "--session-turns", "2", "--probe-every", "4",
		"--probes", "2", "--skills", "-1", "--max-tokens", "8", "--methods", "binary", "--scenario", "lowercase", "--thumbs-only",
		"--user-pace", "0.05", "--out", out2)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stdout, "thumbs-only user") || !strings.Contains(stdout, "0.05s to read and type") {
		t.Errorf("output does not name the user:\n%s", stdout)
	}
	b, err = os.ReadFile(filepath.Join(out2, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	res = nil
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if r := res["lowercase"]; len(r) != 1 || r[0].User != learnbench.UserThumbs || r[0].PaceS != 0.05 ||
		r[0].Daemon["clawrl_reward_turns_total{kind=binary,source=feedback}"] != 4 {
		t.Errorf("thumbs-only run: %+v", r)
	}
	// Base rates: one daemon, every preference of the scenarios asked.
	out3 := t.TempDir()
	stdout, stderr, err = run(t, "", "bench", "learn", "--model", dir, "--base-rates", "2", "--max-tokens", "8", "--scenario", "end_word,switch", "--out", out3)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, stdout, stderr)
	}
	for _, want := range []string{"| end_word=banana | ", "| lowercase | ", "| uppercase | "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("base rates lack %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(out3, "base-rates.json")); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]string{
		{"bench", "learn", "--scenario", "nope"},
		{"bench", "learn", "--methods", "magic"},
		{"bench", "learn", "--user-pace", "-1"},
		{"bench", "learn", "--base-rates", "-1"},
		{"bench", "learn", "--temperature", "0"},
	} {
		if _, _, err := run(t, "", bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
