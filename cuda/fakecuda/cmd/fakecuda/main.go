// Command fakecuda builds the fake libcuda of package fakecuda (with the
// host's C++ compiler, cached as the tests cache it) and prints its path,
// or copies it to -o: for running clawrl itself on the emulated GPU, as
// scripts/gpu-check --fake does, with CLAWRL_LIBCUDA set to that path.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/clawrl/clawrl/cuda/fakecuda"
)

func main() {
	out := flag.String("o", "", "copy the library to this path instead of printing the cached one's")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "fakecuda:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	p, err := fakecuda.Path()
	if err != nil {
		return err
	}
	if out == "" {
		fmt.Println(p)
		return nil
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("installing %s: %w", out, err)
	}
	fmt.Println(out)
	return nil
}
