package trainer

import "sync"

// Lineage is the tree of weight versions: each version's parent (the
// version it was trained from, or the checkpoint a rollback or a restart
// restored) and the trainer's optimizer step count at it. A sample's
// staleness is measured on it, in optimizer steps, not in version
// numbers: a rollback publishes old weights under a new number, which
// makes no sample older, and a sample generated on a branch that was
// rolled back is as stale as the steps between its weights and the
// trainer's, through their common ancestor.
//
// The trainer records the versions it publishes and restores; the loop
// adds the ones the store knows from before a restart (store.Versions).
// It is safe for concurrent use.
type Lineage struct {
	mu    sync.Mutex
	nodes map[uint64]lineageNode
}

type lineageNode struct {
	parent uint64 // 0: a root (the base weights)
	step   int64  // optimizer steps applied to the weights of this version
}

// maxLineageWalk bounds a walk up the tree (a cycle in a damaged record
// must not hang a step).
const maxLineageWalk = 1 << 20

// NewLineage returns an empty lineage.
func NewLineage() *Lineage { return &Lineage{nodes: map[uint64]lineageNode{}} }

// Add records version number, trained or restored from parent (0 for
// none), whose weights have had step optimizer steps. A number recorded
// again takes the new record.
func (l *Lineage) Add(number, parent uint64, step int64) {
	if number == 0 || parent == number {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes[number] = lineageNode{parent: parent, step: step}
}

// Known reports whether version n is recorded.
func (l *Lineage) Known(n uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.nodes[n]
	return ok
}

// Steps is the number of optimizer steps between the weights of versions
// from and to along the lineage: the steps from their nearest common
// ancestor to each, added. It is 0 for a version and its rollback, and
// for a restart's version and its checkpoint. ok is false when either
// version, or an ancestor on the way, is not recorded.
func (l *Lineage) Steps(from, to uint64) (steps int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.nodes[from]; !known {
		return 0, false
	}
	// The ancestors of to, with their step counts.
	up := map[uint64]int64{}
	for n, i := to, 0; n != 0; i++ {
		node, known := l.nodes[n]
		if !known || i > maxLineageWalk {
			return 0, false
		}
		if _, seen := up[n]; seen {
			return 0, false // a cycle
		}
		up[n] = node.step
		n = node.parent
	}
	top := l.nodes[to].step
	for n, i := from, 0; n != 0; i++ {
		node, known := l.nodes[n]
		if !known || i > maxLineageWalk {
			return 0, false
		}
		if s, common := up[n]; common {
			d := (top - s) + (l.nodes[from].step - s)
			return int(max(d, 0)), true
		}
		n = node.parent
	}
	return 0, false // separate trees
}
