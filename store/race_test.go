//go:build race

package store

// raceEnabled: the race detector slows the pure-Go SQLite about tenfold.
const raceEnabled = true
