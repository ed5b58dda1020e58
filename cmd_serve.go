package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/loop"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/server"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/trainer"
)

func (a *app) serveCmd() *cobra.Command {
	var modelFlag string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the OpenAI-compatible daemon",
		Long: `serve loads the model and serves the OpenAI-compatible API (chat
completions, responses, completions, models, feedback) on server.host:port.
Every main turn is recorded with its next state and feedback for the reward
stage. SIGINT or SIGTERM stops it gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.runServe(ctx, modelFlag, nil)
		},
	}
	cmd.Flags().StringVar(&modelFlag, "model", "", "checkpoint directory (default: model.path)")
	fl := cmd.Flags()
	fl.String("host", "", "listen address (server.host)")
	config.BindFlag(fl, "host", "server.host")
	fl.Int("port", 0, "listen port (server.port)")
	config.BindFlag(fl, "port", "server.port")
	return cmd
}

// runServe runs the daemon until ctx ends. If ready is not nil it receives
// the listening address once the API accepts requests (for tests).
func (a *app) runServe(ctx context.Context, modelFlag string, ready chan<- string) error {
	dir, err := a.modelDir(modelFlag)
	if err != nil {
		return err
	}
	setMemoryLimit()
	e, err := a.openEngine(dir)
	if err != nil {
		return err
	}
	defer e.stop()

	srv, sink, vars, reg, err := a.newServer(e)
	if err != nil {
		return err
	}
	sc := a.cfg.Server
	ln, err := net.Listen("tcp", net.JoinHostPort(sc.Host, strconv.Itoa(sc.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}

	// The loop scores the turn records and trains on them in the
	// background; serving never waits on it.
	pipeline, closeLoop, err := a.newLoop(e, sink, vars, reg)
	if err != nil {
		ln.Close()
		return err
	}
	defer closeLoop()
	loopCtx, loopCancel := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() { loopDone <- pipeline.Run(loopCtx) }()
	defer func() {
		loopCancel()
		if err := <-loopDone; err != nil {
			a.log.Error().Err(err).Msg("training loop stopped with an error")
		}
	}()

	err = srv.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

// newServer builds the API server over an engine, with the sink its turn
// records leave through, the template variables it renders with, and the
// metrics registry it serves.
func (a *app) newServer(e *engine) (*server.Server, *session.ChanSink, map[string]any, *prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), e.sched.Collector())
	sink := session.NewChanSink(256)
	sc := a.cfg.Server
	vars := map[string]any{}
	if sc.EnableThinking != "auto" {
		vars["enable_thinking"] = sc.EnableThinking == "true"
	}
	srv, err := server.New(server.Options{
		Generator:        e.sched,
		Tokenizer:        e.tok,
		ModelID:          filepath.Base(filepath.Clean(e.dir)),
		ContextLength:    e.model.Config.MaxPositions,
		Version:          e.store.Current,
		APIKeys:          sc.APIKeys,
		MaxBodyBytes:     int64(sc.MaxBodyMB) << 20,
		MaxN:             sc.MaxN,
		DefaultMaxTokens: sc.DefaultMaxTokens,
		StopTokens:       e.stopTokens(),
		TemplateVars:     vars,
		ShutdownTimeout:  sc.ShutdownTimeout,
		Sink:             sink,
		Sessions: session.Options{
			MaxSessions:        a.cfg.Sessions.MaxSessions,
			IdleTimeout:        a.cfg.Sessions.IdleTimeout,
			MaxTurnsPerSession: a.cfg.Sessions.MaxTurns,
		},
		Logger:   a.log,
		Registry: reg,
	})
	return srv, sink, vars, reg, err
}

// newLoop builds the reward stage (judge and teacher) and the trainer
// over the engine, and the loop that connects them to the turn records.
// The returned func frees what it built, after the loop has stopped.
func (a *app) newLoop(e *engine, sink *session.ChanSink, vars map[string]any, reg *prometheus.Registry) (*loop.Loop, func(), error) {
	rc, tc := a.cfg.Reward, a.cfg.Trainer
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*loop.Loop, func(), error) {
		closeAll()
		return nil, nil, err
	}

	cfg := reward.DefaultConfig()
	cfg.Backend, cfg.Teacher = rc.Judge, rc.Teacher
	cfg.Votes, cfg.Temperature, cfg.MaxTokens = rc.Votes, float32(rc.Temperature), rc.MaxTokens
	cfg.HintVotes, cfg.HintRule = rc.HintVotes, reward.HintRule(rc.HintRule)
	cfg.Timeout, cfg.Workers = rc.Timeout, rc.Workers
	if rc.Teacher == reward.TeacherNone {
		cfg.HintVotes = 0
	}
	if err := reward.ValidateConfig(cfg); err != nil {
		return fail(err)
	}
	var judge reward.Backend
	var err error
	if rc.Judge == reward.BackendOpenAI {
		judge, err = reward.NewOpenAIBackend(reward.OpenAIOptions{BaseURL: rc.JudgeBaseURL, APIKey: rc.JudgeAPIKey, Model: rc.JudgeModel})
	} else {
		// The local judge generates through the serving scheduler, on the
		// current weights.
		judge, err = reward.NewLocalBackend(e.sched, e.tok, reward.LocalOptions{StopTokens: e.stopTokens(), TemplateVars: vars})
	}
	if err != nil {
		return fail(err)
	}
	var teacher reward.Teacher
	if rc.Teacher != reward.TeacherNone {
		c := e.model.Config
		budget := kvBudget(rc.TeacherKVCacheMB, c.KVBytesPerToken(e.cache.DType())*int64(c.MaxPositions), 1, 8, 256<<20, memAvailable())
		tcache, err := e.model.NewKVCache(model.KVCacheOptions{Budget: budget, DType: e.cache.DType()})
		if err != nil {
			return fail(err)
		}
		closers = append(closers, tcache.Close)
		var pick func() *model.Weights // nil: the frozen checkpoint weights
		if rc.Teacher == reward.TeacherPolicy {
			pick = func() *model.Weights {
				v, err := e.store.Acquire()
				if err != nil {
					return nil
				}
				// The store keeps the previous version as well, so the set
				// outlives a publication that lands during the pass.
				defer e.store.Release(v)
				return v.Weights()
			}
		}
		mt, err := reward.NewModelTeacher(e.model, tcache, pick)
		if err != nil {
			return fail(err)
		}
		teacher = mt
	}
	rm, err := reward.NewMetrics(reg)
	if err != nil {
		return fail(err)
	}
	scorer, err := reward.New(reward.Options{Config: cfg, Judge: judge, Teacher: teacher, Tokenizer: e.tok, Metrics: rm, Log: a.log})
	if err != nil {
		return fail(err)
	}

	var tr *trainer.Trainer
	if tc.Enabled {
		opts := trainer.DefaultOptions()
		opts.LR, opts.WarmupSteps, opts.WeightDecay, opts.GradClip = tc.LR, tc.WarmupSteps, tc.WeightDecay, tc.GradClip
		opts.EpsLow, opts.EpsHigh = tc.ClipEpsLow, tc.ClipEpsHigh
		opts.RLWeight, opts.OPDWeight, opts.KLCoef = tc.RLWeight, tc.OPDWeight, tc.KLCoef
		opts.MaxStaleness, opts.MicroBatchTokens = tc.MaxStaleness, tc.MicroBatchTokens
		opts.LoRARank, opts.LoRAAlpha, opts.LoRATargets = tc.LoRARank, tc.LoRAAlpha, tc.LoRATargets
		opts.Checkpointing = tc.ActivationCheckpointing
		if err := opts.Validate(); err != nil {
			return fail(err)
		}
		tr, err = trainer.New(e.model, e.model.Weights(), opts)
		if err != nil {
			return fail(err)
		}
		tr.SetVersion(e.store.Current())
		closers = append(closers, tr.Close)
	}
	var ck trainer.CheckpointOptions
	if tc.CheckpointDir != "" {
		cfgJSON, err := os.ReadFile(filepath.Join(e.dir, "config.json"))
		if err != nil {
			return fail(err)
		}
		ck = trainer.CheckpointOptions{Root: tc.CheckpointDir, Keep: tc.KeepCheckpoints, ConfigJSON: cfgJSON}
	}
	l, err := loop.New(loop.Options{
		Records: sink.C(), Scorer: scorer, Trainer: tr, Store: e.store,
		BatchSize: tc.BatchSize, MaxWait: tc.MaxWait, TemplateVars: vars,
		Checkpoint: ck, CheckpointEvery: tc.CheckpointEvery,
		Registry: reg, Log: a.log,
	})
	if err != nil {
		return fail(err)
	}
	mode := "off"
	if tr != nil {
		mode = "full fine-tuning"
		if tc.LoRARank > 0 {
			mode = fmt.Sprintf("LoRA rank %d", tc.LoRARank)
		}
	}
	a.log.Info().Str("judge", rc.Judge).Str("teacher", rc.Teacher).Str("training", mode).
		Int("batch_size", tc.BatchSize).Msg("feedback loop ready")
	return l, closeAll, nil
}

// setMemoryLimit gives the garbage collector a soft limit of 90% of the
// machine's memory, unless GOMEMLIMIT sets one. The weights and the KV
// cache are large and live as long as the daemon, and the collector paces
// itself by the live heap: without a limit, garbage could grow as large as
// they are before a collection, and push a busy daemon out of memory.
func setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	if total := memInfo("MemTotal"); total > 0 {
		debug.SetMemoryLimit(total / 10 * 9)
	}
}
