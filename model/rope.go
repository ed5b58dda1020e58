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
func (c *Config) RopeFrequencies() []float64 {
	half := c.HeadDim / 2
	f := make([]float64, half)
	for i := range f {
		f[i] = math.Pow(c.RopeTheta, -float64(2*i)/float64(c.HeadDim))
		if c.RopeLinear > 1 {
			f[i] /= c.RopeLinear
		}
		if lr := c.LongRope; lr != nil {
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
	for i, freq := range f {
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
			a := float64(float32(p) * f)
			cos[row+i] = float32(math.Cos(a) * scale)
			sin[row+i] = float32(math.Sin(a) * scale)
		}
	}
	return cos, sin
}
