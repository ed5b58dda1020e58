package weights

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
)

// fakePayload is a payload whose free is recorded, standing in for model
// weights (whose Free the store calls the same way).
type fakePayload struct {
	id    int
	freed atomic.Int32
}

func publishFake(t *testing.T, s *Store, f *fakePayload, parent uint64) *Version {
	t.Helper()
	v, err := s.publish(&payload{free: func() { f.freed.Add(1) }}, 0, parent, Meta{Step: int64(f.id)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestStorePublishAcquireRelease(t *testing.T) {
	s := NewStore(StoreOptions{})
	if _, err := s.Acquire(); err != ErrNoVersion {
		t.Fatalf("Acquire on an empty store: %v, want ErrNoVersion", err)
	}
	a, b := &fakePayload{id: 1}, &fakePayload{id: 2}
	v1 := publishFake(t, s, a, 0)
	if v1.Number() != 1 || s.Current() != 1 {
		t.Fatalf("first version %d, current %d; want 1, 1", v1.Number(), s.Current())
	}
	held, err := s.Acquire()
	if err != nil || held != v1 {
		t.Fatalf("Acquire = %v, %v; want v1", held, err)
	}
	v2 := publishFake(t, s, b, 1)
	if v2.Number() != 2 || v2.Parent() != 1 || s.Current() != 2 {
		t.Fatalf("second version %v, current %d", v2, s.Current())
	}
	if a.freed.Load() != 0 {
		t.Fatal("v1 freed while a reader holds it")
	}
	s.Release(held)
	if a.freed.Load() != 1 {
		t.Fatalf("v1 freed %d times after its last reader let go, want 1", a.freed.Load())
	}
	cur, _ := s.Acquire()
	if cur != v2 {
		t.Fatalf("Acquire after publish = %v, want v2", cur)
	}
	s.Release(cur)
	s.Close()
	if b.freed.Load() != 1 {
		t.Fatalf("current version freed %d times after Close, want 1", b.freed.Load())
	}
	if _, err := s.Acquire(); err != ErrNoVersion {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

func TestStoreKeepAndRollback(t *testing.T) {
	s := NewStore(StoreOptions{Keep: 1, Now: func() time.Time { return time.Unix(100, 0) }})
	ps := []*fakePayload{{id: 1}, {id: 2}, {id: 3}}
	publishFake(t, s, ps[0], 0)
	publishFake(t, s, ps[1], 1)
	if got := s.Kept(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("Kept = %v, want [1 2]", got)
	}
	if ps[0].freed.Load() != 0 {
		t.Fatal("kept version freed")
	}
	// Roll back to 1: a new number, parent 1, sharing 1's weights.
	r, err := s.Rollback(1)
	if err != nil {
		t.Fatal(err)
	}
	if r.Number() != 3 || r.Parent() != 1 || r.Meta().Note != "rollback to 1" || r.Meta().Step != 1 {
		t.Fatalf("rollback version: %v meta %+v", r, r.Meta())
	}
	// Keep 1: version 2 is kept now, version 1 left the kept list but its
	// weights live on in version 3.
	if got := s.Kept(); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Kept = %v, want [2 3]", got)
	}
	if ps[0].freed.Load() != 0 {
		t.Fatal("weights of the rollback target freed while the rollback is current")
	}
	if _, err := s.Rollback(1); err == nil {
		t.Fatal("rollback to a version no longer kept succeeded")
	}
	publishFake(t, s, ps[2], 3) // v4: v2 leaves, v3 kept
	if ps[1].freed.Load() != 1 || ps[0].freed.Load() != 0 {
		t.Fatalf("frees after v4: v2 %d, v1 %d; want 1, 0", ps[1].freed.Load(), ps[0].freed.Load())
	}
	publishFake(t, s, &fakePayload{id: 5}, 4) // v5: v3 leaves, freeing v1's weights
	if ps[0].freed.Load() != 1 {
		t.Fatalf("shared weights freed %d times, want 1", ps[0].freed.Load())
	}
	s.Close()
	for _, p := range ps {
		if p.freed.Load() != 1 {
			t.Errorf("payload %d freed %d times, want 1", p.id, p.freed.Load())
		}
	}
}

func TestStoreAcquireNumber(t *testing.T) {
	s := NewStore(StoreOptions{Keep: 1})
	defer s.Close()
	a := &fakePayload{id: 1}
	publishFake(t, s, a, 0)
	publishFake(t, s, &fakePayload{id: 2}, 1)
	v, err := s.AcquireNumber(1)
	if err != nil || v.Number() != 1 {
		t.Fatalf("AcquireNumber(1) = %v, %v", v, err)
	}
	publishFake(t, s, &fakePayload{id: 3}, 2) // 1 leaves the kept list
	if a.freed.Load() != 0 {
		t.Fatal("held version freed")
	}
	s.Release(v)
	if a.freed.Load() != 1 {
		t.Fatal("released version not freed")
	}
	if _, err := s.AcquireNumber(1); err == nil {
		t.Fatal("AcquireNumber of a freed version succeeded")
	}
}

func TestStorePublishNumbered(t *testing.T) {
	s := NewStore(StoreOptions{})
	defer s.Close()
	if _, err := s.publish(&payload{}, 12, 11, Meta{}); err != nil {
		t.Fatal(err)
	}
	if s.Current() != 12 {
		t.Fatalf("current %d, want 12", s.Current())
	}
	if _, err := s.publish(&payload{}, 12, 11, Meta{}); err == nil {
		t.Fatal("republishing number 12 succeeded")
	}
	v := publishFake(t, s, &fakePayload{}, 12)
	if v.Number() != 13 || s.Last() != 13 {
		t.Fatalf("next number %d (last %d), want 13", v.Number(), s.Last())
	}
	// Numbering continues after After.
	s2 := NewStore(StoreOptions{After: 40})
	defer s2.Close()
	if s2.Last() != 40 {
		t.Fatalf("Last of a new store with After 40: %d", s2.Last())
	}
	if v := publishFake(t, s2, &fakePayload{}, 0); v.Number() != 41 {
		t.Fatalf("first number %d, want 41", v.Number())
	}
}

func TestStoreReleaseTwicePanics(t *testing.T) {
	// The store is abandoned, not closed: the extra releases below take
	// its own hold.
	s := NewStore(StoreOptions{})
	publishFake(t, s, &fakePayload{}, 0)
	v, _ := s.Acquire()
	s.Release(v)
	s.Release(v) // drops the store's hold: refs reach zero
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than acquired did not panic")
		}
	}()
	s.Release(v)
}

// TestStoreConcurrentReaders runs readers that hold versions while a
// publisher replaces them, checking that no reader ever holds freed
// weights and that every version is freed exactly once in the end.
func TestStoreConcurrentReaders(t *testing.T) {
	s := NewStore(StoreOptions{Keep: 1})
	var mu sync.Mutex
	var all []*fakePayload
	byVersion := map[*Version]*fakePayload{}
	pub := func(parent uint64) {
		f := &fakePayload{id: len(all)}
		v := publishFake(t, s, f, parent)
		mu.Lock()
		all = append(all, f)
		byVersion[v] = f
		mu.Unlock()
	}
	pub(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 4 {
		wg.Add(1)
		go func() { // owned by this test; ends when stop closes
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := s.Acquire()
				if err != nil {
					bad.Add(1)
					return
				}
				mu.Lock()
				f := byVersion[v]
				mu.Unlock()
				if f != nil && f.freed.Load() != 0 {
					bad.Add(1)
				}
				s.Release(v)
			}
		}()
	}
	for i := range 200 {
		pub(uint64(i + 1))
		if i%50 == 0 {
			if _, err := s.Rollback(s.Current()); err != nil {
				t.Error(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	s.Close()
	if bad.Load() != 0 {
		t.Fatalf("%d reads saw freed weights or failed", bad.Load())
	}
	for _, f := range all {
		if f.freed.Load() != 1 {
			t.Fatalf("payload %d freed %d times, want 1", f.id, f.freed.Load())
		}
	}
}

// TestStoreFreesModelWeights runs the store over real weight sets: a
// version a reader holds keeps scoring after it is replaced, and its
// weights are freed (unusable) once the reader lets go.
func TestStoreFreesModelWeights(t *testing.T) {
	dir := t.TempDir()
	if err := model.WriteRandomCheckpoint(dir, tinySpec); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: m.Config.KVBytesPerToken(compute.F32) * 256})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	score := func(w *model.Weights) error {
		_, err := m.LogProbsWith(w, kv, []model.ScoreRequest{{Prompt: []int32{1, 2}, Response: []int32{3}}}, 0)
		return err
	}
	s := NewStore(StoreOptions{})
	defer s.Close()
	w1, err := m.Weights().Clone()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(w1, 0, Meta{}); err != nil {
		t.Fatal(err)
	}
	held, err := s.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	w2, err := m.Weights().Clone()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Publish(w2, 1, Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := score(held.Weights()); err != nil {
		t.Fatalf("held version after replacement: %v", err)
	}
	old := held.Weights()
	s.Release(held)
	if err := score(old); err == nil {
		t.Fatal("weights of a released, replaced version still score: not freed")
	}
	cur, _ := s.Acquire()
	defer s.Release(cur)
	if err := score(cur.Weights()); err != nil {
		t.Fatal(err)
	}
}

// TestStoreChanged: a waiter on Changed wakes at every change of the
// current version (publication, rollback) and at Close, never before.
func TestStoreChanged(t *testing.T) {
	s := NewStore(StoreOptions{Keep: 1})
	woke := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	ch := s.Changed()
	if woke(ch) {
		t.Fatal("woke before any change")
	}
	publishFake(t, s, &fakePayload{id: 1}, 0)
	if !woke(ch) {
		t.Fatal("a publication did not wake the waiter")
	}
	ch = s.Changed()
	if woke(ch) {
		t.Fatal("the new channel is closed already")
	}
	publishFake(t, s, &fakePayload{id: 2}, 1)
	ch2 := s.Changed()
	if _, err := s.Rollback(1); err != nil {
		t.Fatal(err)
	}
	if !woke(ch) || !woke(ch2) {
		t.Fatal("a rollback did not wake the waiters")
	}
	ch = s.Changed()
	s.Close()
	if !woke(ch) || !woke(s.Changed()) {
		t.Fatal("Close did not wake the waiter, or a later one")
	}
}
