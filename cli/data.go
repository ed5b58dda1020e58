package cli

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/session"
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
	dirOf := func() (string, error) {
		dir := dataDir
		if dir == "" {
			var err error
			if dir, err = a.cfg.DataDir(); err != nil {
				return "", err
			}
		}
		if _, err := os.Stat(dir); err != nil {
			return "", fmt.Errorf("no data directory at %s: %w", dir, err)
		}
		return dir, nil
	}
	openDB := func() (*store.DB, error) {
		dir, err := dirOf()
		if err != nil {
			return nil, err
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
			dir, err := dirOf()
			if err != nil {
				return err
			}
			key, err := store.IDKey(dir)
			if err != nil {
				return err
			}
			db, err := openDB()
			if err != nil {
				return err
			}
			defer db.Close()
			// The id as stored: scoped to the key that created it (any of
			// server.api_keys, or none) and hashed (data.hash_ids); and as
			// given, for a store written before ids were scoped.
			ids := sessionIDs{Key: key, Hash: a.cfg.Data.HashIDs}
			var f store.Forgotten
			for _, sid := range ids.candidates(session, a.cfg.Server.APIKeys) {
				g, err := db.ForgetSession(sid)
				if err != nil {
					return err
				}
				f.Turns, f.Feedback, f.Samples = f.Turns+g.Turns, f.Feedback+g.Feedback, f.Samples+g.Samples
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

// sessionIDs finds a session's stored ids from the id a client gave.
type sessionIDs session.IDs

// candidates are the ids a session given as raw may be stored under: scoped
// to each key (and to no key) and, for stores written before ids were
// scoped, raw itself.
func (s sessionIDs) candidates(raw string, apiKeys []string) []string {
	ids := session.IDs(s)
	out := []string{raw, ids.Scope("", raw)}
	for _, k := range apiKeys {
		out = append(out, ids.Scope(ids.Owner(sha256.Sum256([]byte(k))), raw))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
