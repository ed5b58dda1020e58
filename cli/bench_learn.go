package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/learnbench"
	"github.com/clawrl/clawrl/reward"
)

type learnFlags struct {
	scenarios, methods              []string
	turns, sessionTurns, probeEvery int
	probes, skills, maxTokens       int
	seed                            uint64
	seeds                           int
	url, apiKey, modelFlag, out     string
	trainPhrasings, thumbsOnly      bool
	judge                           string
	settle                          time.Duration
	userPace, temperature           float64
	baseRates                       int
}

// benchLearnCmd is `clawrl bench learn`: does the model learn a simulated
// user's preference from the way the user talks to it?
func (a *app) benchLearnCmd() *cobra.Command {
	var f learnFlags
	var names []string
	for _, s := range learnbench.Scenarios() {
		names = append(names, s.Name)
	}
	cmd := &cobra.Command{
		Use:   "learn",
		Short: "Measure learning: a simulated user with a hidden preference chats with the daemon; probes measure whether it was learnt",
		Long: `learn runs a simulated user (no language model needed) who holds a hidden
preference, such as "end every answer with the word lantern". The user chats
with the daemon over the OpenAI API in sessions (X-Session-Id) and answers
each reply with praise, or with a correction in plain words when the reply
does not follow the preference. After each session it waits until the daemon
has scored and trained what it has; every --probe-every turns it sends
held-out probe questions (X-No-Train: 1, temperature 0, no instruction) and
reports the share that follow the preference, and held-out arithmetic and
tool prompts (skills), which catch forgetting.

--user-pace SECONDS gives the user a person's reading and typing time: it
waits that long before every message, and the bench no longer waits for
training after a session, so that a fast user who starves training shows.
--thumbs-only makes the user one who never writes a preference: it clicks
thumb up on a reply that satisfies it and thumb down on one that does not
(POST /v1/feedback, no words) and asks its next question: the pure
reinforcement path, with no judge to misread.

--base-rates N measures instead, on one daemon and N of the user's
questions per cell, how often the base model already meets each scenario's
preference when sampling (temperature 1.0 and the user's) and when told in
a system prompt, and writes base-rates.json.

For each --methods entry a fresh daemon is started in-process with the
effective config, reward.method set to that method, a fresh data directory
and trainer.max_wait 1s (so that a session's leftovers train before the
next). With --url the user talks to a running daemon instead (its own
method; its trainer must be on).

It prints a table per scenario (satisfaction at each measurement per method,
skills before and after, steps taken), and writes learn-<scenario>.png and
results.json to --out.

Scenarios: ` + strings.Join(names, ", ") + `, or all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runBenchLearn(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.scenarios, "scenario", []string{"end_word"}, "scenarios to run (comma-separated, or all)")
	fl.StringSliceVar(&f.methods, "methods", []string{reward.MethodBinary, reward.MethodDistill, reward.MethodHinted, reward.MethodCombined},
		"training methods to compare: "+strings.Join(reward.Methods, ", "))
	fl.IntVar(&f.turns, "turns", 64, "graded user turns per run")
	fl.IntVar(&f.sessionTurns, "session-turns", 4, "graded turns per session")
	fl.IntVar(&f.probeEvery, "probe-every", 16, "measure every this many turns")
	fl.IntVar(&f.probes, "probes", 8, "held-out preference probes per measurement")
	fl.IntVar(&f.skills, "skills", 24, "held-out skill probes per measurement (a third each arithmetic, tool use and plain questions; -1: none)")
	fl.IntVar(&f.maxTokens, "max-tokens", 96, "reply length bound")
	fl.Uint64Var(&f.seed, "seed", 1, "seed of the user, its questions and the probes")
	fl.IntVar(&f.seeds, "seeds", 1, "run every method with this many seeds (--seed, --seed+1, ...) and summarize: the last satisfaction per seed, the median, and the seeds that meet the goal (runs differ: which turns share a training step is not deterministic)")
	fl.BoolVar(&f.trainPhrasings, "train-phrasings", false, "correct with the pretraining corpus's instruction sentences (default: held-out ones)")
	fl.BoolVar(&f.thumbsOnly, "thumbs-only", false, "a user who never writes a preference and only clicks thumbs (up when a reply satisfies it, down otherwise): the pure RL path")
	fl.Float64Var(&f.userPace, "user-pace", 0, "a person's reading and typing time in seconds before every message; the bench then never waits for training (0: no pause, and it waits for training after every session)")
	fl.Float64Var(&f.temperature, "temperature", 0.7, "sampling temperature of the user's chats (probes run at 0)")
	fl.IntVar(&f.baseRates, "base-rates", 0, "instead of learning runs, measure each scenario's base rates on this many questions per cell (sampled with no instruction at temperature 1.0 and --temperature; greedy with the preference in a system prompt)")
	fl.DurationVar(&f.settle, "settle-timeout", 5*time.Minute, "longest wait for the daemon to train after a session")
	fl.StringVar(&f.judge, "judge", "model", "model: the daemon's configured judge; oracle: an OpenAI-compatible judge that knows the preference (a control: votes from the user's praise, the canonical instruction as the hint)")
	fl.StringVar(&f.url, "url", "", "talk to this running daemon instead of starting one per method (e.g. http://127.0.0.1:30000)")
	fl.StringVar(&f.apiKey, "api-key", "", "API key for --url (default: the first of server.api_keys)")
	fl.StringVar(&f.modelFlag, "model", "", "checkpoint directory or GGUF file for the in-process daemon (default: model.path, else the bundled model)")
	fl.StringVar(&f.out, "out", "bench-learn", "directory for the PNGs and results.json")
	return cmd
}

func (a *app) runBenchLearn(cmd *cobra.Command, f learnFlags) error {
	var scenarios []learnbench.Scenario
	for _, name := range f.scenarios {
		if name == "all" {
			scenarios = learnbench.Scenarios()
			break
		}
		sc, err := learnbench.ScenarioByName(name)
		if err != nil {
			return err
		}
		scenarios = append(scenarios, sc)
	}
	for _, m := range f.methods {
		if !slices.Contains(reward.Methods, m) {
			return fmt.Errorf("bench learn: method %q is not one of %s", m, strings.Join(reward.Methods, ", "))
		}
	}
	if f.seeds < 1 || f.seeds > 100 {
		return fmt.Errorf("bench learn: --seeds %d must lie in [1, 100]", f.seeds)
	}
	if f.userPace < 0 || f.userPace > 3600 {
		return fmt.Errorf("bench learn: --user-pace %g must lie in [0, 3600] seconds", f.userPace)
	}
	if f.temperature <= 0 || f.temperature > 2 {
		return fmt.Errorf("bench learn: --temperature %g must lie in (0, 2]", f.temperature)
	}
	if f.baseRates < 0 {
		return fmt.Errorf("bench learn: --base-rates %d must be positive", f.baseRates)
	}
	if f.judge != "model" && f.judge != "oracle" {
		return fmt.Errorf("bench learn: --judge %q is not model or oracle", f.judge)
	}
	if f.url != "" {
		if f.judge == "oracle" {
			return errors.New("bench learn: --judge oracle starts its own daemons; it cannot be used with --url")
		}
		f.methods = []string{"daemon"}
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("bench learn: %w", err)
	}
	out := cmd.OutOrStdout()
	ctx := cmd.Context()
	if f.baseRates > 0 {
		return a.learnBaseRates(ctx, f, scenarios, out)
	}
	all := map[string][]*learnbench.Result{}
	var seeds []uint64
	for i := range f.seeds {
		seeds = append(seeds, f.seed+uint64(i))
	}
	for _, sc := range scenarios {
		bySeed := map[string][]*learnbench.Result{}
		for _, seed := range seeds {
			fs := f
			fs.seed = seed
			var results []*learnbench.Result
			for _, method := range f.methods {
				fmt.Fprintf(out, "scenario %s, method %s, seed %d%s\n", sc.Name, method, seed, userNote(f))
				r, err := a.learnRun(ctx, fs, sc, method, out)
				if err != nil {
					return fmt.Errorf("bench learn: scenario %s, method %s, seed %d: %w", sc.Name, method, seed, err)
				}
				r.Method = method
				results = append(results, r)
				bySeed[method] = append(bySeed[method], r)
			}
			learnbench.Table(out, sc, results)
			png, err := learnbench.Plot(sc, results)
			if err != nil {
				return fmt.Errorf("bench learn: plot: %w", err)
			}
			name := "learn-" + sc.Name + ".png"
			if len(seeds) > 1 {
				name = fmt.Sprintf("learn-%s-seed%d.png", sc.Name, seed)
			}
			path := filepath.Join(f.out, name)
			if err := os.WriteFile(path, png, 0o644); err != nil {
				return fmt.Errorf("bench learn: %w", err)
			}
			fmt.Fprintf(out, "\nwrote %s\n", path)
			all[sc.Name] = append(all[sc.Name], results...)
		}
		if len(seeds) > 1 {
			learnbench.SeedTable(out, sc, seeds, learnbench.Summarize(f.methods, bySeed))
		}
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(f.out, "results.json"), b, 0o644)
}

// userNote describes the kind of user and pace for progress lines.
func userNote(f learnFlags) string {
	var s string
	if f.thumbsOnly {
		s = ", thumbs-only user"
	}
	if f.userPace > 0 {
		s += fmt.Sprintf(", user pace %gs", f.userPace)
	}
	return s
}

// learnRun runs one scenario against --url, or against a fresh in-process
// daemon trained with method.
func (a *app) learnRun(ctx context.Context, f learnFlags, sc learnbench.Scenario, method string, out io.Writer) (*learnbench.Result, error) {
	opts := learnbench.Options{
		Scenario: sc, Turns: f.turns, SessionTurns: f.sessionTurns, ProbeEvery: f.probeEvery,
		Probes: f.probes, Skills: f.skills, MaxTokens: f.maxTokens, Seed: f.seed, Temperature: f.temperature,
		TrainPhrasings: f.trainPhrasings, SettleTimeout: f.settle, Progress: out,
		ThumbsOnly: f.thumbsOnly, UserPace: time.Duration(f.userPace * float64(time.Second)),
	}
	if f.judge == "oracle" {
		opts.Oracle = &learnbench.Oracle{}
	}
	var res *learnbench.Result
	err := a.withLearnDaemon(ctx, f, method, opts.Oracle, func(dctx context.Context, c *learnbench.Client) error {
		opts.Client = c
		var err error
		res, err = learnbench.Run(dctx, opts)
		return err
	})
	return res, err
}

// learnBaseRates measures every scenario's preferences' base rates on one
// daemon (or --url) and writes base-rates.json.
func (a *app) learnBaseRates(ctx context.Context, f learnFlags, scenarios []learnbench.Scenario, out io.Writer) error {
	temps := []float64{1}
	if f.temperature != 1 {
		temps = append(temps, f.temperature)
	}
	var rates []learnbench.BaseRate
	seen := map[string]bool{}
	err := a.withLearnDaemon(ctx, f, reward.MethodBinary, nil, func(dctx context.Context, c *learnbench.Client) error {
		if _, err := c.Resolve(dctx); err != nil {
			return err
		}
		for _, sc := range scenarios {
			for _, ph := range sc.Phases {
				if seen[ph.Pref.String()] {
					continue
				}
				seen[ph.Pref.String()] = true
				start := time.Now()
				r, err := learnbench.BaseRates(dctx, c, ph.Pref, f.baseRates, temps, f.maxTokens, f.seed)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s (scenario %s): %v sampled, system prompt %.2f (held-out) %.2f (canonical); %s\n", r.Pref, sc.Name,
					r.Sampled, r.SystemHeldOut, r.SystemTrain, time.Since(start).Round(time.Second))
				rates = append(rates, r)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bench learn: base rates: %w", err)
	}
	fmt.Fprintln(out)
	learnbench.BaseRateTable(out, temps, rates)
	b, err := json.MarshalIndent(rates, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(f.out, "base-rates.json"), b, 0o644)
}

// withLearnDaemon calls fn with a client of --url, or of a fresh
// in-process daemon with the effective config, reward.method set to
// method, a fresh data directory and trainer.max_wait 1s (judging through
// oracle when it is not nil), which it stops after fn returns.
func (a *app) withLearnDaemon(ctx context.Context, f learnFlags, method string, oracle *learnbench.Oracle, fn func(context.Context, *learnbench.Client) error) error {
	key := f.apiKey
	if key == "" && len(a.cfg.Server.APIKeys) > 0 {
		key = a.cfg.Server.APIKeys[0]
	}
	if f.url != "" {
		return fn(ctx, &learnbench.Client{BaseURL: f.url, APIKey: key})
	}

	tmp, err := os.MkdirTemp("", "clawrl-learn-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg := *a.cfg
	cfg.Data.Dir = tmp
	cfg.Trainer.CheckpointDir = ""
	cfg.Trainer.Enabled = true
	cfg.Trainer.MaxWait = time.Second
	cfg.Reward.Method = method
	cfg.Server.Host, cfg.Server.Port = "127.0.0.1", 0
	if oracle != nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: oracle, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
		cfg.Reward.Judge, cfg.Reward.JudgeBaseURL, cfg.Reward.JudgeModel = "openai", "http://"+ln.Addr().String()+"/v1", "oracle"
	}
	b := *a
	b.cfg = &cfg
	b.log = a.log.Level(max(a.log.GetLevel(), zerolog.WarnLevel))
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- b.runServe(dctx, f.modelFlag, ready) }()
	select {
	case addr := <-ready:
		err = fn(dctx, &learnbench.Client{BaseURL: "http://" + addr, APIKey: key})
	case err := <-done:
		return err
	}
	cancel()
	if derr := <-done; derr != nil && !errors.Is(derr, context.Canceled) {
		err = errors.Join(err, derr)
	}
	return err
}
