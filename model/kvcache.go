package model

import (
	"errors"
	"fmt"
	"sync"

	"github.com/clawrl/clawrl/compute"
)

// ErrCacheFull is returned (wrapped) when the KV cache has no free block
// for a sequence's new tokens. The caller can wait for sequences to finish,
// evict cached prefixes, or preempt a sequence and retry.
var ErrCacheFull = errors.New("KV cache full")

// KVCache is a paged cache of attention keys and values.
//
// Its memory is a pool of fixed-size blocks, each holding the keys and
// values of BlockSize consecutive tokens of one sequence in every layer. A
// Sequence owns a block table: block i holds its positions
// [i·BlockSize, (i+1)·BlockSize). Blocks are reference counted, so several
// sequences (and a prefix cache) can share the blocks of a common prompt
// prefix: Retain and Release adjust the counts, a block returns to the free
// list when its count reaches zero, and a sequence about to write into a
// shared block first copies it (copy-on-write), so shared contents never
// change.
//
// The block bookkeeping is safe for concurrent use; a Sequence is not.
type KVCache struct {
	b                    compute.Backend
	layers, width        int // width: KV heads × head dim
	blockSize, numBlocks int
	dtype                compute.DType
	k, v                 []compute.Tensor // per layer: [numBlocks·blockSize, width]
	bytesPerBlock        int64

	mu   sync.Mutex
	refs []int32 // per block
	free []int32 // stack of free blocks
}

// KVCacheOptions sizes a KVCache.
type KVCacheOptions struct {
	// BlockSize is the number of tokens per block (default 16).
	BlockSize int
	// Budget is the memory for keys and values in bytes; the cache holds
	// Budget / BytesPerBlock blocks.
	Budget int64
	// DType is the storage of keys and values: compute.F32 (the default),
	// compute.BF16 (half the memory; values rounded as they are stored) or
	// compute.Q8_0 (34 bytes for 32 values, ggml's blocks; on a backend
	// that is a compute.QuantKVBackend, with a head dim that is a multiple
	// of compute.QK).
	DType compute.DType
}

// NewKVCache allocates a cache for models of config c on backend b.
func NewKVCache(b compute.Backend, c *Config, opts KVCacheOptions) (*KVCache, error) {
	bs := opts.BlockSize
	if bs == 0 {
		bs = 16
	}
	if bs < 1 {
		return nil, fmt.Errorf("model: KV cache block size must be positive, got %d", bs)
	}
	dt := opts.DType
	switch dt {
	case 0:
		dt = compute.F32
	case compute.F32, compute.BF16:
	case compute.Q8_0:
		if _, ok := b.(compute.QuantKVBackend); !ok {
			return nil, fmt.Errorf("model: a Q8_0 KV cache is not built for backend %s (it stores F32 or BF16 only)", b.Name())
		}
		if c.HeadDim%compute.QK != 0 {
			return nil, fmt.Errorf("model: a Q8_0 KV cache needs a head dim that is a multiple of %d, not %d", compute.QK, c.HeadDim)
		}
	default:
		return nil, fmt.Errorf("model: KV cache dtype %v is not F32, BF16 or Q8_0", dt)
	}
	kv := &KVCache{b: b, layers: c.NumLayers, width: c.KVDim(), blockSize: bs, dtype: dt}
	kv.bytesPerBlock = c.KVBytesPerToken(dt) * int64(bs)
	n := opts.Budget / kv.bytesPerBlock
	if n < 1 {
		return nil, fmt.Errorf("model: KV cache budget of %d bytes is less than one block (%d bytes for %d tokens)", opts.Budget, kv.bytesPerBlock, bs)
	}
	if n > 1<<30 {
		n = 1 << 30
	}
	kv.numBlocks = int(n)
	for range kv.layers {
		k, err := newCacheTensor(b, dt, kv.numBlocks*bs, kv.width)
		if err != nil {
			kv.Close()
			return nil, fmt.Errorf("model: allocating KV cache: %w", err)
		}
		kv.k = append(kv.k, k)
		v, err := newCacheTensor(b, dt, kv.numBlocks*bs, kv.width)
		if err != nil {
			kv.Close()
			return nil, fmt.Errorf("model: allocating KV cache: %w", err)
		}
		kv.v = append(kv.v, v)
	}
	kv.refs = make([]int32, kv.numBlocks)
	kv.free = make([]int32, kv.numBlocks)
	for i := range kv.free {
		kv.free[i] = int32(kv.numBlocks - 1 - i) // pop order 0, 1, 2, ...
	}
	return kv, nil
}

// newCacheTensor allocates one layer's keys or values: a Q8_0 cache
// through compute.QuantKVBackend, the others as any tensor.
func newCacheTensor(b compute.Backend, dt compute.DType, slots, width int) (compute.Tensor, error) {
	if dt == compute.Q8_0 {
		return b.(compute.QuantKVBackend).NewKVCacheTensor(dt, slots, width)
	}
	return b.NewTensor(dt, slots, width)
}

// BlockSize is the number of tokens per block.
func (kv *KVCache) BlockSize() int { return kv.blockSize }

// NumBlocks is the number of blocks in the pool.
func (kv *KVCache) NumBlocks() int { return kv.numBlocks }

// DType is the storage of keys and values (F32, BF16 or Q8_0).
func (kv *KVCache) DType() compute.DType { return kv.dtype }

// BytesPerBlock is the memory one block takes over all layers.
func (kv *KVCache) BytesPerBlock() int64 { return kv.bytesPerBlock }

// FreeBlocks is the number of blocks no one holds.
func (kv *KVCache) FreeBlocks() int {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return len(kv.free)
}

// RefCount reports how many holders block has.
func (kv *KVCache) RefCount(block int32) int {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return int(kv.refs[block])
}

// Retain adds a holder to each block (for example a prefix cache keeping a
// finished sequence's full blocks).
func (kv *KVCache) Retain(blocks ...int32) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	for _, b := range blocks {
		if kv.refs[b] <= 0 {
			panic(fmt.Sprintf("model: Retain of free KV block %d", b))
		}
		kv.refs[b]++
	}
}

// Release drops a holder from each block; blocks left without holders
// return to the free list.
func (kv *KVCache) Release(blocks ...int32) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.releaseLocked(blocks)
}

func (kv *KVCache) releaseLocked(blocks []int32) {
	for _, b := range blocks {
		if kv.refs[b] <= 0 {
			panic(fmt.Sprintf("model: Release of free KV block %d", b))
		}
		kv.refs[b]--
		if kv.refs[b] == 0 {
			kv.free = append(kv.free, b)
		}
	}
}

// alloc takes n free blocks, each with one holder.
func (kv *KVCache) alloc(n int) ([]int32, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if n > len(kv.free) {
		return nil, fmt.Errorf("model: %w: need %d blocks of %d tokens, %d of %d free", ErrCacheFull, n, kv.blockSize, len(kv.free), kv.numBlocks)
	}
	got := make([]int32, n)
	for i := range got {
		b := kv.free[len(kv.free)-1]
		kv.free = kv.free[:len(kv.free)-1]
		kv.refs[b] = 1
		got[i] = b
	}
	return got, nil
}

// copyBlock copies block src to block dst in every layer.
func (kv *KVCache) copyBlock(dst, src int32) {
	bs := kv.blockSize
	for l := range kv.layers {
		for _, t := range []compute.Tensor{kv.k[l], kv.v[l]} {
			d := kv.b.Slice(t, int(dst)*bs, int(dst+1)*bs)
			s := kv.b.Slice(t, int(src)*bs, int(src+1)*bs)
			kv.b.Copy(d, s)
		}
	}
}

// Close frees the cache memory. Sequences of the cache must not be used
// afterwards.
func (kv *KVCache) Close() {
	for _, t := range kv.k {
		kv.b.Free(t)
	}
	for _, t := range kv.v {
		kv.b.Free(t)
	}
	kv.k, kv.v = nil, nil
}

// Sequence is one token sequence's view of a KVCache: its length and its
// block table.
type Sequence struct {
	kv     *KVCache
	n      int     // tokens whose keys and values are in the cache
	blocks []int32 // blocks holding positions [0, n) (and maybe room beyond)
}

// NewSequence starts an empty sequence.
func (kv *KVCache) NewSequence() *Sequence { return &Sequence{kv: kv} }

// Cache is the KVCache the sequence lives in.
func (s *Sequence) Cache() *KVCache { return s.kv }

// Len is the number of tokens whose keys and values are cached; the next
// token is at position Len.
func (s *Sequence) Len() int { return s.n }

// Blocks is the block table covering positions [0, Len). The slice is the
// sequence's own: read it, do not modify it.
func (s *Sequence) Blocks() []int32 {
	return s.blocks[:(s.n+s.kv.blockSize-1)/s.kv.blockSize]
}

// Attach makes an empty sequence start with the cached keys and values of
// another sequence's first tokens, held in blocks (as returned by that
// sequence's Blocks, e.g. from a prefix cache). The sequence becomes a
// holder of the blocks; tokens must fall in the last of them. Writing after
// a partially filled shared block copies it first.
func (s *Sequence) Attach(blocks []int32, tokens int) error {
	bs := s.kv.blockSize
	if s.n != 0 || len(s.blocks) != 0 {
		return errors.New("model: Attach on a sequence that is not empty")
	}
	if tokens <= 0 || (tokens+bs-1)/bs != len(blocks) {
		return fmt.Errorf("model: Attach of %d tokens to %d blocks of %d", tokens, len(blocks), bs)
	}
	s.kv.Retain(blocks...)
	s.blocks = append(s.blocks, blocks...)
	s.n = tokens
	return nil
}

// Fork returns a new sequence sharing all of s's cached tokens (for example
// to sample several continuations of one prompt). Both copy a shared block
// before writing into it.
func (s *Sequence) Fork() *Sequence {
	f := s.kv.NewSequence()
	if s.n > 0 {
		if err := f.Attach(s.Blocks(), s.n); err != nil {
			panic(err) // s's own table is always consistent
		}
	}
	return f
}

// Truncate drops the tokens at positions ≥ n (to rewind a sequence and
// reuse its prefix), releasing blocks no longer needed.
func (s *Sequence) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("model: Truncate to %d of a sequence of %d tokens", n, s.n)
	}
	keep := (n + s.kv.blockSize - 1) / s.kv.blockSize
	s.kv.Release(s.blocks[keep:]...)
	s.blocks = s.blocks[:keep]
	s.n = n
	return nil
}

// Free releases all of the sequence's blocks at once and empties it.
func (s *Sequence) Free() {
	s.kv.Release(s.blocks...)
	s.blocks = s.blocks[:0]
	s.n = 0
}

// reserve makes room for n more tokens: it copies a shared partially filled
// last block and allocates the blocks still missing. It returns the number
// of blocks allocated, for unreserve.
func (s *Sequence) reserve(n int) (int, error) {
	bs := s.kv.blockSize
	if s.n%bs != 0 {
		last := s.blocks[s.n/bs]
		if s.kv.RefCount(last) > 1 {
			nb, err := s.kv.alloc(1)
			if err != nil {
				return 0, err
			}
			s.kv.copyBlock(nb[0], last)
			s.kv.Release(last)
			s.blocks[s.n/bs] = nb[0]
		}
	}
	need := (s.n+n+bs-1)/bs - len(s.blocks)
	if need <= 0 {
		return 0, nil
	}
	nb, err := s.kv.alloc(need)
	if err != nil {
		return 0, err
	}
	s.blocks = append(s.blocks, nb...)
	return need, nil
}

// unreserve gives back the last k blocks that reserve allocated.
func (s *Sequence) unreserve(k int) {
	if k == 0 {
		return
	}
	s.kv.Release(s.blocks[len(s.blocks)-k:]...)
	s.blocks = s.blocks[:len(s.blocks)-k]
}
