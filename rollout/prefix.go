package rollout

import (
	"container/list"
	"encoding/binary"
	"hash/maphash"
	"slices"

	"github.com/clawrl/clawrl/model"
)

// prefixCache remembers KV-cache blocks by the token prefix they hold, so a
// request that starts like an earlier one (the same 16k-token system prompt,
// the same history) reuses their keys and values instead of recomputing
// them. Only full blocks are shared. Block i of a prompt is keyed by a hash
// chained over blocks 0..i, so a hit on block i implies the whole prefix
// matches; the block's own tokens are kept and compared to rule out hash
// collisions.
//
// The cache holds one reference on every block it lists. Eviction is least
// recently used among blocks nobody else holds. Lookups touch a chain from
// its end to its start, so a prefix is always more recently used than its
// extensions and is evicted after them.
//
// It belongs to the scheduler goroutine and is not safe for concurrent use.
type prefixCache struct {
	kv      *model.KVCache
	bs      int
	seed    maphash.Seed
	entries map[uint64]*prefixEntry
	lru     *list.List // front = most recently used; values are *prefixEntry
	buf     []byte
}

type prefixEntry struct {
	key    uint64
	block  int32
	tokens []int32
	elem   *list.Element
}

func newPrefixCache(kv *model.KVCache) *prefixCache {
	return &prefixCache{
		kv:      kv,
		bs:      kv.BlockSize(),
		seed:    maphash.MakeSeed(),
		entries: map[uint64]*prefixEntry{},
		lru:     list.New(),
	}
}

// chain extends the hash of a prefix by one block of tokens.
func (p *prefixCache) chain(parent uint64, block []int32) uint64 {
	p.buf = binary.LittleEndian.AppendUint64(p.buf[:0], parent)
	for _, t := range block {
		p.buf = binary.LittleEndian.AppendUint32(p.buf, uint32(t))
	}
	return maphash.Bytes(p.seed, p.buf)
}

// lookup returns the cached blocks covering the longest prefix of tokens
// made of full blocks, leaving at least one token uncovered (the forward
// pass needs one new token to produce logits).
func (p *prefixCache) lookup(tokens []int32) (blocks []int32) {
	var h uint64
	var hits []*prefixEntry
	for i := 0; (i+1)*p.bs < len(tokens); i++ {
		blk := tokens[i*p.bs : (i+1)*p.bs]
		h = p.chain(h, blk)
		e, ok := p.entries[h]
		if !ok || !slices.Equal(e.tokens, blk) {
			break
		}
		hits = append(hits, e)
		blocks = append(blocks, e.block)
	}
	for i := len(hits) - 1; i >= 0; i-- {
		p.lru.MoveToFront(hits[i].elem)
	}
	return blocks
}

// insert records the full blocks of a sequence holding tokens (its block
// table is blocks). Blocks already cached under the same prefix are kept.
func (p *prefixCache) insert(tokens []int32, blocks []int32) {
	var h uint64
	var touched []*prefixEntry
	for i := 0; (i+1)*p.bs <= len(tokens) && i < len(blocks); i++ {
		blk := tokens[i*p.bs : (i+1)*p.bs]
		h = p.chain(h, blk)
		e, ok := p.entries[h]
		if ok {
			if !slices.Equal(e.tokens, blk) {
				break // a collision: leave the existing entry alone
			}
		} else {
			p.kv.Retain(blocks[i])
			e = &prefixEntry{key: h, block: blocks[i], tokens: slices.Clone(blk)}
			e.elem = p.lru.PushFront(e)
			p.entries[h] = e
		}
		touched = append(touched, e)
	}
	for i := len(touched) - 1; i >= 0; i-- {
		p.lru.MoveToFront(touched[i].elem)
	}
}

// evict releases up to n blocks that only the cache holds, least recently
// used first, and returns how many it freed.
func (p *prefixCache) evict(n int) int {
	freed := 0
	for e := p.lru.Back(); e != nil && freed < n; {
		prev := e.Prev()
		pe := e.Value.(*prefixEntry)
		if p.kv.RefCount(pe.block) == 1 {
			p.remove(pe)
			freed++
		}
		e = prev
	}
	return freed
}

func (p *prefixCache) remove(e *prefixEntry) {
	p.lru.Remove(e.elem)
	delete(p.entries, e.key)
	p.kv.Release(e.block)
}

// clear drops every entry (for example when the weights change, since the
// cached keys and values were computed with the old ones).
func (p *prefixCache) clear() {
	for _, e := range p.entries {
		p.kv.Release(e.block)
	}
	p.entries = map[uint64]*prefixEntry{}
	p.lru.Init()
}

// size is the number of cached blocks.
func (p *prefixCache) size() int { return len(p.entries) }
