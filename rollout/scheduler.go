package rollout

import (
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
	// Log receives scheduler events.
	Log zerolog.Logger
}

// Stats is a snapshot of the scheduler's counters.
type Stats struct {
	Running, Waiting     int
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
	prefix  *prefixCache
	running []*job
	held    []*job // admitted before but preempted or not yet fitting; retried first
	// stalled is set by a preemption and cleared when a job leaves: until
	// then nothing new is admitted, or the victim would come straight back.
	stalled bool

	closed  atomic.Bool
	mu      sync.Mutex // guards stats
	stats   Stats
	version uint64 // current version, as last seen
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
	if opts.MaxBatch < 1 || opts.QueueSize < 1 || opts.StepTokens < opts.MaxBatch {
		return nil, fmt.Errorf("rollout: need MaxBatch >= 1, QueueSize >= 1 and StepTokens >= MaxBatch (got %d, %d, %d)",
			opts.MaxBatch, opts.QueueSize, opts.StepTokens)
	}
	s := &Scheduler{
		opts:   opts,
		maxPos: opts.Model.Config.MaxPositions,
		queue:  make(chan *job, opts.QueueSize),
	}
	if !opts.NoPrefixCache {
		s.prefix = newPrefixCache(opts.Cache)
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
	select {
	case s.queue <- j:
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
	for {
		if len(s.running) == 0 && len(s.held) == 0 {
			s.mu.Lock()
			s.stats.Running = 0
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case j := <-s.queue:
				s.held = append(s.held, j)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.checkVersion()
		s.dropCancelled()
		s.admit()
		if len(s.running) == 0 {
			if len(s.held) > 0 {
				// Nothing runs and the first held request cannot fit even in
				// an empty cache: it never will.
				j := s.held[0]
				s.held = s.held[1:]
				s.finish(j, FinishError, fmt.Errorf("rollout: prompt of %d tokens does not fit the KV cache (%d blocks of %d tokens)",
					len(j.tokens), s.opts.Cache.NumBlocks(), s.opts.Cache.BlockSize()))
			}
			continue
		}
		s.mu.Lock()
		s.stats.Running = len(s.running)
		if s.prefix != nil {
			s.stats.PrefixBlocks = s.prefix.size()
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
	for _, j := range s.held {
		s.finish(j, FinishError, ErrClosed)
	}
	s.running, s.held = nil, nil
	for {
		select {
		case j := <-s.queue:
			s.finish(j, FinishError, ErrClosed)
		default:
			if s.prefix != nil {
				s.prefix.clear()
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
	if s.opts.Versions == nil {
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
	heldKeep := s.held[:0]
	for _, j := range s.held {
		if j.ctx.Err() != nil {
			s.finish(j, FinishCancelled, nil)
			continue
		}
		heldKeep = append(heldKeep, j)
	}
	clear(s.held[len(heldKeep):])
	s.held = heldKeep
}

// admit moves waiting requests into the running batch while there is room
// in the batch and in the KV cache. Held requests go first, in order.
func (s *Scheduler) admit() {
	for len(s.running) < s.opts.MaxBatch && !(s.stalled && len(s.running) > 0) {
		if len(s.held) == 0 {
			select {
			case j := <-s.queue:
				if j.ctx.Err() != nil {
					s.finish(j, FinishCancelled, nil)
					continue
				}
				s.held = append(s.held, j)
			default:
				return
			}
		}
		j := s.held[0]
		if !s.start(j) {
			return
		}
		s.held = s.held[1:]
		s.running = append(s.running, j)
	}
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
	// Only generations on the current weights share cached prefixes.
	if s.prefix != nil && j.version == s.version {
		// Attach first: that takes a reference, so the eviction below
		// cannot free the blocks this job is about to use.
		if blocks := s.prefix.lookup(j.tokens); len(blocks) > 0 {
			if err := j.seq.Attach(blocks, len(blocks)*bs); err != nil {
				s.opts.Log.Error().Err(err).Msg("prefix cache attach failed")
			}
		}
	}
	// Room for every token it has plus one step of decoding, and a block of
	// growth for each sequence already running.
	need := (len(j.tokens)+1+bs-1)/bs - len(j.seq.Blocks()) + len(s.running)
	avail := kv.FreeBlocks()
	if need > avail && s.prefix != nil {
		avail += s.prefix.evict(need - avail)
	}
	if need > avail {
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

// step runs one forward pass over the running batch and samples.
func (s *Scheduler) step() error {
	budget := s.opts.StepTokens
	steps := make([]model.Step, 0, len(s.running))
	jobs := make([]*job, 0, len(s.running))
	// Decoding sequences first: one token each.
	for _, j := range s.running {
		if len(j.tokens)-j.seq.Len() == 1 {
			steps = append(steps, model.Step{Seq: j.seq, Tokens: j.tokens[j.seq.Len():]})
			jobs = append(jobs, j)
			budget--
		}
	}
	// Then prompt chunks, oldest first, with what is left.
	prefill := 0
	for _, j := range s.running {
		pending := len(j.tokens) - j.seq.Len()
		if pending <= 1 || budget <= 0 {
			continue
		}
		n := min(pending, budget)
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
		logits, err := s.opts.Model.Run(w, gsteps, model.LastLogits, s.groupLogits[g])
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
				results[i], errs[i] = j.sampler.Sample(rows[i])
			}
		}
	})
	done := map[*job]bool{}
	for i, j := range jobs {
		if !ran[i] || j.seq.Len() < len(j.tokens) {
			continue // not run this step, or prompt not finished yet
		}
		if j.seq.Len() == j.nPrompt && s.prefix != nil && j.version == s.version {
			s.prefix.insert(j.tokens, j.seq.Blocks())
		}
		r, err := results[i], errs[i]
		if err != nil {
			s.finish(j, FinishError, fmt.Errorf("rollout: sampling: %w", err))
			done[j] = true
			continue
		}
		ev := Event{Token: r.Token, HasToken: true, LogProb: r.LogProb, Top: r.Top, Version: j.version}
		if !j.started {
			j.started = true
			ev.CachedTokens = j.cached
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
	if s.prefix != nil && s.prefix.evict(len(s.running)+1) > 0 {
		return
	}
	if len(s.running) <= 1 {
		// A lone sequence that does not fit: nothing else to take room from.
		j := s.running[0]
		s.running = s.running[:0]
		s.finish(j, FinishLength, nil)
		return
	}
	victim := s.running[len(s.running)-1]
	s.running = s.running[:len(s.running)-1]
	victim.seq.Free()
	victim.seq = nil
	s.held = append([]*job{victim}, s.held...)
	s.stalled = true
	s.mu.Lock()
	s.stats.Preemptions++
	s.mu.Unlock()
	s.opts.Log.Debug().Int("tokens", len(victim.tokens)).Msg("preempted a sequence: KV cache full")
}

// complete posts a job's last token with its finish reason and frees it.
func (s *Scheduler) complete(j *job, last Event) {
	if s.prefix != nil && j.seq != nil && j.version == s.version {
		// Keep the whole conversation so far: the next turn resends it.
		s.prefix.insert(j.tokens[:j.seq.Len()], j.seq.Blocks())
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
