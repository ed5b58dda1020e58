//go:build race

package cpu

// raceEnabled: the race detector slows the float64 references of the
// attention tests past what a test run should take.
const raceEnabled = true
