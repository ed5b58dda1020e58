package learnbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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
				if ph.Pref.Kind == instruct.MaxWords {
					continue // a shorter answer follows it; Apply does not shorten
				}
				fixed, ok := ph.Pref.Apply(p.Reference)
				if !ok || !p.Check(fixed, "") {
					t.Errorf("%s: %q cannot be made to satisfy it", ph.Pref, p.Reference)
				}
			}
		}
	}
	skills := SkillProbes(12, 1)
	kinds := map[string]int{}
	for _, p := range skills {
		kinds[p.Kind]++
		if (len(p.Tools) > 0) != (p.Kind == "tool") {
			t.Errorf("%s probe with %d tools", p.Kind, len(p.Tools))
		}
		if p.Kind != "plain" && p.Kind != "fact" {
			continue
		}
		// The reference passes, and a wrong answer does not.
		if !p.Check(p.Reference, "") {
			t.Errorf("%s probe %q: its reference %q fails", p.Kind, p.Messages[0].Content, p.Reference)
		}
		if p.Check("Sure:", "") {
			t.Errorf("%s probe %q passes a reply without its answer", p.Kind, p.Messages[0].Content)
		}
		lower, _ := instruct.Constraint{Kind: instruct.Lowercase}.Apply(p.Reference)
		upper, _ := instruct.Constraint{Kind: instruct.Uppercase}.Apply(p.Reference)
		end, _ := instruct.Constraint{Kind: instruct.EndWord, Arg: "banana"}.Apply(p.Reference)
		for _, ok := range []string{end, "- " + p.Reference, p.Reference + "\n\n-- Alice"} {
			if !p.Check(ok, "") {
				t.Errorf("%s probe %q: %q fails", p.Kind, p.Messages[0].Content, ok)
			}
		}
		// A plain question ignores case; a fact keeps its capitals, so
		// that a model that learnt lowercase or capitals where nobody
		// asked shows it.
		for _, c := range []string{lower, upper} {
			if got := p.Check(c, ""); got != (p.Kind == "plain") {
				t.Errorf("%s probe %q: %q passes %v", p.Kind, p.Messages[0].Content, c, got)
			}
		}
	}
	if len(skills) != 12 || kinds["arithmetic"] != 3 || kinds["tool"] != 3 || kinds["plain"] != 3 || kinds["fact"] != 3 {
		t.Errorf("%d skill probes: %v", len(skills), kinds)
	}
}

// TestFactProbe: the answer a fact probe wants, as the table shows, and
// how a reply is checked against it.
func TestFactProbe(t *testing.T) {
	for _, tc := range []struct {
		key, a, want string
	}{
		{"cap:France", "The capital of France is Paris.", "Paris"},
		{"cap:the United States", "The capital of the United States is Washington, D.C.", "Washington, D.C"},
		{"day+Monday", "Tuesday comes after Monday.", "Tuesday"},
		{"month-March", "February comes before March.", "February"},
		{"units:km", "3 km is 3000 m.", ""},
	} {
		if got := factAnswer(tc.key, tc.a); got != tc.want {
			t.Errorf("factAnswer(%q, %q) = %q, want %q", tc.key, tc.a, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(3, 3))
	for range 50 {
		p := FactProbe(r)
		if p.Kind != "fact" || !p.Check(p.Reference, "") {
			t.Fatalf("fact probe %q: reference %q fails", p.Messages[0].Content, p.Reference)
		}
	}
	p := factProbe("What is the capital of France?", "The capital of France is Paris.", "Paris")
	for _, tc := range []struct {
		reply string
		pass  bool
	}{
		{"The capital of France is Paris.", true},
		{"Paris", true},
		{"- Paris is the capital.\n\n-- Alice", true},
		{"the capital of france is paris.", false},
		{"THE CAPITAL OF FRANCE IS PARIS.", false},
		{"the capital of brazil is brazil.", false},
		{"The capital of France is Parisville.", false},
	} {
		if got := p.Check(tc.reply, ""); got != tc.pass {
			t.Errorf("%q: pass %v, want %v", tc.reply, got, tc.pass)
		}
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
	// replies, when set, are the chat replies in turn (probes still
	// answer as above).
	replies []string
	thumbs  map[string]float64 // response id → thumb posted
	metrics int                // /metrics requests
}

func (f *fakeDaemon) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"m","weight_version":%d}]}`, f.version)
	case "/v1/feedback":
		var body struct {
			ResponseID string  `json:"response_id"`
			Thumb      float64 `json:"thumb"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		if f.thumbs == nil {
			f.thumbs = map[string]float64{}
		}
		f.thumbs[body.ResponseID] = body.Thumb
		fmt.Fprint(w, `{"object":"feedback"}`)
	case "/metrics":
		f.metrics++
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
			msgs, _ := body["messages"].([]any)
			told := len(msgs) > 0 && msgs[0].(map[string]any)["role"] == "system"
			if f.chats >= f.learnAt || told {
				text, _ = f.pref.Apply(text)
			}
		} else {
			if len(f.replies) > 0 {
				text = f.replies[f.chats%len(f.replies)]
			}
			f.chats++
			f.requests = append(f.requests, body)
			f.headers = append(f.headers, r.Header.Clone())
			if f.chats%3 == 0 {
				f.version++ // a training step now and then
			}
		}
		w.Header().Set("X-Weight-Version", fmt.Sprint(f.version))
		id := fmt.Sprintf("chatcmpl-%d", f.chats)
		if r.Header.Get("X-No-Train") == "1" {
			id = fmt.Sprintf("probe-%d", f.probes)
		}
		json.NewEncoder(w).Encode(map[string]any{"id": id,
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": text}}}})
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

// A thumbs-only user at a pace: a thumb on every reply (up when it
// satisfies the preference), bare questions after, no closing message,
// the pause before every message, and no waiting for training.
func TestRunThumbsOnlyPaced(t *testing.T) {
	pref, _ := instruct.Parse("lowercase")
	fd := &fakeDaemon{pref: pref, learnAt: 1 << 30, replies: []string{"The answer is 4.", "the answer is 4."}}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	sc := Scenario{Name: "t", Phases: []Phase{{Pref: pref}}}
	pace := 20 * time.Millisecond
	start := time.Now()
	res, err := Run(context.Background(), Options{Client: &Client{BaseURL: srv.URL}, Scenario: sc, Turns: 8, SessionTurns: 4,
		ProbeEvery: 4, Probes: 2, Skills: -1, Seed: 2, ThumbsOnly: true, UserPace: pace})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 8*pace {
		t.Errorf("8 messages at a pace of %v took %v", pace, took)
	}
	if res.User != UserThumbs || res.PaceS != pace.Seconds() || res.Satisfied != 4 || len(res.Points) != 3 {
		t.Errorf("result: user %q pace %v satisfied %d, %d points", res.User, res.PaceS, res.Satisfied, len(res.Points))
	}
	// 8 chats (no closing message: a thumb needs no next state), a thumb
	// on each, alternating down (capitals) and up.
	if fd.chats != 8 || len(fd.thumbs) != 8 {
		t.Fatalf("%d chats, %d thumbs", fd.chats, len(fd.thumbs))
	}
	for i := 1; i <= 8; i++ {
		want := -1.0
		if i%2 == 0 {
			want = 1
		}
		if got := fd.thumbs[fmt.Sprintf("chatcmpl-%d", i)]; got != want {
			t.Errorf("chat %d: thumb %v, want %v (%v)", i, got, want, fd.thumbs)
		}
	}
	// The user's later messages are its questions alone.
	last := fd.requests[3]["messages"].([]any)
	if len(last) != 7 {
		t.Fatalf("the session's last request has %d messages; want 7", len(last))
	}
	for i := 2; i < 7; i += 2 {
		c := last[i].(map[string]any)["content"].(string)
		if strings.Contains(c, "\n\n") || strings.Contains(strings.ToLower(c), "lower") {
			t.Errorf("message %d %q is more than a question", i, c)
		}
	}
	// Only the end-of-run counters read /metrics: no waiting for training.
	if fd.metrics != 1 {
		t.Errorf("/metrics read %d times; want once (no settling at a user pace)", fd.metrics)
	}
}

func TestBaseRates(t *testing.T) {
	pref, _ := instruct.Parse("end_word=banana")
	fd := &fakeDaemon{pref: pref, learnAt: 1 << 30}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL}
	br, err := BaseRates(context.Background(), c, pref, 5, []float64{1, 0.7}, 32, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The fake follows the preference only when a system prompt states it.
	if br.N != 5 || br.Sampled["1.0"] != 0 || br.Sampled["0.7"] != 0 || br.SystemHeldOut != 1 || br.SystemTrain != 1 {
		t.Errorf("base rates %+v", br)
	}
	if fd.chats != 0 || fd.probes != 5*5 {
		t.Errorf("%d chats that train, %d without", fd.chats, fd.probes)
	}
	if br.ThumbsGoal() || !br.WordedGoal() {
		t.Errorf("goals: thumbs %v, worded %v", br.ThumbsGoal(), br.WordedGoal())
	}
	var b strings.Builder
	BaseRateTable(&b, []float64{1, 0.7}, []BaseRate{br, {Pref: "lowercase", N: 5, Sampled: map[string]float64{"1.0": 0.2, "0.7": 0.2}, Needed: 0.4, SystemTrain: 0.3}})
	for _, want := range []string{"| end_word=banana | 0.00 | 0.00 | 0.00 | 1.00 | 1.00 | - | yes |", "| lowercase | 0.20 | 0.20 | 0.40 | 0.00 | 0.30 | yes | - |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestViolates(t *testing.T) {
	p := func(s string) instruct.Constraint {
		c, err := instruct.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tt := range []struct {
		pref, answer string
		want         bool
	}{
		{"lowercase", "The capital of France is Paris.", true},
		{"lowercase", "12.", false}, // already lowercase: a reply can keep it
		{"max_words=5", "The capital of France is Paris.", true},
		{"max_words=5", "Paris.", false},
		{"end_word=banana", "Paris.", true},
	} {
		if got := violates(p(tt.pref), tt.answer); got != tt.want {
			t.Errorf("violates(%s, %q) = %v, want %v", tt.pref, tt.answer, got, tt.want)
		}
	}
	// The questions of the "where needed" base rate are all of that kind:
	// the same seed gives the same questions, and n of them.
	a, err := neededQuestions(p("lowercase"), 20, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := neededQuestions(p("lowercase"), 20, 3)
	if len(a) != 20 || !slices.Equal(a, b) {
		t.Errorf("needed questions %d, deterministic %v", len(a), slices.Equal(a, b))
	}
	if _, err := neededQuestions(p("avoid_word=the"), 5, 1); err == nil {
		t.Error("a preference no plain answer violates gave questions")
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
