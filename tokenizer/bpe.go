package tokenizer

import (
	"container/heap"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel applies BPE merges to one pre-tokenized word. A byte-level
// model works on raw bytes and token ids; the printable byte-level
// alphabet only matters when reading and writing tokenizer.json. A
// SentencePiece-style model (chars) starts from the word's characters
// instead, as tokens written with "▁" for a space, and a character
// outside the vocabulary becomes its UTF-8 bytes' "<0xXX>" tokens
// (byte_fallback) or the unknown token.
type bpeModel struct {
	byteID [256]int32        // token id of each single byte (byte-level)
	merges map[uint64]uint64 // pair key (left<<32 | right) → rank<<32 | merged id
	// vocab maps every model token to its id: its raw bytes (byte-level)
	// or its text (chars); with ignoreMerges a word that is a whole token
	// skips the merges.
	vocab        map[string]int32
	ignoreMerges bool
	cache        *wordCache

	chars        bool       // SentencePiece-style: characters, not bytes
	byteFallback bool       // chars: unknown characters as "<0xXX>" tokens
	fallback     [256]int32 // chars: the id of "<0xXX>" for each byte
	unk          int32      // chars: the unknown token's id, −1 for none
	fuseUnk      bool       // chars: a run of unknown characters is one unknown token
	// cut (chars): no merge joins a character to a following cut (every
	// merged token is a run of cuts and then no cut, as SentencePiece's
	// vocabularies are), so a word is merged a piece at a time, each
	// piece starting where a run of cuts follows another character:
	// the same tokens, without merging a whole text as one word.
	cut string
}

// symbols appends the initial symbols of word (its bytes, or its
// characters) to syms.
func (m *bpeModel) symbols(syms []int32, word string) []int32 {
	if !m.chars {
		for i := 0; i < len(word); i++ {
			if id := m.byteID[word[i]]; id >= 0 {
				syms = append(syms, id)
			}
		}
		return syms
	}
	lastUnk := false
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		c := word[i : i+n]
		i += n
		if id, ok := m.vocab[c]; ok {
			syms, lastUnk = append(syms, id), false
			continue
		}
		switch {
		case m.byteFallback:
			for j := 0; j < len(c); j++ {
				syms = append(syms, m.fallback[c[j]])
			}
			lastUnk = false
		case m.unk >= 0 && !(m.fuseUnk && lastUnk):
			syms, lastUnk = append(syms, m.unk), true
		}
	}
	return syms
}

const noRank = math.MaxUint32

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func (m *bpeModel) lookup(a, b int32) (rank uint32, merged int32) {
	v, ok := m.merges[pairKey(a, b)]
	if !ok {
		return noRank, -1
	}
	return uint32(v >> 32), int32(uint32(v))
}

// Words up to smallWord bytes are merged by a linear scan over stack arrays;
// longer ones (long runs of spaces, say) by a heap. Words up to cachedWord
// bytes go through the cache.
const (
	smallWord  = 64
	cachedWord = 128
)

// appendWord appends the ids of word to dst.
func (m *bpeModel) appendWord(dst []int32, word string) []int32 {
	if m.cut == "" {
		return m.appendPiece(dst, word)
	}
	start := 0
	for i := 1; i < len(word); {
		j := strings.Index(word[i:], m.cut)
		if j < 0 {
			break
		}
		i += j
		if !strings.HasSuffix(word[:i], m.cut) {
			dst = m.appendPiece(dst, word[start:i])
			start = i
		}
		i += len(m.cut)
	}
	return m.appendPiece(dst, word[start:])
}

// appendPiece appends the ids of word to dst, merging it whole.
func (m *bpeModel) appendPiece(dst []int32, word string) []int32 {
	switch {
	case len(word) == 0:
		return dst
	case len(word) == 1 && !m.chars && m.byteID[word[0]] >= 0:
		return append(dst, m.byteID[word[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) > cachedWord {
		return m.mergeLarge(dst, m.symbols(make([]int32, 0, len(word)), word))
	}
	if ids, ok := m.cache.get(word); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	if len(word) <= smallWord {
		// A word has at most as many symbols as bytes.
		var symBuf [smallWord]int32
		dst = m.mergeSmall(dst, m.symbols(symBuf[:0], word))
	} else {
		dst = m.mergeLarge(dst, m.symbols(make([]int32, 0, len(word)), word))
	}
	m.cache.put(word, dst[n:])
	return dst
}

// mergeSmall repeatedly merges the adjacent pair of lowest rank, the
// leftmost one on a tie, until no pair has a merge; syms (at most
// smallWord of them) are the word's initial symbols, merged in place.
func (m *bpeModel) mergeSmall(dst, syms []int32) []int32 {
	if len(syms) < 2 {
		return append(dst, syms...)
	}
	var idBuf [smallWord]int32
	var rankBuf [smallWord]uint32
	ranks, ids := rankBuf[:len(syms)-1], idBuf[:len(syms)-1]
	for i := range ranks {
		ranks[i], ids[i] = m.lookup(syms[i], syms[i+1])
	}
	for {
		best, bestRank := -1, uint32(noRank)
		for i, r := range ranks {
			if r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] = ids[best]
		syms = append(syms[:best+1], syms[best+2:]...)
		ranks = append(ranks[:best], ranks[best+1:]...)
		ids = append(ids[:best], ids[best+1:]...)
		if best > 0 {
			ranks[best-1], ids[best-1] = m.lookup(syms[best-1], syms[best])
		}
		if best < len(ranks) {
			ranks[best], ids[best] = m.lookup(syms[best], syms[best+1])
		}
	}
	return append(dst, syms...)
}

// mergeLarge is mergeSmall for long words: symbols form a linked list and
// candidate merges wait in a heap ordered by (rank, position); an entry whose
// symbols have changed since it was pushed is dropped when popped. syms
// are merged in place.
func (m *bpeModel) mergeLarge(dst, syms []int32) []int32 {
	n := len(syms)
	if n < 2 {
		return append(dst, syms...)
	}
	next := make([]int32, n) // -1 at the end
	prev := make([]int32, n) // -1 at the start
	for i := 0; i < n; i++ {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	h := &mergeHeap{}
	push := func(pos int32) {
		r := next[pos]
		if r < 0 {
			return
		}
		if rank, merged := m.lookup(syms[pos], syms[r]); rank != noRank {
			heap.Push(h, mergeCand{rank: rank, pos: pos, left: syms[pos], right: syms[r], merged: merged})
		}
	}
	for i := 0; i < n-1; i++ {
		push(int32(i))
	}
	for h.Len() > 0 {
		c := heap.Pop(h).(mergeCand)
		r := next[c.pos]
		if syms[c.pos] != c.left || r < 0 || syms[r] != c.right {
			continue // stale
		}
		syms[c.pos] = c.merged
		syms[r] = -1
		next[c.pos] = next[r]
		if next[r] >= 0 {
			prev[next[r]] = c.pos
		}
		if p := prev[c.pos]; p >= 0 {
			push(p)
		}
		push(c.pos)
	}
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, syms[i])
	}
	return dst
}

type mergeCand struct {
	rank                uint32
	pos                 int32
	left, right, merged int32
}

type mergeHeap []mergeCand

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// wordCache remembers the ids of recently seen words. It is a direct-mapped
// table: a fixed number of slots, each word hashed to one slot, a newer word
// replacing an older one. Its memory is bounded and it is safe for
// concurrent use (slots are guarded by striped locks).
type wordCache struct {
	seed  maphash.Seed
	locks [64]sync.Mutex
	slots []cacheSlot
}

type cacheSlot struct {
	word string
	ids  []int32
}

const cacheSlots = 1 << 16

func newWordCache() *wordCache {
	return &wordCache{seed: maphash.MakeSeed(), slots: make([]cacheSlot, cacheSlots)}
}

func (c *wordCache) get(word string) ([]int32, bool) {
	i := maphash.String(c.seed, word) & (cacheSlots - 1)
	mu := &c.locks[i%uint64(len(c.locks))]
	mu.Lock()
	s := c.slots[i]
	mu.Unlock()
	return s.ids, s.ids != nil && s.word == word
}

func (c *wordCache) put(word string, ids []int32) {
	s := cacheSlot{word: strings.Clone(word), ids: append([]int32(nil), ids...)}
	i := maphash.String(c.seed, word) & (cacheSlots - 1)
	mu := &c.locks[i%uint64(len(c.locks))]
	mu.Lock()
	c.slots[i] = s
	mu.Unlock()
}
