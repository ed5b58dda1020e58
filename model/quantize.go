package model

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/clawrl/clawrl/compute"
)

// Quantize-on-load: a checkpoint of float weights served with
// block-quantized matrices (config model.quantize), the way llama-quantize
// makes a Q8_0, Q4_0 or IQ4_NL GGUF file from a BF16 one, but as the
// weights are read, so that nothing is written to disk.
//
// Which tensors, following llama.cpp's mixes (llama_tensor_get_type):
// every matrix of the layers (q, k, v, o, gate, up, down) takes the type;
// norms and biases stay F32. The output projection keeps more precision,
// as llama.cpp gives it Q6_K in every mix but Q8_0's: Q6_16 (Q6_K's
// 6-bit values, a scale for each 16) in the Q4_0 and IQ4_NL mixes, Q8_0
// in the Q8_0 mix; and so does a tied embedding, which is the output
// projection too. An untied input embedding takes the type, as
// llama.cpp's token_embd does. A matrix whose rows are not a multiple of
// 32 values stays as it is (llama.cpp falls back likewise), and so does a
// tensor a GGUF file already stores as Q8_0, Q4_0, Q4_1, Q5_1 or IQ4_NL;
// one it stores in another block format (Q4_K, Q6_K, ...), which the
// backend would widen to float32, is quantized again from its values
// (Requantize, for auto, rewrites Q4_K, Q5_K, Q5_0, IQ4_XS, Q6_K and Q3_K
// as Q4_1, Q5_1, Q5_1, IQ4_NL, Q6_16 and Q6_16 instead).

// Quantize returns src with its matrices quantized to dt (compute.Q8_0,
// compute.Q4_0 or compute.IQ4_NL) as they are read, per the mix above: Tensor returns them
// as blocks (SourceTensor.Format and Blocks), which a
// compute.QuantBackend takes as they are and any other backend as the
// dequantized values. Closing the result closes src.
func Quantize(src Source, dt compute.DType) (Source, error) {
	if !dt.Quantized() {
		return nil, fmt.Errorf("model: cannot quantize weights to %v (Q8_0, Q4_0 or IQ4_NL)", dt)
	}
	return &quantSource{Source: src, dt: dt}, nil
}

// Requantize returns src with only its matrices stored in a block format
// that a compute.QuantBackend cannot multiply as it is (the K-quants,
// Q5_0, IQ4_XS) converted as they are read: those whose blocks map onto
// another format's without requantizing (SourceTensor.Reblock: Q4_K,
// Q5_K, Q5_0, IQ4_XS, Q6_K and Q3_K as Q4_1, Q5_1, Q5_1, IQ4_NL, Q6_16
// and Q6_16) as such blocks,
// the others quantized to dt from their values; every other tensor, F32,
// F16, BF16, Q8_0, Q4_0, Q4_1, Q5_1 and IQ4_NL, as it is. A GGUF file's
// Q4_K_M mix then runs on the int8 kernels in about a fifth of the
// memory of its values widened to float32 (model.quantize: auto).
// Closing the result closes src.
func Requantize(src Source, dt compute.DType) (*Requantized, error) {
	if !dt.Quantized() {
		return nil, fmt.Errorf("model: cannot quantize weights to %v (Q8_0, Q4_0 or IQ4_NL)", dt)
	}
	return &Requantized{quantSource{Source: src, dt: dt, blocksOnly: true, counts: map[string]int{}}}, nil
}

// Requantized is the Source Requantize returns.
type Requantized struct{ quantSource }

// Counts reports how many tensors were converted so far, by stored
// format and the format they became ("Q4_K → Q4_1", "Q2_K → Q8_0").
func (r *Requantized) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}

// Note says what was converted so far, one group per target format, e.g.
// "Q4_K×168 → Q4_1, Q6_K×29 → Q6_16" ("" for nothing).
func (r *Requantized) Note() string {
	counts := r.Counts()
	byTarget := map[string][]string{}
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		from, to, _ := strings.Cut(k, " → ")
		byTarget[to] = append(byTarget[to], fmt.Sprintf("%s×%d", from, counts[k]))
	}
	var parts []string
	for _, to := range slices.Sorted(maps.Keys(byTarget)) {
		parts = append(parts, strings.Join(byTarget[to], " ")+" → "+to)
	}
	return strings.Join(parts, ", ")
}

// quantSource is a Source whose matrices are quantized as they are read
// (with blocksOnly, only those stored in a block format the backend
// cannot take as it is).
type quantSource struct {
	Source
	dt         compute.DType
	blocksOnly bool
	mu         sync.Mutex
	counts     map[string]int // by "stored → converted" format, with blocksOnly
}

// QuantizedType is the type Quantize gives the tensor name of shape shape
// in a model of config c quantized to dt: dt, Q6_16 for the output
// projection (Q8_0 when dt is Q8_0), or 0 for a tensor that stays as it
// is.
func QuantizedType(c *Config, name string, shape []int, dt compute.DType) compute.DType {
	if len(shape) != 2 || shape[1]%compute.QK != 0 || shape[1] == 0 {
		return 0
	}
	switch {
	case name == "lm_head.weight", name == "model.embed_tokens.weight" && c.TieWordEmbeddings:
		if dt == compute.Q8_0 {
			return compute.Q8_0
		}
		return compute.Q6_16
	}
	return dt
}

func (s *quantSource) Tensor(name string) (SourceTensor, error) {
	st, err := s.Source.Tensor(name)
	if err != nil || quantFormat(st.Format) != 0 || (s.blocksOnly && st.Format == "") {
		return st, err
	}
	dt := QuantizedType(s.Config(), name, st.Shape, s.dt)
	if dt == 0 {
		return st, nil
	}
	if s.blocksOnly && st.Reblock != nil {
		if to, blocks, err := st.Reblock(); err == nil {
			s.count(st.Format, to)
			return blockTensor(st, to, blocks), nil
		}
	}
	if s.blocksOnly {
		s.count(st.Format, dt)
	}
	rows, cols := st.Shape[0], st.Shape[1]
	blocks := make([]byte, dt.Bytes(rows*cols))
	var vals []float32
	// Widened or viewed whole, unless the rows can be had one at a time:
	// BF16 and a block format with Rows (a K-quant embedding of 151,936
	// rows would take 0.6 GB widened whole for the Qwen3-0.6B shape).
	if st.BF16 == nil && st.Rows == nil {
		if vals, _, err = st.Float32(); err != nil {
			return st, err
		}
	}
	rowBytes := dt.Bytes(cols)
	var firstErr error
	var mu sync.Mutex
	forRows(rows, func(lo, hi int) {
		row := make([]float32, cols)
		for r := lo; r < hi; r++ {
			x := row
			switch {
			case st.BF16 != nil:
				for j, h := range st.BF16[r*cols : (r+1)*cols] {
					row[j] = bf16ToF32(h)
				}
			case vals == nil:
				if err := st.Rows(row, r, r+1); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
			default:
				x = vals[r*cols : (r+1)*cols]
			}
			if err := compute.Quantize(dt, blocks[r*rowBytes:(r+1)*rowBytes], x); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
		}
	})
	if firstErr != nil {
		return st, fmt.Errorf("model: quantizing %q to %v: %w", name, dt, firstErr)
	}
	return blockTensor(st, dt, blocks), nil
}

// count notes one tensor of stored format from converted to dt.
func (s *quantSource) count(from string, dt compute.DType) {
	s.mu.Lock()
	s.counts[from+" → "+dt.String()]++
	s.mu.Unlock()
}

// blockTensor is st held as blocks of dt instead.
func blockTensor(st SourceTensor, dt compute.DType, blocks []byte) SourceTensor {
	q := st
	q.BF16, q.View, q.Reblock, q.Rows = nil, false, nil, nil
	q.Format, q.Blocks = dt.String(), blocks
	n := len(blocks) / dt.BlockBytes() * dt.BlockSize()
	q.Float32 = func() ([]float32, bool, error) {
		out := make([]float32, n)
		err := compute.Dequantize(dt, out, blocks)
		return out, false, err
	}
	return q
}

// bf16ToF32 widens BF16 bits exactly.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// forRows runs fn over [0, n) in one contiguous range per core.
func forRows(n int, fn func(lo, hi int)) {
	t := min(n, runtime.GOMAXPROCS(0))
	if t <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for i := range t {
		wg.Go(func() { fn(n*i/t, n*(i+1)/t) })
	}
	wg.Wait()
}

// quantFormat is the dtype of a SourceTensor's Format this package passes
// to a compute.QuantBackend as blocks (0 for another format, which loads
// as float values).
func quantFormat(f string) compute.DType {
	switch f {
	case "Q8_0":
		return compute.Q8_0
	case "Q4_0":
		return compute.Q4_0
	case "Q4_1":
		return compute.Q4_1
	case "Q5_1":
		return compute.Q5_1
	case "IQ4_NL":
		return compute.IQ4_NL
	case "Q6_16":
		return compute.Q6_16
	}
	return 0
}

// weightQuant makes the weight of a tensor src stores in blocks of a
// format the backend computes with (ok false otherwise: the caller loads
// its float values).
func weightQuant(b compute.Backend, st SourceTensor, shape []int) (t compute.Tensor, ok bool, err error) {
	dt := quantFormat(st.Format)
	qb, isQ := b.(compute.QuantBackend)
	if dt == 0 || !isQ || len(shape) != 2 || st.Blocks == nil {
		return nil, false, nil
	}
	t, err = qb.WeightQuant(dt, st.Blocks, shape...)
	return t, true, err
}

// quantizedIn returns the name of a tensor of w stored quantized, or "".
func quantizedIn(c *Config, w *weights) (name string, dt compute.DType) {
	walkWeights(c, w, func(n string, _ []int, f *compute.Tensor) error {
		if *f != nil && (*f).DType().Quantized() && name == "" {
			name, dt = n, (*f).DType()
		}
		return nil
	})
	return name, dt
}
