package model

import (
	"errors"
	"fmt"

	"github.com/clawrl/clawrl/compute"
)

// TokenLogProb is a token and its log-probability.
type TokenLogProb struct {
	Token   int32
	LogProb float32
}

// ScoreRequest asks for the log-probabilities of Response given Prompt.
type ScoreRequest struct {
	Prompt, Response []int32
}

// Scored holds, for every response token t, log p(response_t | prompt,
// response_<t) and, if asked for, the TopK most likely tokens at that
// position (most likely first).
type Scored struct {
	LogProbs []float32
	TopK     [][]TokenLogProb
}

// LogProbs scores response after prompt in one forward pass over
// prompt+response, using cache for the pass's keys and values (the blocks
// are freed before it returns). topK > 0 also reports the topK most likely
// tokens at each response position.
func (m *Model) LogProbs(cache *KVCache, prompt, response []int32, topK int) (Scored, error) {
	out, err := m.LogProbsBatch(cache, []ScoreRequest{{prompt, response}}, topK)
	if err != nil {
		return Scored{}, err
	}
	return out[0], nil
}

// LogProbsBatch is LogProbs for several requests in one batched pass:
// LogProbsWith(m.Weights(), cache, reqs, topK).
func (m *Model) LogProbsBatch(cache *KVCache, reqs []ScoreRequest, topK int) ([]Scored, error) {
	return m.LogProbsWith(m.base, cache, reqs, topK)
}

// LogProbsWith scores several requests with the weight set w (nil: the
// checkpoint's), which must belong to m and stay unfreed for the call.
//
// The requests' tokens run in rounds of at most ScoreChunkTokens tokens
// (each request's next piece, packed, as the scheduler prefills prompts
// in chunks), and the model's lock is released between rounds and handed
// to a waiting Run first: a long teacher or reference pass never holds up
// serving for more than one round, so decode steps interleave with it.
//
// The log-softmax is computed on the backend in float32 with the row
// maximum subtracted and the sum of exponentials accumulated in float64.
func (m *Model) LogProbsWith(w *Weights, cache *KVCache, reqs []ScoreRequest, topK int) ([]Scored, error) {
	if len(reqs) == 0 {
		return nil, errors.New("model: LogProbs of no requests")
	}
	if topK < 0 || topK > m.Config.VocabSize {
		return nil, fmt.Errorf("model: topK %d outside [0, %d]", topK, m.Config.VocabSize)
	}
	seqs := make([]*Sequence, len(reqs))
	toks := make([][]int32, len(reqs))
	base := make([]int, len(reqs)) // offset of each request's first response token in the output
	total := 0
	for i, r := range reqs {
		if len(r.Prompt) == 0 || len(r.Response) == 0 {
			return nil, fmt.Errorf("model: LogProbs request %d needs a non-empty prompt and response", i)
		}
		toks[i] = append(append(make([]int32, 0, len(r.Prompt)+len(r.Response)), r.Prompt...), r.Response...)
		seqs[i] = cache.NewSequence()
		base[i] = total
		total += len(r.Response)
	}
	defer func() {
		for _, sq := range seqs {
			sq.Free()
		}
	}()

	w, err := m.acquire(w)
	if err != nil {
		return nil, err
	}
	defer w.unlock()
	ws := w.w
	lps := make([]float32, total)
	var top [][]TokenLogProb
	if topK > 0 {
		top = make([][]TokenLogProb, total)
	}
	chunk := m.ScoreChunk()
	done := make([]int, len(reqs)) // tokens of each request already run
	var sl Slicer = noSlicer{}
	if p := m.scoreSlice.Load(); p != nil {
		sl = *p
	}
	release := sl.Train()
	defer func() { release() }()
	for first := true; ; first = false {
		var steps []Step
		var which []int
		budget := chunk
		for i := range reqs {
			if left := len(toks[i]) - done[i]; left > 0 && budget > 0 {
				n := min(left, budget)
				steps = append(steps, Step{Seq: seqs[i], Tokens: toks[i][done[i] : done[i]+n]})
				which = append(which, i)
				budget -= n
			}
		}
		if len(steps) == 0 {
			break
		}
		if !first {
			release = sl.Yield(release)
			m.yieldToRun()
		}
		if err := m.scoreRound(ws, reqs, steps, which, done, base, lps, top, topK); err != nil {
			return nil, err
		}
		for k, i := range which {
			done[i] += len(steps[k].Tokens)
		}
	}

	out := make([]Scored, len(reqs))
	for i, r := range reqs {
		n, off := len(r.Response), base[i]
		out[i].LogProbs = lps[off : off+n : off+n]
		if top != nil {
			out[i].TopK = top[off : off+n : off+n]
		}
	}
	return out, nil
}

// scoreRound runs one round of LogProbsWith under the model's lock: the
// pieces steps (of requests which, each starting at done[i]) and the
// log-probs of the response tokens those pieces predict.
func (m *Model) scoreRound(ws *weights, reqs []ScoreRequest, steps []Step, which, done, base []int, lps []float32, top [][]TokenLogProb, topK int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.run(ws, steps)
	if err != nil {
		return err
	}
	// Position p of a request (prompt then response) predicts token p+1:
	// the last prompt position and every response position but the last
	// predict the response tokens.
	rows := m.s.hRows[:0]
	var targets []int32
	var dst []int
	for k, i := range which {
		r, start := reqs[i], done[i]
		full := len(r.Prompt) + len(r.Response)
		for p := max(start, len(r.Prompt)-1); p < min(start+len(steps[k].Tokens), full-1); p++ {
			rows = append(rows, m.s.hQStart[k]+int32(p-start))
			t := p + 1 - len(r.Prompt)
			targets = append(targets, r.Response[t])
			dst = append(dst, base[i]+t)
		}
	}
	m.s.hRows = rows
	if len(rows) == 0 {
		return nil
	}
	h, err := m.finalHidden(ws, x, rows)
	if err != nil {
		return err
	}
	b, vocab := m.b, m.Config.VocabSize
	got := make([]float32, len(rows))
	for r0 := 0; r0 < len(rows); r0 += logitChunk {
		r1 := min(r0+logitChunk, len(rows))
		n := r1 - r0
		lg, err := m.s.logits.view(b, compute.F32, n, vocab)
		if err != nil {
			return fmt.Errorf("model: scratch memory: %w", err)
		}
		lp, err := m.s.logp.view(b, compute.F32, n, 0)
		if err != nil {
			return fmt.Errorf("model: scratch memory: %w", err)
		}
		tg, err := m.s.target.view(b, compute.I32, n, 0)
		if err != nil {
			return fmt.Errorf("model: scratch memory: %w", err)
		}
		b.Linear(lg, b.Slice(h, r0, r1), ws.Output, nil)
		m.capLogits(lg)
		b.LogSoftmax(lg, lg)
		b.WriteInt32(tg, targets[r0:r1])
		b.Gather(lp, lg, tg)
		if err := b.Read(got[r0:r1], lp); err != nil {
			return fmt.Errorf("model: reading log-probs: %w", err)
		}
		if topK > 0 {
			if cap(m.s.hLogits) < n*vocab {
				m.s.hLogits = make([]float32, n*vocab)
			}
			rowsLP := m.s.hLogits[:n*vocab]
			if err := b.Read(rowsLP, lg); err != nil {
				return fmt.Errorf("model: reading log-probs: %w", err)
			}
			for j := range n {
				top[dst[r0+j]] = topTokens(rowsLP[j*vocab:(j+1)*vocab], topK)
			}
		}
	}
	for j, d := range dst {
		lps[d] = got[j]
	}
	return nil
}

// topTokens returns the k largest entries of row, largest first (ties by
// lower token id).
func topTokens(row []float32, k int) []TokenLogProb {
	top := make([]TokenLogProb, 0, k)
	for id, v := range row {
		if len(top) == k && v <= top[k-1].LogProb {
			continue
		}
		if len(top) < k {
			top = append(top, TokenLogProb{})
		}
		i := len(top) - 1
		for i > 0 && top[i-1].LogProb < v {
			top[i] = top[i-1]
			i--
		}
		top[i] = TokenLogProb{Token: int32(id), LogProb: v}
	}
	return top
}
