package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/engine"
)

// devicesCmd is `clawrl devices`: what the engine can run on here, the
// CPU's kernels and the GPUs the CUDA driver reports, with the numbers
// devices.*.gpus of config.yaml takes.
func (a *app) devicesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "devices",
		Short: "List the CPU kernels and the GPUs the CUDA driver reports (the numbers devices.*.gpus takes)",
		Long: `devices prints the CPU kernels and threads the engine uses, and the GPUs
the NVIDIA driver reports (libcuda.so.1, or the library CLAWRL_LIBCUDA names),
through the same binding that serving uses: the driver's CUDA version, and for
each GPU its number in devices.*.gpus, name, memory, multiprocessors and
compute capability (the kernels need 8.0 or later). A machine without the
driver lists no GPUs and exits 0; a driver that fails is an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "cpu: %s kernels (available: %s), %d threads\n", engine.Kernels(), engine.AvailableKernels(), engine.Threads())
			ver, gpus, err := engine.GPUs()
			if errors.Is(err, engine.ErrNoDriver) {
				fmt.Fprintf(out, "gpus: none (%v)\n", engine.ErrNoDriver)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "cuda driver: CUDA %d.%d, %d GPU(s)\n", ver/1000, ver%1000/10, len(gpus))
			for _, g := range gpus {
				note := ""
				if g.Major < 8 {
					note = " (too old: the kernels need compute capability 8.0)"
				}
				fmt.Fprintf(out, "gpu %d: %s, %.1f GiB, %d SMs, compute capability %d.%d%s\n",
					g.Index, g.Name, float64(g.Memory)/(1<<30), g.SMs, g.Major, g.Minor, note)
			}
			return nil
		},
	}
}
