// Package priority shares one machine's compute between serving and
// training so that serving comes first without starving training.
//
// On a small machine (the CPU build on 2 cores) a static split of the
// cores wastes half of them whenever one side is idle, and running both
// at once on every core makes every decode step wait for a share of a
// training step. A Gate instead serialises them at fine grain: a serving
// step (one scheduler forward pass) and a training slice (one layer of a
// forward or backward pass) never run together, and when both want the
// machine they alternate, one serving step then one training slice. A
// decode step therefore waits for at most one training slice, and a
// training step under a constant stream of users still advances one layer
// per serving step; with no user waiting it runs at full speed. Judge and
// teacher work rides on the serving side's scheduler as background work,
// in the gaps users leave.
package priority

import "sync"

// Gate is the alternation between serving steps and training slices. The
// zero value is ready to use; a nil *Gate lets everything through.
type Gate struct {
	mu       sync.Mutex
	cond     *sync.Cond
	serving  int  // serving steps holding the gate
	training bool // a training slice holds it
	waitServ int  // serving steps waiting
	waitTrn  int  // training slices waiting
	trnTurn  bool // a serving step ended while training waited: training goes next

	servedSteps, trainSlices, yields int64
}

func (g *Gate) init() {
	if g.cond == nil {
		g.cond = sync.NewCond(&g.mu)
	}
}

// Serve waits until a serving step may run and returns its release. It
// waits only for a training slice in progress, or for the one slice that
// is owed after the previous serving step.
func (g *Gate) Serve() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.init()
	g.waitServ++
	for g.training || (g.trnTurn && g.waitTrn > 0) {
		g.cond.Wait()
	}
	g.waitServ--
	g.serving++
	g.servedSteps++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.serving--
		if g.serving == 0 && g.waitTrn > 0 {
			g.trnTurn = true
		}
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

// Train waits until a training slice may run and returns its release: it
// runs when no serving step runs and none waits, or when it is owed a
// turn.
func (g *Gate) Train() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.init()
	g.waitTrn++
	for g.serving > 0 || g.training || (g.waitServ > 0 && !g.trnTurn) {
		g.cond.Wait()
	}
	g.waitTrn--
	g.trnTurn = false
	g.training = true
	g.trainSlices++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.training = false
		g.cond.Broadcast()
		g.mu.Unlock()
	}
}

// Yield is a boundary inside a training pass that holds the gate: when a
// serving step waits, it releases the gate, lets that step run, and takes
// the gate back (the returned release replaces the one it was given);
// otherwise it keeps the gate.
func (g *Gate) Yield(release func()) func() {
	if g == nil {
		return release
	}
	g.mu.Lock()
	waiting := g.waitServ > 0
	if waiting {
		g.yields++
	}
	g.mu.Unlock()
	if !waiting {
		return release
	}
	release()
	return g.Train()
}

// Stats are the gate's counters.
type Stats struct {
	ServingSteps   int64 // serving steps let through
	TrainingSlices int64 // training slices let through (each Train call)
	Yields         int64 // training slices that gave way to a waiting serving step
}

// Stats returns the counters.
func (g *Gate) Stats() Stats {
	if g == nil {
		return Stats{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{ServingSteps: g.servedSteps, TrainingSlices: g.trainSlices, Yields: g.yields}
}
