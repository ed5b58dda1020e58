package reward

import (
	"errors"
	"fmt"
	"time"
)

// Judge backends.
const (
	BackendLocal  = "local"
	BackendOpenAI = "openai"
)

// Teachers: which model scores the response under the hint context.
const (
	TeacherPolicy    = "policy"    // the live policy (self-distillation)
	TeacherReference = "reference" // the frozen reference policy
	TeacherJudge     = "judge"     // the judge model (frozen)
	TeacherNone      = "none"      // no distillation; hints are not asked for
)

// Methods: which training signals scoring produces (config
// reward.method).
const (
	// MethodBinary: the judge's ±1 on the sampled response; hints are not
	// asked for.
	MethodBinary = "binary"
	// MethodDistill: the paper's hint distillation alone: the teacher
	// (policy + hint) scores the sampled response token by token.
	MethodDistill = "distill"
	// MethodHinted: the teacher generates HintedRollouts responses with
	// the hint in context, and the student learns them token by token
	// (teacher log-prob − student log-prob), so that behaviour the student
	// never sampled can be taught.
	MethodHinted = "hinted"
	// MethodCombined: binary, distill and hinted together.
	MethodCombined = "combined"
	// MethodPaper: binary and distill together, as in OpenClaw-RL.
	MethodPaper = "paper"
)

// Methods lists the methods.
var Methods = []string{MethodBinary, MethodDistill, MethodHinted, MethodCombined, MethodPaper}

// Config holds the judge's settings.
type Config struct {
	// Backend is BackendLocal or BackendOpenAI; Teacher one of the
	// Teacher* names. The Scorer does not read them (it is handed a
	// Backend and a Teacher); ValidateConfig checks they go together.
	Backend string
	Teacher string

	// Method selects the training signals (Method* names; "" is
	// MethodPaper, what a Config built before methods meant).
	Method string
	// HintedRollouts is how many responses the teacher generates per
	// hint for MethodHinted and MethodCombined; RolloutTemperature their
	// sampling temperature and RolloutMaxTokens their length bound.
	HintedRollouts     int
	RolloutTemperature float32
	RolloutMaxTokens   int

	// Votes is m, the number of judge votes per turn.
	Votes int
	// Temperature is the sampling temperature of judge and hint votes.
	Temperature float32
	// MaxTokens bounds each judge vote.
	MaxTokens int

	// HintVotes is the number of hint votes per turn (0: no hints).
	HintVotes int
	// HintMaxTokens bounds each hint vote.
	HintMaxTokens int
	// HintRule picks among accepted hints.
	HintRule HintRule
	// HintGrounding drops hints not grounded in what happened next beyond
	// incidental words (see Grounded and HintEvidence; the daemon's config
	// turns it on).
	HintGrounding bool
	// MaxHintChars drops accepted hints longer than this (a hint is one to
	// three sentences; a longer one is rambling or an answer).
	MaxHintChars int

	// Limits bound what the judges read.
	Limits Limits

	// Timeout bounds each judge call attempt and each teacher pass.
	Timeout time.Duration
	// MaxAttempts bounds the attempts of a judge call (first included).
	MaxAttempts int
	// BackoffBase is the wait before the second attempt; it doubles each
	// attempt up to BackoffMax, with jitter.
	BackoffBase, BackoffMax time.Duration
	// MaxConcurrent bounds the judge calls in flight, all workers
	// together (a call asks for all of its votes at once).
	MaxConcurrent int

	// Workers is the number of turns scored at once by Run.
	Workers int
	// QueueSize bounds the turns waiting for a worker, and the results
	// waiting to be read.
	QueueSize int
}

// DefaultConfig returns the defaults: a local judge, the live policy as
// teacher, three votes at temperature 0.7.
func DefaultConfig() Config {
	return Config{
		Backend:            BackendLocal,
		Teacher:            TeacherPolicy,
		Method:             MethodCombined,
		HintedRollouts:     4,
		RolloutTemperature: 0.7,
		RolloutMaxTokens:   256,
		Votes:              3,
		Temperature:        0.7,
		MaxTokens:          512,
		HintVotes:          3,
		HintMaxTokens:      384,
		HintRule:           HintLongest,
		MaxHintChars:       800,
		Limits:             DefaultLimits(),
		Timeout:            2 * time.Minute,
		MaxAttempts:        3,
		BackoffBase:        time.Second,
		BackoffMax:         15 * time.Second,
		MaxConcurrent:      4,
		Workers:            2,
		QueueSize:          64,
	}
}

// ValidateConfig checks c and says what is wrong, all problems at once.
// Teacher log-probs need the log-probs of a given response under a prompt,
// which OpenAI-compatible endpoints do not return: the teacher must be a
// local model, so Teacher "judge" with Backend "openai" is an error.
func ValidateConfig(c Config) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Backend {
	case BackendLocal, BackendOpenAI:
	default:
		bad("reward: judge backend %q is not %q or %q", c.Backend, BackendLocal, BackendOpenAI)
	}
	switch c.Teacher {
	case TeacherPolicy, TeacherReference, TeacherNone:
	case TeacherJudge:
		if c.Backend == BackendOpenAI {
			bad("reward: teacher %q needs prompt log-probs from the judge, which an openai judge backend cannot give; "+
				"use teacher %q or %q (a local model), or the local judge backend", TeacherJudge, TeacherPolicy, TeacherReference)
		}
	default:
		bad("reward: teacher %q is not one of %q, %q, %q, %q", c.Teacher, TeacherPolicy, TeacherReference, TeacherJudge, TeacherNone)
	}
	switch c.Method {
	case "", MethodBinary, MethodDistill, MethodHinted, MethodCombined, MethodPaper:
	default:
		bad("reward: method %q is not one of %v", c.Method, Methods)
	}
	if c.HintedRollouts < 0 || c.HintedRollouts > 16 {
		bad("reward: hinted rollouts %d must lie in [0, 16]", c.HintedRollouts)
	}
	if c.uses(MethodHinted) && c.HintedRollouts < 1 {
		bad("reward: method %q needs hinted rollouts >= 1", c.Method)
	}
	if c.RolloutTemperature < 0 || c.RolloutTemperature > 2 {
		bad("reward: rollout temperature %v is outside [0, 2]", c.RolloutTemperature)
	}
	if c.uses(MethodHinted) && c.RolloutMaxTokens < 1 {
		bad("reward: rollout max tokens %d must be >= 1", c.RolloutMaxTokens)
	}
	if c.Votes < 1 {
		bad("reward: votes %d must be >= 1", c.Votes)
	}
	if c.HintVotes < 0 {
		bad("reward: hint votes %d must be >= 0", c.HintVotes)
	}
	if c.Temperature < 0 || c.Temperature > 2 {
		bad("reward: temperature %v is outside [0, 2]", c.Temperature)
	}
	if c.Temperature == 0 && (c.Votes > 1 || c.HintVotes > 1) {
		bad("reward: temperature 0 makes all %d votes the same; use one vote or a temperature above 0", max(c.Votes, c.HintVotes))
	}
	if c.MaxTokens < 1 || c.HintMaxTokens < 1 {
		bad("reward: max tokens (%d) and hint max tokens (%d) must be >= 1", c.MaxTokens, c.HintMaxTokens)
	}
	switch c.HintRule {
	case HintLongest, HintShortest, HintAgree:
	default:
		bad("reward: hint rule %q is not %q, %q or %q", c.HintRule, HintLongest, HintShortest, HintAgree)
	}
	if c.MaxHintChars <= MinHintRunes {
		bad("reward: max hint chars %d must exceed %d", c.MaxHintChars, MinHintRunes)
	}
	if err := c.Limits.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Timeout <= 0 {
		bad("reward: timeout %v must be positive", c.Timeout)
	}
	if c.MaxAttempts < 1 {
		bad("reward: max attempts %d must be >= 1", c.MaxAttempts)
	}
	if c.BackoffBase < 0 || c.BackoffMax < c.BackoffBase {
		bad("reward: need 0 <= backoff base (%v) <= backoff max (%v)", c.BackoffBase, c.BackoffMax)
	}
	if c.MaxConcurrent < 1 || c.Workers < 1 || c.QueueSize < 1 {
		bad("reward: max concurrent (%d), workers (%d) and queue size (%d) must be >= 1", c.MaxConcurrent, c.Workers, c.QueueSize)
	}
	return errors.Join(errs...)
}

// uses reports whether the configured method includes signal, one of
// MethodBinary, MethodDistill or MethodHinted.
func (c Config) uses(signal string) bool {
	m := c.Method
	if m == "" {
		m = MethodPaper
	}
	switch m {
	case MethodCombined:
		return true
	case MethodPaper:
		return signal == MethodBinary || signal == MethodDistill
	}
	return m == signal
}

// Uses reports whether the configured method includes signal (MethodBinary,
// MethodDistill or MethodHinted).
func (c Config) Uses(signal string) bool { return c.uses(signal) }

// restrict narrows a sample's kind to the signals the method trains on:
// a reward the method does not use is kept for the record but not
// trained.
func (c Config) restrict(k Kind) Kind {
	rl := (k == KindBinary || k == KindBoth) && c.uses(MethodBinary)
	opd := (k == KindDistill || k == KindBoth) && c.uses(MethodDistill)
	switch {
	case rl && opd:
		return KindBoth
	case rl:
		return KindBinary
	case opd:
		return KindDistill
	}
	return KindNone
}
