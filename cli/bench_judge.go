package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/reward"
	"github.com/clawrl/clawrl/tokenizer"
)

// judgeLoad keeps the daemon's local judge busy, as a stream of scored
// turns would: reward.workers workers, each judging turns back to back
// (a vote call with reward.votes samples, then a hint call with
// reward.hint_votes), on the frozen checkpoint weights through the serving
// scheduler as background work (or the judge group's scheduler with
// devices.judge.threads), exactly as the daemon's scorer calls it.
type judgeLoad struct {
	on     atomic.Bool
	turns  atomic.Int64 // turns judged (vote and hint calls both done)
	failed atomic.Int64 // judge calls that returned an error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (a *app) startJudgeLoad(e *engine.Engine) (*judgeLoad, error) {
	rc := a.cfg.Reward
	// As in the daemon: the serving scheduler, or the judge group's own
	// with devices.judge.threads (the engine stops it).
	gen, err := e.JudgeScheduler(rc.Workers * max(1, rc.Votes))
	if err != nil {
		return nil, err
	}
	judge, err := reward.NewLocalBackend(gen, e.Tokenizer(), reward.LocalOptions{StopTokens: e.StopTokens()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &judgeLoad{cancel: cancel}
	lim := reward.DefaultLimits()
	for w := range max(1, rc.Workers) {
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if !l.on.Load() {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				turn := benchTurn(w, i)
				calls := []reward.Request{{Messages: reward.JudgeMessages(&turn, "", lim), N: rc.Votes, Temperature: float32(rc.Temperature), MaxTokens: rc.MaxTokens}}
				if rc.HintVotes > 0 {
					calls = append(calls, reward.Request{Messages: reward.HintMessages(&turn, "", lim), N: rc.HintVotes, Temperature: float32(rc.Temperature), MaxTokens: rc.MaxTokens})
				}
				ok := true
				for _, req := range calls {
					if _, err := judge.Complete(ctx, req); err != nil {
						if ctx.Err() == nil {
							l.failed.Add(1)
						}
						ok = false
						break
					}
				}
				if ok {
					l.turns.Add(1)
				}
			}
		})
	}
	return l, nil
}

func (l *judgeLoad) close() {
	l.cancel()
	l.wg.Wait()
}

// benchTurn is a turn of a session with the person's next message: what
// the judge reads.
func benchTurn(w, i int) reward.Turn {
	next := "Thanks, that helps."
	if i%2 == 1 {
		next = "No, that is wrong: the file is in /etc, not /var. Check first next time."
	}
	return reward.Turn{
		Messages: []tokenizer.Message{
			{Role: "system", Content: "You are a helpful assistant."},
			{Role: "user", Content: fmt.Sprintf("Worker %d, turn %d: where is the config file of the service?", w, i)},
		},
		Response:  tokenizer.Message{Role: "assistant", Content: "It is in /var/lib/service/config.yaml."},
		NextState: []tokenizer.Message{{Role: "user", Content: next}},
	}
}

// judgeOverhead runs 8 and 32 streaming clients with the judge idle and
// with it judging without pause, alternating in rounds, and prints TTFT
// and inter-token p99 as a ratio of idle, the judge's throughput and the
// users' requests refused with 429 (there must be none: the judge has its
// own queue and KV budget below users).
func judgeOverhead(row func(...string), url string, rounds int, window time.Duration, maxTokens int, generated func() uint64, load *judgeLoad) error {
	for _, n := range []int{8, 32} {
		ab := alternate(rounds, load.on.Store, func() serveResult { return runClients(url, n, window/2, maxTokens, 0, generated) }, load.turns.Load)
		refused := ab.off.refused + ab.on.refused
		if f := ab.off.failures + ab.on.failures - refused; f > 0 {
			return fmt.Errorf("judge load: %d requests with %d clients failed", f, n)
		}
		compareRows(row, fmt.Sprintf("judging, %d clients", n), "judging/idle", ab.on, ab.off, false)
		row(fmt.Sprintf("  judging, %d clients: judge throughput", n), fmt.Sprintf("%.2f", float64(ab.onCount)/ab.onWall.Seconds()), "turns/s",
			fmt.Sprintf("%d turns in %.0f s, %d judge calls failed; users refused with 429: %d of %d (goal 0)",
				ab.onCount, ab.onWall.Seconds(), load.failed.Load(), refused, ab.off.requests()+ab.on.requests()))
	}
	return nil
}

// errRefused marks a request the server refused with 429.
var errRefused = errors.New("429 Too Many Requests")

func isRefused(err error) bool {
	return errors.Is(err, errRefused) || strings.Contains(err.Error(), "429")
}
