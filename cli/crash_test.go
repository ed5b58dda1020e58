package cli

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
	"runtime"
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
	log  *lockedBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

// realBinary builds the clawrl binary for a test that runs it (skipped
// with -short) and returns its path.
func realBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// wait waits for the process to exit and returns its status.
func (d *daemon) wait() error {
	<-d.done
	return d.err
}

// buildBinary builds the clawrl binary once per test run.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "clawrl-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "clawrl")
	// As released: no cgo (the CUDA driver is bound at run time).
	cmd := exec.Command("go", "build", "-o", bin, "github.com/clawrl/clawrl")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
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
	return startDaemonEnv(t, bin, cfg, port)
}

// startDaemonEnv is startDaemon with extra environment variables (NAME=value).
func startDaemonEnv(t *testing.T, bin, cfg string, port int, env ...string) *daemon {
	t.Helper()
	return startDaemonArgs(t, bin, cfg, port, nil, env...)
}

// startDaemonArgs is startDaemonEnv with extra arguments to serve.
func startDaemonArgs(t *testing.T, bin, cfg string, port int, args []string, env ...string) *daemon {
	t.Helper()
	d := &daemon{url: fmt.Sprintf("http://127.0.0.1:%d", port), log: &lockedBuffer{}, done: make(chan struct{})}
	// A port is reused across tests: forget the model an earlier daemon
	// on it served (servedModel asks once per url).
	servedMu.Lock()
	delete(servedModels, d.url)
	servedMu.Unlock()
	d.cmd = exec.Command(bin, append([]string{"serve", "--config", cfg, "--port", strconv.Itoa(port)}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Env = append(append(os.Environ(), "CLAWRL_LOG_FORMAT=json"), env...)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { // a failed test must not leave it writing into its TempDir
		select {
		case <-d.done:
		default:
			d.kill()
		}
	})
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
		case <-d.done:
			t.Fatalf("daemon exited before it was ready: %v\n%s", d.err, d.log)
		default:
		}
		if time.Now().After(deadline) {
			d.cmd.Process.Kill()
			t.Fatalf("daemon not ready after 60 s\n%s", d.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metricsUntil reads the daemon's /metrics until done says the text is
// what the test waits for or the timeout passes, and returns the last text.
func (d *daemon) metricsUntil(t *testing.T, timeout time.Duration, done func(text string) bool) string {
	t.Helper()
	var text string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(d.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if text = string(b); done(text) {
			break
		}
	}
	return text
}

// metricValue is the value of the sample name (labels included, as
// written) in a /metrics text; 0 when absent.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return 0
}

func (d *daemon) kill() {
	d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.done
}

// post sends body as JSON to path, in session (if not empty) with
// headers, and returns the status, the decoded JSON reply and its headers.
func (d *daemon) post(t *testing.T, path, session string, headers map[string]string, body any) (int, map[string]any, http.Header) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", d.url+path, bytes.NewReader(b))
	if session != "" {
		req.Header.Set("X-Session-Id", session)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, resp.Header
}

// stop sends SIGTERM and returns the exit status.
func (d *daemon) stop() error {
	d.cmd.Process.Signal(syscall.SIGTERM)
	return d.wait()
}

// servedVersion asks for one short completion and returns the weight
// version it ran on.
func (d *daemon) servedVersion(t *testing.T) uint64 {
	t.Helper()
	req, _ := http.NewRequest("POST", d.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+servedModel(d.url)+`","messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`))
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

// waitLog waits until the daemon's log has a new line holding marker, and
// reports whether one came before the timeout (or the daemon's exit).
func waitLog(d *daemon, marker string, timeout time.Duration) bool {
	seen := strings.Count(d.log.String(), marker)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if strings.Count(d.log.String(), marker) > seen {
			return true
		}
		select {
		case <-d.done:
			return false
		default:
		}
	}
	return false
}

// dumpGoroutines makes a daemon that stopped making progress write its
// loop, store and training metrics and then its goroutines (SIGQUIT) into
// its log, and waits for it to exit, so that a test failing on a wait
// shows where it was stuck.
func (d *daemon) dumpGoroutines() {
	if resp, err := http.Get(d.url + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			for _, p := range []string{"clawrl_loop_", "clawrl_store_", "clawrl_train_", "clawrl_reward_"} {
				if strings.HasPrefix(line, p) {
					d.log.Write([]byte("metric: " + line + "\n"))
				}
			}
		}
	}
	if d.cmd.Process.Signal(syscall.SIGQUIT) != nil {
		return
	}
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
	}
}

// startupVersion reads the version the daemon served when it started
// listening, from its "store opened" log line.
func startupVersion(t *testing.T, d *daemon) uint64 {
	t.Helper()
	for _, line := range strings.Split(d.log.String(), "\n") {
		var ev struct {
			Message string `json:"message"`
			Serving uint64 `json:"serving"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Message == "store opened" {
			return ev.Serving
		}
	}
	t.Fatalf("no \"store opened\" line in the log:\n%s", d.log)
	return 0
}

// TestKillNineResumes runs the real binary, kills it with SIGKILL at
// random points (mid-stream, while scoring, training, checkpointing,
// committing), restarts it each time, and checks what a user relies on:
// every turn whose response completed is stored, every accepted feedback
// is stored, no sample is trained in two applied steps, the version
// served after a restart is the newest checkpoint, numbers never repeat,
// and every checkpoint loads.
func TestKillNineResumes(t *testing.T) {
	bin := realBinary(t)
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
		// The version to resume: the newest checkpoint that verifies, as
		// the killed process left it.
		c, _, err := weights.OpenLatest(filepath.Join(data, "checkpoints"))
		if err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		want := uint64(1)
		if c != nil {
			want = c.Info().Version
		}
		d := startDaemon(t, bin, cfg, port)
		if got := startupVersion(t, d); got != want {
			t.Fatalf("restart %d: serving version %d at start, the newest checkpoint is %d\n%s", i, got, want, d.log)
		}
		// Training may publish again at once (samples are queued): the
		// first answer is on that version or a newer one.
		v := d.servedVersion(t)
		if v < want {
			t.Fatalf("restart %d: answered on version %d, older than the resumed %d", i, v, want)
		}
		served = append(served, v)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { users(ctx, d.url, 3, uint64(i), log) })
		// Most kills land at a random moment; every third one right after a
		// publication (before or during its checkpoint write), or after a
		// checkpoint (before the next step's commit). Those wait for the
		// event, however busy the machine; the first of them waits for a
		// step and its checkpoint, so that at least one step is applied
		// and kept, or the test would not exercise training at all.
		const published, saved = `"message":"trained and published a new version"`, `"message":"checkpoint saved"`
		switch {
		case i == 2:
			if !waitLog(d, published, 2*time.Minute) || !waitLog(d, saved, 2*time.Minute) {
				t.Fatalf("restart %d: no step published and checkpointed within 2 minutes of chatting\n%s", i, d.log)
			}
		case i%3 == 1:
			waitLog(d, published, time.Minute)
		case i%3 == 2:
			waitLog(d, saved, time.Minute)
		default:
			time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		}
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
	if err := d.stop(); err != nil {
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

// TestRestartKeepsLearning is a user's day: chat and give feedback, see a
// new version, stop the daemon (SIGTERM), start it again, and find the
// same version served, feedback on answers from before the restart
// accepted, the conversation continued from where it was (its turn
// completed by the next message), feedback on the last turn of a closed
// session accepted, and `serve --model <checkpoint>` serving a
// checkpoint as a base.
func TestRestartKeepsLearning(t *testing.T) {
	bin := realBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  admin_keys: [adm1n]\ntrainer:\n  batch_size: 2\n  max_wait: 100ms\nreward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndata:\n  dir: %s\n", data)), 0o600)
	port := freePort(t)
	d := startDaemon(t, bin, cfg, port)
	post := func(path, session string, headers map[string]string, body any) (int, map[string]any, http.Header) {
		t.Helper()
		if m, ok := body.(map[string]any); ok && path != "/v1/feedback" {
			m["model"] = servedModel(d.url)
		}
		return d.post(t, path, session, headers, body)
	}
	type msg = map[string]string
	history := []msg{{"role": "user", "content": "Name a fruit."}}
	var ids []string
	for i := range 4 {
		code, m, _ := post("/v1/chat/completions", "day", nil, map[string]any{"messages": history, "max_tokens": 8})
		if code != 200 {
			t.Fatalf("chat %d: %d %v", i, code, m)
		}
		ids = append(ids, m["id"].(string))
		reply := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		history = append(history, msg{"role": "assistant", "content": reply}, msg{"role": "user", "content": fmt.Sprintf("Another one, please (%d).", i)})
		if code, m, _ := post("/v1/feedback", "", nil, map[string]any{"response_id": ids[i], "thumb": 1}); code != 200 {
			t.Fatalf("feedback: %d %v", code, m)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	v := d.servedVersion(t)
	for ; v < 2 && time.Now().Before(deadline); v = d.servedVersion(t) {
		time.Sleep(100 * time.Millisecond)
	}
	if v < 2 {
		t.Fatalf("no new version after 4 thumbs up\n%s", d.log)
	}
	// An operator rolls back to the first checkpoint while it serves.
	var ckpts []uint64
	for deadline := time.Now().Add(30 * time.Second); len(ckpts) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ckpts, _ = weights.List(filepath.Join(data, "checkpoints")) // written just after the publication
	}
	if len(ckpts) == 0 {
		t.Fatal("no checkpoint to roll back to")
	}
	first := ckpts[len(ckpts)-1]
	if code, m, _ := post("/admin/rollback", "", map[string]string{"Authorization": "Bearer wrong"}, map[string]any{"version": first}); code != 401 {
		t.Errorf("rollback with a wrong admin key: %d %v", code, m)
	}
	code, m, _ := post("/admin/rollback", "", map[string]string{"Authorization": "Bearer adm1n"}, map[string]any{"version": first})
	if code != 200 {
		t.Fatalf("rollback: %d %v\n%s", code, m, d.log)
	}
	rolled := uint64(m["weight_version"].(float64))
	if rolled <= v {
		t.Errorf("rollback published version %d, not past %d", rolled, v)
	}
	if got := d.servedVersion(t); got < rolled {
		t.Errorf("after the rollback answering on version %d, want %d or newer", got, rolled)
	}
	if code, _, _ := post("/admin/rollback", "", map[string]string{"Authorization": "Bearer adm1n"}, map[string]any{"version": 99999}); code != 404 {
		t.Errorf("rollback to a version with no checkpoint: %d, want 404", code)
	}
	v = d.servedVersion(t)
	if err := d.stop(); err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, d.log)
	}
	before := v

	d = startDaemon(t, bin, cfg, port)
	defer d.kill()
	if v := d.servedVersion(t); v < before {
		t.Errorf("after a restart serving version %d, before it %d", v, before)
	}
	if code, m, _ := post("/v1/feedback", "", nil, map[string]any{"response_id": ids[0], "thumb": -1, "text": "Too short."}); code != 200 {
		t.Errorf("feedback on a turn from before the restart: %d %v", code, m)
	}
	// The conversation goes on: the last turn before the restart gets its
	// next state.
	code, m, _ = post("/v1/chat/completions", "day", map[string]string{"X-Session-Done": "1"}, map[string]any{"messages": history, "max_tokens": 8})
	if code != 200 {
		t.Fatalf("chat after restart: %d %v", code, m)
	}
	closed := m["id"].(string)
	if code, m, _ := post("/v1/feedback", "", nil, map[string]any{"response_id": closed, "thumb": 1}); code != 200 {
		t.Errorf("feedback on the last turn of a closed session: %d %v", code, m)
	}
	if err := d.stop(); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}

	db, err := sql.Open("sqlite", "file:"+filepath.Join(data, store.FileName)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var end, status string
	var next bool
	if err := db.QueryRow("SELECT end_reason, status, next_state IS NOT NULL FROM turns WHERE response_id = ?", ids[3]).Scan(&end, &status, &next); err != nil {
		t.Fatal(err)
	}
	if !next || end != "thumb" {
		t.Errorf("the turn waiting at the restart: next state kept %v, ended %q; want its next state kept (the conversation continued) "+
			"and the end its thumb gave it", next, end)
	}
	var gens int
	db.QueryRow("SELECT gen FROM turns WHERE response_id = ?", ids[0]).Scan(&gens)
	if gens < 1 {
		t.Errorf("late feedback did not give the turn a new scoring generation")
	}

	// `clawrl weights rollback N` makes an older checkpoint the newest
	// under a new number; the next start serves it and drops what the
	// undone steps trained.
	ns, _ := weights.List(filepath.Join(data, "checkpoints"))
	if len(ns) < 2 {
		t.Fatalf("checkpoints %v: need two to roll back", ns)
	}
	target := ns[len(ns)-1]
	out, err := exec.Command(bin, "weights", "rollback", strconv.FormatUint(target, 10), "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("weights rollback: %v\n%s", err, out)
	}
	newest, _ := weights.List(filepath.Join(data, "checkpoints"))
	if newest[0] <= ns[0] {
		t.Fatalf("rollback made version %d, not past %d", newest[0], ns[0])
	}
	d = startDaemon(t, bin, cfg, port)
	if got := startupVersion(t, d); got != newest[0] {
		t.Errorf("after the rollback serving %d, want %d", got, newest[0])
	}
	if err := d.stop(); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
	if list, err := exec.Command(bin, "weights", "list", "--config", cfg).CombinedOutput(); err != nil ||
		!strings.Contains(string(list), fmt.Sprintf("rollback to %d", target)) || !strings.Contains(string(list), "adapters over ") {
		t.Errorf("weights list: %v\n%s", err, list)
	}

	// A checkpoint serves as a base of its own (another lineage: another data dir).
	c, _, err := weights.OpenLatest(filepath.Join(data, "checkpoints"))
	if err != nil || c == nil {
		t.Fatalf("no checkpoint: %v", err)
	}
	other := filepath.Join(dir, "other.yaml")
	os.WriteFile(other, []byte(fmt.Sprintf("model:\n  path: %s\ntrainer:\n  enabled: false\ndata:\n  dir: %s\n", c.Dir(), filepath.Join(dir, "data2"))), 0o600)
	d2 := startDaemon(t, bin, other, freePort(t))
	d2.servedVersion(t)
	d2.kill()
	// The same data dir with another base is refused, naming both.
	clash := filepath.Join(dir, "clash.yaml")
	os.WriteFile(clash, []byte(fmt.Sprintf("model:\n  path: %s\ndata:\n  dir: %s\n", c.Dir(), data)), 0o600)
	out, err = exec.Command(bin, "serve", "--config", clash, "--port", strconv.Itoa(freePort(t))).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "clawrl-small") || !strings.Contains(string(out), filepath.Base(c.Dir())) {
		t.Errorf("serving another base from the data dir: %v\n%s", err, out)
	}
}

// TestDeviceGroups runs the real binary with thread budgets for the judge
// and the actor: the judge votes on a scheduler of its own (serving's
// scheduler runs only the users' requests), the trainer publishes from its
// own pool, and the startup log states the split.
func TestDeviceGroups(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 cores for a judge thread and an actor thread")
	}
	bin := realBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  batch_size: 2\n  max_wait: 100ms\n  guard:\n    skill_probes: 0\n"+
		"reward:\n  votes: 1\n  hint_votes: 0\n  max_tokens: 8\ndevices:\n  judge:\n    threads: 1\n  actor:\n    threads: 1\ndata:\n  dir: %s\n",
		filepath.Join(dir, "data"))), 0o600)
	d := startDaemon(t, bin, cfg, freePort(t))
	defer d.kill()
	if !strings.Contains(d.log.String(), `judge 1, actor 1"`) {
		t.Errorf("the startup log does not state the groups' threads:\n%s", d.log)
	}
	post := func(path string, body map[string]any) map[string]any {
		t.Helper()
		code, m, _ := d.post(t, path, "groups", nil, body)
		if code != 200 {
			t.Fatalf("%s: %d %v", path, code, m)
		}
		return m
	}
	history := []map[string]string{{"role": "user", "content": "Name a fruit."}}
	const turns = 5
	for i := range turns {
		m := post("/v1/chat/completions", map[string]any{"model": servedModel(d.url), "messages": history, "max_tokens": 8})
		if i < 2 { // thumbs train; the later turns go to the judge
			post("/v1/feedback", map[string]any{"response_id": m["id"], "thumb": 1})
		}
		reply := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		history = append(history, map[string]string{"role": "assistant", "content": reply},
			map[string]string{"role": "user", "content": "No, that's wrong. Try again."})
	}
	metric := metricValue
	text := d.metricsUntil(t, 90*time.Second, func(text string) bool {
		return metric(text, `clawrl_reward_judge_seconds_count{stage="vote"}`) >= 1 && metric(text, "clawrl_weight_version") >= 2
	})
	if v := metric(text, `clawrl_reward_judge_seconds_count{stage="vote"}`); v < 1 {
		t.Errorf("the judge never voted\n%s", d.log)
	}
	if v := metric(text, "clawrl_weight_version"); v < 2 {
		t.Errorf("serving version %v: the trainer on its own threads published nothing\n%s", v, d.log)
	}
	// Serving's scheduler ran the users' requests and nothing of the
	// judge's, which its own scheduler ran (its metrics named for it).
	if n := metric(text, `clawrl_scheduler_finished_total{how="completed"}`); n != turns {
		t.Errorf("serving's scheduler completed %v requests, want the %d users'", n, turns)
	}
	if n := metric(text, `clawrl_judge_scheduler_finished_total{how="completed"}`); n < 1 {
		t.Errorf("the judge's scheduler completed %v requests", n)
	}
	if err := d.stop(); err != nil {
		t.Errorf("SIGTERM: %v\n%s", err, d.log)
	}
}
