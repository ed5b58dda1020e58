package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/server"
	"github.com/clawrl/clawrl/session"
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
	e, err := a.openEngine(dir)
	if err != nil {
		return err
	}
	defer e.stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sink := session.NewChanSink(256)
	sc := a.cfg.Server
	vars := map[string]any{}
	if sc.EnableThinking != "auto" {
		vars["enable_thinking"] = sc.EnableThinking == "true"
	}
	srv, err := server.New(server.Options{
		Generator:        e.sched,
		Tokenizer:        e.tok,
		ModelID:          filepath.Base(filepath.Clean(dir)),
		ContextLength:    e.model.Config.MaxPositions,
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
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(sc.Host, strconv.Itoa(sc.Port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if ready != nil {
		ready <- ln.Addr().String()
	}

	// The reward stage reads turn records; until training is wired into the
	// daemon, they are logged and counted, never silently lost.
	recDone := make(chan struct{})
	recCtx, recCancel := context.WithCancel(context.Background())
	go func() {
		defer close(recDone)
		for {
			select {
			case <-recCtx.Done():
				return
			case rec := <-sink.C():
				logRecord(a, rec)
			}
		}
	}()
	defer func() {
		recCancel()
		<-recDone
	}()

	err = srv.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func logRecord(a *app, rec session.Record) {
	ev := a.log.Debug().Str("kind", rec.Kind.String())
	if t := rec.Turn; t != nil {
		ev = ev.Str("session", t.SessionID).Int("turn", t.Index).Str("response_id", t.ResponseID).
			Int("prompt_tokens", len(t.PromptTokens)).Int("response_tokens", len(t.ResponseTokens)).
			Str("end", string(t.End)).Int("next_state_messages", len(t.NextState))
	}
	if f := rec.Feedback; f != nil {
		ev = ev.Str("response_id", f.ResponseID).Int("thumb", f.Thumb)
	}
	ev.Msg("turn record (training is not wired into the daemon yet)")
}
