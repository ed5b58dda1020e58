package reward

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/ratelog"
	"github.com/clawrl/clawrl/tokenizer"
)

// Options configure a Scorer.
type Options struct {
	Config Config
	// Judge samples the votes and the hints.
	Judge Backend
	// Teacher scores responses under the hint context; nil turns hints and
	// distillation off.
	Teacher Teacher
	// Rollouts generates the teacher's own responses under the hint for
	// methods that use hinted rollouts; nil turns them off.
	Rollouts RolloutGenerator
	// Tokenizer is the policy's tokenizer, whose chat template renders the
	// teacher context; required with a Teacher. The teacher model must
	// share its vocabulary.
	Tokenizer *tokenizer.Tokenizer
	// Metrics receive the judge's counts (nil: a fresh unregistered set).
	Metrics *Metrics
	// Log receives judge failures and shutdown notes.
	Log zerolog.Logger
}

// Errors of Submit.
var (
	// ErrBusy means the scoring queue is full: keep the turn (it is in the
	// store) and offer it again later.
	ErrBusy = errors.New("reward: scoring queue full")
	// ErrClosed means Run has stopped.
	ErrClosed = errors.New("reward: scorer stopped")
)

// Result is the outcome of a turn submitted to Run's workers.
type Result struct {
	TurnID string
	Sample Sample
	// Err is set when the turn could not be scored (invalid input); a
	// failing judge is not an error but a neutral Sample.
	Err error
}

// Scorer scores turns: Score for one turn now, or Submit and Run for a
// bounded pool of workers. It is safe for concurrent use.
type Scorer struct {
	cfg     Config
	judge   Backend
	teacher Teacher
	gen     RolloutGenerator
	tok     *tokenizer.Tokenizer
	m       *Metrics
	log     zerolog.Logger
	warn    *ratelog.Limiter // per-turn failures, at most a line per interval

	sem     chan struct{} // judge calls in flight
	in      chan Turn
	out     chan Result
	running atomic.Bool
	closed  atomic.Bool
}

// New checks opts and returns a Scorer.
func New(opts Options) (*Scorer, error) {
	if err := ValidateConfig(opts.Config); err != nil {
		return nil, err
	}
	if opts.Judge == nil {
		return nil, errors.New("reward: Options need a Judge backend")
	}
	if (opts.Teacher != nil || opts.Rollouts != nil) && opts.Tokenizer == nil {
		return nil, errors.New("reward: a Teacher or hinted rollouts need the policy's Tokenizer for the teacher context")
	}
	if (opts.Teacher != nil || opts.Rollouts != nil) && !opts.Tokenizer.HasChatTemplate() {
		return nil, errors.New("reward: the policy's tokenizer has no chat template for the teacher context")
	}
	m := opts.Metrics
	if m == nil {
		var err error
		if m, err = NewMetrics(nil); err != nil {
			return nil, err
		}
	}
	c := opts.Config
	return &Scorer{
		cfg: c, judge: opts.Judge, teacher: opts.Teacher, gen: opts.Rollouts, tok: opts.Tokenizer, m: m, log: opts.Log,
		warn: ratelog.New(opts.Log, 10*time.Second),
		sem:  make(chan struct{}, c.MaxConcurrent),
		in:   make(chan Turn, c.QueueSize),
		out:  make(chan Result, c.QueueSize),
	}, nil
}

// Submit queues t for Run's workers without blocking. It returns ErrBusy
// when the queue is full, ErrClosed after Run has stopped, or the reason t
// cannot be scored at all.
func (s *Scorer) Submit(t Turn) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := t.validate(); err != nil {
		return err
	}
	select {
	case s.in <- t:
		return nil
	default:
		s.m.Busy.Inc()
		return ErrBusy
	}
}

// Room is how many turns Submit would take now (the queue's free slots).
func (s *Scorer) Room() int { return cap(s.in) - len(s.in) }

// Results delivers the outcome of every submitted turn that was scored.
// It is closed when Run returns. Read it steadily: when it is full, the
// workers wait, the queue fills and Submit answers ErrBusy.
func (s *Scorer) Results() <-chan Result { return s.out }

// Run scores submitted turns with Config.Workers workers until ctx ends,
// then waits for them and returns ctx's error. Turns being scored or
// waiting when ctx ends are not reported (the caller's store still holds
// them as unscored). Run may be called once.
func (s *Scorer) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("reward: Run called twice")
	}
	defer close(s.out)
	stop := context.AfterFunc(ctx, func() { s.closed.Store(true) })
	defer stop()
	var wg sync.WaitGroup
	for range s.cfg.Workers {
		wg.Go(func() { s.work(ctx) })
	}
	wg.Wait()
	s.closed.Store(true)
	if n := len(s.in); n > 0 {
		s.log.Info().Int("turns", n).Msg("reward: stopped with turns still queued; they stay unscored")
	}
	return ctx.Err()
}

func (s *Scorer) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-s.in:
			sm, err := s.Score(ctx, t)
			if ctx.Err() != nil {
				return
			}
			select {
			case s.out <- Result{TurnID: t.ID, Sample: sm, Err: err}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// Score scores one turn: votes (unless a thumb decides), hints and the
// teacher, then BuildSample. A judge or teacher that fails degrades the
// Sample (neutral reward, no distillation; see Sample.Note) instead of
// returning an error; Score returns an error only for an invalid turn or
// when ctx ends, and then the turn should be scored again later.
func (s *Scorer) Score(ctx context.Context, t Turn) (Sample, error) {
	if err := t.validate(); err != nil {
		return Sample{}, err
	}
	thumb, fbText := t.explicit()
	evidence := len(t.NextState) > 0 || fbText != ""

	var (
		o  Outcome
		h  hintOutcome
		wg sync.WaitGroup
	)
	useDistill, useHinted := s.hintUses()
	if evidence && s.hints() {
		wg.Go(func() { h = s.hint(ctx, &t, fbText) })
	}
	switch {
	case thumb != 0:
		o.Reward, o.Source = thumb, SourceFeedback
	case !evidence:
		o.Source = SourceNoEvidence
	default:
		s.vote(ctx, &t, fbText, &o)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Sample{}, fmt.Errorf("reward: scoring turn %q: %w", t.ID, err)
	}
	o.HintVotes, o.HintAccepts = h.votes, h.accepts
	if h.note != "" {
		o.Note = joinNote(o.Note, h.note)
	}
	var rollouts []HintedRollout
	if h.hint != "" {
		o.Hint = h.hint
	}
	if h.hint != "" && useHinted {
		rs, err := s.rollouts(ctx, &t, h.hint)
		switch {
		case ctx.Err() != nil:
			return Sample{}, fmt.Errorf("reward: scoring turn %q: %w", t.ID, ctx.Err())
		case err != nil:
			s.degraded(&t, &o, "rollouts", "hinted rollouts", "none for this turn", err)
		default:
			rollouts = rs
		}
	}
	if h.hint != "" && useDistill {
		lp, err := s.teach(ctx, &t, h.hint)
		switch {
		case ctx.Err() != nil:
			return Sample{}, fmt.Errorf("reward: scoring turn %q: %w", t.ID, ctx.Err())
		case err != nil:
			s.degraded(&t, &o, "teacher", "teacher", "no distillation for this turn", err)
		default:
			o.TeacherLogProbs = lp
		}
	}
	sm := BuildSample(t, o)
	sm.Kind = s.cfg.restrict(sm.Kind)
	if sm.Kind != KindDistill && sm.Kind != KindBoth {
		sm.TeacherLogProbs = nil
	}
	sm.Rollouts = rollouts
	s.m.Turns.WithLabelValues(sm.Kind.String(), string(sm.Source)).Inc()
	return sm, nil
}

// hintUses reports whether hints feed distillation and hinted rollouts.
func (s *Scorer) hintUses() (distill, hinted bool) {
	return s.cfg.uses(MethodDistill) && s.teacher != nil, s.cfg.uses(MethodHinted) && s.gen != nil && s.cfg.HintedRollouts > 0
}

// hints reports whether Score asks the hint judge about a turn with
// evidence.
func (s *Scorer) hints() bool {
	distill, hinted := s.hintUses()
	return (distill || hinted) && s.cfg.HintVotes > 0
}

// NeedsJudge reports whether scoring t calls the judge (votes or hints).
// It does not for a turn whose reward a thumb decides and that carries
// nothing to draw a hint from (no next state, no feedback text, or hints
// off), nor for a turn with no evidence at all: Score returns at once for
// those, without waiting for a worker.
func (s *Scorer) NeedsJudge(t Turn) bool {
	thumb, fbText := t.explicit()
	evidence := len(t.NextState) > 0 || fbText != ""
	return evidence && (thumb == 0 || s.hints())
}

// Waiting is how many submitted turns wait for a worker.
func (s *Scorer) Waiting() int { return len(s.in) }

// Workers is how many turns Run scores at once.
func (s *Scorer) Workers() int { return s.cfg.Workers }

// vote asks the judge for the votes and folds them into o. When the
// next state opens with a user message that goes on after its reaction
// (reaction.go), the judge reads the reaction alone, whose complaint is
// the vote, then the reaction and the sentence after it, whose complaint
// is the vote; else the reaction's vote stands. Otherwise it reads the
// whole next state.
func (s *Scorer) vote(ctx context.Context, t *Turn, fbText string, o *Outcome) {
	view := t
	if r, cut := reactionTurn(t, 1); cut {
		votes, invalid, err := s.votes(ctx, &r, fbText)
		if err != nil {
			s.judgeFailed(ctx, t, err, o)
			return
		}
		o.Votes, o.InvalidVotes, o.Source = votes, invalid, SourceJudge
		o.Reward, o.Tie = Majority(votes)
		if o.Reward == -1 {
			return
		}
		if r2, cut := reactionTurn(t, 2); cut {
			view = &r2
		}
		votes, invalid, err = s.votes(ctx, view, fbText)
		if err != nil {
			s.judgeFailed(ctx, t, err, o)
			return
		}
		if reward, tie := Majority(votes); reward == -1 {
			o.Votes, o.InvalidVotes, o.Reward, o.Tie = votes, invalid, reward, tie
		}
		if o.Tie {
			s.m.Ties.Inc()
		}
		return
	}
	votes, invalid, err := s.votes(ctx, view, fbText)
	if err != nil {
		s.judgeFailed(ctx, t, err, o)
		return
	}
	o.Votes, o.InvalidVotes, o.Source = votes, invalid, SourceJudge
	o.Reward, o.Tie = Majority(votes)
	if o.Tie {
		s.m.Ties.Inc()
	}
}

// votes asks the vote judge about t and parses its votes.
func (s *Scorer) votes(ctx context.Context, t *Turn, fbText string) (votes []int, invalid int, err error) {
	texts, err := s.call(ctx, "vote", Request{
		Messages:    JudgeMessages(t, fbText, s.cfg.Limits),
		N:           s.cfg.Votes,
		Temperature: s.cfg.Temperature,
		MaxTokens:   s.cfg.MaxTokens,
	})
	if err != nil {
		return nil, 0, err
	}
	for _, text := range texts {
		v, ok := ParseVote(text)
		if !ok {
			invalid++
			s.m.ParseFailures.WithLabelValues("vote").Inc()
			continue
		}
		votes = append(votes, v)
		s.m.Votes.WithLabelValues(voteClass(v)).Inc()
	}
	return votes, invalid, nil
}

// judgeFailed records a vote judge that failed: the turn scores neutral,
// whatever an earlier call of the same vote said.
func (s *Scorer) judgeFailed(ctx context.Context, t *Turn, err error, o *Outcome) {
	if ctx.Err() != nil {
		return
	}
	s.m.Failures.WithLabelValues("vote").Inc()
	s.warn.Warn("judge", fmt.Errorf("turn %s: %w", t.ID, err), "reward: judge failed; scoring the turn neutral")
	o.Votes, o.InvalidVotes, o.Reward, o.Tie = nil, 0, 0, false
	o.Source = SourceJudgeFailed
	o.Note = "judge failed: " + err.Error()
}

type hintOutcome struct {
	hint           string
	votes, accepts int
	note           string
}

// hint asks the hint judge for hints and picks one.
func (s *Scorer) hint(ctx context.Context, t *Turn, fbText string) hintOutcome {
	texts, err := s.call(ctx, "hint", Request{
		Messages:    HintMessages(t, fbText, s.cfg.Limits),
		N:           s.cfg.HintVotes,
		Temperature: s.cfg.Temperature,
		MaxTokens:   s.cfg.HintMaxTokens,
	})
	if err != nil {
		if ctx.Err() != nil {
			return hintOutcome{}
		}
		s.m.Failures.WithLabelValues("hint").Inc()
		s.warn.Warn("hint", fmt.Errorf("turn %s: %w", t.ID, err), "reward: hint judge failed; no hint for this turn")
		return hintOutcome{note: "hint judge failed: " + err.Error()}
	}
	var h hintOutcome
	var hints []string
	for _, text := range texts {
		h.votes++
		hv := ParseHint(text)
		switch {
		case !hv.Valid:
			s.m.ParseFailures.WithLabelValues("hint").Inc()
			s.m.HintVotes.WithLabelValues("invalid").Inc()
		case !hv.Accept:
			s.m.HintVotes.WithLabelValues("decline").Inc()
		case len([]rune(hv.Hint)) > s.cfg.MaxHintChars:
			// Too long to be a hint: count it as declined.
			s.m.HintVotes.WithLabelValues("decline").Inc()
		case s.cfg.HintGrounding && !Grounded(hv.Hint, HintEvidence(t, fbText)):
			s.m.HintVotes.WithLabelValues("ungrounded").Inc()
		default:
			s.m.HintVotes.WithLabelValues("accept").Inc()
			h.accepts++
			hints = append(hints, hv.Hint)
		}
	}
	h.hint = SelectHint(hints, s.cfg.HintRule)
	return h
}

// teach scores the turn's response under the hint context.
func (s *Scorer) teach(ctx context.Context, t *Turn, hint string) ([]float32, error) {
	prompt, err := TeacherPrompt(s.tok, t, hint)
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	lp, err := s.teacher.LogProbs(tctx, prompt, t.ResponseTokens)
	s.m.Latency.WithLabelValues("teacher").Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	if len(lp) != len(t.ResponseTokens) {
		return nil, fmt.Errorf("reward: teacher returned %d log-probs for %d response tokens", len(lp), len(t.ResponseTokens))
	}
	return lp, nil
}

// degraded records a hint stage that failed for turn t: counted by stage,
// logged (rate-limited) and noted on the outcome, which goes on without it.
func (s *Scorer) degraded(t *Turn, o *Outcome, stage, what, consequence string, err error) {
	s.m.Failures.WithLabelValues(stage).Inc()
	s.warn.Warn(stage, fmt.Errorf("turn %s: %w", t.ID, err), "reward: "+what+" failed; "+consequence)
	o.Note = joinNote(o.Note, what+" failed: "+err.Error())
}

// rollouts has the teacher generate responses to the turn's prompt with
// the hint in context. A rollout may run to about twice the sampled
// response's length (at least 64 tokens), within RolloutMaxTokens.
func (s *Scorer) rollouts(ctx context.Context, t *Turn, hint string) ([]HintedRollout, error) {
	prompt, err := TeacherPrompt(s.tok, t, hint)
	if err != nil {
		return nil, err
	}
	maxTokens := min(s.cfg.RolloutMaxTokens, max(2*len(t.ResponseTokens)+16, 64))
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	rs, err := s.gen.Rollouts(rctx, prompt, s.cfg.HintedRollouts, maxTokens, s.cfg.RolloutTemperature)
	s.m.Latency.WithLabelValues("rollouts").Observe(time.Since(start).Seconds())
	return rs, err
}

// call runs one judge call with a per-attempt timeout, a slot of the
// concurrency semaphore per attempt, and retries with exponential back-off
// and jitter. It returns ctx's error as soon as ctx ends.
func (s *Scorer) call(ctx context.Context, stage string, req Request) ([]string, error) {
	var last error
	attempts := 0
	for attempts < s.cfg.MaxAttempts {
		if attempts > 0 {
			s.m.Retries.WithLabelValues(stage).Inc()
			t := time.NewTimer(s.backoff(attempts))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		attempts++
		out, err := s.attempt(ctx, stage, req)
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		last = err
		if IsPermanent(err) {
			break
		}
	}
	return nil, fmt.Errorf("reward: %s judge failed after %d attempts: %w", stage, attempts, last)
}

func (s *Scorer) attempt(ctx context.Context, stage string, req Request) ([]string, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.sem }()
	actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	start := time.Now()
	out, err := s.judge.Complete(actx, req)
	s.m.Latency.WithLabelValues(stage).Observe(time.Since(start).Seconds())
	if err == nil && len(out) == 0 {
		err = errors.New("reward: judge returned no completions")
	}
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		err = fmt.Errorf("attempt timed out after %v: %w", s.cfg.Timeout, err)
	}
	return out, err
}

// backoff is the wait before attempt n+1 (n >= 1): BackoffBase·2^(n−1),
// capped at BackoffMax, of which the second half is random.
func (s *Scorer) backoff(n int) time.Duration {
	d := s.cfg.BackoffBase
	for i := 1; i < n && d < s.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, s.cfg.BackoffMax)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
