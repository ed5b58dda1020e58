package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/apiclient"
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
                  number (numbers never repeat). With a daemon running on the
                  data directory, the rollback goes through it (POST
                  /admin/rollback with server.admin_keys' first key) and it
                  serves the version at once; without admin keys the command
                  refuses and says how`,
	}
	dataDirFlag(cmd.PersistentFlags())
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
			fmt.Fprintln(tw, "VERSION\tPARENT\tSTEP\tLOSS\tCREATED\tPINNED\tHOLDS\tNOTE")
			for _, n := range ns {
				c, err := weights.Open(weights.DirOf(dir, n))
				if err != nil {
					fmt.Fprintf(tw, "%d\t\t\t\t\t\t\trefused: %v\n", n, err)
					continue
				}
				m := c.Manifest
				pinned := ""
				if weights.Pinned(dir, n) {
					pinned = "yes"
				}
				holds := "weights"
				if a := m.Adapters; a != nil {
					holds = "adapters over " + a.Path
				}
				fmt.Fprintf(tw, "%d\t%d\t%d\t%.4f\t%s\t%s\t%s\t%s\n", n, m.Parent, m.Meta.Step, m.Meta.Loss,
					m.Created.Local().Format(time.DateTime), pinned, holds, m.Meta.Note)
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
			// A running daemon owns the checkpoints: a version written
			// beside it would be undone by its next step.
			if dataDir, err := a.cfg.DataDir(); err == nil {
				h, held, err := store.Owner(dataDir)
				if err != nil {
					return err
				}
				if held {
					return a.rollbackThroughDaemon(cmd, dataDir, h, n)
				}
			}
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

// rollbackThroughDaemon asks the daemon h that holds dataDir to roll back
// to version n, at the address it announced in the lock file, with the
// first admin key; without one it refuses, saying what works.
func (a *app) rollbackThroughDaemon(cmd *cobra.Command, dataDir string, h store.Holder, n uint64) error {
	pid := h.PID
	url := strings.TrimSuffix(a.defaultBaseURL(), "/v1") + "/admin/rollback"
	if h.Addr != "" {
		url = "http://" + localAddr(h.Addr) + "/admin/rollback"
	}
	if len(a.cfg.Server.AdminKeys) == 0 {
		return fmt.Errorf("a daemon (pid %d) serves data directory %s, and a rollback written beside it would be undone by its next step: "+
			"roll back through it, with an admin key set in server.admin_keys (then run this command again), e.g. "+
			"curl -X POST %s -H 'Authorization: Bearer KEY' -d '{\"version\": %d}'; or stop the daemon first", pid, dataDir, url, n)
	}
	resp, err := apiclient.Post(cmd.Context(), nil, url, http.Header{"Authorization": {"Bearer " + a.cfg.Server.AdminKeys[0]}},
		map[string]any{"version": n})
	if err != nil {
		return fmt.Errorf("rolling back through the daemon (pid %d) at %s: %w", pid, url, err)
	}
	defer resp.Body.Close()
	var out struct {
		Version uint64 `json:"weight_version"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("rolling back through the daemon at %s: %w", url, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "the daemon (pid %d) rolled back: version %d holds the weights of %d and is served now\n", pid, out.Version, n)
	return nil
}
