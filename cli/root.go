// Package cli is clawrl's command line: one cobra command per verb
// (serve, chat, generate, bench, pretrain, export, data, weights,
// testmodel, version), each reading the typed config and wiring packages
// together. The work itself lives in the packages (see DESIGN.md): the
// engine package assembles the model, its backends and device groups; a
// command gets everything that computes through it.
package cli

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/engine"
)

// defaultConfig is the built-in configuration (the repository's
// config.yaml, embedded by package main), and version the release name
// set at link time; SetDefaults sets both before Main runs.
var (
	defaultConfig []byte
	version       = ""
)

// SetDefaults sets the embedded default configuration and the version
// string (empty: the module's VCS stamp).
func SetDefaults(config []byte, release string) {
	defaultConfig, version = config, release
}

// Main runs the command line with args (without the program name) and
// returns the process's exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	cmd := newRootCmd(stdout, stderr)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(stderr, "clawrl:", err)
		return 1
	}
	return 0
}

// app carries what every command shares: the loaded config and the logger.
type app struct {
	configFile string
	cfg        *config.Config
	log        zerolog.Logger
	stdout     io.Writer
	stderr     io.Writer
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "clawrl",
		Short: "Serve a language model over an OpenAI-compatible API and train it from feedback",
		Long: `clawrl serves a language model through an OpenAI-compatible API (port 30000),
treats each user's next message as feedback on the model's last answer, scores
it with a judge, and trains the served model in the background.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load(cmd)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "config file (default: ./config.yaml if present, else built-in defaults)")
	pf.String("log-level", "", "log level: debug, info, warn, error")
	config.BindFlag(pf, "log-level", "log.level")
	pf.Int("threads", 0, "CPU threads for the kernels (0 = one per core)")
	config.BindFlag(pf, "threads", "model.threads")

	root.AddCommand(
		a.versionCmd(),
		a.devicesCmd(),
		a.generateCmd(),
		a.testmodelCmd(),
		a.benchCmd(),
		a.serveCmd(),
		a.chatCmd(),
		a.pretrainCmd(),
		a.dataCmd(),
		a.weightsCmd(),
		a.exportCmd(),
	)
	return root
}

// load reads the configuration (flags of the running command included) and
// sets up logging.
func (a *app) load(cmd *cobra.Command) error {
	cfg, err := config.Load(config.Options{
		Defaults: defaultConfig,
		File:     a.configFile,
		Flags:    cmd.Flags(),
	})
	if err != nil {
		return err
	}
	a.cfg = cfg
	a.log = newLogger(a.stderr, cfg.Log)
	return nil
}

// newLogger writes human-readable lines to a terminal and JSON otherwise.
func newLogger(w io.Writer, c config.Log) zerolog.Logger {
	level, err := zerolog.ParseLevel(c.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	console := c.Format == "console"
	if c.Format == "auto" {
		if f, ok := w.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
			console = true
		}
	}
	if console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05"}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, build and CPU features",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.stdout, "clawrl %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			fmt.Fprintf(a.stdout, "kernels: %s (available: %s), %d threads\n",
				engine.Kernels(), engine.AvailableKernels(), engine.Threads())
			return nil
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev[:min(12, len(rev))] + dirty
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
