package learnbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/clawrl/clawrl/instruct"
)

func TestUserFeedback(t *testing.T) {
	pref, _ := instruct.Parse("end_word=lantern")
	tests := []struct {
		reply     string
		satisfied bool
	}{
		{"The capital of France is Paris. lantern", true},
		{"The capital of France is Paris.", false},
		{"Lantern is a word. Paris.", false},
	}
	for _, split := range []instruct.Split{instruct.Train, instruct.HeldOut} {
		u := NewUser(pref, split, 3)
		for _, tt := range tests {
			text, ok := u.Feedback(tt.reply, false)
			if ok != tt.satisfied || ok != pref.Check(tt.reply) {
				t.Errorf("%q: satisfied %v; want %v", tt.reply, ok, tt.satisfied)
			}
			if ok && !strings.Contains(strings.Join(instruct.Praises(), "\n"), text) {
				t.Errorf("praise %q is not one of the praises", text)
			}
			if !ok && !strings.Contains(text, "lantern") {
				t.Errorf("correction %q does not state the preference", text)
			}
		}
	}
	// A reply that ran into max_tokens never satisfies, even ending with
	// the word: the user complains about it.
	u := NewUser(pref, instruct.HeldOut, 3)
	if text, ok := u.Feedback("Paris. lantern lantern lantern lantern", true); ok || !slices.Contains(runOn, text) {
		t.Errorf("a cut reply: satisfied %v, %q", ok, text)
	}
	// Deterministic for a seed.
	a, b := NewUser(pref, instruct.HeldOut, 9), NewUser(pref, instruct.HeldOut, 9)
	for range 20 {
		if qa, qb := a.Question(), b.Question(); qa != qb {
			t.Fatalf("same seed, different questions: %q %q", qa, qb)
		}
	}
}

func TestProbes(t *testing.T) {
	for _, sc := range Scenarios() {
		for _, ph := range sc.Phases {
			ps, err := PreferenceProbes(ph.Pref, 16, 1)
			if err != nil {
				t.Fatalf("%s: %v", ph.Pref, err)
			}
			seen := map[string]bool{}
			for _, p := range ps {
				q := p.Messages[0].Content
				if seen[q] {
					t.Errorf("%s: probe %q twice", ph.Pref, q)
				}
				seen[q] = true
				if p.Check(p.Reference, "") {
					t.Errorf("%s: the reference answer %q already satisfies the preference", ph.Pref, p.Reference)
				}
				fixed, ok := ph.Pref.Apply(p.Reference)
				if !ok || !p.Check(fixed, "") {
					t.Errorf("%s: %q cannot be made to satisfy it", ph.Pref, p.Reference)
				}
			}
		}
	}
	skills := SkillProbes(9, 1)
	tools, plain := 0, 0
	for _, p := range skills {
		if len(p.Tools) > 0 {
			tools++
		}
		if p.Reference != "" {
			plain++
			// The reference passes, and still passes under a learned
			// preference; an answer that lost it does not.
			fixed, _ := instruct.Constraint{Kind: instruct.Lowercase}.Apply(p.Reference)
			end, _ := instruct.Constraint{Kind: instruct.EndWord, Arg: "banana"}.Apply(p.Reference)
			for _, ok := range []string{p.Reference, fixed, end, "- " + p.Reference} {
				if !p.Check(ok, "") {
					t.Errorf("plain probe %q: %q fails", p.Messages[0].Content, ok)
				}
			}
			if p.Check("Sure:", "") {
				t.Errorf("plain probe %q passes a reply without its answer", p.Messages[0].Content)
			}
		}
	}
	if len(skills) != 9 || tools != 3 || plain != 3 {
		t.Errorf("%d skill probes, %d with tools, %d plain", len(skills), tools, plain)
	}
}

func TestScenarios(t *testing.T) {
	sw, err := ScenarioByName("switch")
	if err != nil {
		t.Fatal(err)
	}
	if sw.PrefAt(0).Kind != instruct.Lowercase || sw.PrefAt(31).Kind != instruct.Lowercase || sw.PrefAt(32).Kind != instruct.Uppercase || sw.PrefAt(500).Kind != instruct.Uppercase {
		t.Error("switch phases")
	}
	if _, err := ScenarioByName("nope"); err == nil || !strings.Contains(err.Error(), "end_word") {
		t.Errorf("unknown scenario: %v", err)
	}
}

// fakeDaemon answers like a daemon that learns the preference after a
// number of user turns: probes (X-No-Train) satisfy it once learnt; chat
// replies never do.
type fakeDaemon struct {
	pref      instruct.Constraint
	learnAt   int // chat requests after which probes satisfy the preference
	mu        sync.Mutex
	chats     int
	probes    int
	version   uint64
	requests  []map[string]any
	headers   []http.Header
	badProbes int // probe requests that were not greedy or not X-No-Train
}

func (f *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","weight_version":%d}]}`, f.version)
	case "/metrics":
		fmt.Fprint(w, "# TYPE clawrl_store_turns_ready gauge\nclawrl_store_turns_ready 0\n# TYPE clawrl_store_samples_queued gauge\nclawrl_store_samples_queued 0\n")
	case "/v1/chat/completions":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		text := "The answer is 4."
		if r.Header.Get("X-No-Train") == "1" {
			f.probes++
			if body["temperature"].(float64) != 0 {
				f.badProbes++
			}
			if f.chats >= f.learnAt {
				text, _ = f.pref.Apply(text)
			}
		} else {
			f.chats++
			f.requests = append(f.requests, body)
			f.headers = append(f.headers, r.Header.Clone())
			if f.chats%3 == 0 {
				f.version++ // a training step now and then
			}
		}
		w.Header().Set("X-Weight-Version", fmt.Sprint(f.version))
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": text}}}})
	default:
		http.NotFound(w, r)
	}
}

func TestRunMeasures(t *testing.T) {
	pref, _ := instruct.Parse("end_word=lantern")
	// 8 graded turns in sessions of 4: 5 chat requests per session. The
	// preference is "learnt" after the first session's 5 requests.
	fd := &fakeDaemon{pref: pref, learnAt: 5}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	sc := Scenario{Name: "t", Phases: []Phase{{Pref: pref}}}
	res, err := Run(context.Background(), Options{Client: &Client{BaseURL: srv.URL}, Scenario: sc, Turns: 8, SessionTurns: 4,
		ProbeEvery: 4, Probes: 3, Skills: 2, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 3 {
		t.Fatalf("%d measurements; want 3 (turns 0, 4, 8)", len(res.Points))
	}
	want := []float64{0, 1, 1}
	for i, p := range res.Points {
		if p.Turn != 4*i || p.Satisfaction != want[i] {
			t.Errorf("point %d: turn %d satisfaction %v; want turn %d, %v", i, p.Turn, p.Satisfaction, 4*i, want[i])
		}
		if p.Skills < 0 || p.Skills > 1 {
			t.Errorf("skills %v", p.Skills)
		}
		// Every failed skill probe is named, by kind and index.
		if miss := len(p.SkillMisses); miss != int(math.Round((1-p.Skills)*2)) {
			t.Errorf("point %d: skills %v but misses %q", i, p.Skills, p.SkillMisses)
		}
		for _, m := range p.SkillMisses {
			if !strings.HasPrefix(m, "arithmetic#0 ") && !strings.HasPrefix(m, "tool#1 ") {
				t.Errorf("miss %q does not name the probe", m)
			}
		}
	}
	if res.Satisfied != 0 || res.Turns != 8 || res.FirstVersion != 0 || res.LastVersion != fd.version {
		t.Errorf("result %+v", res)
	}
	if fd.chats != 10 || fd.badProbes != 0 || fd.probes != 3*(3+2) {
		t.Errorf("%d chats, %d probes, %d not greedy", fd.chats, fd.probes, fd.badProbes)
	}
	// The conversation: each user message after the first holds the
	// feedback on the previous reply; the session's last message is the
	// feedback alone; sessions are named.
	first := fd.requests[4]["messages"].([]any)
	if len(first) != 9 {
		t.Fatalf("the session's closing request has %d messages; want 9", len(first))
	}
	for i := 2; i < 9; i += 2 {
		m := first[i].(map[string]any)
		if m["role"] != "user" || !strings.Contains(strings.ToLower(m["content"].(string)), "lantern") {
			t.Errorf("message %d %v is not a correction", i, m)
		}
		if i == 8 && strings.Contains(m["content"].(string), "\n\n") {
			t.Errorf("the closing message %q carries a question", m["content"])
		}
	}
	if fd.headers[0].Get("X-Session-Id") == "" || fd.headers[0].Get("X-Session-Id") == fd.headers[5].Get("X-Session-Id") ||
		fd.headers[0].Get("X-Session-Id") != fd.headers[4].Get("X-Session-Id") {
		t.Error("sessions are not named one per session")
	}
}

func TestRunSwitch(t *testing.T) {
	lower, _ := instruct.Parse("lowercase")
	upper, _ := instruct.Parse("uppercase")
	fd := &fakeDaemon{pref: upper, learnAt: 1 << 30}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	sc := Scenario{Name: "sw", Phases: []Phase{{Pref: lower, Turns: 4}, {Pref: upper}}}
	res, err := Run(context.Background(), Options{Client: &Client{BaseURL: srv.URL}, Scenario: sc, Turns: 8, SessionTurns: 4,
		ProbeEvery: 4, Probes: 2, Skills: -1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Points[1]; p.Previous != -1 {
		t.Errorf("before the switch: previous %v; want -1", p.Previous)
	}
	if p := res.Points[2]; p.Previous < 0 || p.Skills != -1 {
		t.Errorf("after the switch: previous %v skills %v", p.Previous, p.Skills)
	}
	// The second session's corrections ask for uppercase.
	last := fd.requests[len(fd.requests)-1]["messages"].([]any)
	if c := last[len(last)-1].(map[string]any)["content"].(string); !strings.Contains(strings.ToLower(c), "capital") && !strings.Contains(strings.ToLower(c), "upper") {
		t.Errorf("a correction after the switch: %q", c)
	}
}

func TestReport(t *testing.T) {
	sc := Scenarios()[0]
	rs := []*Result{{Method: "binary", Turns: 4, Points: []Point{{Turn: 0, Satisfaction: 0, Previous: -1, Skills: 0.5}, {Turn: 4, Satisfaction: 0.25, Previous: -1, Skills: 0.5}},
		Daemon: map[string]float64{"clawrl_reward_votes_total{class=1}": 3}}}
	var b strings.Builder
	Table(&b, sc, rs)
	for _, want := range []string{"| binary | 0.00 | 0.25 | 50% → 50% | 0/4 |", "reward_votes_total{class=1} 3"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	png, err := Plot(sc, rs)
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Errorf("plot: %d bytes, %v", len(png), err)
	}
}

// The multi-seed summary: the median of the last satisfaction and the
// goal counted per seed (≥ 0.8, skills down at most 5 points; the bounds
// themselves count).
func TestSummarize(t *testing.T) {
	run := func(sat, skillsBefore, skillsAfter float64) *Result {
		return &Result{Points: []Point{{Turn: 0, Satisfaction: 0, Skills: skillsBefore}, {Turn: 64, Satisfaction: sat, Skills: skillsAfter}}}
	}
	runs := map[string][]*Result{
		"combined": {run(0.25, 0.62, 0.62), run(1, 0.67, 0.62), run(1, 0.71, 0.71), run(0.875, 0.62, 0.50)},
		"hinted":   {run(0.8, 0.6, 0.55), run(0.75, 0.6, 0.6), run(0.125, 0.5, 0.5)},
		"binary":   nil,
	}
	sums := Summarize([]string{"combined", "hinted", "binary"}, runs)
	for _, tc := range []struct {
		i      int
		median float64
		met    int
	}{{0, 0.9375, 2}, {1, 0.75, 1}, {2, 0, 0}} {
		s := sums[tc.i]
		if math.Abs(s.MedianFinal-tc.median) > 1e-12 || s.Met != tc.met {
			t.Errorf("%s: median %v, met %d; want %v, %d", s.Method, s.MedianFinal, s.Met, tc.median, tc.met)
		}
	}
	if d := sums[0].SkillDelta[3]; math.Abs(d+0.12) > 1e-9 {
		t.Errorf("skill delta %v, want -0.12", d)
	}
	var b strings.Builder
	SeedTable(&b, Scenario{Name: "end_word"}, []uint64{1, 2, 3, 4}, sums)
	if !strings.Contains(b.String(), "| combined | 0.25 (+0) | 1.00 (-5) | 1.00 (+0) | 0.88 (-12) | 0.94 | 2 of 4 |") {
		t.Errorf("table:\n%s", b.String())
	}
}
