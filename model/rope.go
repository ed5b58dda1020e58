package model

import "math"

// RopeFrequencies returns the rotary frequency of each pair of head
// dimensions (headDim/2 values), θ^(−2i/headDim), with Llama 3 scaling
// applied when the config asks for it: wavelengths longer than
// original_max_position_embeddings/low_freq_factor are stretched by factor,
// wavelengths shorter than original_max_position_embeddings/high_freq_factor
// are kept, and those between are blended smoothly. Linear scaling
// (RopeLinear) divides every frequency by its factor, LongRoPE each by
// its short factor.
//
// With partial rotary (RotaryDim < HeadDim) the first RotaryDim/2
// frequencies are θ^(−2i/RotaryDim), the rotary ones of the dimensions that
// rotate, and the rest are 0: in the order the model keeps a head's
// dimensions (HeadPerm), those pairs are the dimensions that pass through.
func (c *Config) RopeFrequencies() []float64 {
	half, rot := c.HeadDim/2, c.rotaryDim()
	f := make([]float64, half)
	for i := range rot / 2 {
		f[i] = math.Pow(c.RopeTheta, -float64(2*i)/float64(rot))
		if c.RopeLinear > 1 {
			f[i] /= c.RopeLinear
		}
		if lr := c.LongRope; lr != nil && lr.UseLong {
			f[i] /= lr.LongFactor[i]
		} else if lr != nil {
			f[i] /= lr.ShortFactor[i]
		}
	}
	s := c.RopeScaling
	if s == nil {
		return f
	}
	orig := float64(s.OriginalMaxPositions)
	longest := orig / s.LowFreqFactor   // wavelengths above this are stretched
	shortest := orig / s.HighFreqFactor // wavelengths below this are kept
	for i, freq := range f[:rot/2] {
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < shortest:
		case wavelen > longest:
			f[i] = freq / s.Factor
		default:
			t := (orig/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			f[i] = (1-t)*freq/s.Factor + t*freq
		}
	}
	return f
}

// localRopeFrequencies are the windowed layers' frequencies with
// LocalRopeTheta (Gemma 3's rope_local_base_freq): plain RoPE, no scaling.
func (c *Config) localRopeFrequencies() []float64 {
	cc := *c
	cc.RopeTheta, cc.RopeLinear, cc.RopeScaling, cc.LongRope = c.LocalRopeTheta, 0, nil, nil
	return cc.RopeFrequencies()
}

// rotaryDim is RotaryDim, HeadDim for a config made without ParseConfig.
func (c *Config) rotaryDim() int {
	if c.RotaryDim == 0 {
		return c.HeadDim
	}
	return c.RotaryDim
}

// HeadPerm is the order in which the model keeps the dimensions of each
// query and key head, as indices into Hugging Face's order, for partial
// rotary; nil when every dimension rotates (the orders agree). The model's
// RoPE pairs dimension i with i+HeadDim/2; Hugging Face rotates the first
// RotaryDim dimensions, pairing i with i+RotaryDim/2, and passes the rest
// through. So the model's dimension i < RotaryDim/2 is Hugging Face's i
// and its i+HeadDim/2 is Hugging Face's i+RotaryDim/2; the pairs after
// those, whose frequency is 0, hold the dimensions that pass through, in
// order. Attention scores are the same in either order, since queries and
// keys are reordered alike; loading reorders the rows of the query and
// key projections (and their biases and norms), and checkpoints are
// written back in Hugging Face's order.
func (c *Config) HeadPerm() []int {
	d, r := c.HeadDim, c.rotaryDim()
	if r == d {
		return nil
	}
	p := make([]int, d)
	half, rhalf := d/2, r/2
	for i := range rhalf {
		p[i], p[i+half] = i, i+rhalf
	}
	next := r
	for i := rhalf; i < half; i++ {
		p[i] = next
		next++
	}
	for i := rhalf; i < half; i++ {
		p[i+half] = next
		next++
	}
	return p
}

// RopeScale is the factor cos and sin are multiplied by: LongRoPE's
// attention factor, 1 otherwise.
func (c *Config) RopeScale() float64 {
	if lr := c.LongRope; lr != nil {
		return lr.AttnFactor
	}
	return 1
}

// ropeTables fills cos and sin tables of [positions, headDim/2], each value
// multiplied by scale. The angle of position p and frequency f is computed
// the way the reference implementation does, as a float32 product of
// float32 values, so long contexts see the same angles the model was
// trained with.
func ropeTables(freqs []float64, positions int, scale float64) (cos, sin []float32) {
	half := len(freqs)
	cos, sin = make([]float32, positions*half), make([]float32, positions*half)
	f32 := make([]float32, half)
	for i, f := range freqs {
		f32[i] = float32(f)
	}
	for p := range positions {
		row := p * half
		for i, f := range f32 {
			if f == 0 { // a dimension that passes through (partial rotary)
				cos[row+i], sin[row+i] = 1, 0
				continue
			}
			a := float64(float32(p) * f)
			cos[row+i] = float32(math.Cos(a) * scale)
			sin[row+i] = float32(math.Sin(a) * scale)
		}
	}
	return cos, sin
}
