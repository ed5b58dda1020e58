package tokenizer

import (
	"container/heap"
	"fmt"
	"iter"
	"slices"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// TrainOptions configures Train.
type TrainOptions struct {
	// VocabSize is the size of the vocabulary to build, counting the 256
	// byte tokens, the merged tokens and the special tokens. Training stops
	// earlier when no pair is frequent enough to merge.
	VocabSize int
	// SpecialTokens are added after the merged tokens, in order, as special
	// added tokens. Where they occur in the corpus they are cut out before
	// counting, as Encode would.
	SpecialTokens []string
	// Pattern is the pre-tokenizer Split regex; "" means PatternQwen2.
	Pattern string
	// MinFrequency is how many times a pair must occur to be merged; values
	// below 2 mean 2 (merging a pair seen once teaches nothing).
	MinFrequency int
	// BOS, EOS and PAD name special tokens for tokenizer_config.json; each
	// is "" or one of SpecialTokens.
	BOS, EOS, PAD string
	// ChatTemplate is a Jinja chat template for tokenizer_config.json.
	ChatTemplate string
}

// Train learns a byte-level BPE vocabulary from a corpus of documents. Its
// tokenizer normalizes with NFC, splits words with the Split pattern, starts
// from the 256 single bytes (ids 0-255, in byte order), and adds merged
// tokens in the order learned; Save writes it as tokenizer.json, which
// Hugging Face tokenizers loads too. The result depends only on the corpus
// and options, not on map order or timing.
//
// Each step merges the most frequent adjacent pair of tokens over all words
// (ties go to the pair of smaller ids); pair counts are updated only for the
// words that hold the merged pair, so a step costs in proportion to those
// words rather than to the corpus.
func Train(docs iter.Seq[string], opts TrainOptions) (*Tokenizer, error) {
	if opts.Pattern == "" {
		opts.Pattern = PatternQwen2
	}
	minFreq := int64(max(opts.MinFrequency, 2))
	numMerges := opts.VocabSize - 256 - len(opts.SpecialTokens)
	if numMerges < 0 {
		return nil, fmt.Errorf("train: vocab size %d is below 256 bytes + %d special tokens", opts.VocabSize, len(opts.SpecialTokens))
	}
	seen := map[string]bool{}
	for _, s := range opts.SpecialTokens {
		if s == "" || seen[s] {
			return nil, fmt.Errorf("train: special token %q is empty or repeated", s)
		}
		seen[s] = true
	}
	for _, role := range []struct{ name, tok string }{{"BOS", opts.BOS}, {"EOS", opts.EOS}, {"PAD", opts.PAD}} {
		if role.tok != "" && !seen[role.tok] {
			return nil, fmt.Errorf("train: %s %q is not one of the special tokens", role.name, role.tok)
		}
	}
	m, err := newMatcher(opts.Pattern)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	split := splitStep{m: m, behavior: behaviorIsolated}

	// Count the words of the corpus.
	specials := make([]addedToken, len(opts.SpecialTokens))
	for i, s := range opts.SpecialTokens {
		specials[i] = addedToken{ID: int32(i), Content: s, Special: true}
	}
	added := newAddedMatcher(specials, opts.SpecialTokens)
	nfc := normalizer{formStep{norm.NFC}}
	counts := make(map[string]int64)
	countWord := func(w string) {
		if c, ok := counts[w]; ok {
			counts[w] = c + 1
		} else {
			counts[strings.Clone(w)] = 1 // don't pin the document
		}
	}
	for doc := range docs {
		added.split(doc, false, func(s string) { split.apply(nfc.normalize(s), countWord) }, func(int32) {})
	}

	tr := newTrainer(counts)
	merges := tr.run(numMerges, minFreq)

	f := &fileJSON{
		Normalizer:    rawJSON(`{"type":"NFC"}`),
		PreTokenizer:  rawJSON(`{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + quoteJSON(opts.Pattern) + `},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}`),
		PostProcessor: rawJSON(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Decoder:       rawJSON(`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`),
		Model: modelJSON{
			Type:  "BPE",
			Vocab: make(map[string]int32, 256+len(merges)),
		},
	}
	tokens := make([]string, 0, 256+len(merges))
	for b := 0; b < 256; b++ {
		tokens = append(tokens, string(byteToRune[b]))
	}
	for _, mg := range merges {
		a, b := tokens[mg[0]], tokens[mg[1]]
		f.Model.Merges = append(f.Model.Merges, mergeJSON{a, b})
		tokens = append(tokens, a+b)
	}
	for id, s := range tokens {
		f.Model.Vocab[s] = int32(id)
	}
	for i, s := range opts.SpecialTokens {
		f.AddedTokens = append(f.AddedTokens, addedToken{ID: int32(len(tokens) + i), Content: s, Special: true})
	}
	t, err := build(f)
	if err != nil {
		return nil, fmt.Errorf("train: build tokenizer: %w", err)
	}
	for _, st := range []struct {
		name string
		dst  *specialToken
	}{{opts.BOS, &t.bos}, {opts.EOS, &t.eos}, {opts.PAD, &t.pad}} {
		if st.name != "" {
			*st.dst = specialToken{text: st.name, id: t.ids[st.name], ok: true}
		}
	}
	if opts.ChatTemplate != "" {
		t.chat = newChatTemplates(map[string]string{"default": opts.ChatTemplate})
	}
	return t, nil
}

// trainer holds the words of a corpus as token sequences with their counts,
// and the count of every adjacent pair of tokens over them.
type trainer struct {
	words  [][]int32
	counts []int64
	pairs  map[uint64]int64   // pair key → occurrences, weighted by word count
	where  map[uint64][]int32 // pair key → words that held it (may repeat or be stale)
	queue  pairQueue
	seenAt []int32 // word → last merge that visited it, +1
	nextID int32
}

func newTrainer(counts map[string]int64) *trainer {
	words := make([]string, 0, len(counts))
	for w := range counts {
		words = append(words, w)
	}
	slices.Sort(words) // a fixed order, though the result does not depend on it
	tr := &trainer{
		words:  make([][]int32, len(words)),
		counts: make([]int64, len(words)),
		pairs:  make(map[uint64]int64),
		where:  make(map[uint64][]int32),
		seenAt: make([]int32, len(words)),
		nextID: 256,
	}
	for i, w := range words {
		syms := make([]int32, len(w))
		for j := 0; j < len(w); j++ {
			syms[j] = int32(w[j])
		}
		tr.words[i], tr.counts[i] = syms, counts[w]
		for j := 0; j+1 < len(syms); j++ {
			k := pairKey(syms[j], syms[j+1])
			tr.pairs[k] += counts[w]
			if ws := tr.where[k]; len(ws) == 0 || ws[len(ws)-1] != int32(i) {
				tr.where[k] = append(ws, int32(i))
			}
		}
	}
	for k, c := range tr.pairs {
		tr.queue = append(tr.queue, pairCount{count: c, key: k})
	}
	heap.Init(&tr.queue)
	return tr
}

// run performs up to n merges and returns them in order; merge i makes
// token 256+i.
func (tr *trainer) run(n int, minFreq int64) [][2]int32 {
	var merges [][2]int32
	for len(merges) < n && tr.queue.Len() > 0 {
		top := heap.Pop(&tr.queue).(pairCount)
		cur := tr.pairs[top.key]
		if cur != top.count { // stale entry: requeue at the current count
			if cur >= minFreq {
				heap.Push(&tr.queue, pairCount{count: cur, key: top.key})
			}
			continue
		}
		if cur < minFreq {
			break
		}
		a, b := int32(top.key>>32), int32(uint32(top.key))
		merges = append(merges, [2]int32{a, b})
		tr.merge(a, b, int32(len(merges)))
	}
	return merges
}

// merge replaces every a,b in the words that hold it with a new token and
// updates the pair counts of their neighbours.
func (tr *trainer) merge(a, b, stamp int32) {
	key := pairKey(a, b)
	id := tr.nextID
	tr.nextID++
	grown := map[uint64]bool{}
	add := func(x, y int32, delta int64, w int32) {
		k := pairKey(x, y)
		tr.pairs[k] += delta
		if delta > 0 {
			grown[k] = true
			if ws := tr.where[k]; len(ws) == 0 || ws[len(ws)-1] != w {
				tr.where[k] = append(ws, w)
			}
		}
	}
	for _, w := range tr.where[key] {
		if tr.seenAt[w] == stamp {
			continue
		}
		tr.seenAt[w] = stamp
		syms, c := tr.words[w], tr.counts[w]
		for i := 0; i+1 < len(syms); i++ {
			if syms[i] != a || syms[i+1] != b {
				continue
			}
			if i > 0 {
				add(syms[i-1], a, -c, w)
				add(syms[i-1], id, c, w)
			}
			if i+2 < len(syms) {
				add(b, syms[i+2], -c, w)
				add(id, syms[i+2], c, w)
			}
			tr.pairs[key] -= c
			syms[i] = id
			syms = append(syms[:i+1], syms[i+2:]...)
		}
		tr.words[w] = syms
	}
	delete(tr.pairs, key)
	delete(tr.where, key)
	// Queue the pairs that grew, in a fixed order.
	keys := make([]uint64, 0, len(grown))
	for k := range grown {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if c := tr.pairs[k]; c > 0 {
			heap.Push(&tr.queue, pairCount{count: c, key: k})
		}
	}
}

type pairCount struct {
	count int64
	key   uint64
}

// pairQueue is a max-heap on count, ties to the smaller pair.
type pairQueue []pairCount

func (q pairQueue) Len() int { return len(q) }
func (q pairQueue) Less(i, j int) bool {
	if q[i].count != q[j].count {
		return q[i].count > q[j].count
	}
	return q[i].key < q[j].key
}
func (q pairQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pairQueue) Push(x any)   { *q = append(*q, x.(pairCount)) }
func (q *pairQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
