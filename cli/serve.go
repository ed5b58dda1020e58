package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/bundled"
	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/dashboard"
	"github.com/clawrl/clawrl/loop"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/replay"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/server"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/trainer"
	"github.com/clawrl/clawrl/weights"
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
//
// Start: open the store in the data directory (refusing another base
// model's), load the model, resume the newest checkpoint of the lineage
// (weights, optimizer, step count) and serve it under its own number,
// reserve every number the store has seen issued, reconcile the store
// with the checkpoint (steps after it are lost; their samples queue
// again), give the session tracker back the turns that were waiting for a
// next state, and only then listen. Stop (SIGINT/SIGTERM): stop accepting,
// let streams finish, stop the loop after its current step, checkpoint the
// current version if it has none, and close the store.
func (a *app) runServe(ctx context.Context, modelFlag string, ready chan<- string) error {
	dir, err := a.modelDir(modelFlag)
	if err != nil {
		return err
	}
	base, err := baseFingerprint(dir)
	if err != nil {
		return err
	}
	dataDir, err := a.cfg.DataDir()
	if err != nil {
		return err
	}
	ckptDir, err := a.cfg.CheckpointDir()
	if err != nil {
		return err
	}
	setMemoryLimit()
	reg := prometheus.NewRegistry()
	db, err := store.Open(dataDir, store.Options{
		BaseModel: base, NoRedact: !a.cfg.Data.Redact, MaxBytes: int64(a.cfg.Data.MaxMB) << 20,
		Registry: reg, Log: a.log,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := db.Close(); err != nil {
			a.log.Error().Err(err).Msg("closing the store")
		}
	}()
	e, err := a.openEngine(dir)
	if err != nil {
		return err
	}
	defer e.stop()
	if err := db.RecordVersion(e.store.Current(), 0, 0, "base: "+base); err != nil {
		return err
	}

	adm := &admin{}
	srv, vars, err := a.newServer(e, db, reg, adm)
	if err != nil {
		return err
	}
	pipeline, closeLoop, err := a.newLoop(e, db, vars, reg, base, ckptDir)
	if err != nil {
		return err
	}
	if a.cfg.Trainer.Enabled {
		adm.set(pipeline.loop, ckptDir)
	}
	defer closeLoop()
	if err := a.resume(e, db, srv, pipeline); err != nil {
		return err
	}
	if a.cfg.Data.RetentionDays > 0 {
		stopPurge := a.purgeLoop(db)
		defer stopPurge()
	}

	sc := a.cfg.Server
	ln, err := net.Listen("tcp", net.JoinHostPort(sc.Host, strconv.Itoa(sc.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}

	// The loop scores the stored turns and trains on them in the
	// background; serving never waits on it.
	loopCtx, loopCancel := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() { loopDone <- pipeline.loop.Run(loopCtx) }()

	err = srv.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	a.log.Info().Msg("shutting down: streams finished; stopping the training loop")
	loopCancel()
	if lerr := <-loopDone; lerr != nil {
		a.log.Error().Err(lerr).Msg("training loop stopped with an error")
	}
	if err := db.Flush(); err != nil {
		a.log.Error().Err(err).Msg("flushing the store")
	}
	if st, serr := db.Stats(); serr == nil {
		a.log.Info().Uint64("version", e.store.Current()).Any("turns", st.Turns).Any("samples", st.Samples).
			Str("store", db.Path()).Msg("stopped: store flushed")
	}
	return err
}

// resume serves the newest checkpoint of the lineage and reconciles the
// store and the session tracker with it.
func (a *app) resume(e *engine, db *store.DB, srv *server.Server, p *pipeline) error {
	var step int64
	rolledBack := false
	if p.trainer != nil && p.ckpt.Root != "" {
		c, refused, err := weights.OpenLatest(p.ckpt.Root)
		for _, r := range refused {
			a.log.Warn().Err(r).Msg("checkpoint refused")
		}
		switch {
		case err != nil:
			return fmt.Errorf("resume: %w (move the damaged checkpoints aside to start from the base model)", err)
		case c != nil && c.Manifest.Meta.Base != "" && c.Manifest.Meta.Base != p.ckpt.Base:
			return fmt.Errorf("resume: checkpoint %s was trained from base model %s, and this daemon serves base model %s: "+
				"use another data.dir / trainer.checkpoint_dir for this model", c.Dir(), c.Manifest.Meta.Base, p.ckpt.Base)
		case c != nil && c.Info().Version == e.store.Current():
			// The checkpoint of the base version itself (the guard saves
			// one before the first step, to roll back to): the trainer
			// already holds it.
			p.loop.SetCheckpointed(c.Info().Version)
			a.log.Info().Uint64("version", c.Info().Version).Str("checkpoint", c.Dir()).Msg("the newest checkpoint is the base version")
		case c != nil:
			if err := p.trainer.Restore(c); err != nil {
				return fmt.Errorf("resume: %w", err)
			}
			v, err := p.trainer.Publish(e.store)
			if err != nil {
				return fmt.Errorf("resume: %w", err)
			}
			if err := db.RecordVersion(v.Number(), v.Parent(), p.trainer.StepCount(), "resumed from "+c.Dir()); err != nil {
				return err
			}
			p.loop.SetCheckpointed(v.Number())
			step = p.trainer.StepCount()
			rolledBack = strings.HasPrefix(c.Manifest.Meta.Note, "rollback to ")
			a.log.Info().Uint64("version", v.Number()).Int64("step", step).Str("checkpoint", c.Dir()).Msg("resumed the newest checkpoint")
		}
	}
	last, err := db.LastVersion()
	if err != nil {
		return err
	}
	e.store.Reserve(last)
	r, err := db.Resume(step, rolledBack)
	if err != nil {
		return err
	}
	open, err := db.OpenTurns(a.cfg.Sessions.MaxSessions * a.cfg.Sessions.MaxTurns)
	if err != nil {
		return err
	}
	srv.RestoreTurns(open)
	ev := a.log.Info().Uint64("serving", e.store.Current()).Uint64("next_version", e.store.Last()+1).
		Int("open_turns", len(open)).Int("ready_turns", r.ReadyTurns).Int("queued_samples", r.QueuedSamples).Str("store", db.Path())
	if r.LostSteps > 0 {
		ev = ev.Int("lost_steps", r.LostSteps).Int("requeued_samples", r.Requeued)
	}
	ev.Msg("store opened")
	switch {
	case r.LostSteps > 0 && rolledBack:
		a.log.Warn().Int("rolled_back_steps", r.LostSteps).Int64("checkpoint_step", step).Int("dropped_samples", r.Requeued).
			Msg("resumed a rollback: the steps after it are undone and their samples dropped")
	case r.LostSteps > 0:
		a.log.Warn().Int("lost_steps", r.LostSteps).Int64("checkpoint_step", step).Int64("last_step", r.LastStep).
			Int("requeued_samples", r.Requeued).Msg("steps after the last checkpoint were lost with the previous process; their samples will train again")
	}
	return nil
}

// purgeLoop deletes records older than data.retention_days, hourly, until
// the returned func is called.
func (a *app) purgeLoop(db *store.DB) func() {
	days := a.cfg.Data.RetentionDays
	stop := make(chan struct{})
	done := make(chan struct{})
	purge := func() {
		f, err := db.Purge(time.Now().AddDate(0, 0, -days))
		if err != nil {
			a.log.Error().Err(err).Msg("retention purge failed")
		} else if f.Turns > 0 {
			a.log.Info().Int("turns", f.Turns).Int("days", days).Msg("retention: old records deleted")
		}
	}
	go func() {
		defer close(done)
		purge()
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				purge()
			}
		}
	}()
	return func() { close(stop); <-done }
}

// admin is the server's Admin: rollbacks go to the training loop, which
// is built after the server (set binds it).
type admin struct {
	mu   sync.Mutex
	loop *loop.Loop
	root string
}

func (a *admin) set(l *loop.Loop, root string) {
	a.mu.Lock()
	a.loop, a.root = l, root
	a.mu.Unlock()
}

func (a *admin) Rollback(ctx context.Context, n uint64) (uint64, error) {
	a.mu.Lock()
	l, root := a.loop, a.root
	a.mu.Unlock()
	if l == nil {
		return 0, errors.New("training is off: nothing to roll back")
	}
	c, err := weights.Open(weights.DirOf(root, n))
	if err != nil {
		return 0, fmt.Errorf("%w: version %d: %v", server.ErrUnknownVersion, n, err)
	}
	return l.Rollback(ctx, c)
}

// replaySource builds trainer.replay's source: the JSONL file it names,
// the bundled pretraining corpus ("corpus", or "" when the served model is
// the bundled one), or nil (no replay: samples 0, or "" with another
// model).
func (e *engine) replaySource(rc config.Replay, microBatchTokens int) (*replay.Source, error) {
	if rc.Samples <= 0 || rc.Data == "" && !isBundled(e.dir) {
		return nil, nil
	}
	opts := replay.Options{Weight: rc.Weight, MaxTokens: min(e.model.Config.MaxPositions, microBatchTokens), Seed: 1}
	var src *replay.Source
	var err error
	if rc.Data == "" || rc.Data == "corpus" {
		src, err = replay.Corpus(e.tok, nil, opts)
	} else {
		src, err = replay.File(rc.Data, e.tok, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("trainer.replay.data: %w", err)
	}
	return src, nil
}

// isBundled reports whether dir is the bundled model's directory.
func isBundled(dir string) bool {
	d, err := bundled.Dir()
	return err == nil && filepath.Clean(d) == filepath.Clean(dir)
}

// forgetter adapts the store to the server's DataStore.
type forgetter struct{ db *store.DB }

func (f forgetter) ForgetSession(id string) (server.Forgotten, error) {
	r, err := f.db.ForgetSession(id)
	return server.Forgotten{Turns: r.Turns, Feedback: r.Feedback, Samples: r.Samples}, err
}

// baseFingerprint identifies a base checkpoint directory: the bundled
// model by its embedded hash, any other by the SHA-256 of its config, the
// sizes of its weight files, their headers and their first and last MiB
// (reading a multi-GB checkpoint whole at every start would cost seconds).
func baseFingerprint(dir string) (string, error) {
	if isBundled(dir) {
		return bundled.Name + "-" + bundled.Hash()[:16], nil
	}
	h := sha256.New()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", fmt.Errorf("model %s: %w", dir, err)
	}
	h.Write(cfg)
	names, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(names) == 0 {
		return "", fmt.Errorf("model %s: no *.safetensors file", dir)
	}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			return "", fmt.Errorf("model %s: %w", dir, err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return "", fmt.Errorf("model %s: %w", dir, err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(name), st.Size())
		const chunk = 1 << 20
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, chunk)); err != nil {
			f.Close()
			return "", fmt.Errorf("model %s: %w", name, err)
		}
		if st.Size() > chunk {
			if _, err := io.Copy(h, io.NewSectionReader(f, max(chunk, st.Size()-chunk), chunk)); err != nil {
				f.Close()
				return "", fmt.Errorf("model %s: %w", name, err)
			}
		}
		f.Close()
	}
	return filepath.Base(filepath.Clean(dir)) + "-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// newServer builds the API server over an engine, with the store its
// turn records go to, and returns the template variables it renders with.
func (a *app) newServer(e *engine, db *store.DB, reg *prometheus.Registry, adm server.Admin) (*server.Server, map[string]any, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), e.sched.Collector())
	sc := a.cfg.Server
	vars := map[string]any{}
	if sc.EnableThinking != "auto" {
		vars["enable_thinking"] = sc.EnableThinking == "true"
	}
	modelID := filepath.Base(filepath.Clean(e.dir))
	var dash server.Dashboard
	if sc.Dashboard {
		dash = dashboard.New(dashboard.Options{
			ModelID: modelID, Version: e.store.Current, Training: a.cfg.Trainer.Enabled, Store: db, Gatherer: reg,
		})
	}
	srv, err := server.New(server.Options{
		Generator:        e.sched,
		Tokenizer:        e.tok,
		ModelID:          modelID,
		ContextLength:    e.model.Config.MaxPositions,
		Version:          e.store.Current,
		APIKeys:          sc.APIKeys,
		ModelAliases:     sc.ModelAliases,
		AdminKeys:        sc.AdminKeys,
		Admin:            adm,
		MaxBodyBytes:     int64(sc.MaxBodyMB) << 20,
		MaxN:             sc.MaxN,
		DefaultMaxTokens: sc.DefaultMaxTokens,
		StopTokens:       e.stopTokens(),
		TemplateVars:     vars,
		ShutdownTimeout:  sc.ShutdownTimeout,
		Sink:             db,
		Data:             forgetter{db},
		Dashboard:        dash,
		Sessions: session.Options{
			MaxSessions:        a.cfg.Sessions.MaxSessions,
			IdleTimeout:        a.cfg.Sessions.IdleTimeout,
			MaxTurnsPerSession: a.cfg.Sessions.MaxTurns,
			Archive:            db,
		},
		Logger:   a.log,
		Registry: reg,
	})
	return srv, vars, err
}

// newBareServer is newServer without a store: turns are recorded by the
// session tracker and go nowhere (benchmarks measure the store against it).
func (a *app) newBareServer(e *engine) (*server.Server, error) {
	sc := a.cfg.Server
	return server.New(server.Options{
		Generator: e.sched, Tokenizer: e.tok, ModelID: filepath.Base(filepath.Clean(e.dir)),
		ContextLength: e.model.Config.MaxPositions, Version: e.store.Current, ModelAliases: a.cfg.Server.ModelAliases,
		MaxBodyBytes: int64(sc.MaxBodyMB) << 20, MaxN: sc.MaxN, DefaultMaxTokens: sc.DefaultMaxTokens,
		StopTokens: e.stopTokens(), ShutdownTimeout: sc.ShutdownTimeout,
		Sessions: session.Options{MaxSessions: a.cfg.Sessions.MaxSessions, IdleTimeout: a.cfg.Sessions.IdleTimeout,
			MaxTurnsPerSession: a.cfg.Sessions.MaxTurns},
		Logger: a.log,
	})
}

// pipeline is the loop with the trainer and checkpoint options it runs
// with.
type pipeline struct {
	loop    *loop.Loop
	trainer *trainer.Trainer // nil when training is off and nothing is resumed
	ckpt    trainer.CheckpointOptions
}

// newLoop builds the reward stage (judge and teacher) and the trainer
// over the engine, and the loop that connects them through the store. The
// trainer is built when training is on, or when there are checkpoints to
// resume (their weights are served even with training off). The returned
// func frees what it built, after the loop has stopped.
func (a *app) newLoop(e *engine, db *store.DB, vars map[string]any, reg *prometheus.Registry, base, ckptDir string) (*pipeline, func(), error) {
	rc, tc := a.cfg.Reward, a.cfg.Trainer
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (*pipeline, func(), error) {
		closeAll()
		return nil, nil, err
	}

	cfg := reward.DefaultConfig()
	cfg.Backend, cfg.Teacher = rc.Judge, rc.Teacher
	cfg.Votes, cfg.Temperature, cfg.MaxTokens = rc.Votes, float32(rc.Temperature), rc.MaxTokens
	cfg.HintVotes, cfg.HintRule, cfg.HintGrounding = rc.HintVotes, reward.HintRule(rc.HintRule), rc.HintGrounding
	cfg.Timeout, cfg.Workers = rc.Timeout, rc.Workers
	cfg.Method, cfg.HintedRollouts = rc.Method, rc.HintedRollouts
	cfg.RolloutTemperature, cfg.RolloutMaxTokens = float32(rc.RolloutTemp), rc.RolloutMaxTokens
	if rc.Teacher == reward.TeacherNone {
		cfg.HintVotes = 0
	}
	if err := reward.ValidateConfig(cfg); err != nil {
		return fail(err)
	}
	// The actor group: the trainer and the teacher's scoring passes run on
	// actor, a view of the model on threads of their own when
	// devices.actor.threads is set, else the served model itself.
	actor, closeActor, err := e.actorModel(a)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, closeActor)
	var judge reward.Backend
	if rc.Judge == reward.BackendOpenAI {
		judge, err = reward.NewOpenAIBackend(reward.OpenAIOptions{BaseURL: rc.JudgeBaseURL, APIKey: rc.JudgeAPIKey, Model: rc.JudgeModel})
	} else {
		// The local judge generates on the checkpoint's frozen weights:
		// through a scheduler of its own on devices.judge.threads, or
		// through the serving scheduler as background work below users.
		js, stop, jerr := e.judgeScheduler(a, rc.Workers*max(1, rc.Votes))
		if jerr != nil {
			return fail(jerr)
		}
		closers = append(closers, stop)
		if js != e.sched {
			reg.MustRegister(js.GroupCollector("judge"))
		}
		judge, err = reward.NewLocalBackend(js, e.tok, reward.LocalOptions{StopTokens: e.stopTokens(), TemplateVars: vars})
	}
	if err != nil {
		return fail(err)
	}
	var teacher reward.Teacher
	if rc.Teacher != reward.TeacherNone {
		c := e.model.Config
		budget := kvBudget(rc.TeacherKVCacheMB, c.KVBytesPerToken(e.cache.DType())*int64(c.MaxPositions), 1, 8, 256<<20, memAvailable())
		tcache, err := actor.NewKVCache(model.KVCacheOptions{Budget: budget, DType: e.cache.DType()})
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
		mt, err := reward.NewModelTeacher(actor, tcache, pick)
		if err != nil {
			return fail(err)
		}
		teacher = mt
	}
	rm, err := reward.NewMetrics(reg)
	if err != nil {
		return fail(err)
	}
	var rollouts reward.RolloutGenerator
	if rc.Teacher != reward.TeacherNone && cfg.Uses(reward.MethodHinted) {
		// The teacher writes its responses through the serving scheduler,
		// below every user request, or through a scheduler of the actor
		// group's own: on the live weights for teacher "policy", on the
		// checkpoint's for "reference" and "judge".
		var gen rollout.Generator = e.sched
		if actor != e.model {
			as, stop, err := e.groupScheduler(a, "actor", actor, e.store, e.groupKVBudget(rc.Workers*max(1, rc.HintedRollouts)))
			if err != nil {
				return fail(err)
			}
			closers = append(closers, stop)
			reg.MustRegister(as.GroupCollector("actor"))
			gen = as
		}
		rollouts = &reward.SchedulerRollouts{Gen: gen, StopTokens: e.stopTokens(), Frozen: rc.Teacher != reward.TeacherPolicy, TopP: 1}
	}
	scorer, err := reward.New(reward.Options{Config: cfg, Judge: judge, Teacher: teacher, Rollouts: rollouts, Tokenizer: e.tok, Metrics: rm, Log: a.log})
	if err != nil {
		return fail(err)
	}

	var tr *trainer.Trainer
	existing, err := weights.List(ckptDir)
	if err != nil {
		return fail(err)
	}
	if tc.Enabled || len(existing) > 0 {
		opts := trainer.DefaultOptions()
		opts.LR, opts.WarmupSteps, opts.WeightDecay, opts.GradClip = tc.LR, tc.WarmupSteps, tc.WeightDecay, tc.GradClip
		opts.EpsLow, opts.EpsHigh = tc.ClipEpsLow, tc.ClipEpsHigh
		opts.RLWeight, opts.OPDWeight, opts.KLCoef = tc.RLWeight, tc.OPDWeight, tc.KLCoef
		opts.MaxStaleness, opts.MicroBatchTokens, opts.PPOEpochs = tc.MaxStaleness, tc.MicroBatchTokens, tc.PPOEpochs
		opts.LoRARank, opts.LoRAAlpha, opts.LoRATargets = tc.LoRARank, tc.LoRAAlpha, tc.LoRATargets
		opts.Checkpointing = tc.ActivationCheckpointing
		opts.MeasureKL = tc.Guard.KLMax > 0
		if err := opts.Validate(); err != nil {
			return fail(err)
		}
		tr, err = trainer.New(actor, e.model.Weights(), opts)
		if err != nil {
			return fail(err)
		}
		tr.SetVersion(e.store.Current())
		if a.trainingYields() {
			tr.SetSlicer(e.gate)
			e.model.SetScoreSlicer(e.gate)
			if actor != e.model {
				actor.SetScoreSlicer(e.gate) // the teacher's passes run on the actor's view
			}
		}
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "clawrl_train_yields_total",
			Help: "Slice boundaries at which a training pass or a teacher/reference scoring pass gave way to serving (trainer.yield_to_serving)."},
			func() float64 { return float64(e.gate.Stats().Yields) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "clawrl_train_busy_seconds_total",
			Help: "Time training and scoring slices ran while serving had work (bounded by trainer.share_under_load)."},
			func() float64 { return e.gate.Stats().BusyTraining.Seconds() }))
		closers = append(closers, tr.Close)
	}
	// Checkpoints are self-contained: the model's config and tokenizer
	// files travel with the weights, so `generate --model` and
	// `serve --model` load one as they load the base.
	cfgJSON, err := os.ReadFile(filepath.Join(e.dir, "config.json"))
	if err != nil {
		return fail(err)
	}
	extra := map[string][]byte{}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"} {
		if b, err := os.ReadFile(filepath.Join(e.dir, name)); err == nil {
			extra[name] = b
		}
	}
	ck := trainer.CheckpointOptions{Root: ckptDir, Keep: tc.KeepCheckpoints, ConfigJSON: cfgJSON, ExtraFiles: extra, Base: base}
	training := tr
	if !tc.Enabled {
		training = nil
	}
	guard := loop.GuardOptions{KLMax: tc.Guard.KLMax, SkillMargin: tc.Guard.SkillMargin, SkillEvery: tc.Guard.SkillEvery, LRFactor: tc.Guard.LRFactor,
		RecoverAfter: tc.Guard.RecoverAfter}
	if tc.Guard.SkillProbes > 0 && training != nil {
		if guard.Skill, err = e.guardSkill(tc.Guard.SkillProbes, vars); err != nil {
			return fail(err)
		}
		guard.SkillSet = guardSkillSet(tc.Guard.SkillProbes)
	}
	lo := loop.Options{
		DB: db, Scorer: scorer, Trainer: training, Versions: e.store,
		BatchSize: tc.BatchSize, MaxWait: tc.MaxWait, TemplateVars: vars,
		Checkpoint: ck, CheckpointEvery: tc.CheckpointEvery, Guard: guard,
		Registry: reg, Log: a.log,
	}
	if training != nil {
		src, err := e.replaySource(tc.Replay, tc.MicroBatchTokens)
		if err != nil {
			return fail(err)
		}
		if src != nil {
			lo.Replay, lo.ReplaySamples = src, tc.Replay.Samples
			a.log.Info().Str("from", src.String()).Int("samples", tc.Replay.Samples).Float64("weight", tc.Replay.Weight).Msg("replay on: every step also learns examples of what the model already does")
		} else if tc.Replay.Samples > 0 {
			a.log.Info().Str("model", e.dir).Msg("replay off: no replay data for a model other than the bundled one (set trainer.replay.data to a JSONL file of conversations)")
		}
	}
	l, err := loop.New(lo)
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
		Str("threads", groupThreads(a.cfg.Devices.Judge.Threads, a.cfg.Devices.Actor.Threads)).Int("batch_size", tc.BatchSize).Str("checkpoints", ckptDir).Msg("feedback loop ready")
	return &pipeline{loop: l, trainer: tr, ckpt: ck}, closeAll, nil
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
