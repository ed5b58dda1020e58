// Package sample turns a model's next-token logits into a chosen token:
// temperature, top-k, top-p (nucleus), seeded randomness, and the log-probs
// that the OpenAI API reports and the trainer records. It also holds the
// stop-string matcher that decides, on decoded text, where a generation ends.
//
// Log-probs are always those of the model's own distribution (softmax of
// the raw logits, temperature 1, no truncation), whatever the sampling
// settings: that is the distribution the trainer recomputes and the one
// OpenAI-compatible servers report.
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/clawrl/clawrl/cpu/kernels"
)

// Params are the sampling settings of one request.
type Params struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float32
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP; 0 or 1 disables it.
	TopP float32
	// TopK keeps the K most likely tokens; 0 disables it.
	TopK int
	// Seed makes sampling reproducible; nil draws a random seed.
	Seed *uint64
	// TopLogProbs is how many alternatives to report per token (0–20).
	TopLogProbs int
}

// Validate checks the ranges OpenAI documents.
func (p Params) Validate() error {
	switch {
	case math.IsNaN(float64(p.Temperature)) || p.Temperature < 0 || p.Temperature > 2:
		return fmt.Errorf("temperature %v is out of range [0, 2]", p.Temperature)
	case math.IsNaN(float64(p.TopP)) || p.TopP < 0 || p.TopP > 1:
		return fmt.Errorf("top_p %v is out of range [0, 1]", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("top_k %d must be >= 0", p.TopK)
	case p.TopLogProbs < 0 || p.TopLogProbs > 20:
		return fmt.Errorf("top_logprobs %d is out of range [0, 20]", p.TopLogProbs)
	}
	return nil
}

// TokenLogProb is a token with its log-probability under the model.
type TokenLogProb struct {
	Token   int32
	LogProb float32
}

// Result is one sampled token.
type Result struct {
	Token   int32
	LogProb float32        // log p(Token) under the model (temperature 1)
	Top     []TokenLogProb // the TopLogProbs most likely tokens, best first
}

// Sampler draws tokens for one sequence. It is not safe for concurrent use;
// each generation owns one.
type Sampler struct {
	p   Params
	rng *rand.Rand
	// scratch, reused across calls
	probs []float32
	idx   []int32
}

// New returns a sampler for p (which should have been validated).
func New(p Params) *Sampler {
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		seed = rand.Uint64()
	}
	return &Sampler{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// ErrBadLogits reports logits that contain NaN or are all -Inf.
var ErrBadLogits = errors.New("sample: logits are NaN or all -Inf")

// Sample chooses the next token from logits (len = vocabulary size). The
// slice is not modified.
func (s *Sampler) Sample(logits []float32) (Result, error) {
	n := len(logits)
	if n == 0 {
		return Result{}, ErrBadLogits
	}
	maxv := kernels.Max(logits)
	if math.IsNaN(float64(maxv)) || math.IsInf(float64(maxv), -1) {
		return Result{}, ErrBadLogits
	}
	for _, v := range logits { // Max may skip NaNs depending on position
		if v != v {
			return Result{}, ErrBadLogits
		}
	}
	if cap(s.probs) < n {
		s.probs = make([]float32, n)
		s.idx = make([]int32, n)
	}
	probs := s.probs[:n]
	// log-softmax normaliser of the model distribution, in float64.
	kernels.ExpSub(probs, logits, maxv)
	logZ := float64(maxv) + math.Log(sum64(probs))
	logp := func(t int32) float32 { return float32(float64(logits[t]) - logZ) }

	var tok int32
	if s.p.Temperature == 0 {
		tok = argmax(logits)
	} else {
		tok = s.draw(logits, maxv)
	}
	r := Result{Token: tok, LogProb: logp(tok)}
	if k := s.p.TopLogProbs; k > 0 {
		for _, t := range topK(logits, min(k, n), s.idx[:0]) {
			r.Top = append(r.Top, TokenLogProb{Token: t, LogProb: logp(t)})
		}
	}
	return r, nil
}

// draw samples from softmax(logits/T) restricted by top-k and top-p.
func (s *Sampler) draw(logits []float32, maxv float32) int32 {
	n := len(logits)
	probs := s.probs[:n]
	invT := 1 / s.p.Temperature
	for i, v := range logits {
		probs[i] = (v - maxv) * invT
	}
	total := kernels.ExpSub(probs, probs, 0)
	cand := s.idx[:n]
	for i := range cand {
		cand[i] = int32(i)
	}
	if k := s.p.TopK; k > 0 && k < n {
		cand = selectTop(cand, probs, k)
		total = 0
		for _, t := range cand {
			total += probs[t]
		}
	}
	if p := s.p.TopP; p > 0 && p < 1 {
		cand, total = nucleus(cand, probs, total, p)
	}
	u := s.rng.Float32() * total
	var acc float32
	for _, t := range cand {
		acc += probs[t]
		if u < acc {
			return t
		}
	}
	// Rounding left u at or past the sum: take the last candidate with mass.
	for i := len(cand) - 1; i >= 0; i-- {
		if probs[cand[i]] > 0 {
			return cand[i]
		}
	}
	return cand[len(cand)-1]
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// topK returns the k indices of the largest x, best first (ties: lower id first).
func topK(x []float32, k int, buf []int32) []int32 {
	idx := buf[:0]
	for i := range x {
		idx = append(idx, int32(i))
	}
	idx = selectTop(idx, x, k)
	sortDesc(idx, x)
	return idx
}

// selectTop reorders idx so its first k entries are the k with the largest
// w (quickselect, expected linear time) and returns them.
func selectTop(idx []int32, w []float32, k int) []int32 {
	lo, hi := 0, len(idx)
	for hi-lo > 1 {
		if k <= lo || k >= hi {
			break
		}
		pivot := w[idx[lo+(hi-lo)/2]]
		// three-way partition: > pivot | == pivot | < pivot
		lt, i, gt := lo, lo, hi
		for i < gt {
			v := w[idx[i]]
			switch {
			case v > pivot:
				idx[lt], idx[i] = idx[i], idx[lt]
				lt++
				i++
			case v < pivot:
				gt--
				idx[i], idx[gt] = idx[gt], idx[i]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k > gt:
			lo = gt
		default:
			return idx[:k]
		}
	}
	return idx[:k]
}

// nucleus keeps the smallest prefix of cand, by descending probability,
// whose mass reaches p·total. It partitions around pivots instead of sorting
// the whole vocabulary, so it costs about linear time.
func nucleus(cand []int32, probs []float32, total, p float32) ([]int32, float32) {
	target := p * total
	lo, hi := 0, len(cand)
	var kept float32 // mass of cand[:lo], all of which is kept
	for hi-lo > 1 {
		pivot := probs[cand[lo+(hi-lo)/2]]
		lt, i, gt := lo, lo, hi
		var above, equal float32
		for i < gt {
			v := probs[cand[i]]
			switch {
			case v > pivot:
				above += v
				cand[lt], cand[i] = cand[i], cand[lt]
				lt++
				i++
			case v < pivot:
				gt--
				cand[i], cand[gt] = cand[gt], cand[i]
			default:
				equal += v
				i++
			}
		}
		switch {
		case kept+above >= target:
			hi = lt
		case kept+above+equal >= target:
			// Part of the tie group suffices; keep just enough of it.
			kept += above
			j := lt
			for j < gt && kept < target {
				kept += probs[cand[j]]
				j++
			}
			return cand[:j], kept
		default:
			kept += above + equal
			lo = gt
		}
	}
	if lo < len(cand) && kept < target {
		kept += probs[cand[lo]]
		lo++
	}
	if lo == 0 {
		lo = 1
		kept = probs[cand[0]]
	}
	return cand[:lo], kept
}

// sortDesc sorts idx by descending w, ties by ascending index (insertion
// sort: idx is short, at most 20 entries).
func sortDesc(idx []int32, w []float32) {
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0; j-- {
			a, b := idx[j-1], idx[j]
			if w[a] > w[b] || (w[a] == w[b] && a < b) {
				break
			}
			idx[j-1], idx[j] = b, a
		}
	}
}

// sum64 adds x in float32 blocks accumulated in float64: a vocabulary-sized
// float32 running sum drifts by ~1e-4 relative, which log-probs would show.
func sum64(x []float32) float64 {
	var total float64
	for len(x) > 0 {
		n := min(len(x), 256)
		var s float32
		for _, v := range x[:n] {
			s += v
		}
		total += float64(s)
		x = x[n:]
	}
	return total
}
