package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/cpu/kernels"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/weights"
)

// Options configure a Scheduler.
type Options struct {
	// Model runs the forward passes. The scheduler is its only caller
	// while Run is running.
	Model *model.Model
	// Cache holds the keys and values of running sequences and the prefix
	// cache. It must belong to Model.
	Cache *model.KVCache
	// MaxBatch is the most sequences decoding together (default 32).
	MaxBatch int
	// QueueSize is the most requests waiting to start (default 64); more
	// get ErrQueueFull.
	QueueSize int
	// StepTokens is the most tokens one forward pass takes: every running
	// sequence's decode token first, then prompt chunks of waiting
	// prefills with what is left (default 512). It bounds how long a long
	// prompt can stall the decode of others.
	StepTokens int
	// NoPrefixCache turns off sharing of cached prompt prefixes.
	NoPrefixCache bool
	// Versions, if set, supplies the weights: each generation acquires the
	// current version when it starts and runs on it to the end, so its
	// tokens and log-probs all come from one policy. A version published
	// meanwhile is picked up by the generations that start after it; the
	// running ones are never paused or restarted. Nil means the model's
	// checkpoint weights, version 0, forever.
	Versions *weights.Store
	// MaxBackground is the most background requests running at once
	// (default a quarter of MaxBatch, at least 1); BackgroundQueue the most
	// waiting (default QueueSize). See Request.Background.
	MaxBackground, BackgroundQueue int
	// MinBackground slots stay with background requests even while
	// foreground ones wait (default 1; negative: none, strict priority),
	// so that scoring goes on under a sustained load of users instead of
	// starving, at the cost of that share of the batch.
	MinBackground int
	// BackgroundKV is the share of the KV cache's blocks background
	// requests may hold together (default 0.25; 1: all of it). A
	// background request beyond it waits, unless no other background
	// request runs; so users always find at least the rest free of judge
	// and teacher work, and a long judge prompt still runs alone.
	BackgroundKV float64
	// BackgroundPrefill is the most prompt tokens of background requests
	// one step computes while a foreground request runs (default 64;
	// negative: no limit beyond StepTokens). A judge prompt of a few
	// hundred tokens then spreads over several steps instead of making
	// one step of users' decoding several times longer; with no user
	// running, background prompts get the whole StepTokens.
	BackgroundPrefill int
	// BackgroundRows is the most background sequences one step decodes
	// while a foreground request runs (default 2; negative: no limit),
	// the least recently stepped first, so none starves. On a CPU every
	// row costs users time: judge samples with long prompts beside a few
	// users' short ones doubled a decode step.
	BackgroundRows int
	// Gate, if set, is taken around every forward pass (priority.Gate):
	// a training pass sharing the machine then gives way to the step at
	// its next slice boundary, and the two never run together. If it also
	// has an Idle method, the scheduler calls it whenever it runs out of
	// work, so that training may run freely until the next step.
	Gate interface{ Serve() (release func()) }
	// Log receives scheduler events.
	Log zerolog.Logger
}

// Stats is a snapshot of the scheduler's counters.
type Stats struct {
	Running, Waiting     int
	WaitingBackground    int    // background requests waiting
	Background           int    // background requests running
	PrefixBlocks         int    // blocks held by the prefix cache
	FreeBlocks           int    // KV blocks free now
	Steps                uint64 // forward passes
	PromptTokens         uint64 // prompt tokens computed (cache hits excluded)
	CachedTokens         uint64 // prompt tokens served from the prefix cache
	GeneratedTokens      uint64
	Preemptions          uint64 // sequences evicted from the KV cache and recomputed later
	Completed, Cancelled uint64
}

// Scheduler batches generations continuously: requests join the running
// batch between forward passes and leave it as they finish, long prompts are
// prefilled in chunks between decode steps, and prompt prefixes already in
// the KV cache are reused.
//
// One goroutine, started by Run, owns the model, the cache and every job;
// Generate only enqueues.
type Scheduler struct {
	opts    Options
	maxPos  int
	queue   chan *job
	bgQueue chan *job // background requests (Request.Background)
	prefix  *prefixCache
	// frozenPrefix caches prompt prefixes of frozen generations (the
	// checkpoint's weights; see Request.Frozen), which outlive versions.
	frozenPrefix *prefixCache
	running      []*job
	held         []*job // admitted before but preempted or not yet fitting; retried first
	heldBg       []*job // the same for background requests, retried after foreground ones
	// stalled is set by a preemption and cleared when a job leaves: until
	// then nothing new is admitted, or the victim would come straight back.
	stalled bool

	closed  atomic.Bool
	mu      sync.Mutex // guards stats
	stats   Stats
	version uint64 // current version, as last seen
	nstep   uint64 // steps run (for BackgroundRows' turns)
	// group buffers, one per weight set in a step, reused
	groupLogits [][]float32
}

type job struct {
	ctx     context.Context
	req     Request
	box     *mailbox
	sampler *sample.Sampler
	seq     *model.Sequence
	tokens  []int32 // prompt, then generated tokens
	nPrompt int
	cached  int // prompt tokens that came from the prefix cache
	started bool
	ver     *weights.Version // held from admission to release; nil without a store
	w       *model.Weights
	version uint64
	stepped uint64 // the scheduler step that last advanced it (background rows take turns)
}

// New checks opts and returns a scheduler; call Run to start it.
func New(opts Options) (*Scheduler, error) {
	if opts.Model == nil || opts.Cache == nil {
		return nil, errors.New("rollout: Options need a Model and a Cache")
	}
	if opts.MaxBatch == 0 {
		opts.MaxBatch = 32
	}
	if opts.QueueSize == 0 {
		opts.QueueSize = 64
	}
	if opts.StepTokens == 0 {
		opts.StepTokens = 512
	}
	if opts.MaxBackground == 0 {
		opts.MaxBackground = max(1, opts.MaxBatch/4)
	}
	if opts.BackgroundQueue == 0 {
		opts.BackgroundQueue = opts.QueueSize
	}
	switch {
	case opts.MinBackground == 0:
		opts.MinBackground = 1
	case opts.MinBackground < 0:
		opts.MinBackground = 0
	}
	opts.MinBackground = min(opts.MinBackground, opts.MaxBackground, max(0, opts.MaxBatch-1))
	if opts.MaxBackground < 1 || opts.BackgroundQueue < 1 {
		return nil, fmt.Errorf("rollout: need MaxBackground >= 1 and BackgroundQueue >= 1 (got %d, %d)", opts.MaxBackground, opts.BackgroundQueue)
	}
	if opts.BackgroundKV == 0 {
		opts.BackgroundKV = 0.25
	}
	if opts.BackgroundPrefill == 0 {
		opts.BackgroundPrefill = 64
	}
	if opts.BackgroundRows == 0 {
		opts.BackgroundRows = 2
	}
	if !(opts.BackgroundKV > 0 && opts.BackgroundKV <= 1) {
		return nil, fmt.Errorf("rollout: BackgroundKV %v must lie in (0, 1]", opts.BackgroundKV)
	}
	if opts.MaxBatch < 1 || opts.QueueSize < 1 || opts.StepTokens < opts.MaxBatch {
		return nil, fmt.Errorf("rollout: need MaxBatch >= 1, QueueSize >= 1 and StepTokens >= MaxBatch (got %d, %d, %d)",
			opts.MaxBatch, opts.QueueSize, opts.StepTokens)
	}
	s := &Scheduler{
		opts:    opts,
		maxPos:  opts.Model.Config.MaxPositions,
		queue:   make(chan *job, opts.QueueSize),
		bgQueue: make(chan *job, opts.BackgroundQueue),
	}
	if !opts.NoPrefixCache {
		s.prefix = newPrefixCache(opts.Cache)
		if opts.Versions != nil {
			s.frozenPrefix = newPrefixCache(opts.Cache)
		}
	}
	return s, nil
}

// Generate enqueues a generation. See Generator.
func (s *Scheduler) Generate(ctx context.Context, req Request) (<-chan Event, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if len(req.Prompt) == 0 {
		return nil, errors.New("rollout: empty prompt")
	}
	if req.MaxTokens < 1 {
		return nil, fmt.Errorf("rollout: MaxTokens %d must be >= 1", req.MaxTokens)
	}
	if len(req.Prompt)+req.MaxTokens > s.maxPos {
		return nil, fmt.Errorf("%w: %d prompt tokens + %d max tokens > %d", ErrContextLength, len(req.Prompt), req.MaxTokens, s.maxPos)
	}
	vocab := int32(s.opts.Model.Config.VocabSize)
	for i, t := range req.Prompt {
		if t < 0 || t >= vocab {
			return nil, fmt.Errorf("rollout: prompt token %d at %d is outside the vocabulary [0, %d)", t, i, vocab)
		}
	}
	if err := req.Sampling.Validate(); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	j := &job{
		ctx:     ctx,
		req:     req,
		sampler: sample.New(req.Sampling),
		tokens:  append(make([]int32, 0, len(req.Prompt)+req.MaxTokens), req.Prompt...),
		nPrompt: len(req.Prompt),
		box:     newMailbox(),
	}
	q := s.queue
	if req.Background {
		q = s.bgQueue
	}
	select {
	case q <- j:
	default:
		return nil, ErrQueueFull
	}
	// Its forwarding goroutine starts only once the job is accepted.
	j.box.start(ctx)
	return j.box.out, nil
}

// Stats returns a snapshot of the counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Waiting = len(s.queue)
	st.WaitingBackground = len(s.bgQueue)
	st.FreeBlocks = s.opts.Cache.FreeBlocks()
	return st
}

// Start runs the scheduler loop (Run) in a goroutine of its own until
// stop is called; stop returns once the loop has.
func (s *Scheduler) Start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// Run is the scheduler loop. It returns when ctx ends; requests still
// running or waiting then finish with an error event.
func (s *Scheduler) Run(ctx context.Context) error {
	defer s.shutdown()
	idle := func() {}
	if idler, ok := s.opts.Gate.(interface{ Idle() }); ok {
		idle = idler.Idle
	}
	defer idle() // a training pass waiting for serving must not wait for a stopped scheduler
	for {
		if len(s.running) == 0 && len(s.held) == 0 && len(s.heldBg) == 0 {
			s.mu.Lock()
			s.stats.Running, s.stats.Background = 0, 0
			s.mu.Unlock()
			idle()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case j := <-s.queue:
				s.held = append(s.held, j)
			case j := <-s.bgQueue:
				s.heldBg = append(s.heldBg, j)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.checkVersion()
		s.dropCancelled()
		s.admit()
		if len(s.running) == 0 {
			held := &s.held
			if len(*held) == 0 {
				held = &s.heldBg
			}
			if len(*held) > 0 {
				// Nothing runs and the first held request cannot fit even in
				// an empty cache: it never will.
				j := (*held)[0]
				*held = (*held)[1:]
				s.finish(j, FinishError, fmt.Errorf("rollout: prompt of %d tokens does not fit the KV cache (%d blocks of %d tokens)",
					len(j.tokens), s.opts.Cache.NumBlocks(), s.opts.Cache.BlockSize()))
			}
			continue
		}
		s.mu.Lock()
		s.stats.Running, s.stats.Background = len(s.running), s.backgroundRunning()
		if s.prefix != nil {
			s.stats.PrefixBlocks = s.prefix.size()
		}
		if s.frozenPrefix != nil {
			s.stats.PrefixBlocks += s.frozenPrefix.size()
		}
		s.mu.Unlock()
		if err := s.step(); err != nil {
			s.opts.Log.Error().Err(err).Msg("forward pass failed")
			for _, j := range s.running {
				s.finish(j, FinishError, err)
			}
			s.running = s.running[:0]
		}
	}
}

// releaseVersion lets go of the weights a job was pinned to.
func (s *Scheduler) releaseVersion(j *job) {
	if j.ver != nil {
		s.opts.Versions.Release(j.ver)
		j.ver = nil
	}
	j.w = nil
}

// shutdown ends every job still known to the scheduler.
func (s *Scheduler) shutdown() {
	s.closed.Store(true)
	for _, j := range s.running {
		s.finish(j, FinishError, ErrClosed)
	}
	for _, j := range append(s.held, s.heldBg...) {
		s.finish(j, FinishError, ErrClosed)
	}
	s.running, s.held, s.heldBg = nil, nil, nil
	for {
		select {
		case j := <-s.queue:
			s.finish(j, FinishError, ErrClosed)
		case j := <-s.bgQueue:
			s.finish(j, FinishError, ErrClosed)
		default:
			if s.prefix != nil {
				s.prefix.clear()
			}
			if s.frozenPrefix != nil {
				s.frozenPrefix.clear()
			}
			return
		}
	}
}

// checkVersion drops the prefix cache when the weights changed: its keys
// and values belong to the old weights.
func (s *Scheduler) checkVersion() {
	if s.opts.Versions == nil {
		return
	}
	v := s.opts.Versions.Current()
	if v == s.version {
		return
	}
	s.version = v
	if s.prefix != nil {
		s.prefix.clear()
	}
}

// acquire pins the current weights for a job starting now.
func (s *Scheduler) acquire(j *job) error {
	if s.opts.Versions == nil || j.req.Frozen {
		j.w, j.version = s.opts.Model.Weights(), 0
		return nil
	}
	v, err := s.opts.Versions.Acquire()
	if err != nil {
		return fmt.Errorf("rollout: weights: %w", err)
	}
	j.ver, j.w, j.version = v, v.Weights(), v.Number()
	if j.version != s.version {
		// Published since this step began: the prefix cache belongs to
		// the previous weights.
		s.version = j.version
		if s.prefix != nil {
			s.prefix.clear()
		}
	}
	return nil
}

// dropCancelled finishes jobs whose caller went away and frees their cache.
func (s *Scheduler) dropCancelled() {
	keep := s.running[:0]
	for _, j := range s.running {
		if j.ctx.Err() != nil {
			s.finish(j, FinishCancelled, nil)
			continue
		}
		keep = append(keep, j)
	}
	clear(s.running[len(keep):])
	s.running = keep
	for _, held := range []*[]*job{&s.held, &s.heldBg} {
		keep := (*held)[:0]
		for _, j := range *held {
			if j.ctx.Err() != nil {
				s.finish(j, FinishCancelled, nil)
				continue
			}
			keep = append(keep, j)
		}
		clear((*held)[len(keep):])
		*held = keep
	}
}

// admit moves waiting requests into the running batch while there is room
// in the batch and in the KV cache. Held requests go first, in order, and
// foreground before background: a background request starts only when no
// foreground one waits, and gives its slot up (preempted, to resume later)
// when a foreground one needs it.
func (s *Scheduler) admit() {
	s.yieldBackground()
	for len(s.running) < s.opts.MaxBatch && !(s.stalled && len(s.running) > 0) {
		held := s.nextWaiting()
		if held == nil {
			return
		}
		j := (*held)[0]
		if !s.start(j) {
			return
		}
		*held = (*held)[1:]
		s.running = append(s.running, j)
	}
}

// pull moves one live request from q into held; it reports false when q is
// empty.
func (s *Scheduler) pull(q chan *job, held *[]*job) bool {
	for {
		select {
		case j := <-q:
			if j.ctx.Err() != nil {
				s.finish(j, FinishCancelled, nil)
				continue
			}
			*held = append(*held, j)
			return true
		default:
			return false
		}
	}
}

// nextWaiting returns the held list whose first request is the next to
// start (pulling one from its queue if needed), or nil when none may.
func (s *Scheduler) nextWaiting() *[]*job {
	if s.backgroundRunning() < s.opts.MinBackground && (len(s.heldBg) > 0 || s.pull(s.bgQueue, &s.heldBg)) {
		return &s.heldBg // its guaranteed share
	}
	if len(s.held) > 0 || s.pull(s.queue, &s.held) {
		return &s.held
	}
	if s.backgroundRunning() >= s.opts.MaxBackground {
		return nil
	}
	if len(s.heldBg) > 0 || s.pull(s.bgQueue, &s.heldBg) {
		return &s.heldBg
	}
	return nil
}

func (s *Scheduler) backgroundRunning() int {
	n := 0
	for _, j := range s.running {
		if j.req.Background {
			n++
		}
	}
	return n
}

// backgroundFits reports whether a background request needing need more
// blocks keeps background work within its KV share; one alone always
// fits.
func (s *Scheduler) backgroundFits(need int) bool {
	held, n, bs := 0, 0, s.opts.Cache.BlockSize()
	for _, j := range s.running {
		if j.req.Background {
			// Blocks are reserved as the tokens run: count what the
			// request's tokens will take.
			held += max(len(j.seq.Blocks()), (len(j.tokens)+bs-1)/bs)
			n++
		}
	}
	return n == 0 || float64(held+need) <= s.opts.BackgroundKV*float64(s.opts.Cache.NumBlocks())
}

// yieldBackground preempts running background requests while the batch is
// full and a foreground request waits for a slot.
func (s *Scheduler) yieldBackground() {
	for len(s.running) >= s.opts.MaxBatch && (len(s.held) > 0 || s.pull(s.queue, &s.held)) {
		if s.backgroundRunning() <= s.opts.MinBackground {
			return // their guaranteed share
		}
		i := newestBackground(s.running)
		if i < 0 {
			return
		}
		s.preempt(i)
	}
}

// newestBackground is the index of the last background job in running, or
// -1.
func newestBackground(running []*job) int {
	for i := len(running) - 1; i >= 0; i-- {
		if running[i].req.Background {
			return i
		}
	}
	return -1
}

// preempt takes running job i out of the batch and frees its cache; it is
// retried first (its tokens so far are recomputed as its prompt).
func (s *Scheduler) preempt(i int) {
	victim := s.running[i]
	s.running = slices.Delete(s.running, i, i+1)
	victim.seq.Free()
	victim.seq = nil
	if victim.req.Background {
		s.heldBg = append([]*job{victim}, s.heldBg...)
	} else {
		s.held = append([]*job{victim}, s.held...)
	}
	s.mu.Lock()
	s.stats.Preemptions++
	s.mu.Unlock()
}

// prefixFor is the prefix cache of the weights j runs on: the current
// version's, the frozen checkpoint's, or none (an older version's).
func (s *Scheduler) prefixFor(j *job) *prefixCache {
	switch {
	case j.req.Frozen && s.opts.Versions != nil:
		return s.frozenPrefix
	case j.version == s.version:
		return s.prefix
	}
	return nil
}

// evictPrefixes frees up to n blocks held only by the prefix caches, the
// policy's first, and returns how many it freed.
func (s *Scheduler) evictPrefixes(n int) int {
	got := 0
	for _, pc := range []*prefixCache{s.prefix, s.frozenPrefix} {
		if pc != nil && got < n {
			got += pc.evict(n - got)
		}
	}
	return got
}

// start gives j a sequence, reusing cached prefix blocks, if the cache can
// hold its tokens now. It reports whether j can run.
func (s *Scheduler) start(j *job) bool {
	kv := s.opts.Cache
	bs := kv.BlockSize()
	if !j.started && j.w == nil {
		if err := s.acquire(j); err != nil {
			s.opts.Log.Error().Err(err).Msg("no weights to run on")
			return false
		}
	}
	j.seq = kv.NewSequence()
	// Only generations on the same weights share cached prefixes.
	if pc := s.prefixFor(j); pc != nil {
		// Attach first: that takes a reference, so the eviction below
		// cannot free the blocks this job is about to use.
		if blocks := pc.lookup(j.tokens); len(blocks) > 0 {
			if err := j.seq.Attach(blocks, len(blocks)*bs); err != nil {
				s.opts.Log.Error().Err(err).Msg("prefix cache attach failed")
			}
		}
	}
	// Room for every token it has plus one step of decoding, and a block of
	// growth for each sequence already running.
	need := (len(j.tokens)+1+bs-1)/bs - len(j.seq.Blocks()) + len(s.running)
	avail := kv.FreeBlocks()
	if need > avail {
		avail += s.evictPrefixes(need - avail)
	}
	if need > avail || (j.req.Background && !s.backgroundFits(need)) {
		j.seq.Free()
		j.seq = nil
		if !j.started {
			// Nothing computed yet: take the newest weights when it fits.
			s.releaseVersion(j)
		}
		return false
	}
	if !j.started {
		j.cached = j.seq.Len()
		s.mu.Lock()
		s.stats.CachedTokens += uint64(j.cached)
		s.mu.Unlock()
	}
	return true
}

// budgeted is a Constraint that wants to know how many tokens the
// generation may still write (grammar.Constraint closes its document
// before max_tokens).
type budgeted interface{ SetBudget(tokens int) }

// sampleConstrained draws a token c allows, from the model's distribution
// restricted to the allowed tokens (sample.Sampler.SampleAllowed: the
// mask, then temperature and truncation), and reports the model's own
// log-probs beside the log-prob under that restricted distribution, and
// whether c allowed no other token.
func sampleConstrained(smp *sample.Sampler, row []float32, c Constraint) (sample.Result, error) {
	r, err := smp.SampleAllowed(row, c.Allow)
	if err != nil {
		return r, fmt.Errorf("constrained decoding: %w", err)
	}
	return r, nil
}

// step runs one forward pass over the running batch and samples.
func (s *Scheduler) step() error {
	budget := s.opts.StepTokens
	steps := make([]model.Step, 0, len(s.running))
	jobs := make([]*job, 0, len(s.running))
	s.nstep++
	users := slices.ContainsFunc(s.running, func(j *job) bool { return !j.req.Background })
	// Decoding sequences first: one token each; background ones within
	// BackgroundRows while a user's request runs, taking turns.
	var bgDecode []*job
	for _, j := range s.running {
		if len(j.tokens)-j.seq.Len() == 1 {
			if users && j.req.Background && s.opts.BackgroundRows > 0 {
				bgDecode = append(bgDecode, j)
				continue
			}
			steps = append(steps, model.Step{Seq: j.seq, Tokens: j.tokens[j.seq.Len():]})
			jobs = append(jobs, j)
			j.stepped = s.nstep
			budget--
		}
	}
	slices.SortStableFunc(bgDecode, func(a, b *job) int { return cmp.Compare(a.stepped, b.stepped) })
	for _, j := range bgDecode[:min(len(bgDecode), max(s.opts.BackgroundRows, 0))] {
		steps = append(steps, model.Step{Seq: j.seq, Tokens: j.tokens[j.seq.Len():]})
		jobs = append(jobs, j)
		j.stepped = s.nstep
		budget--
	}
	// Then prompt chunks, oldest first, with what is left; background
	// prompts within BackgroundPrefill while a user's request runs.
	prefill := 0
	bgBudget := budget
	if s.opts.BackgroundPrefill > 0 && users {
		bgBudget = s.opts.BackgroundPrefill
	}
	for _, j := range s.running {
		pending := len(j.tokens) - j.seq.Len()
		if pending <= 1 || budget <= 0 {
			continue
		}
		n := min(pending, budget)
		if j.req.Background {
			if bgBudget <= 0 {
				continue
			}
			n = min(n, bgBudget)
			bgBudget -= n
		}
		steps = append(steps, model.Step{Seq: j.seq, Tokens: j.tokens[j.seq.Len() : j.seq.Len()+n]})
		jobs = append(jobs, j)
		budget -= n
		prefill += n
	}
	// One forward pass per weight set: usually one, two while generations
	// that started before a publication finish on the old weights.
	rows := make([][]float32, len(jobs))
	var sets []*model.Weights
	for _, j := range jobs {
		if !slices.Contains(sets, j.w) {
			sets = append(sets, j.w)
		}
	}
	for len(s.groupLogits) < len(sets) {
		s.groupLogits = append(s.groupLogits, nil)
	}
	vocab := s.opts.Model.Config.VocabSize
	ran := make([]bool, len(jobs))
	full := false
	for g, w := range sets {
		var gsteps []model.Step
		var idx []int
		for i, j := range jobs {
			if j.w == w {
				gsteps = append(gsteps, steps[i])
				idx = append(idx, i)
			}
		}
		release := func() {}
		if s.opts.Gate != nil {
			release = s.opts.Gate.Serve()
		}
		logits, err := s.opts.Model.Run(w, gsteps, model.LastLogits, s.groupLogits[g])
		release()
		if errors.Is(err, model.ErrCacheFull) {
			full = true // this group did not advance; the others may have
			continue
		}
		if err != nil {
			return err
		}
		s.groupLogits[g] = logits
		for k, i := range idx {
			rows[i] = logits[k*vocab : (k+1)*vocab]
			ran[i] = true
		}
	}
	if full {
		defer s.makeRoom()
	}
	s.mu.Lock()
	s.stats.Steps++
	s.stats.PromptTokens += uint64(prefill)
	s.mu.Unlock()
	// Sample every sequence whose prompt is done, in parallel: each job has
	// its own sampler, and a vocabulary-wide softmax per sequence adds up.
	results := make([]sample.Result, len(jobs))
	errs := make([]error, len(jobs))
	kernels.ParallelFor(len(jobs), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if j := jobs[i]; ran[i] && j.seq.Len() == len(j.tokens) {
				if j.req.Constraint != nil {
					if b, ok := j.req.Constraint.(budgeted); ok {
						b.SetBudget(j.req.MaxTokens - (len(j.tokens) - j.nPrompt))
					}
					results[i], errs[i] = sampleConstrained(j.sampler, rows[i], j.req.Constraint)
				} else {
					results[i], errs[i] = j.sampler.Sample(rows[i])
				}
			}
		}
	})
	done := map[*job]bool{}
	for i, j := range jobs {
		if !ran[i] || j.seq.Len() < len(j.tokens) {
			continue // not run this step, or prompt not finished yet
		}
		if pc := s.prefixFor(j); j.seq.Len() == j.nPrompt && pc != nil {
			pc.insert(j.tokens, j.seq.Blocks())
		}
		r, err := results[i], errs[i]
		if err != nil {
			s.finish(j, FinishError, fmt.Errorf("rollout: sampling: %w", err))
			done[j] = true
			continue
		}
		ev := Event{Token: r.Token, HasToken: true, LogProb: r.LogProb, SampleLogProb: r.SampleLogProb, Forced: r.Forced, Top: r.Top, Version: j.version}
		if !j.started {
			j.started = true
			ev.CachedTokens = j.cached
		}
		if j.req.Constraint != nil {
			j.req.Constraint.Accept(r.Token)
		}
		j.tokens = append(j.tokens, r.Token)
		generated := len(j.tokens) - j.nPrompt
		switch {
		case slices.Contains(j.req.StopTokens, r.Token):
			ev.Finish = FinishStop
		case generated >= j.req.MaxTokens || len(j.tokens) >= s.maxPos:
			ev.Finish = FinishLength
		}
		s.mu.Lock()
		s.stats.GeneratedTokens++
		s.mu.Unlock()
		if ev.Finish != "" {
			s.complete(j, ev)
			done[j] = true
			continue
		}
		j.box.post(ev)
	}
	if len(done) > 0 {
		s.running = slices.DeleteFunc(s.running, func(j *job) bool { return done[j] })
	}
	return nil
}

// makeRoom frees KV blocks after a forward pass found the cache full: first
// cached prefixes nobody uses, then the most recently admitted sequence,
// which is preempted and recomputed when there is room again.
func (s *Scheduler) makeRoom() {
	if s.evictPrefixes(len(s.running)+1) > 0 {
		return
	}
	if len(s.running) <= 1 {
		// A lone sequence that does not fit: nothing else to take room from.
		j := s.running[0]
		s.running = s.running[:0]
		s.finish(j, FinishLength, nil)
		return
	}
	// The newest background sequence first, else the newest.
	i := newestBackground(s.running)
	if i < 0 {
		i = len(s.running) - 1
	}
	tokens := len(s.running[i].tokens)
	s.preempt(i)
	s.stalled = true
	s.opts.Log.Debug().Int("tokens", tokens).Msg("preempted a sequence: KV cache full")
}

// complete posts a job's last token with its finish reason and frees it.
func (s *Scheduler) complete(j *job, last Event) {
	if pc := s.prefixFor(j); pc != nil && j.seq != nil {
		// Keep the whole conversation so far: the next turn resends it.
		pc.insert(j.tokens[:j.seq.Len()], j.seq.Blocks())
	}
	s.release(j)
	s.mu.Lock()
	s.stats.Completed++
	s.mu.Unlock()
	j.box.post(last)
}

// finish ends a job without a token.
func (s *Scheduler) finish(j *job, reason FinishReason, err error) {
	s.release(j)
	if reason == FinishCancelled {
		s.mu.Lock()
		s.stats.Cancelled++
		s.mu.Unlock()
	}
	j.box.post(Event{Finish: reason, Err: err, Version: j.version})
}

func (s *Scheduler) release(j *job) {
	s.stalled = false
	if j.seq != nil {
		j.seq.Free()
		j.seq = nil
	}
	s.releaseVersion(j)
}
