package sample

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func logSoftmax64(x []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v) - m - math.Log(s)
	}
	return out
}

func randLogits(r *rand.Rand, n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64()) * scale
	}
	return x
}

func seed(v uint64) *uint64 { return &v }

func TestGreedyAndLogProbs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 1000, 151936} {
		logits := randLogits(r, n, 3)
		s := New(Params{Temperature: 0, TopLogProbs: min(5, n)})
		res, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		want := logSoftmax64(logits)
		best := 0
		for i := range logits {
			if logits[i] > logits[best] {
				best = i
			}
		}
		if int(res.Token) != best {
			t.Fatalf("n=%d: greedy picked %d, argmax is %d", n, res.Token, best)
		}
		if d := math.Abs(float64(res.LogProb) - want[best]); d > 1e-4 {
			t.Errorf("n=%d: logprob %v, want %v", n, res.LogProb, want[best])
		}
		if len(res.Top) != min(5, n) || res.Top[0].Token != res.Token {
			t.Fatalf("n=%d: top = %+v", n, res.Top)
		}
		for i := 1; i < len(res.Top); i++ {
			if res.Top[i].LogProb > res.Top[i-1].LogProb {
				t.Errorf("top not sorted: %+v", res.Top)
			}
			if d := math.Abs(float64(res.Top[i].LogProb) - want[res.Top[i].Token]); d > 1e-4 {
				t.Errorf("top logprob off by %v", d)
			}
		}
	}
}

func TestSeededReproducible(t *testing.T) {
	logits := randLogits(rand.New(rand.NewPCG(3, 4)), 500, 1)
	draw := func(p Params) []int32 {
		s := New(p)
		var out []int32
		for range 50 {
			res, err := s.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res.Token)
		}
		return out
	}
	p := Params{Temperature: 1, TopP: 0.9, TopK: 100, Seed: seed(42)}
	a, b := draw(p), draw(p)
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different tokens")
	}
	p.Seed = seed(43)
	if slices.Equal(a, draw(p)) {
		t.Fatal("different seeds gave the same 50 tokens")
	}
}

// TestDistribution checks that temperature sampling follows softmax(x/T):
// the empirical frequencies over many draws match within a few standard
// errors.
func TestDistribution(t *testing.T) {
	logits := []float32{2, 1, 0.5, 0, -1, -3}
	for _, temp := range []float32{1, 0.5, 1.7} {
		scaled := make([]float32, len(logits))
		for i, v := range logits {
			scaled[i] = v / temp
		}
		want := logSoftmax64(scaled)
		s := New(Params{Temperature: temp, Seed: seed(7)})
		const draws = 200000
		counts := make([]int, len(logits))
		for range draws {
			res, _ := s.Sample(logits)
			counts[res.Token]++
		}
		for i, c := range counts {
			p := math.Exp(want[i])
			se := math.Sqrt(p * (1 - p) / draws)
			if got := float64(c) / draws; math.Abs(got-p) > 5*se+1e-4 {
				t.Errorf("T=%v token %d: freq %.4f, want %.4f", temp, i, got, p)
			}
		}
	}
}

func TestTopKTopPRestrict(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 50 {
		n := 1 + r.IntN(300)
		logits := randLogits(r, n, 2)
		if trial%5 == 0 { // ties
			for i := range logits {
				logits[i] = float32(int(logits[i]))
			}
		}
		k := 1 + r.IntN(n)
		p := float32(0.05 + 0.9*r.Float64())
		// reference: sort by prob desc, take top k, then smallest prefix with mass >= p.
		probs := logSoftmax64(logits)
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int {
			switch {
			case probs[a] > probs[b]:
				return -1
			case probs[a] < probs[b]:
				return 1
			}
			return 0
		})
		order = order[:k]
		var total float64
		for _, i := range order {
			total += math.Exp(probs[i])
		}
		var acc float64
		cut := 0
		for cut < len(order) && acc < float64(p)*total*(1-1e-5) {
			acc += math.Exp(probs[order[cut]])
			cut++
		}
		// allowed: the reference nucleus plus anything tied with its last member
		minProb := probs[order[max(cut, 1)-1]]
		s := New(Params{Temperature: 1, TopK: k, TopP: p, Seed: seed(uint64(trial))})
		for range 300 {
			res, err := s.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			if probs[res.Token] < minProb-1e-6 {
				t.Fatalf("trial %d (n=%d k=%d p=%v): sampled token %d with logprob %v below nucleus floor %v",
					trial, n, k, p, res.Token, probs[res.Token], minProb)
			}
		}
	}
}

func TestBadLogits(t *testing.T) {
	s := New(Params{Temperature: 1})
	nan := float32(math.NaN())
	inf := float32(math.Inf(-1))
	for _, l := range [][]float32{{}, {nan, 1}, {1, nan}, {inf, inf}} {
		if _, err := s.Sample(l); err == nil {
			t.Errorf("Sample(%v) accepted", l)
		}
	}
	// some -Inf is fine (masked tokens) and never sampled
	for range 100 {
		res, err := s.Sample([]float32{inf, 0, inf})
		if err != nil || res.Token != 1 {
			t.Fatalf("masked sampling: %v %v", res, err)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		p   Params
		bad string
	}{
		{Params{Temperature: 0.7, TopP: 0.9, TopK: 40, TopLogProbs: 20}, ""},
		{Params{Temperature: -1}, "temperature"},
		{Params{Temperature: 2.5}, "temperature"},
		{Params{Temperature: float32(math.NaN())}, "temperature"},
		{Params{TopP: 1.5}, "top_p"},
		{Params{TopK: -1}, "top_k"},
		{Params{TopLogProbs: 21}, "top_logprobs"},
	}
	for _, tt := range tests {
		err := tt.p.Validate()
		if (err != nil) != (tt.bad != "") || (err != nil && !strings.Contains(err.Error(), tt.bad)) {
			t.Errorf("Validate(%+v) = %v, want error about %q", tt.p, err, tt.bad)
		}
	}
}

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		chunks  []string
		want    string
		stopped bool
	}{
		{"no stops", nil, []string{"ab", "c"}, "abc", false},
		{"in one chunk", []string{"END"}, []string{"helloEND more"}, "hello", true},
		{"across chunks", []string{"END"}, []string{"hel", "loE", "N", "D!"}, "hello", true},
		{"false prefix released", []string{"END"}, []string{"E", "N", "x"}, "ENx", false},
		{"earliest of several", []string{"bb", "a"}, []string{"xbba"}, "x", true},
		{"prefix at end flushed", []string{"STOP"}, []string{"go ST"}, "go ST", false},
		{"overlapping prefix", []string{"aab"}, []string{"aa", "aab"}, "aa", true},
		{"unicode", []string{"。"}, []string{"你好", "。再见"}, "你好", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewStopMatcher(tt.stops)
			var out strings.Builder
			stopped := false
			for _, c := range tt.chunks {
				e, s := m.Push(c)
				out.WriteString(e)
				if s {
					stopped = true
					break
				}
			}
			if !stopped {
				out.WriteString(m.Flush())
			}
			if out.String() != tt.want || stopped != tt.stopped {
				t.Errorf("got %q stopped=%v, want %q stopped=%v", out.String(), stopped, tt.want, tt.stopped)
			}
		})
	}
}

func BenchmarkSampleTopP(b *testing.B) {
	logits := randLogits(rand.New(rand.NewPCG(1, 1)), 151936, 2)
	s := New(Params{Temperature: 0.8, TopP: 0.95, Seed: seed(1)})
	for b.Loop() {
		if _, err := s.Sample(logits); err != nil {
			b.Fatal(err)
		}
	}
}

// TestTopPDistribution checks that top-p sampling without top-k follows
// the renormalised nucleus: empirical frequencies of 200000 draws within a
// few standard errors of the exact restricted distribution, for
// temperatures 1 and 0.7 and cut-offs that split the nucleus' last
// histogram bucket, fall on a bucket edge, or keep one token.
func TestTopPDistribution(t *testing.T) {
	for _, hist := range []bool{true, false} {
		t.Run(fmt.Sprintf("histogram=%v", hist), func(t *testing.T) { testTopPDistribution(t, hist) })
	}
}

func testTopPDistribution(t *testing.T, hist bool) {
	if hist {
		defer func(v int) { histMinVocab = v }(histMinVocab)
		histMinVocab = 1
	}
	// Probabilities chosen so that 0.165 and 0.16 share a histogram bucket,
	// which top_p 0.55 splits (at temperature 1; 0.7 at 0.62).
	base := []float64{0.3, 0.17, 0.165, 0.16, 0.1, 0.05, 0.03, 0.015, 0.01}
	logits := make([]float32, len(base))
	for i, p := range base {
		logits[i] = float32(math.Log(p))
	}
	for _, temp := range []float32{1, 0.7} {
		for _, topP := range []float32{0.55, 0.62, 0.9, 0.2} {
			scaled := make([]float32, len(logits))
			for i, v := range logits {
				scaled[i] = v / temp
			}
			lp := logSoftmax64(scaled)
			order := make([]int, len(lp))
			for i := range order {
				order[i] = i
			}
			slices.SortFunc(order, func(a, b int) int { return -cmp(lp[a], lp[b]) })
			var acc float64
			cut := 0
			for cut < len(order) && acc < float64(topP)*(1-1e-6) {
				acc += math.Exp(lp[order[cut]])
				cut++
			}
			want := make([]float64, len(lp))
			for _, i := range order[:cut] {
				want[i] = math.Exp(lp[i]) / acc
			}
			s := New(Params{Temperature: temp, TopP: topP, Seed: seed(9)})
			const draws = 100000
			counts := make([]int, len(lp))
			for range draws {
				res, err := s.Sample(logits)
				if err != nil {
					t.Fatal(err)
				}
				counts[res.Token]++
			}
			for i, c := range counts {
				p := want[i]
				se := math.Sqrt(p * (1 - p) / draws)
				if got := float64(c) / draws; math.Abs(got-p) > 5*se+1e-4 {
					t.Errorf("T=%v top_p=%v token %d: freq %.4f, want %.4f", temp, topP, i, got, p)
				}
			}
		}
	}
}

func cmp(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestTopPLargeVocabulary: with a vocabulary-sized, flat distribution (the
// nucleus holds thousands of tokens across many histogram buckets), every
// sampled token is in the nucleus, and tokens from both the buckets kept
// whole and the split one are drawn.
func TestTopPLargeVocabulary(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	logits := randLogits(r, 151936, 2)
	lp := logSoftmax64(logits)
	order := make([]int, len(lp))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return -cmp(lp[a], lp[b]) })
	const topP = 0.9
	var acc float64
	cut := 0
	for cut < len(order) && acc < topP*(1-1e-5) {
		acc += math.Exp(lp[order[cut]])
		cut++
	}
	floor := lp[order[cut-1]]
	s := New(Params{Temperature: 1, TopP: topP, Seed: seed(3)})
	var top, low int
	for range 300 {
		res, err := s.Sample(logits)
		if err != nil {
			t.Fatal(err)
		}
		if lp[res.Token] < floor-1e-6 {
			t.Fatalf("sampled token %d with logprob %v below the nucleus floor %v", res.Token, lp[res.Token], floor)
		}
		if lp[res.Token] > lp[order[cut/2]] {
			top++
		} else {
			low++
		}
	}
	if top == 0 || low == 0 {
		t.Errorf("draws from the upper half of the nucleus %d, lower half %d", top, low)
	}
}

// BenchmarkSample covers the other common settings at Qwen3's vocabulary:
// greedy, and plain sampling at temperature 1 (the API's defaults).
func BenchmarkSample(b *testing.B) {
	logits := randLogits(rand.New(rand.NewPCG(1, 1)), 151936, 2)
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"greedy", Params{Temperature: 0}},
		{"temperature1", Params{Temperature: 1, TopP: 1}},
		{"temperature1-topp0.9", Params{Temperature: 1, TopP: 0.9}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.p.Seed = seed(1)
			s := New(c.p)
			for b.Loop() {
				if _, err := s.Sample(logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
