package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The OpenAI-compatible clients people use today, run against the real
// daemon on the bundled model: Node scripts in testdata/clients, with the
// packages scripts/fetch-testdata installs (npm ci) into .cache/clients.
// Each script drives its SDK over several seeds and reports, as one JSON
// line, what the SDK threw, the tool calls and structured outputs the
// server returned, and the schemas the SDK declared for them; the test
// validates every one with a full JSON Schema validator. The bundled
// model is a toy: what it writes is silly, but it must be well formed.

// clientReport is what a client script reports.
type clientReport struct {
	Requests      int            `json:"requests"`
	ItemRefs      int            `json:"itemReferences"`
	Errors        []string       `json:"errors"`
	Turns         int            `json:"turns"`
	ToolErrors    int            `json:"toolErrors"`
	Runs          int            `json:"runs"`
	MaxTurns      int            `json:"maxTurns"`
	Parsed        map[string]int `json:"parsed"`
	Calls         []clientCall   `json:"calls"`
	ValidCalls    int            `json:"-"`
	InvalidCalls  []string       `json:"-"`
	UndeclaredFns []string       `json:"-"`
}

type clientCall struct {
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Schema    json.RawMessage `json:"schema"`
	Declared  bool            `json:"declared"`
}

// clientSeeds is how many sampled runs each client test makes.
const clientSeeds = 20

// clientScripts returns a directory holding the client scripts beside the
// installed packages, or skips the test saying what is missing.
func clientScripts(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found: the client tests need Node.js 20 or later (and npm for scripts/fetch-testdata)")
	}
	out, err := exec.Command(node, "--version").Output()
	major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v"))
	if err != nil || major < 20 {
		t.Skipf("node %s: the client tests need Node.js 20 or later", strings.TrimSpace(string(out)))
	}
	fixture, _ := filepath.Abs(filepath.Join("testdata", "clients"))
	installed, _ := filepath.Abs(filepath.Join("..", ".cache", "clients"))
	want, _ := os.ReadFile(filepath.Join(fixture, "package-lock.json"))
	have, err := os.ReadFile(filepath.Join(installed, "package-lock.json"))
	if _, serr := os.Stat(filepath.Join(installed, "node_modules")); err != nil || serr != nil || !bytes.Equal(want, have) {
		t.Skipf("the client packages are not installed in %s, or not the versions %s pins: run scripts/fetch-testdata", installed, filepath.Join(fixture, "package-lock.json"))
	}
	dir := t.TempDir()
	entries, _ := os.ReadDir(fixture)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".mjs") {
			b, err := os.ReadFile(filepath.Join(fixture, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Node resolves packages from the script's directory up.
	if err := os.Symlink(filepath.Join(installed, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// clientDaemon starts the real binary (built without the race detector,
// so that the model runs at its speed) on the bundled model, training
// off, with its data in a new directory, and returns it and the model's
// id.
func clientDaemon(t *testing.T) (*daemon, string) {
	t.Helper()
	return clientDaemonIn(t, filepath.Join(t.TempDir(), "data"))
}

// clientDaemonIn is clientDaemon with its data in dir.
func clientDaemonIn(t *testing.T, dir string) (*daemon, string) {
	t.Helper()
	bin := realBinary(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("trainer:\n  enabled: false\nreward:\n  votes: 1\n  hint_votes: 0\ndata:\n  dir: %s\n", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, bin, cfg, freePort(t))
	t.Cleanup(func() { d.stop() })
	return d, firstModel(t, d.url)
}

// runClient runs one client script against d and checks every call it
// saw against the schema its SDK declared.
func runClient(t *testing.T, scripts, script string, d *daemon, model string) *clientReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = scripts
	cmd.Env = append(os.Environ(), "CLAWRL_BASE_URL="+d.url, "CLAWRL_MODEL="+model, "CLAWRL_SEEDS="+strconv.Itoa(clientSeeds))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s\n%s", script, err, out, stderr.String())
	}
	var rep clientReport
	line := out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]
	if err := json.Unmarshal(line, &rep); err != nil {
		t.Fatalf("node %s: report %q: %v\n%s", script, line, err, stderr.String())
	}
	for _, c := range rep.Calls {
		if !c.Declared {
			rep.UndeclaredFns = append(rep.UndeclaredFns, c.Name)
			continue
		}
		if err := validateArgs(c.Schema, c.Arguments); err != nil {
			rep.InvalidCalls = append(rep.InvalidCalls, fmt.Sprintf("%s(%s): %v", c.Name, c.Arguments, err))
			continue
		}
		rep.ValidCalls++
	}
	t.Logf("%s: %d requests in %v; %d of %d calls valid for their schema, %d undeclared; %d errors",
		script, rep.Requests, time.Since(start).Round(time.Second), rep.ValidCalls, len(rep.Calls), len(rep.UndeclaredFns), len(rep.Errors))
	for _, e := range rep.Errors {
		t.Errorf("%s: %s", script, e)
	}
	for _, c := range rep.InvalidCalls {
		t.Errorf("%s: invalid: %s", script, c)
	}
	for _, n := range rep.UndeclaredFns {
		t.Errorf("%s: a call of the undeclared function %q", script, n)
	}
	return &rep
}

// validateArgs validates a call's arguments against the schema declared.
func validateArgs(schema json.RawMessage, args string) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		return err
	}
	v, err := c.Compile("s.json")
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return v.Validate(inst)
}

// TestClients runs the three clients against one daemon: the Vercel AI
// SDK's default provider (the Responses API with item_reference replay)
// for three turns of a tool loop, the OpenAI Agents SDK with strict tools
// in auto mode, and LangChain's ChatOpenAI structured output (a forced
// function and json_schema), 20 seeds each.
func TestClients(t *testing.T) {
	scripts := clientScripts(t)
	d, model := clientDaemon(t)

	t.Run("vercel", func(t *testing.T) {
		rep := runClient(t, scripts, "vercel.mjs", d, model)
		if rep.Turns != 3*clientSeeds || rep.ToolErrors != 0 {
			t.Errorf("%d of %d turns, %d tool errors", rep.Turns, 3*clientSeeds, rep.ToolErrors)
		}
		// Turns 2 and 3 replay the earlier output by reference.
		if rep.ItemRefs < 2*clientSeeds {
			t.Errorf("%d item references over %d seeds: the SDK did not replay by reference", rep.ItemRefs, clientSeeds)
		}
		if rep.ValidCalls < 3*clientSeeds {
			t.Errorf("%d valid tool calls, want one per turn at least (%d)", rep.ValidCalls, 3*clientSeeds)
		}
	})
	t.Run("agents", func(t *testing.T) {
		rep := runClient(t, scripts, "agents.mjs", d, model)
		if rep.Runs != clientSeeds {
			t.Errorf("%d of %d runs finished", rep.Runs, clientSeeds)
		}
		// Auto mode: the model decides whether to call; it mostly does.
		if rep.ValidCalls < clientSeeds/2 {
			t.Errorf("%d valid strict tool calls in %d runs", rep.ValidCalls, clientSeeds)
		}
	})
	t.Run("langchain", func(t *testing.T) {
		rep := runClient(t, scripts, "langchain.mjs", d, model)
		for _, m := range []string{"functionCalling", "jsonSchema"} {
			if rep.Parsed[m] != clientSeeds {
				t.Errorf("%s: %d of %d structured outputs parsed", m, rep.Parsed[m], clientSeeds)
			}
		}
		if rep.ValidCalls != 2*clientSeeds {
			t.Errorf("%d of %d outputs valid", rep.ValidCalls, 2*clientSeeds)
		}
	})
}
