package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/weights"
)

// daemon is the real clawrl binary running `serve` in a child process.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	log  *bytes.Buffer
	done chan error
}

// buildBinary builds the clawrl binary once per test run.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "clawrl-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "clawrl")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startDaemon starts `clawrl serve --config cfg` and waits until it
// answers /readyz.
func startDaemon(t *testing.T, bin, cfg string, port int) *daemon {
	t.Helper()
	d := &daemon{url: fmt.Sprintf("http://127.0.0.1:%d", port), log: &bytes.Buffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command(bin, "serve", "--config", cfg, "--port", strconv.Itoa(port))
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Env = append(os.Environ(), "CLAWRL_LOG_FORMAT=json")
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(d.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return d
			}
		}
		select {
		case err := <-d.done:
			t.Fatalf("daemon exited before it was ready: %v\n%s", err, d.log)
		default:
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			t.Fatalf("daemon not ready after 60 s\n%s", d.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// servedVersion asks for one short completion and returns the weight
// version it ran on.
func (d *daemon) servedVersion(t *testing.T) uint64 {
	t.Helper()
	req, _ := http.NewRequest("POST", d.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"clawrl-small","messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`))
	req.Header.Set("X-Turn-Type", "side")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	v, err := strconv.ParseUint(resp.Header.Get("X-Weight-Version"), 10, 64)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, X-Weight-Version %q", resp.StatusCode, resp.Header.Get("X-Weight-Version"))
	}
	return v
}

// TestKillNineResumes runs the real binary, kills it with SIGKILL at
// random points (mid-stream, while scoring, training, checkpointing,
// committing), restarts it each time, and checks what a user relies on:
// every turn whose response completed is stored, every accepted feedback
// is stored, no sample is trained in two applied steps, the version
// served after a restart is the newest checkpoint, numbers never repeat,
// and every checkpoint loads.
func TestKillNineResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
model:
  kv_cache_mb: 256
trainer:
  batch_size: 1
  max_wait: 200ms
  checkpoint_every: 1
  keep_checkpoints: 3
reward:
  votes: 1
  hint_votes: 0
  max_tokens: 16
  temperature: 0
data:
  dir: %s
`, data)), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	log := newClientLog()
	rng := rand.New(rand.NewPCG(1, 2))
	const restarts = 20
	var served []uint64
	for i := range restarts {
		d := startDaemon(t, bin, cfg, port)
		v := d.servedVersion(t)
		c, _, err := weights.OpenLatest(filepath.Join(data, "checkpoints"))
		if err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		want := uint64(1)
		if c != nil {
			want = c.Info().Version
		}
		if v != want {
			t.Fatalf("restart %d: serving version %d, the newest checkpoint is %d\n%s", i, v, want, d.log)
		}
		served = append(served, v)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { users(ctx, d.url, 3, uint64(i), log) })
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		d.kill() // mid-whatever
		cancel()
		wg.Wait()
	}

	// A last clean run: SIGTERM checkpoints the current version.
	d := startDaemon(t, bin, cfg, port)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	users(ctx, d.url, 2, 99, log)
	cancel()
	last := d.servedVersion(t)
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-d.done; err != nil {
		t.Fatalf("SIGTERM: exit %v\n%s", err, d.log)
	}
	c, _, err := weights.OpenLatest(filepath.Join(data, "checkpoints"))
	if err != nil || c == nil {
		t.Fatalf("no checkpoint after SIGTERM: %v", err)
	}
	if c.Info().Version < last {
		t.Errorf("SIGTERM while serving version %d left checkpoint %d", last, c.Info().Version)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, store.FileName)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inDB := func(query, id string) bool {
		var n int
		if err := db.QueryRow(query, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	missing := 0
	for id := range log.completed {
		if !inDB("SELECT COUNT(*) FROM turns WHERE response_id = ?", id) {
			missing++
			t.Errorf("completed response %s is not in the store", id)
		}
	}
	for id := range log.feedback {
		if !inDB("SELECT COUNT(*) FROM feedback WHERE id = ?", id) {
			missing++
			t.Errorf("accepted feedback %s is not in the store", id)
		}
	}

	// Exactly once: no sample id in two applied steps, every trained
	// sample in exactly one.
	rows, err := db.Query("SELECT id, version, samples, status FROM steps ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	inStep := map[string]int{}
	versions := map[uint64]bool{}
	applied, lost := 0, 0
	for rows.Next() {
		var id int
		var version uint64
		var samples, status string
		if err := rows.Scan(&id, &version, &samples, &status); err != nil {
			t.Fatal(err)
		}
		if versions[version] {
			t.Errorf("version %d published by two steps", version)
		}
		versions[version] = true
		if status == "lost" {
			lost++
			continue
		}
		applied++
		var ids []string
		json.Unmarshal([]byte(samples), &ids)
		for _, s := range ids {
			inStep[s]++
			if inStep[s] > 1 {
				t.Errorf("sample %s trained in %d applied steps", s, inStep[s])
			}
		}
	}
	rows.Close()
	var trained int
	if err := db.QueryRow("SELECT COUNT(*) FROM samples WHERE status = 'trained'").Scan(&trained); err != nil {
		t.Fatal(err)
	}
	if trained != len(inStep) {
		t.Errorf("%d samples marked trained, %d in applied steps", trained, len(inStep))
	}
	ns, _ := weights.List(filepath.Join(data, "checkpoints"))
	for _, n := range ns {
		if _, err := weights.Open(filepath.Join(data, "checkpoints", fmt.Sprintf("v%08d", n))); err != nil {
			t.Errorf("checkpoint %d does not load: %v", n, err)
		}
	}
	var turns, samples int
	db.QueryRow("SELECT COUNT(*) FROM turns").Scan(&turns)
	db.QueryRow("SELECT COUNT(*) FROM samples").Scan(&samples)
	t.Logf("%d restarts: %d completed responses and %d feedback seen by clients, %d missing; store: %d turns, %d samples, %d trained; steps: %d applied, %d lost with a kill; served after restarts: %v; checkpoints left: %v",
		restarts, len(log.completed), len(log.feedback), missing, turns, samples, trained, applied, lost, served, ns)
	if applied == 0 {
		t.Errorf("no step was applied in %d runs: the test did not exercise training", restarts)
	}
}
