package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/clawrl/clawrl/weights"
)

// The guard: automatic rollback. Training on what people say can go
// wrong (a poisoned batch, a judge that misreads a user, a learning rate
// too high for the model), and a user must not be left with a model that
// forgot how to answer. After every applied step the guard looks at
//
//   - the step itself: a non-finite loss or gradient (the trainer skips
//     such a step), or a mean KL to the frozen reference above KLMax;
//   - every SkillEvery steps, the served version's score on skill probes
//     (the daemon's are learnbench.SkillProbes: held-out arithmetic, tool
//     calls and plain questions, and plain facts that must keep their
//     capitals, so that a misread correction that teaches lowercase or
//     garbles answers shows), against the score of the version the daemon
//     started with: a drop of more than SkillMargin;
//
// and when one trips, serving reverts to the last good version (the last
// that passed a skill check, or the one the daemon started with), the
// learning rate is multiplied by LRFactor (and raised again by as much
// after RecoverAfter good checks in a row), and the event is counted
// (clawrl_loop_guard_events_total{reason}) and logged. The last good
// version's checkpoint is pinned so that pruning keeps it; the guard
// unpins the one it pinned before. The judge's moving-average reward is
// kept beside it (clawrl_loop_reward_moving_average) for the operator.

// GuardOptions configure the guard.
type GuardOptions struct {
	// KLMax trips the guard when an applied step's mean KL to the frozen
	// reference exceeds it (0: off). The trainer must measure KL
	// (trainer.Options.MeasureKL or KLCoef > 0).
	KLMax float64
	// Skill scores skills on the version being served (the share
	// of probes passed, in [0, 1]); nil turns the skill check off.
	Skill func(ctx context.Context) (float64, error)
	// SkillSet names the probe set Skill scores (its size and seed, say):
	// a baseline stored for another set is not comparable, and is
	// measured again.
	SkillSet string
	// SkillMargin trips the guard when the skill score falls more than
	// this below the starting score.
	SkillMargin float64
	// SkillEvery is how many applied steps pass between skill checks
	// (default 4).
	SkillEvery int
	// LRFactor multiplies the learning rate at every trip (default 0.5).
	LRFactor float64
	// RecoverAfter raises a lowered learning rate again, by 1/LRFactor up
	// to the configured rate, after this many good checks in a row since
	// the last trip (skill checks passed; without a skill check, good
	// steps); 0 keeps it lowered, across restarts too. Without it every
	// trip lowers the rate for good, and a few trips on a hard stretch (a
	// user who changes their mind) leave a rate too small to learn anything
	// after it.
	RecoverAfter int
	// RewardWindow is how many judged samples the moving-average reward
	// spans (default 32).
	RewardWindow int
}

// Store meta keys: the checkpoint the guard pinned; the skill score of
// the first version it checked, with the probe set's name (kept across
// restarts, so that a slow decline spread over several restarts still
// counts from the start); the learning-rate scale its trips left (a
// restart does not undo the lowering).
const (
	metaGuardGood     = "guard_good"
	metaGuardBaseline = "guard_baseline"
	metaGuardLRScale  = "guard_lr_scale"
)

// storedBaseline is the guard_baseline meta value.
type storedBaseline struct {
	Score float64 `json:"score"`
	Set   string  `json:"probe_set"`
}

// parseBaseline reads a guard_baseline value: JSON, or a bare number
// (written before probe sets were named, for the set "").
func parseBaseline(v string) (storedBaseline, bool) {
	var b storedBaseline
	if err := json.Unmarshal([]byte(v), &b); err == nil {
		return b, !math.IsNaN(b.Score)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) {
		return storedBaseline{}, false
	}
	return storedBaseline{Score: f}, true
}

type guard struct {
	opts     GuardOptions
	baseline float64 // skill score of the first version the guard saw (NaN: not measured)
	pinned   uint64  // the checkpoint the guard pinned (0: none)
	since    int     // applied steps since the last skill check
	good     int     // good checks in a row since the last trip or recovery

	rmu     sync.Mutex // the collect goroutine adds rewards
	rewards []int      // ring of the last judged rewards
	next    int

	events  *prometheus.CounterVec
	skill   prometheus.Gauge
	reward  prometheus.Gauge
	lrScale prometheus.Gauge
}

func newGuard(o GuardOptions) *guard {
	if o.SkillEvery <= 0 {
		o.SkillEvery = 4
	}
	if o.LRFactor <= 0 || o.LRFactor > 1 {
		o.LRFactor = 0.5
	}
	if o.RewardWindow <= 0 {
		o.RewardWindow = 32
	}
	return &guard{
		opts: o, baseline: math.NaN(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clawrl_loop_guard_events_total",
			Help: "Automatic rollbacks, by reason (nonfinite, kl, skill)."}, []string{"reason"}),
		skill: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_skill",
			Help: "Share of held-out skill probes the served version passed at the last check (-1: not measured)."}),
		reward: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_reward_moving_average",
			Help: "Mean judge reward over the last judged samples."}),
		lrScale: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clawrl_loop_lr_scale",
			Help: "Scale of the configured learning rate (lowered by each automatic rollback)."}),
	}
}

func (g *guard) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.events, g.skill, g.reward, g.lrScale}
}

// observeReward adds a judged reward to the moving average.
func (g *guard) observeReward(r int) {
	g.rmu.Lock()
	defer g.rmu.Unlock()
	if len(g.rewards) < g.opts.RewardWindow {
		g.rewards = append(g.rewards, r)
	} else {
		g.rewards[g.next] = r
		g.next = (g.next + 1) % len(g.rewards)
	}
	sum := 0
	for _, x := range g.rewards {
		sum += x
	}
	g.reward.Set(float64(sum) / float64(len(g.rewards)))
}

// GuardStatus is what the guard knows.
type GuardStatus struct {
	Good     uint64  // last good version
	Baseline float64 // starting skill score (NaN: not measured)
	Events   map[string]int
	LRScale  float64
}

// guardStart runs before the first step, on the training goroutine: the
// version the daemon starts with is the last good one (it is checkpointed
// and pinned); the skill baseline is the score of the first version this
// data directory ever served, measured now on a first start (or when the
// probe set changed) and read back on a restart, which scores nothing.
func (l *Loop) guardStart(ctx context.Context) {
	g, tr := l.guard, l.opts.Trainer
	g.skill.Set(-1)
	if v, err := l.opts.DB.Meta(metaGuardLRScale); err == nil && v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f <= 1 && f != tr.LRScale() {
			tr.ScaleLR(f / tr.LRScale())
			l.opts.Log.Info().Float64("lr_scale", f).Msg("guard: the learning rate stays lowered by earlier rollbacks")
		}
	}
	g.lrScale.Set(tr.LRScale())
	if prev, err := l.opts.DB.Meta(metaGuardGood); err == nil && prev != "" {
		if n, err := strconv.ParseUint(prev, 10, 64); err == nil {
			g.pinned = n
		}
	}
	l.markGood(tr.Version())
	if g.opts.Skill == nil {
		return
	}
	prev, perr := l.opts.DB.Meta(metaGuardBaseline)
	stored, ok := parseBaseline(prev)
	if perr == nil && ok && stored.Set == g.opts.SkillSet {
		// A restart: the baseline is the first start's. Scoring the probes
		// now would only fill the gauge, and would hold the first step
		// back (14 s on the Qwen3-0.6B shape): the next check fills it.
		g.baseline = stored.Score
		l.guardBaseline.Store(math.Float64bits(stored.Score))
		l.opts.Log.Info().Float64("baseline", stored.Score).Uint64("version", tr.Version()).
			Msg("guard: the skill baseline is the first start's; the next check scores this version")
		return
	}
	s, err := g.opts.Skill(ctx)
	if err != nil && ctx.Err() != nil {
		return // stopping before the check finished: nothing to report
	}
	if err != nil {
		l.warn.Warn("guard_skill", err, "guard: the starting skill check failed; the skill check is off")
		g.opts.Skill = nil
		return
	}
	g.skill.Set(s)
	if ok {
		l.opts.Log.Warn().Str("was", stored.Set).Str("now", g.opts.SkillSet).
			Msg("guard: the skill probe set changed; the baseline is measured again on the version served now")
	}
	js, _ := json.Marshal(storedBaseline{Score: s, Set: g.opts.SkillSet})
	if err := l.opts.DB.SetMeta(metaGuardBaseline, string(js)); err != nil {
		l.warn.Warn("guard_skill", err, "guard: recording the skill baseline failed")
	}
	g.baseline = s
	l.guardBaseline.Store(math.Float64bits(s))
	l.opts.Log.Info().Float64("skill", s).Float64("baseline", s).Uint64("version", tr.Version()).Msg("guard: skill at start")
}

// markGood records version v (the trainer's current one) as the last good
// version: it is checkpointed if it is not yet, and pinned.
func (l *Loop) markGood(v uint64) {
	g, root := l.guard, l.opts.Checkpoint.Root
	if root == "" {
		l.guardGood.Store(v)
		return
	}
	l.mu.Lock()
	done := l.checkpointed == v
	l.mu.Unlock()
	if !done {
		l.checkpoint()
		l.mu.Lock()
		done = l.checkpointed == v
		l.mu.Unlock()
		if !done {
			return // the checkpoint failed (logged): keep the older good one
		}
	}
	if err := weights.Pin(root, v); err != nil {
		l.warn.Warn("guard_pin", err, "guard: pinning the last good checkpoint failed")
		return
	}
	if g.pinned != 0 && g.pinned != v {
		if err := weights.Unpin(root, g.pinned); err != nil {
			l.warn.Warn("guard_pin", err, "guard: unpinning the previous good checkpoint failed")
		}
	}
	g.pinned = v
	l.guardGood.Store(v)
	if err := l.opts.DB.SetMeta(metaGuardGood, strconv.FormatUint(v, 10)); err != nil {
		l.warn.Warn("guard_pin", err, "guard: recording the last good version failed")
	}
}

// guardAfterStep runs after a step was applied and published as version v.
func (l *Loop) guardAfterStep(ctx context.Context, kl float64) {
	g, tr := l.guard, l.opts.Trainer
	if g.opts.KLMax > 0 && kl > g.opts.KLMax {
		l.guardTrip(fmt.Sprintf("KL to the reference %.3g > %.3g", kl, g.opts.KLMax), "kl")
		return
	}
	g.since++
	if g.opts.Skill == nil {
		// Without a skill check, a version is good once it is on disk.
		l.mu.Lock()
		done := l.checkpointed == tr.Version()
		l.mu.Unlock()
		if done {
			l.markGood(tr.Version())
			l.guardGoodCheck()
		}
		return
	}
	if g.since < g.opts.SkillEvery {
		return
	}
	g.since = 0
	s, err := g.opts.Skill(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.warn.Warn("guard_skill", err, "guard: the skill check failed")
		}
		return
	}
	g.skill.Set(s)
	if !math.IsNaN(g.baseline) && g.baseline-s > g.opts.SkillMargin {
		l.guardTrip(fmt.Sprintf("held-out skill %.2f fell below the starting %.2f by more than %.2f", s, g.baseline, g.opts.SkillMargin), "skill")
		return
	}
	l.markGood(tr.Version())
	l.guardGoodCheck()
}

// guardGoodCheck counts a good check and, after RecoverAfter of them in a
// row, raises a lowered learning rate by one trip's factor.
func (l *Loop) guardGoodCheck() {
	g, tr := l.guard, l.opts.Trainer
	if g.opts.RecoverAfter <= 0 || tr.LRScale() >= 1 {
		g.good = 0
		return
	}
	if g.good++; g.good < g.opts.RecoverAfter {
		return
	}
	g.good = 0
	scale := l.guardScaleLR(min(1/g.opts.LRFactor, 1/tr.LRScale()))
	l.opts.Log.Info().Float64("lr_scale", scale).Int("good_checks", g.opts.RecoverAfter).Msg("guard: the learning rate recovers")
}

// guardScaleLR multiplies the learning rate by f and records the new
// scale in the gauge and the store (a restart keeps it); it returns the
// scale.
func (l *Loop) guardScaleLR(f float64) float64 {
	scale := l.opts.Trainer.ScaleLR(f)
	l.guard.lrScale.Set(scale)
	if err := l.opts.DB.SetMeta(metaGuardLRScale, strconv.FormatFloat(scale, 'g', -1, 64)); err != nil {
		l.warn.Warn("guard_lr", err, "guard: recording the learning rate failed")
	}
	return scale
}

// guardTrip reverts serving to the last good version and lowers the
// learning rate.
func (l *Loop) guardTrip(why, reason string) {
	g, tr := l.guard, l.opts.Trainer
	g.events.WithLabelValues(reason).Inc()
	g.good = 0
	scale := l.guardScaleLR(g.opts.LRFactor)
	cur, good := tr.Version(), l.guardGood.Load()
	ev := l.opts.Log.Warn().Str("reason", reason).Str("why", why).Uint64("version", cur).Uint64("last_good", good).
		Float64("lr_scale", scale)
	if good == 0 || good == cur || l.opts.Checkpoint.Root == "" {
		ev.Msg("guard: tripped; the served version is the last good one, the learning rate is lowered")
		return
	}
	c, err := weights.Open(weights.DirOf(l.opts.Checkpoint.Root, good))
	if err != nil {
		ev.Err(err).Msg("guard: tripped, but the last good checkpoint cannot be opened; the learning rate is lowered")
		return
	}
	ev.Msg("guard: tripped; rolling back to the last good version and lowering the learning rate")
	v, err := l.doRollback(c, reason, why)
	if err != nil {
		l.opts.Log.Error().Err(err).Msg("guard: rollback failed")
		return
	}
	g.since = 0
	l.markGood(v)
}

// Guard returns what the guard knows (for status output and tests).
func (l *Loop) Guard() GuardStatus {
	st := GuardStatus{Good: l.guardGood.Load(), Baseline: math.Float64frombits(l.guardBaseline.Load()), Events: map[string]int{}}
	if l.guard == nil {
		return st
	}
	for _, r := range []string{"nonfinite", "kl", "skill"} {
		st.Events[r] = int(counterValue(l.guard.events.WithLabelValues(r)))
	}
	if l.opts.Trainer != nil {
		st.LRScale = l.opts.Trainer.LRScale()
	}
	return st
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
