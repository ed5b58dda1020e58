package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The hand-computed example of the behaviour log-probs (trainer's
// TestImportanceWeightOfTheSampler takes the same numbers). The model's
// distribution over four tokens is π = (0.4, 0.3, 0.2, 0.1) (logits ln π).
//
//   - temperature 0.7: q ∝ π^(1/0.7) = (0.27017, 0.17912, 0.10037, 0.03729),
//     summing to 0.58694: q = (0.46030, 0.30518, 0.17100, 0.06353);
//   - and top-p 0.8: the running sum 0.46030, 0.76548 (< 0.8), 0.93647
//     keeps tokens 0–2, renormalised by 0.93647:
//     q = (0.49152, 0.32588, 0.18260, 0);
//   - and top-k 2: tokens 0 and 1, renormalised by 0.76548:
//     q = (0.60132, 0.39868, 0, 0);
//   - a grammar that refuses token 0, the mask first: π restricted and
//     renormalised is (0, 0.5, 0.33333, 0.16667); at temperature 0.7
//     (0, 0.56546, 0.31684, 0.11771); top-p 0.8 keeps tokens 1 and 2
//     (0.56546 < 0.8 ≤ 0.88229): q = (0, 0.64089, 0.35911, 0);
//   - a grammar that allows token 2 alone: forced, q = 1 (log 0);
//   - greedy: the argmax, q = 1.
var handPi = []float64{0.4, 0.3, 0.2, 0.1}

var handCases = []struct {
	name   string
	p      Params
	allow  []int32 // nil: Sample; else SampleAllowed with these tokens
	q      []float64
	forced bool
}{
	{"temperature 1", Params{Temperature: 1}, nil, []float64{0.4, 0.3, 0.2, 0.1}, false},
	{"temperature 0.7", Params{Temperature: 0.7}, nil, []float64{0.46030, 0.30518, 0.17100, 0.06353}, false},
	{"temperature 0.7, top-p 0.8", Params{Temperature: 0.7, TopP: 0.8}, nil, []float64{0.49152, 0.32588, 0.18260, 0}, false},
	{"temperature 0.7, top-k 2", Params{Temperature: 0.7, TopK: 2}, nil, []float64{0.60132, 0.39868, 0, 0}, false},
	{"grammar, temperature 0.7, top-p 0.8", Params{Temperature: 0.7, TopP: 0.8}, []int32{1, 2, 3}, []float64{0, 0.64089, 0.35911, 0}, false},
	{"grammar, every token", Params{Temperature: 0.7}, []int32{0, 1, 2, 3}, []float64{0.46030, 0.30518, 0.17100, 0.06353}, false},
	{"grammar forces one token", Params{Temperature: 0.7, TopP: 0.8}, []int32{2}, []float64{0, 0, 1, 0}, true},
	{"greedy", Params{Temperature: 0}, nil, []float64{1, 0, 0, 0}, false},
	{"greedy, grammar", Params{Temperature: 0}, []int32{2, 3}, []float64{0, 0, 1, 0}, false},
}

// TestSampleLogProbByHand: every token drawn reports the log-prob of the
// distribution above it was drawn from (and the model's own beside it),
// tokens outside its support are never drawn, and the draws follow it.
func TestSampleLogProbByHand(t *testing.T) {
	logits := make([]float32, len(handPi))
	for i, p := range handPi {
		logits[i] = float32(math.Log(p))
	}
	for _, tt := range handCases {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.p
			p.Seed = seed(11)
			s := New(p)
			const draws = 40000
			counts := make([]int, len(handPi))
			for range draws {
				var r Result
				var err error
				if tt.allow == nil {
					r, err = s.Sample(logits)
				} else {
					r, err = s.SampleAllowed(logits, func(tok int32) bool { return slices.Contains(tt.allow, tok) })
				}
				if err != nil {
					t.Fatal(err)
				}
				q := tt.q[r.Token]
				if q == 0 {
					t.Fatalf("drew token %d, outside the support %v", r.Token, tt.q)
				}
				if d := math.Abs(float64(r.SampleLogProb) - math.Log(q)); d > 1e-4 {
					t.Fatalf("token %d: sample log-prob %v, want ln %v = %v", r.Token, r.SampleLogProb, q, math.Log(q))
				}
				if d := math.Abs(float64(r.LogProb) - math.Log(handPi[r.Token])); d > 1e-6 {
					t.Fatalf("token %d: model log-prob %v, want ln %v", r.Token, r.LogProb, handPi[r.Token])
				}
				if r.Forced != tt.forced {
					t.Fatalf("token %d: forced %v, want %v", r.Token, r.Forced, tt.forced)
				}
				counts[r.Token]++
			}
			for i, c := range counts {
				q := tt.q[i]
				se := math.Sqrt(q * (1 - q) / draws)
				if got := float64(c) / draws; math.Abs(got-q) > 5*se+1e-3 {
					t.Errorf("token %d drawn %.4f of the time, q = %.4f", i, got, q)
				}
			}
		})
	}
}

// TestSampleLogProbPaths: on each path of the draw (the whole vocabulary,
// the candidates of a small one, the histogram nucleus of a large one, and
// SampleAllowed), the sample log-prob is that of the kept candidates
// found independently by sorting, against float64 arithmetic.
func TestSampleLogProbPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tt := range []struct {
		name  string
		n     int
		p     Params
		allow func(int32) bool
	}{
		{"scan", 1000, Params{Temperature: 0.8}, nil},
		{"top-k", 1000, Params{Temperature: 1.3, TopK: 50}, nil},
		{"top-p, candidates", 1000, Params{Temperature: 0.6, TopP: 0.9}, nil},
		{"top-k and top-p", 1000, Params{Temperature: 1, TopK: 40, TopP: 0.7}, nil},
		{"top-p, histogram", 151936, Params{Temperature: 0.7, TopP: 0.95}, nil},
		{"allowed, top-p", 5000, Params{Temperature: 0.7, TopP: 0.9}, func(t int32) bool { return t%3 != 0 }},
		{"allowed, temperature 1.5", 5000, Params{Temperature: 1.5}, func(t int32) bool { return t%7 == 2 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logits := randLogits(r, tt.n, 3)
			p := tt.p
			p.Seed = seed(3)
			s := New(p)
			for range 20 {
				var res Result
				var err error
				if tt.allow == nil {
					res, err = s.Sample(logits)
				} else {
					res, err = s.SampleAllowed(logits, tt.allow)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := refSampleLogProb(logits, p, tt.allow, res.Token)
				if math.IsInf(want, -1) {
					t.Fatalf("token %d is outside the reference's kept candidates", res.Token)
				}
				if d := math.Abs(float64(res.SampleLogProb) - want); d > 2e-4 {
					t.Fatalf("token %d: sample log-prob %v, reference %v", res.Token, res.SampleLogProb, want)
				}
			}
		})
	}
}

// refSampleLogProb is log q(tok) computed in float64 by sorting: the
// logits restricted to allow (all of them where allowedTail leaves none
// out in these tests), divided by the temperature, top-k, then top-p.
func refSampleLogProb(logits []float32, p Params, allow func(int32) bool, tok int32) float64 {
	type cand struct {
		id int32
		w  float64
	}
	var cs []cand
	var m float64 = math.Inf(-1)
	for i, l := range logits {
		if allow == nil || allow(int32(i)) {
			m = math.Max(m, float64(l))
		}
	}
	for i, l := range logits {
		if allow == nil || allow(int32(i)) {
			cs = append(cs, cand{int32(i), math.Exp((float64(l) - m) / float64(p.Temperature))})
		}
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp(b.w, a.w) })
	if p.TopK > 0 && p.TopK < len(cs) {
		cs = cs[:p.TopK]
	}
	var total float64
	for _, c := range cs {
		total += c.w
	}
	if p.TopP > 0 && p.TopP < 1 {
		var acc float64
		for i, c := range cs {
			if acc >= float64(p.TopP)*total {
				cs = cs[:i]
				break
			}
			acc += c.w
		}
	}
	var kept float64
	var w float64
	for _, c := range cs {
		kept += c.w
		if c.id == tok {
			w = c.w
		}
	}
	return math.Log(w / kept)
}

// TestSampleAllowedChecksFew: where the model agrees with the grammar,
// SampleAllowed asks about the few most likely tokens, not the
// vocabulary; a grammar that allows nothing is an error.
func TestSampleAllowedChecksFew(t *testing.T) {
	logits := randLogits(rand.New(rand.NewPCG(9, 9)), 151936, 1)
	logits[42] = 30 // the model is sure of token 42
	s := New(Params{Temperature: 1, Seed: seed(1)})
	calls := 0
	r, err := s.SampleAllowed(logits, func(int32) bool { calls++; return true })
	if err != nil || r.Token != 42 || calls > 64 {
		t.Errorf("token %d, %d allow calls, %v; want 42 after a few calls", r.Token, calls, err)
	}
	// Forced where the grammar allows only what the model was sure of.
	if r, err := s.SampleAllowed(logits, func(t int32) bool { return t == 42 }); err != nil || !r.Forced || r.SampleLogProb != 0 {
		t.Errorf("%+v, %v; want token 42 forced", r, err)
	}
	// A grammar that refuses the model's choice: the whole vocabulary is
	// asked, and the one token it allows is forced.
	calls = 0
	if r, err := s.SampleAllowed(logits, func(t int32) bool { calls++; return t == 7 }); err != nil || r.Token != 7 || !r.Forced || calls != len(logits) {
		t.Errorf("%+v, %v after %d calls; want token 7 forced after %d", r, err, calls, len(logits))
	}
	if _, err := s.SampleAllowed(logits, func(int32) bool { return false }); err == nil {
		t.Error("no error when no token is allowed")
	}
}

func BenchmarkSampleAllowed(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{6144, 151936} {
		logits := randLogits(r, n, 3)
		b.Run(map[int]string{6144: "bundled", 151936: "qwen3"}[n], func(b *testing.B) {
			s := New(Params{Temperature: 0.7, TopP: 0.9, Seed: seed(2)})
			for range b.N {
				if _, err := s.SampleAllowed(logits, func(t int32) bool { return t%2 == 0 }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
