package weights

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clawrl/clawrl/model"
)

// Meta is what training had done when a version was made. It travels with
// the version into its checkpoint's manifest.
type Meta struct {
	Step    int64   `json:"step"`    // optimizer steps applied since the base model
	Samples int64   `json:"samples"` // samples trained on, in total
	Tokens  int64   `json:"tokens"`  // response tokens trained on, in total
	Loss    float64 `json:"loss"`    // loss of the last step
	// Note says how the version came to be when it is not a training step:
	// "base", "resumed from <path>", "rollback to 7".
	Note string `json:"note,omitempty"`
	// Base identifies the base model the lineage trains from (a
	// fingerprint of its files); a checkpoint of another base is refused.
	Base string `json:"base_model,omitempty"`
}

// Version is one published parameter set. Its fields are read through
// methods and never change after publication.
type Version struct {
	number, parent uint64
	created        time.Time
	meta           Meta

	p    *payload
	refs atomic.Int64 // the store's holds (current, kept) plus readers'
}

// payload is a parameter set shared by the versions that carry it (a
// rollback shares its target's weights). It is freed when its last version
// dies.
type payload struct {
	w    *model.Weights
	free func()
	refs atomic.Int64 // live versions carrying it
}

func (p *payload) release() {
	switch n := p.refs.Add(-1); {
	case n == 0:
		if p.free != nil {
			p.free()
		}
	case n < 0:
		panic("weights: payload released more often than retained")
	}
}

// Number is the version's number. Numbers grow with every publication
// (rollbacks included): Publish takes the next one, PublishNumbered a
// larger one it is given.
func (v *Version) Number() uint64 { return v.number }

// Parent is the number of the version this one was trained from (or, for a
// rollback, the version it restores); 0 for a base model.
func (v *Version) Parent() uint64 { return v.parent }

// Created is when the version was published.
func (v *Version) Created() time.Time { return v.created }

// Meta describes the training that produced the version.
func (v *Version) Meta() Meta { return v.meta }

// Weights are the version's parameters. They stay valid while the caller
// holds the version (from Acquire until Release).
func (v *Version) Weights() *model.Weights { return v.p.w }

// String is "v12 (parent 11)".
func (v *Version) String() string { return fmt.Sprintf("v%d (parent %d)", v.number, v.parent) }

// tryRetain adds a reference unless the version is already dead.
func (v *Version) tryRetain() bool {
	for {
		n := v.refs.Load()
		if n <= 0 {
			return false
		}
		if v.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (v *Version) release() {
	switch n := v.refs.Add(-1); {
	case n == 0:
		v.p.release()
	case n < 0:
		panic(fmt.Sprintf("weights: version %d released more often than acquired", v.number))
	}
}

// StoreOptions configure a Store.
type StoreOptions struct {
	// Keep is how many versions before the current one stay in memory for
	// Rollback (config: weights.keep_versions). Each costs a full copy of
	// the parameters; 0 keeps none.
	Keep int
	// After is the number the store's numbering continues after: the first
	// Publish makes After+1. Set it to the newest checkpoint on disk
	// (List), so that a run that rolled back or fell back to an older
	// checkpoint never reuses a number that names other weights on disk.
	After uint64
	// Now stamps new versions (time.Now when nil); tests fix it.
	Now func() time.Time
}

// Store holds the current version and the last Keep ones before it.
//
// Acquire is lock-free and safe from any goroutine; Publish, Rollback and
// Close serialise among themselves.
type Store struct {
	opts StoreOptions
	cur  atomic.Pointer[Version]

	mu      sync.Mutex
	last    uint64     // number of the newest version ever published
	kept    []*Version // older versions kept for rollback, oldest first
	closed  bool
	changed chan struct{} // closed (and replaced) when the current version changes
}

// NewStore returns an empty store; nothing is current until the first
// Publish (or PublishNumbered, for a run that resumes from a checkpoint and
// keeps its version number).
func NewStore(opts StoreOptions) *Store {
	if opts.Keep < 0 {
		opts.Keep = 0
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Store{opts: opts, last: opts.After, changed: make(chan struct{})}
}

// Changed returns a channel that is closed when the current version
// changes (a publication, a rollback) or the store closes: a mirror of the
// store (a serving replica on another device) waits on it, then reads
// Current, then asks again.
func (s *Store) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return closedChan
	}
	return s.changed
}

// closedChan is what Changed returns after Close.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// notifyLocked wakes the waiters of Changed; s.mu is held.
func (s *Store) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// ErrNoVersion is returned by Acquire before the first Publish and after
// Close.
var ErrNoVersion = errors.New("weights: no published version")

// Acquire returns the current version with a reference that the caller
// must give back with Release. The version's weights stay valid until
// then, however many versions are published meanwhile.
func (s *Store) Acquire() (*Version, error) {
	for {
		v := s.cur.Load()
		if v == nil {
			return nil, ErrNoVersion
		}
		if v.tryRetain() {
			return v, nil
		}
		// v stopped being current and died between the load and the
		// retain; the pointer already names its successor.
	}
}

// Release gives back a reference from Acquire or AcquireNumber. The
// version is freed when it is neither current, nor kept, nor held.
func (s *Store) Release(v *Version) { v.release() }

// Last is the number of the newest version ever published (or
// StoreOptions.After before the first publication): the next Publish makes
// Last()+1, and PublishNumbered needs a number above it.
func (s *Store) Last() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Reserve makes the numbering continue after n (if it is not past n
// already): a restart that resumes from an older checkpoint than the
// newest version it had published reserves the numbers it had issued, so
// no number ever names two parameter sets.
func (s *Store) Reserve(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = max(s.last, n)
}

// Current is the number of the current version (0 before the first
// Publish). It does not hold the version.
func (s *Store) Current() uint64 {
	if v := s.cur.Load(); v != nil {
		return v.number
	}
	return 0
}

// Publish makes w the current version, numbered one past the last, with
// parent and meta as given. The store takes ownership of w: it is freed
// (w.Free) when the version dies; on error the caller keeps it. w must not
// be published twice (Rollback shares weights between versions safely). The version replaced moves to the kept
// list (or dies if nothing holds it and Keep is 0). The returned version
// is not held for the caller; use Acquire to hold one.
func (s *Store) Publish(w *model.Weights, parent uint64, meta Meta) (*Version, error) {
	if w == nil {
		return nil, errors.New("weights: publish: nil weights")
	}
	return s.publish(&payload{w: w, free: w.Free}, 0, parent, meta)
}

// PublishNumbered is Publish with the version number given rather than
// the next one: a run resuming from checkpoint vN publishes its weights as
// N again, so samples generated by vN before the restart are not counted
// stale. number must exceed every number published before.
func (s *Store) PublishNumbered(w *model.Weights, number, parent uint64, meta Meta) (*Version, error) {
	if w == nil {
		return nil, errors.New("weights: publish: nil weights")
	}
	return s.publish(&payload{w: w, free: w.Free}, number, parent, meta)
}

// publish publishes a new payload as version number (the next one when 0).
func (s *Store) publish(p *payload, number, parent uint64, meta Meta) (*Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("weights: publish: store is closed")
	}
	if number != 0 && number <= s.last {
		return nil, fmt.Errorf("weights: publish: version %d is not after the last published version %d", number, s.last)
	}
	return s.publishLocked(p, number, parent, meta), nil
}

// publishLocked makes a version of p current, numbered number or the next
// number when 0; s.mu is held, and p is alive (new, or carried by a version
// the store holds).
func (s *Store) publishLocked(p *payload, number, parent uint64, meta Meta) *Version {
	if number == 0 {
		number = s.last + 1
	}
	s.last = number
	v := &Version{number: number, parent: parent, created: s.opts.Now(), meta: meta, p: p}
	p.refs.Add(1)
	v.refs.Store(1) // the store's "current" hold
	old := s.cur.Swap(v)
	s.notifyLocked()
	if old != nil {
		// The "current" hold of old becomes its "kept" hold.
		s.kept = append(s.kept, old)
		for len(s.kept) > s.opts.Keep {
			s.kept[0].release()
			s.kept[0] = nil
			s.kept = s.kept[1:]
		}
	}
	return v
}

// Rollback makes the weights of kept version n current again, as a new
// publication: the result has the next number, parent n, n's training
// metadata, and the note "rollback to n". Numbers stay monotone, so
// samples generated by versions after n count as older than the result.
// It fails if n is neither current nor kept in memory; to roll back
// further, load the weights from a checkpoint (OpenLatest, Open) and
// Publish them.
func (s *Store) Rollback(n uint64) (*Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("weights: rollback: store is closed")
	}
	var target *Version
	if c := s.cur.Load(); c != nil && c.number == n {
		target = c
	}
	for _, k := range s.kept {
		if k.number == n {
			target = k
		}
	}
	if target == nil {
		return nil, fmt.Errorf("weights: rollback: version %d is not kept in memory (kept: %v)", n, s.keptNumbers())
	}
	// target is held by the store and s.mu keeps it so, so its payload is
	// alive while the new version takes a share of it.
	meta := target.meta
	meta.Note = fmt.Sprintf("rollback to %d", n)
	return s.publishLocked(target.p, 0, n, meta), nil
}

// AcquireNumber holds the current or kept version numbered n, for a
// reader that must use one particular version (finishing a request on the
// version it started with does not need this: it keeps its Acquire).
func (s *Store) AcquireNumber(n uint64) (*Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur.Load(); c != nil && c.number == n && c.tryRetain() {
		return c, nil
	}
	for _, k := range s.kept {
		if k.number == n && k.tryRetain() {
			return k, nil
		}
	}
	return nil, fmt.Errorf("weights: version %d is not kept in memory (kept: %v)", n, s.keptNumbers())
}

// Kept lists the numbers of the versions that Rollback can restore, oldest
// first, the current one last.
func (s *Store) Kept() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keptNumbers()
}

func (s *Store) keptNumbers() []uint64 {
	ns := make([]uint64, 0, len(s.kept)+1)
	for _, k := range s.kept {
		ns = append(ns, k.number)
	}
	if c := s.cur.Load(); c != nil {
		ns = append(ns, c.number)
	}
	return ns
}

// Close drops the store's holds on the current and kept versions; each is
// freed as soon as its last reader releases it. Acquire fails afterwards.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.notifyLocked()
	for _, k := range s.kept {
		k.release()
	}
	s.kept = nil
	if c := s.cur.Swap(nil); c != nil {
		c.release()
	}
}
