// Package sample turns a model's next-token logits into a chosen token:
// temperature, top-k, top-p (nucleus), seeded randomness, and the log-probs
// that the OpenAI API reports and the trainer records. It also holds the
// stop-string matcher that decides, on decoded text, where a generation ends.
//
// Each drawn token carries two log-probs. Result.LogProb is the model's
// own (softmax of the raw logits: temperature 1, the whole vocabulary),
// whatever the sampling settings: the distribution the trainer recomputes
// and optimises, and the one OpenAI-compatible servers report.
// Result.SampleLogProb is the log-prob of the token under the distribution
// it was really drawn from (the logits divided by the temperature,
// truncated by top-k and top-p, restricted to what a grammar allows, and
// renormalised; 0 for a greedy or forced choice): the behaviour policy
// that the trainer's importance weights divide by (package trainer).
package sample

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

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
	LogProb float32 // log p(Token) under the model (temperature 1, whole vocabulary)
	// SampleLogProb is log q(Token) under the distribution the token was
	// drawn from: softmax(logits/T) restricted to the top-k and top-p
	// candidates (and, with SampleAllowed, to the allowed tokens), and
	// renormalised. Greedy decoding and a forced token give 0 (q = 1).
	SampleLogProb float32
	// Forced reports a token that was the only one allowed (SampleAllowed):
	// the model had no choice.
	Forced bool
	Top    []TokenLogProb // the TopLogProbs most likely tokens, best first
}

// Sampler draws tokens for one sequence. It is not safe for concurrent use;
// each generation owns one.
type Sampler struct {
	p   Params
	rng *rand.Rand
	// scratch, reused across calls
	probs  []float32
	idx    []int32
	hist   *histogram
	masked []float32           // SampleAllowed's logits of the allowed tokens
	counts *[histBuckets]int32 // SampleAllowed's counting sort
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

// ErrBadLogits reports logits that contain NaN or +Inf, or are all -Inf.
var ErrBadLogits = errors.New("sample: logits are NaN, +Inf or all -Inf")

// Sample chooses the next token from logits (len = vocabulary size). The
// slice is not modified.
//
// It makes one pass over the vocabulary for the model's normaliser (the
// exponentials, summed; a NaN among the logits shows in the sum), a second
// one for the sampling distribution when the temperature is not 1, and
// for top-p a histogram pass and a partial scan (see nucleusDraw): about
// 0.3 ms for Qwen3's 151936 tokens, where sorting or partitioning the
// vocabulary took 1.5 ms.
func (s *Sampler) Sample(logits []float32) (Result, error) {
	n := len(logits)
	if n == 0 {
		return Result{}, ErrBadLogits
	}
	maxv := kernels.Max(logits)
	if math.IsNaN(float64(maxv)) || math.IsInf(float64(maxv), 0) {
		return Result{}, ErrBadLogits
	}
	if cap(s.probs) < n {
		s.probs = make([]float32, n)
	}
	probs := s.probs[:n]
	// log-softmax normaliser of the model distribution, in float64. Max
	// may have skipped a NaN (which depends on the kernel set), but exp
	// keeps it, and the sum shows it.
	sum := expSum(probs, logits, maxv, 1)
	if math.IsNaN(sum) {
		return Result{}, ErrBadLogits
	}
	logZ := float64(maxv) + math.Log(sum)
	logp := func(t int32) float32 { return float32(float64(logits[t]) - logZ) }

	var tok int32
	var slp float32 // 0: greedy is deterministic
	if t := s.p.Temperature; t == 0 {
		tok = firstIndex(logits, maxv)
	} else {
		var mass float64
		tok, mass = s.draw(logits, maxv, sum)
		// q(tok) = exp((logit − max)/T) / mass, mass the sum of the same
		// terms over the candidates the draw kept.
		slp = float32((float64(logits[tok])-float64(maxv))/float64(t) - math.Log(mass))
		slp = min(slp, 0) // rounding in the sums: q ≤ 1
	}
	r := Result{Token: tok, LogProb: logp(tok), SampleLogProb: slp}
	if k := s.p.TopLogProbs; k > 0 {
		for _, t := range topK(logits, min(k, n), s.indices(n)[:0]) {
			r.Top = append(r.Top, TokenLogProb{Token: t, LogProb: logp(t)})
		}
	}
	return r, nil
}

// ModelLogProbs returns log p(tok) under the model's distribution over
// logits (temperature 1) and its k most likely tokens, best first: what
// Sample reports, for a token chosen some other way (constrained
// decoding samples from masked logits but reports the model's own
// log-probs).
func ModelLogProbs(logits []float32, tok int32, k int) (float32, []TokenLogProb) {
	maxv := kernels.Max(logits)
	probs := make([]float32, len(logits))
	logZ := float64(maxv) + math.Log(expSum(probs, logits, maxv, 1))
	lp := func(t int32) float32 { return float32(float64(logits[t]) - logZ) }
	var top []TokenLogProb
	if k > 0 {
		for _, t := range topK(logits, min(k, len(logits)), make([]int32, 0, len(logits))) {
			top = append(top, TokenLogProb{Token: t, LogProb: lp(t)})
		}
	}
	return lp(tok), top
}

// allowedTail bounds what SampleAllowed leaves out: it checks tokens from
// the most likely down and stops once the tokens left unchecked carry at
// most this share of the allowed mass found (at temperature 1, or the
// sampling temperature when higher), counting them as refused. The
// distribution drawn from, whose log-prob is reported, is then exactly the
// model's restricted to the allowed tokens it checked: within a total
// variation of allowedTail of the one over every allowed token, for a few
// dozen checks where the model mostly agrees with the grammar instead of
// one per vocabulary entry. A token is Forced when it is the only allowed
// one found: any other allowed token carried less than allowedTail of the
// allowed mass, so the sampler had no choice to speak of.
const allowedTail = 1e-3

// SampleAllowed chooses the next token among those allow accepts, drawn
// from the model's distribution restricted to them (the mask first, then
// temperature, top-k and top-p over what is left, renormalised: the order
// of vLLM's structured outputs and llama.cpp's grammar sampler). Tokens
// are offered to allow from the most likely down until the rest carry
// less than allowedTail of the allowed mass (see allowedTail), so allow is
// called a few dozen times where the model agrees with the grammar, and
// at worst once per token of the vocabulary.
//
// Result.LogProb and Result.Top are the model's own (temperature 1, whole
// vocabulary), as Sample reports them; Result.SampleLogProb is the token's
// log-prob under the restricted distribution it was drawn from; a token
// that was the only one allowed is Forced, with SampleLogProb 0. It fails
// when allow accepts no token.
func (s *Sampler) SampleAllowed(logits []float32, allow func(tok int32) bool) (Result, error) {
	n := len(logits)
	if n == 0 {
		return Result{}, ErrBadLogits
	}
	maxv := kernels.Max(logits)
	if math.IsNaN(float64(maxv)) || math.IsInf(float64(maxv), 0) {
		return Result{}, ErrBadLogits
	}
	if cap(s.probs) < n {
		s.probs = make([]float32, n)
	}
	if s.counts == nil {
		s.counts = new([histBuckets]int32)
	}
	probs, order := s.probs[:n], s.indices(n)
	// The walk measures mass at temperature 1, or at the sampling
	// temperature where that is higher (a flatter distribution gives the
	// tail more weight): not at a lower one, where the tail's mass
	// vanishes and a token the model merely prefers would look forced.
	invT := float32(1)
	if t := s.p.Temperature; t > 1 {
		invT = 1 / t
	}
	if sum := expSum(probs, logits, maxv, invT); math.IsNaN(sum) {
		return Result{}, ErrBadLogits
	}
	// Tokens by decreasing magnitude (a counting sort on the histogram
	// buckets of nucleusDraw: each spans a factor of at most 9/8), and the
	// total mass added in the same float64 terms as the walk's.
	counts := s.counts
	*counts = [histBuckets]int32{}
	var total float64
	for _, v := range probs {
		counts[bucketOf(v)]++
		total += float64(v)
	}
	var at int32
	for b := histBuckets - 1; b >= 0; b-- {
		c := counts[b]
		counts[b] = at
		at += c
	}
	for i, v := range probs {
		b := bucketOf(v)
		order[counts[b]] = int32(i)
		counts[b]++
	}
	// The allowed tokens found are gathered at the front of order (the
	// walk has read every entry before it).
	var checked, allowed float64
	nAllowed := 0
	for _, t := range order {
		p := float64(probs[t])
		checked += p
		if allow(t) {
			allowed += p
			order[nAllowed] = t
			nAllowed++
		}
		if allowed > 0 && total-checked <= allowedTail*allowed {
			break
		}
	}
	if nAllowed == 0 {
		return Result{}, errors.New("sample: no token is allowed here")
	}
	cand := order[:nAllowed]
	var r Result
	switch {
	case nAllowed == 1:
		r = Result{Token: cand[0], Forced: true}
	case nAllowed <= compactMax:
		r = s.drawAmong(logits, cand)
	default:
		if cap(s.masked) < n {
			s.masked = make([]float32, n)
		}
		masked := s.masked[:n]
		ninf := float32(math.Inf(-1))
		for i := range masked {
			masked[i] = ninf
		}
		for _, t := range cand {
			masked[t] = logits[t]
		}
		var err error
		if r, err = s.sampleDrawn(masked); err != nil {
			return r, err
		}
	}
	logZ := math.NaN() // the model's normaliser, when the walk's mass was at temperature 1
	if invT == 1 {
		logZ = float64(maxv) + math.Log(total)
	}
	r.LogProb, r.Top = s.modelLogProbs(logits, maxv, logZ, r.Token, s.p.TopLogProbs)
	return r, nil
}

// compactMax is the most allowed tokens SampleAllowed draws among as a
// list (drawAmong); beyond it, it masks a copy of the logits and draws as
// Sample does.
const compactMax = 1024

// drawAmong draws from the model's distribution restricted to cand (at
// least two tokens), with the sampling settings, as Sample draws from the
// whole vocabulary: temperature, then top-k, then top-p (the smallest
// prefix by descending probability, ties by ascending id, whose mass
// reaches p), renormalised. Greedy takes the most likely (the lowest id
// among ties). It reports the token and its log-prob under that
// distribution.
func (s *Sampler) drawAmong(logits []float32, cand []int32) Result {
	best := cand[0]
	for _, t := range cand[1:] {
		if l, b := logits[t], logits[best]; l > b || (l == b && t < best) {
			best = t
		}
	}
	temp := s.p.Temperature
	if temp == 0 {
		return Result{Token: best}
	}
	top := float64(logits[best])
	w := func(t int32) float64 { return math.Exp((float64(logits[t]) - top) / float64(temp)) }
	k, p := s.p.TopK, s.p.TopP
	if (k > 0 && k < len(cand)) || (p > 0 && p < 1) {
		slices.SortFunc(cand, func(a, b int32) int {
			if la, lb := logits[a], logits[b]; la != lb {
				return cmpDesc(la, lb)
			}
			return int(a - b)
		})
		if k > 0 && k < len(cand) {
			cand = cand[:k]
		}
		if p > 0 && p < 1 {
			var mass float64
			for _, t := range cand {
				mass += w(t)
			}
			var acc float64
			for i, t := range cand {
				if acc >= float64(p)*mass {
					cand = cand[:i]
					break
				}
				acc += w(t)
			}
		}
	}
	var mass float64
	for _, t := range cand {
		mass += w(t)
	}
	u := s.rng.Float64() * mass
	tok := cand[len(cand)-1]
	var acc float64
	for _, t := range cand {
		if acc += w(t); u < acc {
			tok = t
			break
		}
	}
	slp := math.Min((float64(logits[tok])-top)/float64(temp)-math.Log(mass), 0)
	return Result{Token: tok, SampleLogProb: float32(slp)}
}

// cmpDesc orders larger values first.
func cmpDesc(a, b float32) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// sampleDrawn is Sample without the model's log-probs and alternatives
// (which SampleAllowed takes from the unmasked logits).
func (s *Sampler) sampleDrawn(logits []float32) (Result, error) {
	k := s.p.TopLogProbs
	s.p.TopLogProbs = 0
	r, err := s.Sample(logits)
	s.p.TopLogProbs = k
	return r, err
}

// modelLogProbs is ModelLogProbs on the sampler's scratch, with the
// logits' maximum known, and their log-normaliser unless it is NaN.
func (s *Sampler) modelLogProbs(logits []float32, maxv float32, logZ float64, tok int32, k int) (float32, []TokenLogProb) {
	n := len(logits)
	if math.IsNaN(logZ) {
		logZ = float64(maxv) + math.Log(expSum(s.probs[:n], logits, maxv, 1))
	}
	lp := func(t int32) float32 { return float32(float64(logits[t]) - logZ) }
	var top []TokenLogProb
	if k > 0 {
		for _, t := range topK(logits, min(k, n), s.indices(n)[:0]) {
			top = append(top, TokenLogProb{Token: t, LogProb: lp(t)})
		}
	}
	return lp(tok), top
}

// indices returns the index scratch with room for n entries.
func (s *Sampler) indices(n int) []int32 {
	if cap(s.idx) < n {
		s.idx = make([]int32, n)
	}
	return s.idx[:n]
}

// expChunk is how many exponentials expSum adds in float32 before it adds
// their sum to a float64 total.
const expChunk = 1024

// expSum sets dst[i] = exp((src[i] − maxv)·invT) and returns Σ dst in
// float64 (float32 partial sums of expChunk elements): a vocabulary-sized
// float32 running sum drifts by ~1e-4 relative, which log-probs would show.
func expSum(dst, src []float32, maxv, invT float32) float64 {
	shift := maxv
	if invT != 1 {
		copy(dst, src)
		kernels.Scale(invT, dst)
		src, shift = dst, maxv*invT
	}
	var total float64
	for c := 0; c < len(src); c += expChunk {
		e := min(c+expChunk, len(src))
		total += float64(kernels.ExpSub(dst[c:e], src[c:e], shift))
	}
	return total
}

// firstIndex returns the first index of v in x (v is in x).
func firstIndex(x []float32, v float32) int32 {
	for i, e := range x {
		if e == v {
			return int32(i)
		}
	}
	return int32(len(x) - 1)
}

// draw samples from softmax(logits/T) restricted by top-k and top-p. On
// entry s.probs holds exp(logits − maxv), whose sum is sum. It returns
// the token and the mass of the candidates it drew from (the sum of
// exp((logits − maxv)/T) over them), which normalises the token's
// sampling probability.
func (s *Sampler) draw(logits []float32, maxv float32, sum float64) (int32, float64) {
	n := len(logits)
	probs := s.probs[:n]
	total64 := sum
	if t := s.p.Temperature; t != 1 {
		total64 = expSum(probs, logits, maxv, 1/t)
	}
	total := float32(total64)
	k, p := s.p.TopK, s.p.TopP
	topK := k > 0 && k < n
	if !topK && (p <= 0 || p >= 1) {
		return s.scanDraw(probs, total), total64
	}
	if !topK && n >= histMinVocab {
		return s.nucleusDraw(probs, total, total64, p)
	}
	cand := s.indices(n)
	for i := range cand {
		cand[i] = int32(i)
	}
	if topK {
		cand = selectTop(cand, probs, k)
		total = 0
		for _, t := range cand {
			total += probs[t]
		}
	}
	if p > 0 && p < 1 {
		cand, total = nucleus(cand, probs, p*total)
	}
	var mass float64
	for _, t := range cand {
		mass += float64(probs[t])
	}
	return s.pick(cand, probs, s.rng.Float32()*total), mass
}

// pick returns the candidate at which the running sum of probs passes u.
func (s *Sampler) pick(cand []int32, probs []float32, u float32) int32 {
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

// scanDraw samples from all of probs (unnormalised, total their sum),
// scanning in index order.
func (s *Sampler) scanDraw(probs []float32, total float32) int32 {
	u := s.rng.Float32() * total
	var acc float32
	last := int32(-1)
	for i, v := range probs {
		acc += v
		if u < acc {
			return int32(i)
		}
		if v > 0 {
			last = int32(i)
		}
	}
	if last < 0 { // all-zero mass cannot happen (the maximum has exp(0) = 1)
		return 0
	}
	return last
}

// histogram holds the mass of probabilities by magnitude: bucket b holds
// the values whose float32 bits, shifted right by histShift, are b (the
// exponent and top three mantissa bits: each bucket spans a factor of at
// most 9/8, and a larger bucket holds only larger values). Values in [0, 1]
// fall in buckets below histBuckets. The ways are interleaved partial
// histograms: consecutive values landing in the same bucket would
// otherwise wait on each other's sums.
type histogram [histWays][histBuckets]float64

// histMinVocab is the smallest vocabulary for which top-p goes through the
// histogram (nucleusDraw): below it, partitioning the candidates costs less
// than clearing and adding up the histogram. A variable so that tests can
// lower it.
var histMinVocab = 4096

const (
	histShift   = 20
	histBuckets = 1024 // 1.0 is bucket 0x3f8
	histWays    = 4
)

func bucketOf(v float32) int { return int(math.Float32bits(v)>>histShift) & (histBuckets - 1) }

// nucleusDraw samples from the smallest set of the largest probs (values
// in [0, 1], unnormalised, total their sum) whose mass reaches p·total,
// without sorting or partitioning the vocabulary:
//
//  1. one pass adds every value to the histogram of its magnitude;
//  2. from the largest bucket down, the buckets are added up until the
//     mass reaches the target: the buckets above the last one are in the
//     nucleus whole, and of the last one only its largest values, found
//     by partitioning that bucket's values alone;
//  3. a random point of the nucleus' mass picks a bucket from the
//     histogram, and a scan of the vocabulary for that bucket's values
//     picks the token.
//
// The nucleus is the one the partition of the whole vocabulary found; the
// draw goes through the nucleus in another order, which is as random. It
// returns the token and the nucleus' mass (total64, the float64 sum of
// probs, when it falls back to the whole vocabulary).
func (s *Sampler) nucleusDraw(probs []float32, total float32, total64 float64, p float32) (int32, float64) {
	if s.hist == nil {
		s.hist = new(histogram)
	}
	h := s.hist
	*h = histogram{}
	i := 0
	for ; i+histWays <= len(probs); i += histWays {
		v0, v1, v2, v3 := probs[i], probs[i+1], probs[i+2], probs[i+3]
		h[0][bucketOf(v0)] += float64(v0)
		h[1][bucketOf(v1)] += float64(v1)
		h[2][bucketOf(v2)] += float64(v2)
		h[3][bucketOf(v3)] += float64(v3)
	}
	for ; i < len(probs); i++ {
		h[0][bucketOf(probs[i])] += float64(probs[i])
	}
	mass := &h[0] // the ways added up, for the buckets the walk below visits
	target := float64(p) * float64(total)
	last, above := -1, 0.0 // the bucket that reaches the target; the mass of those above it
	for b := histBuckets - 1; b >= 0; b-- {
		mass[b] += h[1][b] + h[2][b] + h[3][b]
		if above+mass[b] >= target {
			last = b
			break
		}
		above += mass[b]
	}
	if last < 0 { // rounding: the buckets add up to less than p·total
		return s.scanDraw(probs, total), total64
	}
	// The last bucket's values, and of them the largest that complete the
	// nucleus.
	cand := s.indices(len(probs))
	j := 0
	for i, v := range probs {
		cand[j] = int32(i) // kept when in the bucket: no branch to mispredict
		if bucketOf(v) == last {
			j++
		}
	}
	cand, kept := nucleus(cand[:j], probs, float32(target-above))
	nmass := above + float64(kept)
	u := s.rng.Float64() * nmass
	if u >= above {
		return s.pick(cand, probs, float32(u-above)), nmass
	}
	// A bucket above the last one: the one where the running mass, from
	// the top, passes u; then the value of that bucket where the running
	// sum passes what is left of u.
	b, lowest := -1, -1
	for c := histBuckets - 1; c > last; c-- {
		if mass[c] == 0 {
			continue
		}
		lowest = c
		if u < mass[c] {
			b = c
			break
		}
		u -= mass[c]
	}
	if b < 0 { // rounding took u past the buckets: the lowest one with mass
		b, u = lowest, mass[lowest]
	}
	var acc float64
	picked := int32(-1)
	for i, v := range probs {
		if bucketOf(v) == b {
			picked = int32(i)
			if acc += float64(v); u < acc {
				break
			}
		}
	}
	return picked, nmass
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
// whose mass reaches target, and returns it with its mass. It partitions
// around pivots instead of sorting, so it costs about linear time.
func nucleus(cand []int32, probs []float32, target float32) ([]int32, float32) {
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
