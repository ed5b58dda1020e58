package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/store"
)

// dataCmd is `clawrl data`: what the store holds, for the user it
// belongs to. It works on the data directory of the config (data.dir), and
// beside a running daemon (SQLite's WAL lets several processes open it).
func (a *app) dataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Inspect, export or delete the stored conversations and training data",
		Long: `data works on the store in data.dir (default ~/.local/share/clawrl):
  stats              counts of sessions, turns, samples, steps, versions
  export [--out F]   JSONL for TRL / OpenRLHF (chat messages, reward, votes, hint, teacher advantages)
  forget --session ID   delete a session's turns, feedback and samples (and their bytes)`,
	}
	var dataDir string
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "", "data directory (default: data.dir)")
	openDB := func() (*store.DB, error) {
		dir := dataDir
		if dir == "" {
			var err error
			if dir, err = a.cfg.DataDir(); err != nil {
				return nil, err
			}
		}
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("no data directory at %s: %w", dir, err)
		}
		return store.Open(dir, store.Options{Log: a.log})
	}

	stats := &cobra.Command{
		Use: "stats", Short: "Print counts of what the store holds (JSON)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := db.Stats()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	}

	var out string
	export := &cobra.Command{
		Use: "export", Short: "Write every scored turn as JSONL (TRL / OpenRLHF conversational format)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			w := cmd.OutOrStdout()
			var f *os.File
			if out != "" && out != "-" {
				if f, err = os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
					return err
				}
				w = f
			}
			bw := bufio.NewWriter(w)
			n, err := db.Export(bw)
			if err == nil {
				err = bw.Flush()
			}
			if f != nil {
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "exported %d records\n", n)
			return nil
		},
	}
	export.Flags().StringVarP(&out, "out", "o", "", "output file (default: standard output)")

	var session string
	forget := &cobra.Command{
		Use: "forget", Short: "Delete a session's turns, feedback and samples from the store", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if session == "" {
				return fmt.Errorf("name the session: clawrl data forget --session ID")
			}
			db, err := openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			f, err := db.ForgetSession(session)
			if err != nil {
				return err
			}
			if f.Turns == 0 && f.Feedback == 0 {
				return fmt.Errorf("no stored session %q", session)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted session %s: %d turns, %d feedback, %d samples\n", session, f.Turns, f.Feedback, f.Samples)
			return nil
		},
	}
	forget.Flags().StringVar(&session, "session", "", "session id (the X-Session-Id the daemon answered with)")
	cmd.AddCommand(stats, export, forget)
	return cmd
}
