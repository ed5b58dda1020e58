package trainer

// microBatches splits samples (in order) into consecutive groups whose
// token counts (prompt + response) stay within budget. A sample larger than
// the budget on its own gets a micro-batch of its own rather than being
// dropped: it is trained, at the cost of a larger pass. It returns the
// group boundaries: group g is samples[bounds[g]:bounds[g+1]].
func microBatches(samples []*Sample, budget int) []int {
	bounds := []int{0}
	tokens := 0
	for i, s := range samples {
		n := s.Tokens()
		if i > bounds[len(bounds)-1] && tokens+n > budget {
			bounds = append(bounds, i)
			tokens = 0
		}
		tokens += n
	}
	if len(samples) > 0 {
		bounds = append(bounds, len(samples))
	}
	return bounds
}
