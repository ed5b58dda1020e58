// Package priority shares one machine's compute between serving and
// training so that serving comes first.
//
// On a small machine (the CPU build on 2 cores) a static split of the
// cores wastes half of them whenever one side is idle, and running both
// at once on every core makes every decode step wait for a share of a
// training step. A Gate instead serialises them at fine grain: a serving
// step (one scheduler forward pass) and a training slice (a part of a
// layer of a forward or backward pass, or a round of a scoring pass) never
// run together.
//
// The policy is serving first. While the scheduler has work (from its
// first step until it reports Idle), a training pass waits at its next
// slice boundary; it runs at full speed in the gaps users leave: between
// one person's messages, which on a laptop is most of the time. So that
// training is not starved by a constant stream of requests, it may take
// up to Share of the machine while serving is busy: every serving step
// that ends while training waits earns it Share/(1−Share) of the step's
// duration in credit, and a slice run while serving is busy spends its
// own duration. With a small share, few decode steps (about Share × step /
// slice of them) wait for a slice, and each waits for at most one. Judge
// and teacher generations ride on the scheduler as background work, so
// they count as serving here.
package priority

import (
	"sync"
	"time"
)

// maxCredit bounds the credit training can save up while serving is
// busy: after a long stretch of waiting it gets one slice, not a burst.
const maxCredit = 50 * time.Millisecond

// Gate is the arbiter between serving steps and training slices. A nil
// *Gate lets everything through; use New for a non-nil one.
type Gate struct {
	mu       sync.Mutex
	cond     *sync.Cond
	share    float64              // Share (0 ≤ share < 1)
	now      func() time.Duration // monotonic clock (tests inject one)
	serving  int                  // serving steps holding the gate
	training bool                 // a training slice holds it
	waitServ int                  // serving steps waiting
	waitTrn  int                  // training slices waiting
	busy     bool                 // the scheduler has work: Serve since the last Idle
	trnTurn  bool                 // training has credit and waits: it goes before the next serving step
	credit   time.Duration        // training's allowance while serving is busy
	started  time.Duration        // when the running training slice began

	servedSteps, trainSlices, yields int64
	busyTrain                        time.Duration // slice time spent while serving was busy
	maxSlice                         time.Duration // the longest slice
}

// New returns a gate that lets training take up to share (clamped to
// [0, 0.9]) of the machine while serving is busy.
func New(share float64) *Gate {
	epoch := time.Now()
	return newGate(share, func() time.Duration { return time.Since(epoch) })
}

func newGate(share float64, now func() time.Duration) *Gate {
	g := &Gate{share: min(max(share, 0), 0.9), now: now}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Share is the most of the machine training takes while serving is busy.
func (g *Gate) Share() float64 {
	if g == nil {
		return 1
	}
	return g.share
}

// Serve waits until a serving step may run and returns its release. It
// waits only for a training slice in progress, or for the one slice owed
// to training when it has credit. The first Serve after
// Idle marks serving busy.
func (g *Gate) Serve() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.busy = true
	g.waitServ++
	for g.training || (g.trnTurn && g.waitTrn > 0) {
		g.cond.Wait()
	}
	g.waitServ--
	g.serving++
	g.servedSteps++
	start := g.now()
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.serving--
		if g.waitTrn > 0 && g.share > 0 {
			earned := time.Duration(float64(g.now()-start) * g.share / (1 - g.share))
			g.credit = min(g.credit+earned, maxCredit)
		}
		if g.serving == 0 && g.waitTrn > 0 && g.credit > 0 {
			g.trnTurn = true
		}
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

// Idle tells the gate that the scheduler has no work left: training runs
// freely until the next Serve. Unspent credit is dropped; a debt (slices
// that ran while serving was busy beyond the share) is kept, so that
// short gaps do not let training take more than its share.
func (g *Gate) Idle() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.busy, g.credit, g.trnTurn = false, min(g.credit, 0), false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// trainMayRun reports whether a training slice may start now.
func (g *Gate) trainMayRun() bool {
	if g.training || g.serving > 0 || (g.waitServ > 0 && !g.trnTurn) {
		return false
	}
	return !g.busy || g.credit > 0
}

// Train waits until a training slice may run and returns its release:
// when serving is idle, or busy but training has credit left and no
// serving step runs or waits (or one waits but training is owed a turn).
func (g *Gate) Train() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.waitTrn++
	for !g.trainMayRun() {
		g.cond.Wait()
	}
	g.waitTrn--
	g.trnTurn = false
	g.training = true
	g.trainSlices++
	g.started = g.now()
	g.mu.Unlock()
	return g.endSlice
}

// endSlice releases the gate held by a training slice, charging the slice
// to the credit when serving was busy.
func (g *Gate) endSlice() {
	g.mu.Lock()
	g.chargeLocked()
	g.training = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// chargeLocked closes the running slice's accounting: its length and,
// while serving is busy, its cost to the credit. A new slice starts now.
func (g *Gate) chargeLocked() {
	now := g.now()
	d := now - g.started
	g.maxSlice = max(g.maxSlice, d)
	if g.busy {
		g.credit -= d
		g.busyTrain += d
	}
	g.started = now
}

// Yield is a slice boundary inside a training pass that holds the gate.
// When serving is busy and training's credit is spent, or a serving step
// waits, it releases the gate, lets serving run, and takes the gate back
// when it may (the returned release replaces the one it was given);
// otherwise the pass keeps the gate and a new slice begins.
func (g *Gate) Yield(release func()) func() {
	if g == nil {
		return release
	}
	g.mu.Lock()
	g.chargeLocked()
	if !g.busy || (g.waitServ == 0 && g.credit > 0) {
		g.trainSlices++
		g.mu.Unlock()
		return release
	}
	g.yields++
	g.training = false
	g.cond.Broadcast()
	g.mu.Unlock()
	return g.Train()
}

// Stats are the gate's counters.
type Stats struct {
	ServingSteps   int64         // serving steps let through
	TrainingSlices int64         // training slices run
	Yields         int64         // slice boundaries at which training gave way to serving
	BusyTraining   time.Duration // training time while serving was busy
	MaxSlice       time.Duration // the longest training slice: the most a serving step waited for one
}

// Stats returns the counters.
func (g *Gate) Stats() Stats {
	if g == nil {
		return Stats{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{ServingSteps: g.servedSteps, TrainingSlices: g.trainSlices, Yields: g.yields, BusyTraining: g.busyTrain, MaxSlice: g.maxSlice}
}
