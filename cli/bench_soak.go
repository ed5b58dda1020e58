package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/apiclient"
	"github.com/clawrl/clawrl/store"
)

// benchSoakCmd is `clawrl bench soak`: the whole daemon (serving, store,
// judge, trainer) under simulated users for a while, then what became of
// their turns.
func (a *app) benchSoakCmd() *cobra.Command {
	var clients int
	var seconds float64
	var modelFlag, dataDir string
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run the daemon with training on under N streaming users; count what was stored, trained, dropped",
		Long: `soak starts the daemon in-process with the effective config (training on),
on a fresh data directory unless --data-dir is given, and runs --clients
simulated users for --seconds: each holds a conversation (X-Session-Id),
streams every answer and gives a thumb on most of them. Then it stops the
daemon as SIGTERM would and reports: responses completed and failed (by
status), completed turns missing from the store (must be 0), samples by
outcome (trained, queued, dropped by reason) and steps applied.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runSoak(cmd, modelFlag, dataDir, clients, time.Duration(seconds*float64(time.Second)))
		},
	}
	cmd.Flags().IntVar(&clients, "clients", 64, "simulated users streaming at once")
	cmd.Flags().Float64Var(&seconds, "seconds", 120, "how long they keep talking")
	cmd.Flags().StringVar(&modelFlag, "model", "", "checkpoint directory or GGUF file (default: model.path, else the bundled model)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data directory (default: a fresh temporary one)")
	return cmd
}

func (a *app) runSoak(cmd *cobra.Command, modelFlag, dataDir string, clients int, d time.Duration) error {
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "clawrl-soak-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dataDir = tmp
	}
	a.cfg.Data.Dir = dataDir
	a.cfg.Server.Host, a.cfg.Server.Port = "127.0.0.1", 0
	a.log = a.log.Level(max(a.log.GetLevel(), zerolog.WarnLevel)) // warnings and errors only: request logs would drown the report
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- a.runServe(ctx, modelFlag, ready) }()
	var url string
	select {
	case addr := <-ready:
		url = "http://" + addr
	case err := <-done:
		return err
	}
	log := newClientLog()
	uctx, ucancel := context.WithTimeout(ctx, d)
	start := time.Now()
	users(uctx, url, clients, 1, log)
	ucancel()
	took := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		return err
	}

	db, err := store.Open(dataDir, store.Options{Log: a.log})
	if err != nil {
		return err
	}
	defer db.Close()
	missing := 0
	for id := range log.completed {
		var n int
		if err := db.SQL().QueryRow("SELECT COUNT(*) FROM turns WHERE response_id = ?", id).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			missing++
		}
	}
	st, err := db.Stats()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "soak: %d streaming users for %s\n", clients, took.Round(time.Second))
	fmt.Fprintf(out, "  responses completed           %d (%.1f/s)\n", len(log.completed), float64(len(log.completed))/took.Seconds())
	fmt.Fprintf(out, "  requests failed, by status    %s\n", formatCounts(log.statuses))
	fmt.Fprintf(out, "  feedback accepted             %d\n", len(log.feedback))
	fmt.Fprintf(out, "  completed turns not stored    %d\n", missing)
	fmt.Fprintf(out, "  stored turns, by status       %s\n", formatCounts(st.Turns))
	fmt.Fprintf(out, "  samples, by status            %s\n", formatCounts(st.Samples))
	fmt.Fprintf(out, "  dropped samples, by reason    %s\n", formatCounts(st.Dropped))
	fmt.Fprintf(out, "  steps                         %s; last version %d\n", formatCounts(st.Steps), st.LastVersion)
	trainable := st.Samples[store.SampleTrained] + st.Samples[store.SampleQueued] + st.Samples[store.SampleDropped]
	if trainable > 0 {
		fmt.Fprintf(out, "  trained / trainable samples   %d / %d (%.0f%%); turns trained: %.0f%% of completed\n",
			st.Samples[store.SampleTrained], trainable, 100*float64(st.Samples[store.SampleTrained])/float64(trainable),
			100*float64(st.Samples[store.SampleTrained])/float64(max(1, len(log.completed))))
	}
	if missing > 0 {
		return fmt.Errorf("%d completed turns are not in the store", missing)
	}
	return nil
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// clientLog is what the simulated users saw.
type clientLog struct {
	mu        sync.Mutex
	completed map[string]bool // response ids whose stream ended with [DONE]
	feedback  map[string]bool // feedback ids answered 200
	statuses  map[string]int  // failed requests by HTTP status (or "transport")
}

func newClientLog() *clientLog {
	return &clientLog{completed: map[string]bool{}, feedback: map[string]bool{}, statuses: map[string]int{}}
}

func (l *clientLog) fail(status string) {
	l.mu.Lock()
	l.statuses[status]++
	l.mu.Unlock()
}

// chatTurn streams one chat completion and returns its id and text when
// the stream completed, else the failure ("" when the context ended).
func chatTurn(ctx context.Context, url, sessionID string, msgs []map[string]string) (id, text, failure string) {
	body := map[string]any{"model": servedModel(url), "messages": msgs, "max_tokens": 24, "stream": true}
	resp, err := apiclient.Post(ctx, nil, url+"/v1/chat/completions", http.Header{"X-Session-Id": {sessionID}}, body)
	var ae *apiclient.Error
	switch {
	case err != nil && ctx.Err() != nil:
		return "", "", ""
	case errors.As(err, &ae):
		return "", "", fmt.Sprint(ae.Status)
	case err != nil:
		return "", "", "transport"
	}
	defer resp.Body.Close()
	var b strings.Builder
	err = apiclient.ReadStream(resp.Body, func(ck *apiclient.Chunk) error {
		id = ck.ID
		if len(ck.Choices) > 0 && ck.Choices[0].Delta.Content != nil {
			b.WriteString(*ck.Choices[0].Delta.Content)
		}
		return nil
	})
	switch {
	case err == nil && id != "":
		return id, b.String(), ""
	case ctx.Err() != nil:
		return "", "", ""
	case errors.As(err, &ae):
		return "", "", "stream error"
	}
	return "", "", "stream cut"
}

var (
	servedMu     sync.Mutex
	servedModels = map[string]string{}
)

// servedModel is the id of the model url serves (GET /v1/models, asked
// once per url).
func servedModel(url string) string {
	servedMu.Lock()
	defer servedMu.Unlock()
	if id, ok := servedModels[url]; ok {
		return id
	}
	id := "clawrl-small"
	if resp, err := http.Get(url + "/v1/models"); err == nil {
		var list struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&list) == nil && len(list.Data) > 0 {
			id = list.Data[0].ID
		}
		resp.Body.Close()
		servedModels[url] = id
	}
	return id
}

// users runs n simulated users against url until ctx ends: each holds a
// conversation, continues it turn after turn, and gives a thumb on most
// answers. A refused request (429) is retried after a pause, as a client
// honouring Retry-After would.
func users(ctx context.Context, url string, n int, seed uint64, log *clientLog) {
	var wg sync.WaitGroup
	for u := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(u)))
			sess := fmt.Sprintf("s%d-%d", seed, u)
			msgs := []map[string]string{{"role": "system", "content": "You are a helpful assistant."}}
			for turn := 0; ctx.Err() == nil; turn++ {
				if len(msgs) > 24 { // start a new conversation now and then
					sess = fmt.Sprintf("s%d-%d-%d", seed, u, turn)
					msgs = msgs[:1]
				}
				msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("Question %d of user %d: name a colour.", turn, u)})
				id, text, failure := chatTurn(ctx, url, sess, msgs)
				if failure != "" {
					log.fail(failure)
					msgs = msgs[:len(msgs)-1]
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
					continue
				}
				if id == "" {
					return
				}
				log.mu.Lock()
				log.completed[id] = true
				log.mu.Unlock()
				msgs = append(msgs, map[string]string{"role": "assistant", "content": text})
				if rng.IntN(4) == 0 {
					continue
				}
				thumb := 1
				if rng.IntN(2) == 0 {
					thumb = -1
				}
				fb, _ := json.Marshal(map[string]any{"response_id": id, "thumb": thumb})
				req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/feedback", bytes.NewReader(fb))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				var got struct {
					ID string `json:"id"`
				}
				json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if resp.StatusCode == 200 && got.ID != "" {
					log.mu.Lock()
					log.feedback[got.ID] = true
					log.mu.Unlock()
				} else {
					log.fail(fmt.Sprintf("feedback %d", resp.StatusCode))
				}
			}
		})
	}
	wg.Wait()
}
