package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/weights"
)

// weightsCmd is `clawrl weights`: the checkpoints of the lineage in the
// data directory.
func (a *app) weightsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "weights",
		Short: "List, pin or roll back the checkpointed weight versions",
		Long: `weights works on the checkpoints of the lineage (trainer.checkpoint_dir,
default checkpoints/ under data.dir):
  list            every checkpoint: version, parent, step, loss, when, pinned
  pin N / unpin N keep checkpoint N whatever its age (pruning skips it)
  rollback N      make checkpoint N's weights the newest, as a new version
                  number (numbers never repeat); a daemon serves it from its
                  next start`,
	}
	root := func() (string, error) { return a.cfg.CheckpointDir() }
	version := func(arg string) (uint64, error) {
		n, err := strconv.ParseUint(arg, 10, 64)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("%q is not a version number", arg)
		}
		return n, nil
	}

	list := &cobra.Command{
		Use: "list", Short: "List the checkpoints", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := root()
			if err != nil {
				return err
			}
			ns, err := weights.List(dir)
			if err != nil {
				return err
			}
			if len(ns) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no checkpoints under %s\n", dir)
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tPARENT\tSTEP\tLOSS\tCREATED\tPINNED\tNOTE")
			for _, n := range ns {
				c, err := weights.Open(weights.DirOf(dir, n))
				if err != nil {
					fmt.Fprintf(tw, "%d\t\t\t\t\t\trefused: %v\n", n, err)
					continue
				}
				m := c.Manifest
				pinned := ""
				if weights.Pinned(dir, n) {
					pinned = "yes"
				}
				fmt.Fprintf(tw, "%d\t%d\t%d\t%.4f\t%s\t%s\t%s\n", n, m.Parent, m.Meta.Step, m.Meta.Loss,
					m.Created.Local().Format(time.DateTime), pinned, m.Meta.Note)
			}
			return tw.Flush()
		},
	}
	// onVersion is a command that applies fn to the checkpoint root and
	// the version named by its argument.
	onVersion := func(use, short string, fn func(cmd *cobra.Command, root string, n uint64) error) *cobra.Command {
		return &cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				n, err := version(args[0])
				if err != nil {
					return err
				}
				dir, err := root()
				if err != nil {
					return err
				}
				return fn(cmd, dir, n)
			},
		}
	}
	pin := onVersion("pin N", "Keep checkpoint N through pruning",
		func(_ *cobra.Command, dir string, n uint64) error { return weights.Pin(dir, n) })
	unpin := onVersion("unpin N", "Let pruning delete checkpoint N again",
		func(_ *cobra.Command, dir string, n uint64) error { return weights.Unpin(dir, n) })
	rollback := onVersion("rollback N", "Make checkpoint N's weights the newest version",
		func(cmd *cobra.Command, dir string, n uint64) error {
			c, err := weights.Open(weights.DirOf(dir, n))
			if err != nil {
				return err
			}
			// The new number follows every number issued: the store's and
			// the checkpoints'.
			next := n
			if ns, err := weights.List(dir); err == nil && len(ns) > 0 {
				next = max(next, ns[0])
			}
			var db *store.DB
			if dataDir, err := a.cfg.DataDir(); err == nil {
				if _, err := os.Stat(filepath.Join(dataDir, store.FileName)); err == nil {
					if db, err = store.Open(dataDir, store.Options{Log: a.log}); err != nil {
						return err
					}
					defer db.Close()
					last, err := db.LastVersion()
					if err != nil {
						return err
					}
					next = max(next, last)
				}
			}
			next++
			info := c.Info()
			info.Version, info.Parent, info.Created = next, n, time.Now()
			info.Meta.Note = fmt.Sprintf("rollback to %d", n)
			out, err := weights.Republish(dir, c, info, a.cfg.Trainer.KeepCheckpoints)
			if err != nil {
				return err
			}
			if db != nil {
				if err := db.RecordVersion(next, n, info.Meta.Step, info.Meta.Note); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "version %d holds the weights of %d (%s); a daemon serves it from its next start\n", next, n, out.Dir())
			return nil
		})
	cmd.AddCommand(list, pin, unpin, rollback)
	return cmd
}
