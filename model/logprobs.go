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

// LogProbsWith scores several requests in one batched pass with the weight
// set w (nil: the checkpoint's), which must belong to m and stay unfreed
// for the call.
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
	steps := make([]Step, len(reqs))
	total := 0
	for i, r := range reqs {
		if len(r.Prompt) == 0 || len(r.Response) == 0 {
			return nil, fmt.Errorf("model: LogProbs request %d needs a non-empty prompt and response", i)
		}
		toks := make([]int32, 0, len(r.Prompt)+len(r.Response))
		steps[i] = Step{Seq: cache.NewSequence(), Tokens: append(append(toks, r.Prompt...), r.Response...)}
		total += len(r.Response)
	}
	defer func() {
		for _, st := range steps {
			st.Seq.Free()
		}
	}()

	w, err := m.acquire(w)
	if err != nil {
		return nil, err
	}
	defer w.unlock()
	ws := w.w
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.run(ws, steps)
	if err != nil {
		return nil, err
	}
	// The logits at the last prompt token and at every response token but
	// the last predict the response tokens.
	rows := m.s.hRows[:0]
	targets := make([]int32, 0, total)
	for i, r := range reqs {
		first := m.s.hQStart[i] + int32(len(r.Prompt)) - 1
		for t := range r.Response {
			rows = append(rows, first+int32(t))
		}
		targets = append(targets, r.Response...)
	}
	m.s.hRows = rows
	h, err := m.finalHidden(ws, x, rows)
	if err != nil {
		return nil, err
	}

	b, vocab := m.b, m.Config.VocabSize
	lps := make([]float32, total)
	var top [][]TokenLogProb
	if topK > 0 {
		top = make([][]TokenLogProb, total)
	}
	for r0 := 0; r0 < total; r0 += logitChunk {
		r1 := min(r0+logitChunk, total)
		n := r1 - r0
		lg, err := m.s.logits.view(b, compute.F32, n, vocab)
		if err != nil {
			return nil, fmt.Errorf("model: scratch memory: %w", err)
		}
		lp, err := m.s.logp.view(b, compute.F32, n, 0)
		if err != nil {
			return nil, fmt.Errorf("model: scratch memory: %w", err)
		}
		tg, err := m.s.target.view(b, compute.I32, n, 0)
		if err != nil {
			return nil, fmt.Errorf("model: scratch memory: %w", err)
		}
		b.Linear(lg, b.Slice(h, r0, r1), ws.Output, nil)
		b.LogSoftmax(lg, lg)
		b.WriteInt32(tg, targets[r0:r1])
		b.Gather(lp, lg, tg)
		if err := b.Read(lps[r0:r1], lp); err != nil {
			return nil, fmt.Errorf("model: reading log-probs: %w", err)
		}
		if topK > 0 {
			if cap(m.s.hLogits) < n*vocab {
				m.s.hLogits = make([]float32, n*vocab)
			}
			rowsLP := m.s.hLogits[:n*vocab]
			if err := b.Read(rowsLP, lg); err != nil {
				return nil, fmt.Errorf("model: reading log-probs: %w", err)
			}
			for i := range n {
				top[r0+i] = topTokens(rowsLP[i*vocab:(i+1)*vocab], topK)
			}
		}
	}

	out := make([]Scored, len(reqs))
	off := 0
	for i, r := range reqs {
		n := len(r.Response)
		out[i].LogProbs = lps[off : off+n : off+n]
		if top != nil {
			out[i].TopK = top[off : off+n : off+n]
		}
		off += n
	}
	return out, nil
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
