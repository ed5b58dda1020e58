package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/dashboard"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/replay"
	"github.com/clawrl/clawrl/server"
	"github.com/clawrl/clawrl/session"
	"github.com/clawrl/clawrl/store"
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
	cmd.Flags().StringVar(&modelFlag, "model", "", "checkpoint directory or GGUF file (default: model.path)")
	fl := cmd.Flags()
	fl.String("host", "", "listen address (server.host)")
	config.BindFlag(fl, "host", "server.host")
	fl.Int("port", 0, "listen port (server.port)")
	config.BindFlag(fl, "port", "server.port")
	dataDirFlag(fl)
	return cmd
}

// runServe runs the daemon until ctx ends. If ready is not nil it receives
// the listening address once the API accepts requests (for tests).
//
// Start, in this order: the data directory's lock (a second daemon on it
// is refused at once), the engine (the model loaded, the serving
// scheduler), the store in the data directory (refusing another base
// model's), the feedback loop (judge, teacher, trainer) and the API
// server. Then resume the newest checkpoint of the lineage (weights,
// optimizer, step count) and serve it under its own number, reserve every
// number the store has seen issued, reconcile the store with the
// checkpoint (steps after it are lost; their samples queue again), give
// the session tracker back the turns that were waiting for a next state,
// and only then listen. Stop (SIGINT/SIGTERM): stop accepting, let streams
// finish, stop the loop after its current step, checkpoint the current
// version if it has none, and close the store.
func (a *app) runServe(ctx context.Context, modelFlag string, ready chan<- string) error {
	dataDir, err := a.cfg.DataDir()
	if err != nil {
		return err
	}
	ckptDir, err := a.cfg.CheckpointDir()
	if err != nil {
		return err
	}
	lock, err := store.LockDir(dataDir)
	if err != nil {
		return err
	}
	defer lock.Close()
	engine.SetMemoryLimit()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	e, err := engine.Open(a.cfg, engine.Options{Model: modelFlag, Log: a.log, Registry: reg})
	if err != nil {
		return err
	}
	defer e.Close()
	if !e.Tokenizer().HasChatTemplate() {
		// The API, the judge and the teacher all render chats.
		return fmt.Errorf("%s has no chat template (GGUF files made before llama.cpp stored one, and base models, carry none): set model.chat_template (or CLAWRL_MODEL_CHAT_TEMPLATE) to a Jinja chat template file, or to the template itself", e.Dir())
	}
	db, err := store.Open(dataDir, store.Options{
		BaseModel: e.Base(), NoRedact: !a.cfg.Data.Redact, MaxBytes: int64(a.cfg.Data.MaxMB) << 20,
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
	if err := db.RecordVersion(e.Versions().Current(), 0, 0, "base: "+e.Base()); err != nil {
		return err
	}
	idKey, err := store.IDKey(dataDir)
	if err != nil {
		return err
	}
	vars := a.templateVars()
	fb, err := a.newFeedback(e, db, reg, vars, ckptDir)
	if err != nil {
		return err
	}
	srv, err := a.newServer(e, db, reg, vars, idKey, fb)
	if err != nil {
		return err
	}
	if err := a.resume(e, db, srv, fb); err != nil {
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
	if err := lock.Announce(ln.Addr().String()); err != nil {
		ln.Close()
		return err
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}

	// The loop scores the stored turns and trains on them in the
	// background; serving never waits on it.
	loopCtx, loopCancel := context.WithCancel(context.Background())
	loopDone := make(chan error, 1)
	go func() { loopDone <- fb.loop.Run(loopCtx) }()

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
		a.log.Info().Uint64("version", e.Versions().Current()).Any("turns", st.Turns).Any("samples", st.Samples).
			Str("store", db.Path()).Msg("stopped: store flushed")
	}
	return err
}

// resume serves the newest checkpoint of the lineage and reconciles the
// store and the session tracker with it.
func (a *app) resume(e *engine.Engine, db *store.DB, srv *server.Server, p *feedback) error {
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
		case c != nil && c.Info().Version == e.Versions().Current():
			// The checkpoint of the base version itself (the guard saves
			// one before the first step, to roll back to): the trainer
			// already holds it.
			p.loop.SetCheckpointed(c.Info().Version)
			a.log.Info().Uint64("version", c.Info().Version).Str("checkpoint", c.Dir()).Msg("the newest checkpoint is the base version")
		case c != nil:
			if err := p.trainer.Restore(c); err != nil {
				return fmt.Errorf("resume: %w", err)
			}
			v, err := p.trainer.Publish(e.Versions())
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
	e.Versions().Reserve(last)
	r, err := db.Resume(step, rolledBack)
	if err != nil {
		return err
	}
	open, err := db.OpenTurns(a.cfg.Sessions.MaxSessions * a.cfg.Sessions.MaxTurns)
	if err != nil {
		return err
	}
	srv.RestoreTurns(open)
	ev := a.log.Info().Uint64("serving", e.Versions().Current()).Uint64("next_version", e.Versions().Last()+1).
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

// Rollback is the server's Admin: POST /admin/rollback rolls the
// training loop back to checkpointed version n.
func (f *feedback) Rollback(ctx context.Context, n uint64) (uint64, error) {
	if !f.training {
		return 0, errors.New("training is off: nothing to roll back")
	}
	c, err := weights.Open(weights.DirOf(f.ckpt.Root, n))
	if err != nil {
		return 0, fmt.Errorf("%w: version %d: %v", server.ErrUnknownVersion, n, err)
	}
	return f.loop.Rollback(ctx, c)
}

// replaySource builds trainer.replay's source: the JSONL file it names,
// the bundled pretraining corpus ("corpus", or "" when the served model is
// the bundled one), or nil (no replay: samples 0, or "" with another
// model).
func replaySource(e *engine.Engine, rc config.Replay, microBatchTokens int) (*replay.Source, error) {
	if rc.Samples <= 0 || rc.Data == "" && !engine.IsBundled(e.Dir()) {
		return nil, nil
	}
	opts := replay.Options{Weight: rc.Weight, MaxTokens: min(e.Model().Config.MaxPositions, microBatchTokens), Seed: 1}
	var src *replay.Source
	var err error
	if rc.Data == "" || rc.Data == "corpus" {
		src, err = replay.Corpus(e.Tokenizer(), nil, opts)
	} else {
		src, err = replay.File(rc.Data, e.Tokenizer(), opts)
	}
	if err != nil {
		return nil, fmt.Errorf("trainer.replay.data: %w", err)
	}
	return src, nil
}

// forgetter adapts the store to the server's DataStore.
type forgetter struct{ db *store.DB }

func (f forgetter) ForgetSession(id string) (server.Forgotten, error) {
	r, err := f.db.ForgetSession(id)
	return server.Forgotten{Turns: r.Turns, Feedback: r.Feedback, Samples: r.Samples}, err
}

// templateVars are the chat template's variables every request renders
// with (server.enable_thinking).
func (a *app) templateVars() map[string]any {
	vars := map[string]any{}
	if t := a.cfg.Server.EnableThinking; t != "auto" {
		vars["enable_thinking"] = t == "true"
	}
	return vars
}

// newServer builds the API server over an engine, with the store its
// turn records go to, the chat template's variables, the secret session
// ids are hashed under (nil: one per process) and the admin endpoint's
// rollbacks (nil: none).
func (a *app) newServer(e *engine.Engine, db *store.DB, reg *prometheus.Registry, vars map[string]any, idKey []byte, adm server.Admin) (*server.Server, error) {
	sc := a.cfg.Server
	modelID := filepath.Base(filepath.Clean(e.Dir()))
	var dash server.Dashboard
	if sc.Dashboard {
		dash = dashboard.New(dashboard.Options{
			ModelID: modelID, Version: e.Versions().Current, Training: a.cfg.Trainer.Enabled, Store: db, Gatherer: reg,
		})
	}
	return server.New(server.Options{
		Generator:        e.Scheduler(),
		Tokenizer:        e.Tokenizer(),
		ModelID:          modelID,
		ContextLength:    e.Model().Config.MaxPositions,
		Version:          e.Versions().Current,
		APIKeys:          sc.APIKeys,
		IDKey:            idKey,
		HashIDs:          a.cfg.Data.HashIDs,
		ModelAliases:     sc.ModelAliases,
		AdminKeys:        sc.AdminKeys,
		Admin:            adm,
		MaxBodyBytes:     int64(sc.MaxBodyMB) << 20,
		MaxN:             sc.MaxN,
		DefaultMaxTokens: sc.DefaultMaxTokens,
		StopTokens:       e.StopTokens(),
		TemplateVars:     vars,
		ShutdownTimeout:  sc.ShutdownTimeout,
		Sink:             db,
		Data:             forgetter{db},
		Responses:        responseStore{db},
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
}

// newBareServer is newServer without a store: turns are recorded by the
// session tracker and go nowhere (benchmarks measure the store against it).
func (a *app) newBareServer(e *engine.Engine) (*server.Server, error) {
	sc := a.cfg.Server
	return server.New(server.Options{
		Generator: e.Scheduler(), Tokenizer: e.Tokenizer(), ModelID: filepath.Base(filepath.Clean(e.Dir())),
		ContextLength: e.Model().Config.MaxPositions, Version: e.Versions().Current, ModelAliases: a.cfg.Server.ModelAliases,
		MaxBodyBytes: int64(sc.MaxBodyMB) << 20, MaxN: sc.MaxN, DefaultMaxTokens: sc.DefaultMaxTokens,
		StopTokens: e.StopTokens(), ShutdownTimeout: sc.ShutdownTimeout,
		Sessions: session.Options{MaxSessions: a.cfg.Sessions.MaxSessions, IdleTimeout: a.cfg.Sessions.IdleTimeout,
			MaxTurnsPerSession: a.cfg.Sessions.MaxTurns},
		Logger: a.log,
	})
}

// dataDirFlag adds --data-dir, bound to data.dir, to the flags of a
// command that works on the data directory (serve, weights, export), so
// that a second daemon, or a look at one, needs no config file.
func dataDirFlag(fl *pflag.FlagSet) {
	fl.String("data-dir", "", "data directory: the store and the checkpoints (data.dir; default ~/.local/share/clawrl)")
	config.BindFlag(fl, "data-dir", "data.dir")
}
