package cli

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/weights"
)

// TestOneDaemonPerDataDir is two people starting `clawrl serve` on one
// data directory: the second is refused at once, naming the first's pid
// and the directory, and the first keeps serving; read-only commands work
// beside it; `weights rollback` goes through the running daemon (with an
// admin key), or is refused with the command that works (without one);
// after the first stops, the directory is free again.
func TestOneDaemonPerDataDir(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	write := func(name, extra string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(fmt.Sprintf("trainer:\n  batch_size: 2\n  max_wait: 100ms\n  checkpoint_every: 1\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n%s", data, extra)), 0o600)
		return p
	}
	cfg := write("config.yaml", "server:\n  admin_keys: [adm]\n")
	noAdmin := write("noadmin.yaml", "")
	first := startDaemon(t, bin, cfg, freePort(t))
	clawrl := func(cfg string, args ...string) (string, error) {
		out, err := exec.Command(bin, append(args, "--config", cfg)...).CombinedOutput()
		return string(out), err
	}

	// The second daemon: refused before it loads anything.
	start := time.Now()
	out, err := clawrl(cfg, "serve", "--port", strconv.Itoa(freePort(t)))
	pid := strconv.Itoa(first.cmd.Process.Pid)
	if err == nil || !strings.Contains(out, "pid "+pid) || !strings.Contains(out, data) || !strings.Contains(out, "another clawrl daemon") {
		t.Fatalf("a second daemon on %s: %v\n%s", data, err, out)
	}
	t.Logf("second daemon refused in %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	if v := first.servedVersion(t); v < 1 {
		t.Fatalf("the first daemon stopped serving: version %d", v)
	}
	// What the refusal suggests works: the same config with --data-dir.
	if !strings.Contains(out, "--data-dir") {
		t.Errorf("the refusal does not say how to give another data directory: %s", out)
	}
	other := filepath.Join(dir, "other")
	beside := startDaemonArgs(t, bin, cfg, freePort(t), []string{"--data-dir", other})
	if v := beside.servedVersion(t); v < 1 {
		t.Errorf("a daemon on --data-dir %s serves version %d", other, v)
	}
	if err := beside.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, beside.log)
	}
	if _, err := os.Stat(filepath.Join(other, "clawrl.db")); err != nil {
		t.Errorf("--data-dir %s holds no store: %v", other, err)
	}
	if out, err := clawrl(cfg, "weights", "list", "--data-dir", other); err != nil || !strings.Contains(out, "base: ") {
		t.Errorf("weights list --data-dir %s: %v\n%s", other, err, out)
	}

	// Train one version, so that there is something to roll back to.
	chatWithThumbs(t, first, "o", "Name a fruit.", 2, 1, "", nil)
	root := filepath.Join(data, "checkpoints")
	var ns []uint64
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ns, _ = weights.List(root); len(ns) > 0 && ns[0] >= 2 {
			break
		}
	}
	if len(ns) == 0 || ns[0] < 2 {
		t.Fatalf("no trained checkpoint after two thumbs up\n%s", first.log)
	}

	// Reading beside the daemon works.
	for _, args := range [][]string{{"data", "stats"}, {"weights", "list"}, {"data", "export", "--out", filepath.Join(dir, "export.jsonl")}} {
		if out, err := clawrl(cfg, args...); err != nil {
			t.Errorf("%v beside the daemon: %v\n%s", args, err, out)
		}
	}

	// Without an admin key the rollback is refused with what works.
	target := ns[len(ns)-1]
	out, err = clawrl(noAdmin, "weights", "rollback", strconv.FormatUint(target, 10))
	if err == nil || !strings.Contains(out, "pid "+pid) || !strings.Contains(out, "/admin/rollback") || !strings.Contains(out, "server.admin_keys") {
		t.Fatalf("rollback beside the daemon without an admin key: %v\n%s", err, out)
	}
	after, _ := weights.List(root)
	if after[0] != ns[0] && !strings.Contains(first.log.String(), "trained and published") {
		t.Errorf("the refused rollback wrote a checkpoint: %v → %v", ns, after)
	}

	// With one, it goes through the daemon, which serves the new version.
	out, err = clawrl(cfg, "weights", "rollback", strconv.FormatUint(target, 10))
	if err != nil || !strings.Contains(out, "rolled back") || !strings.Contains(out, fmt.Sprintf("weights of %d", target)) {
		t.Fatalf("rollback through the daemon: %v\n%s", err, out)
	}
	var rolled uint64
	if _, err := fmt.Sscanf(out[strings.Index(out, "version "):], "version %d", &rolled); err != nil {
		t.Fatalf("rollback output %q: %v", out, err)
	}
	if v := first.servedVersion(t); v < rolled {
		t.Errorf("the daemon serves version %d after rolling back to %d as version %d", v, target, rolled)
	}
	if err := first.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, first.log)
	}

	// Free again: a new daemon starts on the directory and resumes.
	second := startDaemon(t, bin, cfg, freePort(t))
	if v := second.servedVersion(t); v < rolled {
		t.Errorf("after a restart: version %d, the rollback made %d", v, rolled)
	}
	if err := second.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, second.log)
	}
}

// TestBrokenModelLeavesNoLineage: a start that fails on a damaged
// checkpoint says what is wrong with it and leaves the fresh data
// directory untied to it, so the next start with a good model works.
func TestBrokenModelLeavesNoLineage(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	good, broken := filepath.Join(dir, "good"), filepath.Join(dir, "broken")
	for _, m := range []string{good, broken} {
		if out, err := exec.Command(bin, "testmodel", m).CombinedOutput(); err != nil {
			t.Fatalf("testmodel: %v\n%s", err, out)
		}
	}
	st := filepath.Join(broken, "model.safetensors")
	info, _ := os.Stat(st)
	if err := os.Truncate(st, info.Size()/2); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("data:\n  dir: %s\n", data)), 0o600)
	out, err := exec.Command(bin, "serve", "--config", cfg, "--model", broken, "--port", strconv.Itoa(freePort(t))).CombinedOutput()
	if err == nil || !strings.Contains(string(out), st) || strings.Contains(string(out), "lineage") {
		t.Fatalf("serving a truncated checkpoint: %v\n%s", err, out)
	}
	os.WriteFile(cfg, []byte(fmt.Sprintf("data:\n  dir: %s\nmodel:\n  path: %s\n", data, good)), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	if v := d.servedVersion(t); v != 1 {
		t.Errorf("the good model serves version %d, want 1", v)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log)
	}
}

// TestIdentifiersAtRest: with two API keys, the `user` field and the
// session ids clients send reach neither the database's bytes nor `data
// export` (keyed hashes, data.hash_ids); a key deleting the other's
// session gets the 404 of a session that does not exist and deletes
// nothing; the owner deletes it; `data forget` finds a session by the id
// the client used. With hash_ids off the ids are kept as sent.
func TestIdentifiersAtRest(t *testing.T) {
	bin := realBinary(t)
	for _, hash := range []bool{true, false} {
		t.Run(fmt.Sprintf("hash_ids=%v", hash), func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			cfg := filepath.Join(dir, "config.yaml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  enabled: false\nserver:\n  api_keys: [sk-alice, sk-bob]\ndata:\n  dir: %s\n  hash_ids: %v\n", data, hash)), 0o600)
			d := startDaemon(t, bin, cfg, freePort(t))
			const email, sid = "alice.liddell@example.com", "alices-private-session"
			as := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
			for i, s := range []string{sid, "second-session"} {
				code, m, _ := d.post(t, "/v1/chat/completions", s, as("sk-alice"), map[string]any{"model": servedModel(d.url), "user": email,
					"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Question %d.", i)}}, "max_tokens": 4})
				if code != 200 {
					t.Fatalf("chat: %d %v", code, m)
				}
			}
			del := func(key, id string) int {
				req, _ := http.NewRequest("DELETE", d.url+"/v1/sessions/"+id, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if got, none := del("sk-bob", sid), del("sk-bob", "no-such-session"); got != 404 || none != 404 {
				t.Errorf("bob deleting alice's session: %d (a session that does not exist: %d), want 404 for both", got, none)
			}
			if got := del("sk-alice", sid); got != 200 {
				t.Errorf("alice deleting her session: %d", got)
			}
			if err := d.stop(); err != nil {
				t.Fatalf("SIGTERM: %v\n%s", err, d.log)
			}
			clawrl := func(args ...string) (string, error) {
				out, err := exec.Command(bin, append(args, "--config", cfg)...).CombinedOutput()
				return string(out), err
			}
			export, err := clawrl("data", "export")
			if err != nil {
				t.Fatalf("export: %v\n%s", err, export)
			}
			var raw strings.Builder
			for _, suffix := range []string{"", "-wal"} {
				b, _ := os.ReadFile(filepath.Join(data, "clawrl.db") + suffix)
				raw.Write(b)
			}
			for what, text := range map[string]string{"the database": raw.String(), "data export": export} {
				if strings.Contains(text, email) {
					t.Errorf("%s holds the user field %q", what, email)
				}
				if got := strings.Contains(text, "second-session"); got && hash || !got && !hash && what == "the database" {
					t.Errorf("%s holds the session id as sent: %v, want %v", what, got, !hash)
				}
			}
			if out, err := clawrl("data", "forget", "--session", "second-session"); err != nil || !strings.Contains(out, "1 turns") {
				t.Errorf("data forget by the client's id: %v\n%s", err, out)
			}
		})
	}
}
