// Package learnbench measures whether the served model learns a user's
// preference from the way the user talks to it, through the public API
// only (`clawrl bench learn`).
//
// A simulated user (written in Go, no language model needed) holds a
// hidden preference from the verifiable-instruction catalog (package
// instruct): "end every answer with the word lantern", "write in
// lowercase". It chats with the daemon in sessions of a few turns, with an
// X-Session-Id header, and answers every reply with praise when the reply
// satisfies the preference or with a correction in plain words when it
// does not, followed by its next question, so that each correction is the
// next state of the turn it judges, as the daemon expects. A thumbs-only
// user (Options.ThumbsOnly) never writes a word about the preference: it
// clicks thumb up or down on every reply (POST /v1/feedback) and asks its
// next question, the pure reinforcement path. By default the bench waits
// after every session for the daemon to score and train what it has (the
// store and loop gauges of /metrics); with a user pace (Options.UserPace)
// it never waits, and the user takes that long to read and type each
// message, as a person does, so that training gets only the time a person
// leaves it. Every K turns it measures:
//
//   - satisfaction: the share of held-out probe questions, sent with
//     X-No-Train: 1 at temperature 0 and with no instruction, whose answer
//     satisfies the preference. Probes are chosen so that the plain
//     reference answer violates it: satisfaction starts near 0 and can only
//     rise by learning;
//   - skills: the share of held-out arithmetic, tool-use and plain-question prompts
//     answered right, which catches forgetting.
//
// Everything is deterministic for a seed up to the daemon's own
// scheduling (which turns share a training step).
package learnbench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/clawrl/clawrl/instruct"
	"github.com/clawrl/clawrl/tokenizer"
)

// Options configure one run against one daemon.
type Options struct {
	Client   *Client
	Scenario Scenario
	// Turns is the number of graded user turns (default 64), SessionTurns
	// how many a session holds before the user starts a new one (default
	// 4), ProbeEvery how often (in turns) the probes run (default 16).
	Turns, SessionTurns, ProbeEvery int
	// Probes and Skills are the numbers of preference and skill probes
	// (defaults 8 and 8).
	Probes, Skills int
	// TrainPhrasings has the user correct with the pretraining corpus's
	// instruction sentences; by default it uses the held-out ones, which
	// the model never saw.
	TrainPhrasings bool
	// Temperature of the user's chats (default 0.7); probes run at 0.
	Temperature float64
	// MaxTokens bounds every reply (default 96).
	MaxTokens int
	Seed      uint64
	// SettleTimeout bounds the wait for the daemon to train after a
	// session (default 5m); a daemon that does not catch up fails the run.
	SettleTimeout time.Duration
	// Progress receives a line per session and per measurement (nil: none).
	Progress io.Writer
	// Oracle, when the daemon judges through it, is told the preference
	// in force before every turn.
	Oracle *Oracle
	// UserPace is a person's reading and typing time: the user waits this
	// long before every message it sends, and the bench never waits for
	// the daemon to train (0: no pause, and after every session the bench
	// waits until the daemon has scored and trained everything, as if the
	// person came back only then; a fast user who starves training looks
	// like a patient one).
	UserPace time.Duration
	// ThumbsOnly makes the user one who never writes a preference: it
	// gives every reply a thumb, up when the reply satisfies the hidden
	// preference and down otherwise, and its next message is only its next
	// question. With thumbs as complete signals every thumbed turn trains,
	// with no judge to misread words.
	ThumbsOnly bool
}

func (o *Options) defaults() {
	if o.Turns <= 0 {
		o.Turns = 64
	}
	if o.SessionTurns <= 0 {
		o.SessionTurns = 4
	}
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = 16
	}
	if o.Probes <= 0 {
		o.Probes = 8
	}
	if o.Skills < 0 {
		o.Skills = 0
	} else if o.Skills == 0 {
		o.Skills = 24
	}
	if o.Temperature == 0 {
		o.Temperature = 0.7
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 96
	}
	if o.SettleTimeout <= 0 {
		o.SettleTimeout = 5 * time.Minute
	}
}

// The kinds of user (Result.User).
const (
	UserWords  = "words"  // praise, and corrections in words
	UserThumbs = "thumbs" // a thumb on every reply, no words
)

// Point is one measurement.
type Point struct {
	Turn    int    `json:"turn"`    // graded user turns so far
	Version uint64 `json:"version"` // the weight version that answered the probes
	// Satisfaction is the share of probes satisfying the preference in
	// force; Previous, after a switch, the share still satisfying the
	// preference before it (-1: no switch yet).
	Satisfaction float64 `json:"satisfaction"`
	Previous     float64 `json:"previous"`
	Skills       float64 `json:"skills"` // share of skill probes passed (-1: none run)
	// SkillMisses names the skill probes that failed, as kind#index and
	// why (cut: ran into max_tokens; else the reply, clipped), so that
	// two points show which skills a run lost.
	SkillMisses []string `json:"skill_misses,omitempty"`
	// Example is the first probe's answer, for the report.
	Example string `json:"example"`
}

// Result is one run.
type Result struct {
	Scenario string `json:"scenario"`
	Method   string `json:"method"`
	// User is the kind of user: "words" (praise and corrections) or
	// "thumbs" (thumbs only); PaceS its reading and typing time in seconds
	// (0: the bench waited for training after every session).
	User   string  `json:"user"`
	PaceS  float64 `json:"pace_s"`
	Seed   uint64  `json:"seed"`
	Points []Point `json:"points"`
	// Satisfied counts the chat replies (not probes) that satisfied the
	// preference, of Turns.
	Satisfied, Turns int
	// Versions are the weight versions served before and after.
	FirstVersion, LastVersion uint64
	Duration                  time.Duration
	// Daemon holds the daemon's judge and training counters at the end
	// (votes by class, hint votes by outcome, samples by kind and
	// outcome), for telling a judge that cannot read the user from a
	// trainer that cannot learn.
	Daemon map[string]float64 `json:"daemon"`
}

// Run chats with the daemon as the scenario's user and measures learning.
func Run(ctx context.Context, o Options) (*Result, error) {
	o.defaults()
	c := o.Client
	if c == nil || len(o.Scenario.Phases) == 0 {
		return nil, fmt.Errorf("learnbench: Run needs a client and a scenario")
	}
	start := time.Now()
	v0, err := c.Resolve(ctx)
	if err != nil {
		return nil, err
	}
	probes := map[instruct.Constraint][]Probe{}
	for i, ph := range o.Scenario.Phases {
		ps, err := PreferenceProbes(ph.Pref, o.Probes, o.Seed+uint64(i)*7919)
		if err != nil {
			return nil, err
		}
		probes[ph.Pref] = ps
	}
	var skills []Probe
	if o.Skills > 0 {
		skills = SkillProbes(o.Skills, o.Seed)
	}
	res := &Result{Scenario: o.Scenario.Name, Seed: o.Seed, Turns: o.Turns, FirstVersion: v0, User: UserWords, PaceS: o.UserPace.Seconds()}
	if o.ThumbsOnly {
		res.User = UserThumbs
	}
	logf := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, format+"\n", args...)
		}
	}
	measure := func(turn int) error {
		pref := o.Scenario.PrefAt(max(turn-1, 0))
		p := Point{Turn: turn, Previous: -1, Skills: -1}
		var err error
		var ex string
		if p.Satisfaction, p.Version, ex, _, err = o.score(ctx, probes[pref]); err != nil {
			return err
		}
		p.Example = ex
		if first := o.Scenario.Phases[0].Pref; pref != first {
			if p.Previous, _, _, _, err = o.score(ctx, probes[first]); err != nil {
				return err
			}
		}
		if len(skills) > 0 {
			if p.Skills, _, _, p.SkillMisses, err = o.score(ctx, skills); err != nil {
				return err
			}
		}
		res.Points = append(res.Points, p)
		logf("  turn %3d  version %3d  satisfaction %.2f  skills %.2f  e.g. %q", turn, p.Version, p.Satisfaction, p.Skills, clip(ex, 70))
		return nil
	}
	if err := measure(0); err != nil {
		return nil, err
	}
	phrasing := instruct.HeldOut
	if o.TrainPhrasings {
		phrasing = instruct.Train
	}
	user := NewUser(o.Scenario.PrefAt(0), phrasing, o.Seed)
	// pause is the user reading the last reply and typing the next message.
	pause := func() error {
		if o.UserPace <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.UserPace):
			return nil
		}
	}
	chat := func(msgs []tokenizer.Message, sid string, seed uint64) (Reply, error) {
		if err := pause(); err != nil {
			return Reply{}, err
		}
		return c.Chat(ctx, ChatRequest{Messages: msgs, SessionID: sid, Temperature: o.Temperature, MaxTokens: o.MaxTokens, Seed: seed})
	}
	turn := 0
	for session := 0; turn < o.Turns; session++ {
		sid := fmt.Sprintf("learnbench-%d-%s-%d", o.Seed, o.Scenario.Name, session)
		msgs := []tokenizer.Message{{Role: "user", Content: user.Question()}}
		sat := 0
		var version uint64
		for k := 0; k < o.SessionTurns && turn < o.Turns; k++ {
			user.Pref = o.Scenario.PrefAt(turn)
			if o.Oracle != nil {
				o.Oracle.SetPref(user.Pref)
			}
			reply, err := chat(msgs, sid, o.Seed*1000003+uint64(turn))
			if err != nil {
				return nil, fmt.Errorf("learnbench: turn %d: %w", turn, err)
			}
			version = reply.Version
			more := k < o.SessionTurns-1 && turn+1 < o.Turns
			var next string
			var ok bool
			if o.ThumbsOnly {
				var thumb int
				thumb, ok = user.Thumb(reply.Text, reply.Cut)
				if err := c.Feedback(ctx, reply.ID, thumb); err != nil {
					return nil, fmt.Errorf("learnbench: turn %d: thumb: %w", turn, err)
				}
				if more {
					next = user.Question()
				}
			} else {
				next, ok = user.Feedback(reply.Text, reply.Cut)
				if more {
					next += "\n\n" + user.Question()
				}
			}
			if ok {
				sat++
				res.Satisfied++
			}
			turn++
			if next != "" {
				msgs = append(msgs, reply.Message(), tokenizer.Message{Role: "user", Content: next})
			}
		}
		if !o.ThumbsOnly {
			// The last feedback alone: it is the next state of the
			// session's last graded turn. Its own reply is never graded.
			// (A thumb needs no next state.)
			if _, err := chat(msgs, sid, o.Seed*1000003+uint64(turn)+500000); err != nil {
				return nil, fmt.Errorf("learnbench: turn %d: %w", turn, err)
			}
		}
		done := min(o.SessionTurns, turn-session*o.SessionTurns)
		if o.UserPace > 0 {
			logf("  session %2d: %d/%d replies satisfied %s; served by version %d", session, sat, done, user.Pref, version)
		} else {
			settleStart := time.Now()
			if err := c.Settle(ctx, o.SettleTimeout); err != nil {
				return nil, err
			}
			logf("  session %2d: %d/%d replies satisfied %s; trained in %.1fs", session, sat, done, user.Pref, time.Since(settleStart).Seconds())
		}
		if turn%o.ProbeEvery == 0 || turn == o.Turns {
			if err := measure(turn); err != nil {
				return nil, err
			}
		}
	}
	v1, err := c.Resolve(ctx)
	if err != nil {
		return nil, err
	}
	res.LastVersion, res.Duration = v1, time.Since(start)
	m, err := c.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	res.Daemon = map[string]float64{}
	for k, v := range m {
		for _, p := range []string{"clawrl_reward_votes_total{", "clawrl_reward_parse_failures_total{", "clawrl_reward_hint_votes_total{",
			"clawrl_reward_turns_total{", "clawrl_store_samples_total{", "clawrl_reward_judge_failures_total{", "clawrl_loop_samples_stale_total",
			"clawrl_loop_guard_events_total{", "clawrl_loop_lr_scale", "clawrl_loop_skill", "clawrl_train_step{stat=kl}", "clawrl_train_step{stat=lr}",
			"clawrl_store_turns_ready", "clawrl_store_samples_queued", "clawrl_loop_scoring_inflight"} {
			if strings.HasPrefix(k, p) {
				res.Daemon[k] = v
			}
		}
	}
	return res, nil
}

// score sends the probes greedily, without training, and returns the share
// that passed, the weight version that answered the first, the first
// answer, and the misses (kind#index and why) of probes with a Kind.
func (o *Options) score(ctx context.Context, probes []Probe) (float64, uint64, string, []string, error) {
	if len(probes) == 0 {
		return -1, 0, "", nil, nil
	}
	var misses []string
	pass := 0
	var version uint64
	var first string
	for i, p := range probes {
		r, err := o.Client.Chat(ctx, ChatRequest{Messages: p.Messages, Tools: p.Tools, NoTrain: true, Temperature: 0,
			MaxTokens: o.MaxTokens, Seed: o.Seed})
		if err != nil {
			return 0, 0, "", nil, fmt.Errorf("learnbench: probe: %w", err)
		}
		if i == 0 {
			version, first = r.Version, r.Text
		}
		switch {
		case !r.Cut && p.Check(r.Text, r.Tool): // a reply that ran into max_tokens never passes
			pass++
		case p.Kind == "":
		case r.Cut:
			misses = append(misses, fmt.Sprintf("%s#%d cut", p.Kind, i))
		default:
			got := r.Text
			if r.Tool != "" {
				got = "tool " + r.Tool
			}
			misses = append(misses, fmt.Sprintf("%s#%d %q", p.Kind, i, clip(got, 40)))
		}
	}
	return float64(pass) / float64(len(probes)), version, first, misses, nil
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
