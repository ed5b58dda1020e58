package cpu

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cpu/kernels"
)

// Paged attention: flash attention (Dao et al., 2022) over the paged KV
// cache, in tiles.
//
// The work of a call is cut into tasks, one per (sequence, key/value head,
// tile of the sequence's new tokens). A task stacks the queries of all the
// heads that share its key/value head, for every token of its tile, into
// one matrix Q of m = tokens·group rows (row tok·group + j is query head
// g·group + j of token tok; the heads of a token are adjacent in q, so this
// is one contiguous copy per token, and so is writing the output back).
// Each key and value row is then read once per group of heads and tile of
// tokens, and the products are matrix products, not a dot product per key.
//
// A task walks its keys in tiles of tiles.keys positions and keeps, per
// query row, a running maximum mx, a running denominator l and an
// unnormalised output O (the online softmax):
//
//	S   = Q·Kᵀ·scale                 (scores of the tile)
//	mx' = max(mx, rowmax S)          (masked entries excluded)
//	P   = exp(S − mx')               (masked entries 0)
//	l   = l·exp(mx − mx') + rowsum P
//	O   = O·exp(mx − mx') + P·V
//
// and at the end writes O / l. No score matrix larger than a query tile by
// a key tile is ever held. The causal mask only touches the key tiles that
// reach past the task's first token: the query row of token tok sees the
// keys up to position first + tok.
//
// Three implementations of a task share this plan:
//
//   - the AVX-512 tile kernels (attention_asm.go, attention_amd64.s): Q, S
//     and O held transposed, one lane per query row, and the keys and values
//     read through a table of row offsets, in place in an F32 cache, never
//     packed. With a BF16 cache the values' tiles are widened to F32 first,
//     and so are the keys', except at BF16 products (below);
//   - the AVX-512 decode kernels (attention_asm.go, attention_dec_amd64.s),
//     for tasks of at most decRows query rows (a decode step is one token:
//     m = group): row layout, vectorised along the head dimension, reading
//     an F32 or a BF16 cache in place;
//   - kernels.Sgemm (attention_sgemm.go), on other CPUs and kernel sets
//     (a BF16 cache's tiles widened to F32 first).
//
// A Q8_0 cache (compute.QuantKVBackend) takes the paths of a BF16 one:
// each tile of keys and values is dequantized (kernels.DequantQ8_0, exact)
// into contiguous F32 rows of the thread's scratch, which the kernels then
// read as they read an F32 cache; the queries stay float32. Decode reads
// 34 bytes of the cache for 32 values where BF16 reads 64.
//
// At kernels.PrecisionBF16 with a BF16 cache (the daemon's default on a CPU
// with AVX512_BF16 and a BF16 checkpoint), every path rounds the queries
// to BF16 before their products with the keys and applies the scale to the
// scores after, so that all paths compute the same products, exactly, and
// a decode step agrees with a prefill of the same tokens. The tile path
// then multiplies the queries, held as BF16 pairs, by the keys where they
// lie in the cache with VDPBF16PS (flashQK512BF16), two elements per
// instruction: prefill attention at 4K tokens ran 20-26% faster
// (BenchmarkPagedAttention, bf16-products against bf16). The products
// of the attention probabilities with the values stay in float32:
// VDPBF16PS would need the probabilities rounded to BF16 relative to each
// tile's running maximum, which a reference cannot model short of
// repeating the tiling.
//
// The cache is laid out by blocks, head-major inside a block
// (compute.Attention.KVIndex), so a task reads BlockSize·HeadDim
// contiguous values of a block where a slot-major layout would make it
// skip over the other heads at every row. Measured against slot-major
// (BenchmarkPagedAttention, F32): decode at 16K with 8 key/value heads of
// 128, 10.8 → 23 GB/s; 8 sequences at 4K, 19 → 28 GB/s.
//
// A sliding window (compute.Attention.Window) starts a task's keys at its
// first token's window. The keys that some of its tokens see and others
// do not (the band below its last token's window) run on the Sgemm path,
// whose masks have a lower bound, as a part of their own; the keys from
// there on, which every token sees up to its own position, run on the
// kernels above, which mask causally only; the parts merge as split tasks
// do (below). A decode task's one token sees exactly its keys.
//
// When there are fewer tasks than the threads want (decode of one or a few
// long sequences), the keys of a task are split into parts of whole key
// tiles that run on different threads (flash-decoding); each part leaves
// its output with its maxima and denominators, and a last pass (merge)
// combines them. Threads claim the pieces of work one at a time, the
// costliest first.

// Attention runs causal grouped-query attention over the paged cache (see
// the comment above for the algorithm).
func (b *Backend) Attention(dst, q, kCache, vCache compute.Tensor, a *compute.Attention) {
	out := must(dst, compute.F32, "Attention dst")
	qs := must(q, compute.F32, "Attention q")
	kc := cacheTensor(kCache, "Attention kCache")
	vc := cacheTensor(vCache, "Attention vCache")
	qstart := must(a.QueryStart, compute.I32, "Attention QueryStart").i32
	ctxLen := must(a.ContextLen, compute.I32, "Attention ContextLen").i32
	table := must(a.BlockTable, compute.I32, "Attention BlockTable").i32

	hd, bs := a.HeadDim, a.BlockSize
	qdim, kvdim := a.Heads*hd, a.KVHeads*hd
	switch {
	case a.Heads <= 0 || a.KVHeads <= 0 || hd <= 0 || bs <= 0 || a.Heads%a.KVHeads != 0:
		shapePanic("Attention", "heads %d, kv heads %d, head dim %d, block size %d", a.Heads, a.KVHeads, hd, bs)
	case compute.Cols(qs) != qdim || compute.Cols(out) != qdim || out.shape[0] != qs.shape[0]:
		shapePanic("Attention", "q %s, dst %s for %d heads of %d", compute.ShapeString(qs.shape), compute.ShapeString(out.shape), a.Heads, hd)
	case compute.Cols(kc) != kvdim || kc.shape[0]%bs != 0 || vc.dt != kc.dt || !slices.Equal(vc.shape, kc.shape):
		shapePanic("Attention", "cache %v %s and %v %s for rows of %d in blocks of %d", kc.dt, compute.ShapeString(kc.shape), vc.dt, compute.ShapeString(vc.shape), kvdim, bs)
	case kc.dt == compute.Q8_0 && hd%compute.QK != 0:
		shapePanic("Attention", "a Q8_0 cache needs a head dim that is a multiple of %d, not %d", compute.QK, hd)
	case len(qstart) != a.Seqs+1 || len(ctxLen) != a.Seqs || len(table) != a.Seqs*a.MaxBlocks:
		shapePanic("Attention", "metadata lengths %d, %d, %d for %d sequences of %d blocks", len(qstart), len(ctxLen), len(table), a.Seqs, a.MaxBlocks)
	case a.Seqs > 0 && (qstart[0] != 0 || int(qstart[a.Seqs]) != qs.shape[0]):
		shapePanic("Attention", "query rows %d..%d for q of %d rows", qstart[0], qstart[a.Seqs], qs.shape[0])
	case a.Window < 0:
		shapePanic("Attention", "window %d", a.Window)
	case a.Softcap < 0 || math.IsNaN(float64(a.Softcap)) || math.IsInf(float64(a.Softcap), 0):
		shapePanic("Attention", "softcap %g", a.Softcap)
	}
	nBlocks := kc.shape[0] / bs
	window := a.Window
	longest := 0
	for s := 0; s < a.Seqs; s++ {
		longest = max(longest, int(ctxLen[s]))
	}
	if window >= longest {
		window = 0 // no query reaches past the window: plain causal attention
	}
	for s := 0; s < a.Seqs; s++ {
		n, c := int(qstart[s+1]-qstart[s]), int(ctxLen[s])
		if n < 0 || c < n || (c+bs-1)/bs > a.MaxBlocks {
			shapePanic("Attention", "sequence %d: %d new tokens, context %d, %d blocks of %d", s, n, c, a.MaxBlocks, bs)
		}
		for _, blk := range table[s*a.MaxBlocks : s*a.MaxBlocks+(c+bs-1)/bs] {
			if blk < 0 || int(blk) >= nBlocks {
				shapePanic("Attention", "sequence %d: block %d outside cache of %d", s, blk, nBlocks)
			}
		}
	}

	f := flashCalls.Get().(*flashCall)
	claimFn, mergeFn := f.claimFn, f.mergeFn
	*f = flashCall{
		claimFn: claimFn, mergeFn: mergeFn,
		q: qs.f32, out: out.f32, k: kc.f32, v: vc.f32, k16: kc.u16, v16: vc.u16, k8: kc.kv8, v8: vc.kv8,
		bf16: kc.dt == compute.BF16, q8: kc.dt == compute.Q8_0, geo: a, table: table,
		hd: hd, bs: bs, group: a.Heads / a.KVHeads, qdim: qdim, kvdim: kvdim,
		maxBlocks: a.MaxBlocks, scale: a.Scale, tl: tiles, window: window, softcap: a.Softcap,
		// The kernels do not soft-cap: capped scores take the Sgemm path.
		asm:   flashAsm && hd%16 == 0 && kernels.Kernels() == kernels.KernelsAVX512 && a.Softcap == 0,
		tasks: f.tasks[:0], work: f.work[:0],
	}
	f.pool = b.pool
	f.roundQ = b.opts.Precision == kernels.PrecisionBF16 && f.bf16
	f.dpQK = f.roundQ && f.asm && hd%32 == 0 && kernels.HasBF16Dot()
	defer f.release()
	f.plan(a, qstart, ctxLen)
	if len(f.work) == 0 {
		return
	}
	if f.partials > 0 {
		p := b.getScratch(f.partials)
		defer b.putScratch(p)
		f.part = *p
	}
	f.next.Store(0)
	b.pool.For(min(len(f.work), b.pool.Threads()), 1, f.claimFn)
	if f.partials > 0 {
		b.pool.For(len(f.tasks), 1, f.mergeFn)
	}
}

// flashTiles are the tile sizes of Attention.
type flashTiles struct {
	// rows is the most query rows (tokens × heads of a group) in a task: the
	// m of its products. Its queries, scores and output stay in L2 while
	// the task walks the keys.
	rows int
	// keys is the number of keys per step of the online softmax.
	keys int
	// minSplit is the fewest keys a part of a split task covers.
	minSplit int
	// pieces is how many pieces of work Attention wants before it stops
	// splitting tasks; 0 means splitTarget per thread.
	pieces int
}

// tiles are the tile sizes in use; a variable so that tests can make them
// small. A prefill chunk of 512 tokens after 16K cached ones, 6 query heads
// over 2 key/value heads of 64 (AVX-512 kernels, one thread), measured 65–78%
// of the FMA peak for rows from 144 to 384 and keys from 128 to 512, the
// differences within the noise of a shared machine; 384 was best or level
// in every run.
var tiles = flashTiles{rows: 384, keys: 256, minSplit: 1024}

// flashAsm turns the AVX-512 kernels on (where the build has them); tests
// turn it off to run the Sgemm path with the same kernel set.
var flashAsm = haveFlashAsm

// negInf32 is the running maximum of a row that has seen no key yet (row
// layout paths).
var negInf32 = float32(math.Inf(-1))

// splitTarget is how many pieces of work per thread Attention wants before
// it stops splitting the keys of its tasks: a few, so that a thread that
// is descheduled (the machine is shared) holds up less.
const splitTarget = 4

// flashCall holds what the pieces of work of one Attention call share.
type flashCall struct {
	q, out, k, v []float32
	k16, v16     []uint16 // a BF16 cache (k and v are then nil)
	k8, v8       []byte   // a Q8_0 cache (ggml blocks in element order)
	bf16, q8     bool
	geo          *compute.Attention // the cache layout (KVIndex)
	table        []int32
	hd, bs       int
	group        int
	qdim, kvdim  int
	maxBlocks    int
	scale        float32
	window       int     // sliding window (0: none): a query at p sees keys from p−window+1
	softcap      float32 // scores soft-capped as softcap·tanh(s/softcap) (0: none; Sgemm path only)
	tl           flashTiles
	asm          bool          // the AVX-512 kernels (attention_asm.go)
	pool         *kernels.Pool // the backend's threads
	// roundQ rounds the queries to BF16 before their products with the
	// keys (the scale applies after): at kernels.PrecisionBF16 with a BF16
	// cache, where the tile path multiplies BF16 queries by the cache's
	// BF16 keys with VDPBF16PS (dpQK) on CPUs that have it. Every path
	// rounds the same way, so that a decode step and a prefill of the same
	// tokens agree, as at float32.
	roundQ bool
	dpQK   bool

	tasks    []flashTask
	work     []flashWork
	maxRows  int       // largest m of a task
	partials int       // floats of partial results of split tasks
	part     []float32 // partial results: see finish

	next             atomic.Int64 // the next piece of work to claim
	claimFn, mergeFn func(lo, hi int)
}

// flashCalls recycles flashCall values with their task and work lists and
// the functions they give kernels.ParallelFor, so that a decode step does
// not allocate them per layer.
var flashCalls = sync.Pool{New: func() any {
	f := new(flashCall)
	f.claimFn, f.mergeFn = f.claim, f.merge
	return f
}}

// release drops f's references to the call's tensors and returns it to
// flashCalls.
func (f *flashCall) release() {
	*f = flashCall{tasks: f.tasks[:0], work: f.work[:0], claimFn: f.claimFn, mergeFn: f.mergeFn}
	flashCalls.Put(f)
}

// claim is the body of each thread: it claims pieces of work, in order
// (the costliest first), until none are left, so that pieces of unequal
// cost balance out. [lo, hi) counts the threads this body stands for.
func (f *flashCall) claim(lo, hi int) {
	for range hi - lo {
		var sc *flashScratch
		for {
			i := int(f.next.Add(1) - 1)
			if i >= len(f.work) {
				break
			}
			if sc == nil {
				sc = f.getScratch()
			}
			f.run(f.work[i], sc)
		}
		if sc != nil {
			flashScratches.Put(sc)
		}
	}
}

// flashTask is the attention of the new tokens [i0, i1) of sequence s for
// the query heads of key/value head g.
type flashTask struct {
	s, g   int
	r0     int // row of q (and dst) of token i0
	first  int // cache position of token i0
	tokens int // i1 − i0
	keys   int // keys visible to the last token: positions [lo, keys)
	lo     int // the first key visible to token i0 (0 without a sliding window)
	// band ends the keys [lo, band) that some of the task's tokens see and
	// others do not (a sliding window's lower edge): they take the Sgemm
	// path, whose masks have a lower bound, as a part of their own; keys
	// from band on need the causal mask only. band = lo: none.
	band  int
	parts int // pieces its keys are split into (1: not split)
	part0 int // offset of its partial results in flashCall.part (parts > 1)
}

// flashWork is one piece of work: keys [k0, k1) of task, part part of it.
type flashWork struct {
	task, part, k0, k1 int
	cost               int  // (query row, key) pairs: for ordering
	sgemm              bool // the band of a sliding window (flashTask.band)
}

// plan cuts the call into tasks and pieces of work (see Attention) and
// sizes the partial results.
func (f *flashCall) plan(a *compute.Attention, qstart, ctxLen []int32) {
	tokPerTile := max(1, f.tl.rows/f.group)
	total := 0
	for s := range a.Seqs {
		n, c := int(qstart[s+1]-qstart[s]), int(ctxLen[s])
		if n == 0 {
			continue
		}
		nt := (n + tokPerTile - 1) / tokPerTile
		for t := range nt {
			i0, i1 := t*n/nt, (t+1)*n/nt // tiles of equal size, to a token
			for g := range a.Heads / f.group {
				task := flashTask{
					s: s, g: g, r0: int(qstart[s]) + i0, first: c - n + i0,
					tokens: i1 - i0, keys: c - n + i1, parts: 1,
				}
				if f.window > 0 {
					task.lo = max(0, task.first-f.window+1)
				}
				task.band = task.lo
				if f.window > 0 && task.tokens > 1 {
					task.band = max(task.lo, task.first+task.tokens-f.window) // the last token's first key
				}
				f.tasks = append(f.tasks, task)
				f.maxRows = max(f.maxRows, task.tokens*f.group)
				total += task.cost(task.lo, task.keys, f.group)
			}
		}
	}
	// Split the keys of long tasks while there are fewer tasks than the
	// threads want, into parts of whole key tiles of about equal cost.
	want := f.tl.pieces
	if want == 0 {
		want = splitTarget * f.pool.Threads()
	}
	if len(f.tasks) < want && len(f.tasks) > 0 {
		per := max(1, total/want)
		for i := range f.tasks {
			t := &f.tasks[i]
			tilesIn := (t.keys - t.band + f.tl.keys - 1) / f.tl.keys
			if p := min(t.cost(t.band, t.keys, f.group)/per, (t.keys-t.band)/max(1, f.tl.minSplit), tilesIn); p > 1 {
				t.parts = p
			}
		}
	}
	for i := range f.tasks {
		t := &f.tasks[i]
		rest := t.parts // parts of the keys from band on
		if t.band > t.lo {
			t.parts++ // and the band, part 0
		}
		if t.parts > 1 {
			t.part0 = f.partials
			f.partials += t.parts * t.tokens * f.group * (f.hd + 2)
		}
		p0 := 0
		if t.band > t.lo {
			f.work = append(f.work, flashWork{task: i, part: 0, k0: t.lo, k1: t.band, cost: t.cost(t.lo, t.band, f.group), sgemm: true})
			p0 = 1
		}
		tilesIn := (t.keys - t.band + f.tl.keys - 1) / f.tl.keys
		for p := range rest {
			k0 := t.band + p*tilesIn/rest*f.tl.keys
			k1 := min(t.keys, t.band+(p+1)*tilesIn/rest*f.tl.keys)
			f.work = append(f.work, flashWork{task: i, part: p0 + p, k0: k0, k1: k1, cost: t.cost(k0, k1, f.group)})
		}
	}
	slices.SortStableFunc(f.work, func(x, y flashWork) int { return cmp.Compare(y.cost, x.cost) })
}

// cost returns the number of (query row, key) pairs of t among keys
// [k0, k1), counting the causal mask.
func (t *flashTask) cost(k0, k1, group int) int {
	c := 0
	for i := range t.tokens {
		c += max(0, min(k1, t.first+i+1)-k0)
	}
	return c * group
}

// run computes one piece of work, on the path its task takes.
func (f *flashCall) run(w flashWork, sc *flashScratch) {
	m := f.tasks[w.task].tokens * f.group
	switch {
	case w.sgemm:
		// The band of a sliding window, whose keys some of the task's
		// tokens see and others do not: only the Sgemm path masks below.
		// Keys from the band on are seen by every token up to its own
		// position and take the kernels below, which mask causally only.
		f.runSgemm(w, sc)
	case f.asm && m <= decRows && f.hd%64 == 0:
		f.runDecode(w, sc)
	case f.asm:
		f.runTiles(w, sc)
	default:
		f.runSgemm(w, sc)
	}
}

// flashScratch is one thread's scratch: queries, scores and output of a
// task, keys and values of a tile (when gathered or widened), running
// maxima, denominators and rescaling factors, and for the assembly kernels
// the byte offsets of a tile's cache rows (offs), those of its copy (seq),
// the maxima of a tile's columns and the mask limits of its keys.
type flashScratch struct {
	buf           []float32
	q, s, o, k, v []float32
	mx, l, alpha  []float32
	cmax          []float32
	offs, seq     []int64
	lim           []int32
	bf            []uint16 // loadQ's rounding buffer
}

var flashScratches sync.Pool // *flashScratch

// loadQ copies one token's queries of a group (row layout) from src to
// dst, rounded to BF16 with roundQ (through sc's buffer: a local array
// passed to the kernels escaped, an allocation per call), times the scale.
func (f *flashCall) loadQ(dst, src []float32, sc *flashScratch) {
	copy(dst, src)
	if f.roundQ {
		if len(sc.bf) < 256 {
			sc.bf = make([]uint16, 256)
		}
		tmp := sc.bf[:256]
		for p := 0; p < len(dst); p += len(tmp) {
			part := dst[p:min(len(dst), p+len(tmp))]
			kernels.F32ToBF16(tmp[:len(part)], part)
			kernels.BF16ToF32(part, tmp[:len(part)])
		}
	}
	kernels.Scale(f.scale, dst)
}

// offsAhead is how many rows past a tile the assembly kernels read in an
// offsets table: they prefetch rows up to this far ahead (the decode
// kernels 16 keys, DPF in attention_dec_amd64.s; the tile kernels 8).
const offsAhead = 16

// getScratch returns a thread's scratch, laid out for f: room for maxRows
// query rows, rounded up to 16 (the assembly tile kernels hold them
// transposed, one lane per row), and for a key tile rounded up to 8 (their
// register tile is 8 keys), plus the offsAhead rows that the kernels
// prefetch past its end.
func (f *flashCall) getScratch() *flashScratch {
	sc, _ := flashScratches.Get().(*flashScratch)
	if sc == nil {
		sc = new(flashScratch)
	}
	m, nk, hd := (f.maxRows+15)&^15, (f.tl.keys+7)&^7, f.hd
	if n := 2*m*hd + m*nk + 2*(nk+offsAhead)*hd + 4*m; cap(sc.buf) < n {
		sc.buf = make([]float32, n)
	}
	b := sc.buf
	take := func(n int) []float32 {
		s := b[:n:n]
		b = b[n:]
		return s
	}
	sc.q, sc.o, sc.s = take(m*hd), take(m*hd), take(m*nk)
	sc.k, sc.v = take((nk+offsAhead)*hd), take((nk+offsAhead)*hd)
	sc.mx, sc.l, sc.alpha, sc.cmax = take(m), take(m), take(m), take(m)
	if cap(sc.offs) < nk+offsAhead {
		sc.offs, sc.seq, sc.lim = make([]int64, nk+offsAhead), make([]int64, nk+offsAhead), make([]int32, nk)
	}
	sc.offs, sc.seq, sc.lim = sc.offs[:nk+offsAhead], sc.seq[:nk+offsAhead], sc.lim[:nk]
	for j := range sc.seq {
		sc.seq[j] = int64(j * hd * 4)
	}
	return sc
}

// finish writes the output of a piece of work from its unnormalised output
// rows O (m × hd, row layout), maxima mx (natural log units) and
// denominators l: into dst when its task is not split, else, as part p of a
// split task, at part0 + p·m·(hd+2) of f.part: the m output rows normalised
// by their own denominators, then the m maxima, then the m denominators,
// for merge.
func (f *flashCall) finish(t *flashTask, part int, O, mx, l []float32) {
	hd, group := f.hd, f.group
	gw, m := group*hd, t.tokens*group
	if t.parts == 1 {
		for tok := range t.tokens {
			dst := f.out[(t.r0+tok)*f.qdim+t.g*gw:][:gw]
			for j := range group {
				i := tok*group + j
				d := dst[j*hd : (j+1)*hd]
				copy(d, O[i*hd:(i+1)*hd])
				kernels.Scale(1/l[i], d)
			}
		}
		return
	}
	base := f.part[t.part0+part*m*(hd+2):][:m*(hd+2)]
	po := base[:m*hd]
	copy(po, O[:m*hd])
	for i := range m {
		if l[i] > 0 {
			kernels.Scale(1/l[i], po[i*hd:(i+1)*hd])
		}
	}
	copy(base[m*hd:m*hd+m], mx)
	copy(base[m*hd+m:], l)
}

// merge combines the parts of split tasks. Part p of a row left its output
// o_p (normalised by its own denominator l_p) and its maximum mx_p; the
// row's softmax over all its keys weighs them by w_p = l_p·exp(mx_p − max
// mx):
//
//	out = Σ w_p·o_p / Σ w_p
//
// A part in which a row sees no key has l_p = 0 and weighs nothing.
//
// merge is the body of a ParallelFor over the tasks.
func (f *flashCall) merge(lo, hi int) {
	hd, group, gw := f.hd, f.group, f.group*f.hd
	var w [64]float32
	for ti := lo; ti < hi; ti++ {
		t := &f.tasks[ti]
		if t.parts == 1 {
			continue
		}
		m := t.tokens * group
		stride := m * (hd + 2)
		wts := w[:0]
		if t.parts > len(w) {
			wts = make([]float32, 0, t.parts)
		}
		for i := range m {
			tok, j := i/group, i%group
			d := f.out[(t.r0+tok)*f.qdim+t.g*gw+j*hd:][:hd]
			top := negInf32
			for p := range t.parts {
				top = max(top, f.part[t.part0+p*stride+m*hd+i])
			}
			wts = wts[:0]
			sum := float32(0)
			for p := range t.parts {
				base := t.part0 + p*stride
				wp := float32(0)
				if lp := f.part[base+m*hd+m+i]; lp > 0 {
					wp = lp * float32(math.Exp(float64(f.part[base+m*hd+i]-top)))
				}
				wts = append(wts, wp)
				sum += wp
			}
			clear(d)
			for p, wp := range wts {
				if wp != 0 {
					kernels.Axpy(wp/sum, f.part[t.part0+p*stride+i*hd:][:hd], d)
				}
			}
		}
	}
}
