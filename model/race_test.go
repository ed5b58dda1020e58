//go:build race

package model

// raceEnabled: the race detector makes sync.Pool drop items, so scratch
// memory is reallocated and heap measurements include its garbage.
const raceEnabled = true
