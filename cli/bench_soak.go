package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/clawrl/clawrl/apiclient"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/trainer"
)

// benchSoakCmd is `clawrl bench soak`: the whole daemon (serving, store,
// judge, trainer) under simulated users for a while, then what became of
// their turns.
func (a *app) benchSoakCmd() *cobra.Command {
	var clients int
	var seconds float64
	var modelFlag, dataDir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run the daemon with training on under N streaming users; count what was stored, trained, dropped",
		Long: `soak starts the daemon in-process with the effective config (training on),
on a fresh data directory unless --data-dir is given, and runs --clients
simulated users for --seconds: each holds a conversation (X-Session-Id),
streams every answer and gives a thumb on most of them. Then it stops the
daemon as SIGTERM would and reports: responses completed and failed (by
status), completed turns missing from the store (must be 0), samples by
outcome (trained, queued, dropped by reason) and steps applied.

It then measures the goal that thumbs train at once and the judge works
only for turns that can train, from the store: for every accepted thumb,
the training steps that started after it and before the step that
trained its turn (0, 1, 2, more); thumbed turns not trained by the end,
in time (fewer than 2 steps started since the thumb) or missed; thumbed
turns dropped, by reason; and the turns the judge scored (votes, or a
hint) whose samples were dropped, by reason, with the stale ones that
were already more than trainer.max_staleness steps behind when scored.
The goal is met when every thumbed turn trained within 2 steps (or is
still in time) and no judged sample was dropped as stale. --json writes
the whole report as one JSON object instead.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runSoak(cmd, modelFlag, dataDir, clients, time.Duration(seconds*float64(time.Second)), asJSON)
		},
	}
	cmd.Flags().IntVar(&clients, "clients", 64, "simulated users streaming at once")
	cmd.Flags().Float64Var(&seconds, "seconds", 120, "how long they keep talking")
	cmd.Flags().StringVar(&modelFlag, "model", "", "checkpoint directory or GGUF file (default: model.path, else the bundled model)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "data directory (default: a fresh temporary one)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "write the report as one JSON object")
	return cmd
}

func (a *app) runSoak(cmd *cobra.Command, modelFlag, dataDir string, clients int, d time.Duration, asJSON bool) error {
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
	calls := judgeCalls(url)
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
	r := soakReport{
		Clients: clients, Seconds: took.Seconds(), Completed: len(log.completed), Failed: log.statuses,
		FeedbackAccepted: len(log.feedback), NotStored: missing, Turns: st.Turns, Samples: st.Samples,
		Dropped: st.Dropped, Steps: st.Steps, LastVersion: st.LastVersion, JudgeCalls: calls,
		MaxStaleness: a.cfg.Trainer.MaxStaleness, BatchSize: a.cfg.Trainer.BatchSize,
	}
	if err := r.measure(db); err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		r.print(out)
	}
	if missing > 0 {
		return fmt.Errorf("%d completed turns are not in the store", missing)
	}
	return nil
}

// soakReport is what `bench soak` reports.
type soakReport struct {
	Clients          int            `json:"clients"`
	Seconds          float64        `json:"seconds"`
	Completed        int            `json:"responses_completed"`
	Failed           map[string]int `json:"requests_failed"`
	FeedbackAccepted int            `json:"feedback_accepted"`
	NotStored        int            `json:"completed_turns_not_stored"`
	Turns            map[string]int `json:"turns"`
	Samples          map[string]int `json:"samples"`
	Dropped          map[string]int `json:"dropped"`
	Steps            map[string]int `json:"steps"`
	LastVersion      uint64         `json:"last_version"`
	BatchSize        int            `json:"batch_size"`
	MaxStaleness     int            `json:"max_staleness"`
	// JudgeCalls are the judge's call attempts (and teacher passes) by
	// stage, from the daemon's metrics when the users stopped.
	JudgeCalls map[string]int `json:"judge_calls,omitempty"`
	Thumbs     thumbReport    `json:"thumbs"`
	Judged     judgedReport   `json:"judged"`
	// GoalMet: every thumbed turn (but redacted ones) trained within 2
	// steps of its thumb (or is still in time), and no judged sample was
	// dropped as stale.
	GoalMet bool `json:"goal_met"`
}

// thumbReport is what became of the accepted thumbs.
type thumbReport struct {
	Thumbs int `json:"thumbs"`
	// TrainedAfter counts the trained ones by the steps that started
	// after the thumb and before the step that trained it: "0", "1", "2",
	// ">2".
	TrainedAfter map[string]int `json:"trained_after_steps"`
	// InTime and Missed count those not trained by the end with fewer
	// than 2, and 2 or more, steps started since the thumb; MissedAt says
	// where the missed ones were (queued: a sample waiting for a step;
	// unscored: the turn waiting for the scorer).
	InTime   int            `json:"in_time"`
	Missed   int            `json:"missed"`
	MissedAt map[string]int `json:"missed_at"`
	// Dropped counts the thumbed turns whose sample was dropped, by
	// reason; Other those that ended otherwise (nosignal, failed,
	// forgotten, and redacted: its text held a secret, so it never
	// trains, which the goal allows).
	Dropped map[string]int `json:"dropped"`
	Other   map[string]int `json:"other"`
	// Late counts the trained ones with 2 or more steps before.
	Late int `json:"late"`
}

// judgedReport is what became of the turns the judge scored.
type judgedReport struct {
	Samples int            `json:"samples"`
	Outcome map[string]int `json:"outcome"` // trained, queued, nosignal, dropped: REASON
	// StaleWhenScored counts the samples dropped as stale whose turn was
	// already more than max_staleness steps behind the trainer when its
	// score was stored: judge work that could be known not to train.
	StaleWhenScored int `json:"stale_when_scored"`
	// Stale counts all judged samples dropped as stale.
	Stale int `json:"stale"`
}

// measure fills the thumb and judge reports from the store.
func (r *soakReport) measure(db *store.DB) error {
	thumbs, err := db.ThumbOutcomes()
	if err != nil {
		return err
	}
	t := thumbReport{Thumbs: len(thumbs), TrainedAfter: map[string]int{}, MissedAt: map[string]int{}, Dropped: map[string]int{}, Other: map[string]int{}}
	for _, o := range thumbs {
		switch o.Status {
		case store.SampleTrained:
			k := fmt.Sprint(o.StepsBefore)
			if o.StepsBefore > 2 {
				k = ">2"
			}
			t.TrainedAfter[k]++
			if o.StepsBefore >= 2 {
				t.Late++
			}
		case store.SampleDropped:
			t.Dropped[o.Reason]++
		case store.SampleQueued, "unscored":
			if o.Status == "unscored" && o.TurnStatus != "ready" && o.TurnStatus != "open" {
				t.Other[o.TurnStatus]++
				break
			}
			if o.StepsSince < 2 {
				t.InTime++
			} else {
				t.Missed++
				t.MissedAt[o.Status]++
			}
		default:
			t.Other[o.Status]++
		}
	}
	r.Thumbs = t

	// The trainer's version at a time: the newest version recorded by
	// then; staleness in steps of the lineage, as the trainer counts it.
	versions, err := db.Versions()
	if err != nil {
		return err
	}
	lin := trainer.NewLineage()
	for _, v := range versions {
		lin.Add(v.Number, v.Parent, v.Step)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i].Created.Before(versions[j].Created) })
	judged, err := db.JudgedSamples()
	if err != nil {
		return err
	}
	j := judgedReport{Samples: len(judged), Outcome: map[string]int{}}
	for _, s := range judged {
		k := s.Status
		if s.Status == store.SampleDropped {
			k += ": " + s.Reason
		}
		j.Outcome[k]++
		if s.Status != store.SampleDropped || s.Reason != "stale" {
			continue
		}
		j.Stale++
		var cur uint64
		for _, v := range versions {
			if v.Created.After(s.Created) {
				break
			}
			cur = v.Number
		}
		if n, ok := lin.Steps(s.Version, cur); ok && n > r.MaxStaleness {
			j.StaleWhenScored++
		}
	}
	r.Judged = j
	other := 0
	for k, n := range t.Other {
		if k != "redacted" { // its text held a secret: never trained, by design
			other += n
		}
	}
	r.GoalMet = t.Late == 0 && t.Missed == 0 && len(t.Dropped) == 0 && other == 0 && j.Stale == 0
	return nil
}

func (r *soakReport) print(out io.Writer) {
	fmt.Fprintf(out, "soak: %d streaming users for %s\n", r.Clients, (time.Duration(r.Seconds * float64(time.Second))).Round(time.Second))
	fmt.Fprintf(out, "  responses completed           %d (%.1f/s)\n", r.Completed, float64(r.Completed)/r.Seconds)
	fmt.Fprintf(out, "  requests failed, by status    %s\n", formatCounts(r.Failed))
	fmt.Fprintf(out, "  feedback accepted             %d\n", r.FeedbackAccepted)
	fmt.Fprintf(out, "  completed turns not stored    %d\n", r.NotStored)
	fmt.Fprintf(out, "  stored turns, by status       %s\n", formatCounts(r.Turns))
	fmt.Fprintf(out, "  samples, by status            %s\n", formatCounts(r.Samples))
	fmt.Fprintf(out, "  dropped samples, by reason    %s\n", formatCounts(r.Dropped))
	fmt.Fprintf(out, "  steps                         %s; last version %d\n", formatCounts(r.Steps), r.LastVersion)
	trainable := r.Samples[store.SampleTrained] + r.Samples[store.SampleQueued] + r.Samples[store.SampleDropped]
	if trainable > 0 {
		fmt.Fprintf(out, "  trained / trainable samples   %d / %d (%.0f%%); turns trained: %.0f%% of completed\n",
			r.Samples[store.SampleTrained], trainable, 100*float64(r.Samples[store.SampleTrained])/float64(trainable),
			100*float64(r.Samples[store.SampleTrained])/float64(max(1, r.Completed)))
	}
	t := r.Thumbs
	fmt.Fprintf(out, "  thumbs (stored)               %d\n", t.Thumbs)
	fmt.Fprintf(out, "    trained, by steps between   0: %d, 1: %d, 2: %d, >2: %d\n", t.TrainedAfter["0"], t.TrainedAfter["1"], t.TrainedAfter["2"], t.TrainedAfter[">2"])
	fmt.Fprintf(out, "    not trained, in time (<2)   %d\n", t.InTime)
	fmt.Fprintf(out, "    not trained, missed (>=2)   %d (%s)\n", t.Missed, formatCounts(t.MissedAt))
	fmt.Fprintf(out, "    dropped, by reason          %s\n", formatCounts(t.Dropped))
	if len(t.Other) > 0 {
		fmt.Fprintf(out, "    otherwise                   %s\n", formatCounts(t.Other))
	}
	if n := r.Steps["applied"]; n > 0 {
		fmt.Fprintf(out, "    thumbs per applied step     %.1f (batch_size %d)\n", float64(t.Thumbs)/float64(n), r.BatchSize)
	}
	j := r.Judged
	fmt.Fprintf(out, "  judged turns (votes or hint)  %d: %s\n", j.Samples, formatCounts(j.Outcome))
	fmt.Fprintf(out, "    dropped as stale            %d (%d already > %d steps behind when scored)\n", j.Stale, j.StaleWhenScored, r.MaxStaleness)
	if len(r.JudgeCalls) > 0 {
		fmt.Fprintf(out, "  judge calls, by stage         %s\n", formatCounts(r.JudgeCalls))
	}
	verdict := "NOT MET"
	if r.GoalMet {
		verdict = "met"
	}
	fmt.Fprintf(out, "  goal (thumbs within 2 steps, no stale judged turns): %s\n", verdict)
}

// judgeCalls reads the judge's call attempts by stage from the daemon's
// metrics (clawrl_reward_judge_seconds_count); nil when they cannot be
// read.
func judgeCalls(url string) map[string]int {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, `clawrl_reward_judge_seconds_count{stage="`)
		if !ok {
			continue
		}
		stage, val, ok := strings.Cut(rest, `"} `)
		if n, err := strconv.ParseFloat(val, 64); ok && err == nil {
			out[stage] = int(n)
		}
	}
	return out
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
