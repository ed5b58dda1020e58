package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes the CLI with args and returns stdout, stderr and the error.
func run(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd(&out, &errb)
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	err := cmd.Execute()
	return out.String(), errb.String(), err
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "", "version")
	if err != nil || !strings.HasPrefix(out, "clawrl ") || !strings.Contains(out, "kernels: ") {
		t.Fatalf("version: %q, %v", out, err)
	}
}

func TestNotImplemented(t *testing.T) {
	for _, c := range []string{"serve", "chat", "pretrain", "export"} {
		_, _, err := run(t, "", c, "--anything")
		if !errors.Is(err, errNotImplemented) || !strings.Contains(err.Error(), "issue #") {
			t.Errorf("%s: err = %v, want a not-implemented error naming its issue", c, err)
		}
	}
}

func TestBadConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("server:\n  port: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "", "--config", p, "version")
	if err == nil || !strings.Contains(err.Error(), "server.port") {
		t.Fatalf("err = %v, want a server.port error", err)
	}
}

func TestTestmodelAndGenerate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if _, _, err := run(t, "", "testmodel", dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("testmodel did not write %s: %v", f, err)
		}
	}
	gen := func(args ...string) string {
		t.Helper()
		out, _, err := run(t, "", append([]string{"generate", "--model", dir, "--seed", "3", "-n", "12"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := gen("--chat", "--prompt", "Hello!")
	if b := gen("--chat", "--prompt", "Hello!"); a != b {
		t.Errorf("seeded generation differs: %q vs %q", a, b)
	}
	if g1, g2 := gen("-t", "0", "--prompt", "The quick"), gen("-t", "0", "--prompt", "The quick"); g1 != g2 {
		t.Errorf("greedy generation differs: %q vs %q", g1, g2)
	}
	// The prompt can come from standard input.
	if out, _, err := run(t, "The quick", "generate", "--model", dir, "-n", "3"); err != nil || out == "" {
		t.Errorf("stdin prompt: %q, %v", out, err)
	}
	for _, bad := range [][]string{
		{"generate", "--model", dir, "--prompt", "x", "--temperature", "5"},
		{"generate", "--model", dir, "--prompt", "x", "--max-tokens", "0"},
		{"generate", "--model", filepath.Join(dir, "missing"), "--prompt", "x"},
		{"generate", "--prompt", "x"},
		{"testmodel", t.TempDir(), "--preset", "huge"},
	} {
		if _, _, err := run(t, "", bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
