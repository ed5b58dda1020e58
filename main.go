// Command clawrl serves a language model through an OpenAI-compatible API,
// turns each user's next message into feedback on the model's last answer,
// and trains the served model in the background.
//
// This file only starts the command line (package cli); the work lives in
// the packages (see DESIGN.md).
package main

import (
	_ "embed"
	"os"

	"github.com/clawrl/clawrl/cli"
)

//go:embed config.yaml
var defaultConfig []byte

// version is set at link time with -ldflags "-X main.version=..."; empty,
// it comes from the module's VCS stamp.
var version = ""

func main() {
	cli.SetDefaults(defaultConfig, version)
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
