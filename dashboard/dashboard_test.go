package dashboard

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clawrl/clawrl/store"
)

// fakeStore returns fixed stats and history, or errors.
type fakeStore struct {
	stats   store.Stats
	history store.History
	err     error
}

func (f *fakeStore) Stats() (store.Stats, error)        { return f.stats, f.err }
func (f *fakeStore) History(int) (store.History, error) { return f.history, f.err }
func ptr[T any](v T) *T                                 { return &v }
func at(s int) time.Time                                { return time.Unix(1_800_000_000+int64(s), 0).UTC() }
func newClock(t time.Time) func() time.Time             { return func() time.Time { return t } }
func (f *fakeStore) withErr(err error) *fakeStore       { g := *f; g.err = err; return &g }
func metricsOf(t *testing.T, st State, keys ...string) []float64 {
	t.Helper()
	var out []float64
	for _, k := range keys {
		v, ok := st.Metrics[k]
		if !ok {
			t.Errorf("metric %s missing from %v", k, st.Metrics)
		}
		out = append(out, v)
	}
	return out
}

// rollbackNote is a note as the guard writes it.
const rollbackNote = "rollback to 2 (kl): KL to the reference 6.1 > 4"

// sampleDashboard is a dashboard over a store with three steps (the first
// recorded before steps kept the trainer's numbers, the second rolled back
// by the guard for its KL), five versions (one the rollback), three scored
// turns, samples dropped for four reasons (two with an error's text) and
// hints; and a registry with a labelled counter, a gauge, a histogram, a
// NaN gauge and a foreign metric.
func sampleDashboard(t *testing.T) (*Dashboard, *fakeStore) {
	t.Helper()
	fs := &fakeStore{
		stats: store.Stats{Path: "/secret/path/clawrl.db", Bytes: 123456, Sessions: 2, Turns: map[string]int{"scored": 3, "open": 1},
			Samples: map[string]int{"trained": 4, "queued": 1}, Feedback: 3, Hints: map[string]int{"trained": 2, "queued": 1},
			Dropped: map[string]int{"rolled_back": 2, "stale": 3, "error: trainer: /secret/path/x: bad": 1, "nonfinite: loss NaN": 1},
			Steps:   map[string]int{"applied": 2, "rolled_back": 1}, LastVersion: 5},
		history: store.History{
			Steps: []store.StepPoint{{Step: 1, Version: 2, Time: at(10), Loss: 0.5, Status: "applied", Samples: 2, Reward: ptr(-1.0), Stats: map[string]float64{}},
				{Step: 2, Version: 3, Time: at(20), Loss: 0.25, Status: "rolled_back", Samples: 3, Rollouts: 1, Reward: ptr(1.0),
					Stats: map[string]float64{"kl": 6.1, "step_kl": 0.03, "entropy": 1, "grad_norm": 8, "lr": 2e-5, "tokens": 30, "seconds": 2}},
				{Step: 2, Version: 5, Time: at(40), Loss: 0.75, Status: "applied", Samples: 1, Rollouts: 1, // rollouts only: no reward
					Stats: map[string]float64{"kl": 0.02, "step_kl": 0.01, "entropy": 2.5, "grad_norm": 1.25, "lr": 1e-5, "tokens": 40, "seconds": 1.5}}},
			Versions: []store.VersionPoint{{Number: 1, Time: at(0), Note: "base: m"}, {Number: 2, Parent: 1, Step: 1, Time: at(10)},
				{Number: 3, Parent: 2, Step: 2, Time: at(20)}, {Number: 4, Parent: 2, Step: 1, Time: at(30), Note: rollbackNote},
				{Number: 5, Parent: 4, Step: 2, Time: at(40)}},
			Rewards: []store.RewardPoint{{Time: at(5), Reward: -1, Source: "judge", Version: 1}, {Time: at(6), Reward: 1, Source: "feedback", Version: 1},
				{Time: at(15), Reward: 0, Source: "judge", Version: 2}},
		},
	}
	reg := prometheus.NewRegistry()
	// As loop/guard.go exports it: one label, reason.
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_guard_events_total", Help: "h"}, []string{"reason"})
	events.WithLabelValues("kl").Add(2)
	events.WithLabelValues("skill").Add(1)
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_skill", Help: "h"})
	gauge.Set(0.75)
	nan := prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_loss", Help: "h"})
	nan.Set(math.NaN())
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "clawrl_time_to_first_token_seconds", Help: "h"})
	hist.Observe(0.5)
	hist.Observe(1.5)
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_threads_fake", Help: "h"})
	reg.MustRegister(events, gauge, nan, hist, other)
	d := New(Options{ModelID: "clawrl-small", Version: func() uint64 { return 4 }, Training: true, Store: fs, Gatherer: reg, Now: newClock(at(100))})
	d.opts.Now = newClock(at(160))
	return d, fs
}

func TestSnapshot(t *testing.T) {
	d, fs := sampleDashboard(t)
	st := d.Snapshot(t.Context())
	if st.Model != "clawrl-small" || st.Version != 4 || !st.Training || st.Uptime != 60 || len(st.Errors) != 0 {
		t.Errorf("state %+v", st)
	}
	if st.Stats == nil || st.Stats.Path != "" || st.Stats.Sessions != 2 {
		t.Errorf("stats %+v (the file path must not reach a browser)", st.Stats)
	}
	if st.History == nil || len(st.History.Steps) != 3 || len(st.History.Versions) != 5 {
		t.Errorf("history %+v", st.History)
	}
	// Dropped samples by reason, an error's text left out.
	if want := map[string]int{"rolled_back": 2, "stale": 3, "error": 1, "nonfinite": 1}; !maps.Equal(st.Stats.Dropped, want) {
		t.Errorf("dropped %v, want %v", st.Stats.Dropped, want)
	}
	got := metricsOf(t, st, "clawrl_loop_guard_events_total", `clawrl_loop_guard_events_total{reason="kl"}`,
		`clawrl_loop_guard_events_total{reason="skill"}`, "clawrl_loop_skill", "clawrl_time_to_first_token_seconds_count", "clawrl_time_to_first_token_seconds_sum")
	want := []float64{3, 2, 1, 0.75, 2, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("metric %d = %g, want %g", i, got[i], want[i])
		}
	}
	for _, k := range []string{"clawrl_loop_loss", "go_threads_fake"} {
		if _, ok := st.Metrics[k]; ok {
			t.Errorf("metric %s listed (NaN or not clawrl's)", k)
		}
	}
	// The JSON encodes (no NaN) and carries the fields the page reads.
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	note, _ := json.Marshal(rollbackNote)
	for _, k := range []string{`"weight_version":4`, `"uptime_s":60`, `"steps":[`, `"rewards":[`, `"note":` + string(note), `"last_version":5`,
		`"stats":{}`, `"stats":{"entropy":2.5,"grad_norm":1.25,"kl":0.02,"lr":0.00001,`, `"hints":{"queued":1,"trained":2}`, `"dropped":{"error":1,`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("state JSON lacks %s: %s", k, b)
		}
	}
	if strings.Contains(string(b), "/secret/path") {
		t.Errorf("state JSON shows a path: %s", b)
	}

	// A store that fails: the rest is still shown, and the error named.
	d.opts.Store = fs.withErr(errors.New("disk on fire"))
	st = d.Snapshot(t.Context())
	if st.Stats != nil || st.History != nil || len(st.Errors) != 2 || !strings.Contains(st.Errors[0], "disk on fire") || st.Version != 4 {
		t.Errorf("with a failing store: %+v", st)
	}
	// No store, no registry: an empty but valid state.
	st = New(Options{}).Snapshot(t.Context())
	if st.Metrics == nil || st.Stats != nil || len(st.Errors) != 0 {
		t.Errorf("bare state %+v", st)
	}
}

func TestHandlers(t *testing.T) {
	d, _ := sampleDashboard(t)
	for _, tt := range []struct {
		name  string
		serve http.HandlerFunc
		ctype string
		has   string
	}{
		{"page", d.ServePage, "text/html; charset=utf-8", `<script src="/dashboard/app.js">`},
		{"script", d.ServeScript, "text/javascript; charset=utf-8", "/dashboard/state"},
		{"state", d.ServeState, "application/json", `"model":"clawrl-small"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.serve(rec, httptest.NewRequest("GET", "/dashboard", nil))
			if rec.Code != 200 || rec.Header().Get("Content-Type") != tt.ctype || !strings.Contains(rec.Body.String(), tt.has) {
				t.Errorf("%d %q: %.200s", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
			}
			if tt.name != "state" && !strings.Contains(rec.Header().Get("Content-Security-Policy"), "script-src 'self'") {
				t.Errorf("no CSP: %v", rec.Header())
			}
		})
	}
	// The page and script hold no data: nothing of the store's.
	for _, serve := range []http.HandlerFunc{d.ServePage, d.ServeScript} {
		rec := httptest.NewRecorder()
		serve(rec, httptest.NewRequest("GET", "/dashboard", nil))
		if strings.Contains(rec.Body.String(), rollbackNote) {
			t.Error("static asset holds state")
		}
	}
}

// TestPageRenders runs the page's script under Node with a minimal DOM
// (testdata/harness.js) on a real state, and checks what a person would
// see: the version, the cards (the last step's numbers, hints), one dot
// per scored turn, one bar per step with a reward, a chart per trainer
// number with a point per step that has it (the rolled-back step in red),
// numbers on the y axes, step numbers and times on the x axes, legends;
// the versions newest first with the rollback marked and its reason; the
// dropped samples by reason; and the key form when the state answers 401.
// Skipped where Node is not installed.
func TestPageRenders(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	d, _ := sampleDashboard(t)
	path := filepath.Join(t.TempDir(), "state.json")
	b, _ := json.Marshal(d.Snapshot(t.Context()))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	type drawn struct {
		Dots, Red, Lines, Bars int
		Yticks, Xticks, Legend []string
		Text                   string
	}
	type shown struct {
		Polls        int              `json:"polls"`
		Model        string           `json:"model"`
		Version      string           `json:"version"`
		Training     string           `json:"training"`
		Errors       string           `json:"errors"`
		KeyShown     bool             `json:"keyShown"`
		Cards        []string         `json:"cards"`
		VersionRows  int              `json:"versionRows"`
		RollbackRows int              `json:"rollbackRows"`
		FirstRow     string           `json:"firstRow"`
		Rows         []string         `json:"rows"`
		Charts       map[string]drawn `json:"charts"`
		Dropped      [][]string       `json:"dropped"`
	}
	run := func(args ...string) shown {
		t.Helper()
		cmd := exec.Command(node, append([]string{filepath.Join("testdata", "harness.js")}, args...)...)
		cmd.Env = append(os.Environ(), "TZ=UTC") // the times on the axes
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, out)
		}
		var s shown
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("harness output %q: %v", out, err)
		}
		return s
	}
	s := run(path)
	cards := strings.Join(s.Cards, " | ")
	if s.Polls != 1 || s.Model != "clawrl-small" || s.Version != "v4" || s.Training != "training" || s.Errors != "" || s.KeyShown {
		t.Errorf("header %+v", s)
	}
	for _, want := range []string{"weight versionv4", "training steps21 rolled back, 0 lost in a crash", "samples4 trained1 queued, 7 dropped", "held-out skill75.0%",
		`guard events since start: kl 2, skill 1`, "sessions24 turns, 3 feedback", "store0.1 MB",
		"last step#2KL 0.02, entropy 2.5, grad norm 1.25, lr 1.0e-5, 40 tokens in 1.5 s", "hints32 trained, 1 queued"} {
		if !strings.Contains(cards, want) {
			t.Errorf("cards lack %q: %s", want, cards)
		}
	}

	// Every chart: its points, the rolled-back step's in red, its axes.
	steps := []string{"#1", "08:00:10", "#2", "08:00:20", "#2", "08:00:40"} // the step numbers and times
	for _, tt := range []struct {
		id                     string
		dots, red, lines, bars int
		yticks, xticks, legend []string
	}{
		{"rewardchart", 3, 1, 1, 0, []string{"-1.0", "-0.5", "0", "0.5", "1.0"}, []string{"08:00:05", "08:00:06", "08:00:15"}, []string{"a turn's reward", "mean of 16"}},
		{"steprewardchart", 0, 0, 0, 2, []string{"-1.0", "-0.5", "0", "0.5", "1.0"}, steps, nil},
		{"losschart", 3, 1, 1, 0, []string{"0.2", "0.4", "0.6", "0.8"}, steps, []string{"loss", "rolled back or lost"}},
		// The first step was recorded before steps kept the trainer's numbers: no point.
		{"klchart", 4, 2, 2, 0, []string{"0", "2", "4", "6", "8"}, steps, []string{"KL to the reference", "step KL (trust region)", "rolled back or lost"}},
		{"entropychart", 2, 1, 1, 0, []string{"1.0", "1.5", "2.0", "2.5"}, steps, []string{"entropy (nats per token)", "rolled back or lost"}},
		{"gradchart", 2, 1, 1, 0, []string{"0", "2", "4", "6", "8"}, steps, []string{"gradient norm (before clipping)", "rolled back or lost"}},
		{"lrchart", 2, 1, 1, 0, []string{"1.0e-5", "1.5e-5", "2.0e-5"}, steps, []string{"learning rate", "rolled back or lost"}},
	} {
		c := s.Charts[tt.id]
		if c.Dots != tt.dots || c.Red != tt.red || c.Lines != tt.lines || c.Bars != tt.bars {
			t.Errorf("%s: %d dots (%d red), %d lines, %d bars; want %d (%d), %d, %d", tt.id, c.Dots, c.Red, c.Lines, c.Bars, tt.dots, tt.red, tt.lines, tt.bars)
		}
		if !slices.Equal(c.Yticks, tt.yticks) || !slices.Equal(c.Xticks, tt.xticks) || !slices.Equal(c.Legend, tt.legend) {
			t.Errorf("%s: y axis %q, x axis %q, legend %q; want %q, %q, %q", tt.id, c.Yticks, c.Xticks, c.Legend, tt.yticks, tt.xticks, tt.legend)
		}
	}

	// The versions, newest first; the rollback's row names its reason.
	if s.VersionRows != 5 || s.RollbackRows != 1 || !strings.HasPrefix(s.FirstRow, "v5v4") || len(s.Rows) != 5 ||
		!strings.HasPrefix(s.Rows[1], "v4v2") || !strings.HasSuffix(s.Rows[1], rollbackNote) {
		t.Errorf("versions: %d rows, %d rollbacks: %q", s.VersionRows, s.RollbackRows, s.Rows)
	}
	// Dropped samples, most first, each reason explained.
	if len(s.Dropped) != 4 || !slices.Equal(s.Dropped[0][:2], []string{"stale", "3"}) || !slices.Equal(s.Dropped[1][:2], []string{"rolled_back", "2"}) ||
		!strings.Contains(s.Dropped[0][2], "max_staleness") || !strings.Contains(s.Dropped[3][0], "nonfinite") {
		t.Errorf("dropped: %q", s.Dropped)
	}

	// An empty store draws "nothing yet", not an error.
	empty := filepath.Join(t.TempDir(), "empty.json")
	b, _ = json.Marshal(New(Options{ModelID: "m"}).Snapshot(t.Context()))
	os.WriteFile(empty, b, 0o644)
	s = run(empty)
	if s.Errors != "" || s.VersionRows != 1 || s.Version != "v0" || len(s.Dropped) != 1 || s.Dropped[0][0] != "no sample dropped" {
		t.Errorf("empty state: %+v", s)
	}
	for id, c := range s.Charts {
		if c.Dots+c.Lines+c.Bars != 0 || c.Text != "nothing yet" {
			t.Errorf("empty state: %s shows %+v", id, c)
		}
	}
	// Steps without the trainer's numbers (a store from before they were
	// kept): the step charts say so; the loss is still drawn.
	old := filepath.Join(t.TempDir(), "old.json")
	st := d.Snapshot(t.Context())
	for i := range st.History.Steps {
		st.History.Steps[i].Stats = map[string]float64{}
	}
	b, _ = json.Marshal(st)
	os.WriteFile(old, b, 0o644)
	s = run(old)
	if c := s.Charts["klchart"]; s.Errors != "" || c.Text != "nothing yet" || s.Charts["losschart"].Dots != 3 || !strings.Contains(strings.Join(s.Cards, " | "), "last step–no step recorded") {
		t.Errorf("steps without stats: %+v", s)
	}
	// A daemon with API keys: the page asks for one.
	if s := run(path, "401"); !s.KeyShown || s.Model != "needs an API key" || len(s.Cards) != 0 {
		t.Errorf("401: %+v", s)
	}
}
