package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/apiclient"
	"github.com/clawrl/clawrl/engine"
	"github.com/clawrl/clawrl/priority"
	"github.com/clawrl/clawrl/store"
	"github.com/clawrl/clawrl/trainer"
)

// The serving benchmark runs the real daemon path in-process (HTTP server,
// sessions, scheduler, model) on loopback and drives it with streaming
// chat clients, as an agent client would.

type serveResult struct {
	clients  int
	tokens   int
	wall     time.Duration
	ttft     []time.Duration
	gaps     []time.Duration // between content chunks of a stream
	totals   []time.Duration // request sent to the stream's end
	failures int
	refused  int           // failures that were a 429
	firsts   []servedFirst // per request: the version that served it and when its first token came
}

// servedFirst is when a response's first token arrived and the weight
// version that generated it (X-Weight-Version).
type servedFirst struct {
	version uint64
	at      time.Time
}

func (r serveResult) tokS() float64 { return float64(r.tokens) / r.wall.Seconds() }

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// streamChat sends one streaming chat request and returns the time to the
// first content chunk and the completion tokens the usage chunk reports.
func streamChat(ctx context.Context, url string, body any) (time.Duration, int, error) {
	st, err := streamChatStats(ctx, url, body, nil)
	return st.ttft, st.tokens, err
}

// streamStats is what one streamed request measured.
type streamStats struct {
	ttft, total time.Duration
	tokens      int
	first       servedFirst
}

// streamChatStats is streamChat that also appends the gaps between
// content chunks to gaps (when not nil) and measures the whole request.
func streamChatStats(ctx context.Context, url string, body any, gaps *[]time.Duration) (streamStats, error) {
	var st streamStats
	start := time.Now()
	resp, err := apiclient.Post(ctx, nil, url+"/v1/chat/completions", nil, body)
	if err != nil {
		var ae *apiclient.Error
		if errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests {
			return st, errRefused
		}
		return st, err
	}
	defer resp.Body.Close()
	st.first.version, _ = strconv.ParseUint(resp.Header.Get("X-Weight-Version"), 10, 64)
	var ttft time.Duration
	var last time.Time
	tokens := 0
	err = apiclient.ReadStream(resp.Body, func(ck *apiclient.Chunk) error {
		if len(ck.Choices) > 0 && ck.Choices[0].Delta.Content != nil && *ck.Choices[0].Delta.Content != "" {
			now := time.Now()
			if ttft == 0 {
				ttft = now.Sub(start)
			} else if gaps != nil {
				*gaps = append(*gaps, now.Sub(last))
			}
			last = now
		}
		if ck.Usage != nil {
			tokens = ck.Usage.CompletionTokens
			if ttft == 0 { // every token decoded to nothing visible
				ttft = time.Since(start)
			}
		}
		return nil
	})
	st.ttft, st.tokens, st.total = ttft, tokens, time.Since(start)
	st.first.at = start.Add(ttft)
	return st, err
}

// benchModelID is the id the bench's requests name: the served model's
// (the checkpoint directory's name), set before the clients start.
var benchModelID = "clawrl-small"

func chatBody(system, user string, maxTokens int) map[string]any {
	return map[string]any{
		"model":          benchModelID,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"max_tokens":     maxTokens,
		"temperature":    0.8,
		"messages": []map[string]any{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
	}
}

// runClients runs n concurrent clients, each sending requests back to back
// (think 0) or pausing between them for a random time in [think/2,
// 3·think/2], as a person reading the reply would, until the window
// closes, and measures TTFT and the aggregate output
// throughput: the tokens the server generated (counted by generated, the
// scheduler's counter) from the end of the ramp-up, the first tenth of the
// window, to its end, when every client is still sending. The requests
// that finish after the window, while fewer and fewer clients remain, are
// not counted.
func runClients(url string, n int, window time.Duration, maxTokens int, think time.Duration, generated func() uint64) serveResult {
	var mu sync.Mutex
	res := serveResult{clients: n}
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(window)
	for c := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for r := 0; r == 0 || time.Now().Before(deadline); r++ {
				if think > 0 && r > 0 {
					time.Sleep(think/2 + time.Duration(rng.Int64N(int64(think))))
					if !time.Now().Before(deadline) {
						break
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				body := chatBody("You are a helpful assistant.", fmt.Sprintf("Client %d, question %d: tell me a story.", c, r), maxTokens)
				var gaps []time.Duration
				st, err := streamChatStats(ctx, url, body, &gaps)
				cancel()
				mu.Lock()
				if err != nil {
					res.failures++
					if isRefused(err) {
						res.refused++
					}
				} else {
					res.ttft = append(res.ttft, st.ttft)
					res.totals = append(res.totals, st.total)
					res.gaps = append(res.gaps, gaps...)
					res.firsts = append(res.firsts, st.first)
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(window / 10)
	g0, t0 := generated(), time.Now()
	time.Sleep(time.Until(deadline))
	res.tokens, res.wall = int(generated()-g0), time.Since(t0)
	wg.Wait()
	return res
}

// longText makes a system prompt of about n tokens (measured with the
// served tokenizer) of varied English-like words.
func longText(e *engine.Engine, n int) string {
	words := strings.Fields("the assistant reads files checks tools answers questions about code dates units lists and formats " +
		"before replying it should verify paths run tests explain results and keep the user informed of every step taken")
	var b strings.Builder
	for i := 0; ; i++ {
		b.WriteString(words[(i*7+i/len(words))%len(words)])
		b.WriteByte(' ')
		if i%200 == 199 && len(e.Tokenizer().Encode(b.String())) >= n {
			return b.String()
		}
	}
}

func (a *app) benchServe(row func(...string), f benchFlags) error {
	dir := f.model
	if dir == "" {
		spec, ok := presets()[f.preset]
		if !ok {
			return fmt.Errorf("unknown --preset %q (known: %s)", f.preset, presetNames())
		}
		tmp, err := os.MkdirTemp("", "clawrl-bench-serve-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		fmt.Fprintf(a.stderr, "writing a random %s checkpoint with a tokenizer to %s...\n", f.preset, tmp)
		if err := writeTestModel(tmp, spec, "", true); err != nil {
			return err
		}
		dir = tmp
	}
	// Request logs would drown the table.
	a.log = a.log.Level(zerolog.WarnLevel)
	// Enough queue and batch for the largest client count.
	a.cfg.Rollout.MaxBatch = max(a.cfg.Rollout.MaxBatch, 32)
	a.cfg.Rollout.QueueSize = max(a.cfg.Rollout.QueueSize, 64)
	a.cfg.Rollout.StepTokens = max(a.cfg.Rollout.StepTokens, a.cfg.Rollout.MaxBatch)
	reg := prometheus.NewRegistry()
	e, err := engine.Open(a.cfg, engine.Options{Model: dir, Log: a.log, Registry: reg})
	if err != nil {
		return err
	}
	defer e.Close()
	// Turns are recorded into a store of their own, as the daemon records
	// them (group-committed before each response's last chunk).
	dataDir, err := os.MkdirTemp("", "clawrl-bench-data-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	db, err := store.Open(dataDir, store.Options{Log: a.log})
	if err != nil {
		return err
	}
	defer db.Close()
	srv, err := a.newServer(e, db, reg, a.templateVars(), nil, nil)
	if err != nil {
		return err
	}
	// The same scheduler behind a second server whose turns go nowhere:
	// the store's cost is measured against it in alternating rounds.
	bare, err := a.newBareServer(e)
	if err != nil {
		return err
	}
	bareLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	bareCtx, bareCancel := context.WithCancel(context.Background())
	bareDone := make(chan error, 1)
	go func() { bareDone <- bare.Serve(bareCtx, bareLn) }()
	defer func() {
		bareCancel()
		<-bareDone
	}()
	bareURL := "http://" + bareLn.Addr().String()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-done
	}()
	url := "http://" + ln.Addr().String()
	benchModelID = filepath.Base(filepath.Clean(e.Dir()))
	cfg := e.Model().Config
	row(fmt.Sprintf("serving %s %.0fM over HTTP", cfg.Architecture, float64(cfg.NumParams())/1e6), "", "", "")

	// The client counts run in turn, in --rounds rounds of
	// --serve-seconds/--rounds each, and the batching gain is the median
	// of the rounds' ratios: the machine's speed changes from one second
	// to the next, and a ratio of rates measured minutes apart would
	// measure that too.
	counts := []int{1, 8, 32}
	rounds := max(1, f.rounds)
	window := time.Duration(f.serveSeconds * float64(time.Second) / float64(rounds))
	generated := func() uint64 { return e.Scheduler().Stats().GeneratedTokens }
	rates := make([][]float64, len(counts))       // per count, per round
	ttfts := make([][]time.Duration, len(counts)) // pooled
	for range rounds {
		for i, n := range counts {
			r := runClients(url, n, window, f.decodeTokens, 0, generated)
			if r.failures > 0 {
				return fmt.Errorf("%d of %d requests with %d clients failed", r.failures, r.failures+len(r.ttft), n)
			}
			rates[i] = append(rates[i], r.tokS())
			ttfts[i] = append(ttfts[i], r.ttft...)
		}
	}
	for i, n := range counts {
		note := fmt.Sprintf("median of %d rounds", rounds)
		if i > 0 {
			gains := make([]float64, rounds)
			for r := range rounds {
				gains[r] = rates[i][r] / rates[0][r]
			}
			g := median(gains)
			note = fmt.Sprintf("%.1f× 1 client (median of %d rounds' ratios: %.1f–%.1f×)", g, rounds, slices.Min(gains), slices.Max(gains))
		}
		row(fmt.Sprintf("  %d streaming clients: output", n), fmt.Sprintf("%.1f", median(slices.Clone(rates[i]))), "tok/s", note)
		row(fmt.Sprintf("  %d clients: TTFT p50 / p99", n),
			fmt.Sprintf("%.0f / %.0f", ms(percentile(ttfts[i], 0.5)), ms(percentile(ttfts[i], 0.99))), "ms", "")
	}

	if err := storeOverhead(row, url, bareURL, rounds, window, f.decodeTokens, generated); err != nil {
		return err
	}
	if f.judge {
		load, err := a.startJudgeLoad(e)
		if err != nil {
			return err
		}
		err = judgeOverhead(row, url, rounds, window, f.decodeTokens, generated, load)
		load.close()
		if err != nil {
			return err
		}
	}
	if f.train {
		load, err := a.startTrainLoad(e)
		if err != nil {
			return err
		}
		err = trainOverhead(row, url, rounds, window, f.decodeTokens, generated, load)
		load.close()
		if err != nil {
			return err
		}
	}

	// A long shared prefix: the second request's prompt starts with the
	// first's system prompt, so only its own tail is computed.
	prefixTokens := min(f.prefixTokens, cfg.MaxPositions-256)
	if prefixTokens > 0 {
		system := longText(e, prefixTokens)
		t1, _, err := streamChat(context.Background(), url, chatBody(system, "First question: what is in the files?", 1))
		if err != nil {
			return err
		}
		t2, _, err := streamChat(context.Background(), url, chatBody(system, "Second question, another session: list the tools.", 1))
		if err != nil {
			return err
		}
		row(fmt.Sprintf("  TTFT, %dk-token system prompt: first / second", prefixTokens/1000),
			fmt.Sprintf("%.0f / %.0f", ms(t1), ms(t2)), "ms", fmt.Sprintf("second/first = %.3f", t2.Seconds()/t1.Seconds()))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// add pools o's measurements into r.
func (r *serveResult) add(o serveResult) {
	r.ttft = append(r.ttft, o.ttft...)
	r.gaps = append(r.gaps, o.gaps...)
	r.totals = append(r.totals, o.totals...)
	r.firsts = append(r.firsts, o.firsts...)
	r.failures += o.failures
	r.refused += o.refused
}

// requests counts the requests measured, failed ones included.
func (r *serveResult) requests() int { return len(r.ttft) + r.failures }

// abRounds is a comparison in alternating rounds: each round runs the
// clients once with set(false) and once with set(true), so that both
// sides see the same phases of a shared machine. It pools each side's
// results and, for the true side, its wall time and how much count grew
// meanwhile (steps published, turns judged).
type abRounds struct {
	off, on serveResult
	onWall  time.Duration
	onCount int64
}

func alternate(rounds int, set func(on bool), run func() serveResult, count func() int64) abRounds {
	var ab abRounds
	for range rounds {
		for _, on := range []bool{false, true} {
			set(on)
			before, t0 := count(), time.Now()
			r := run()
			if on {
				ab.on.add(r)
				ab.onWall += time.Since(t0)
				ab.onCount += count() - before
			} else {
				ab.off.add(r)
			}
		}
	}
	set(false)
	return ab
}

// compareRows prints TTFT and inter-token p50/p99 of a (and the whole
// request's, with totals) and their ratios to b's, named ratio.
func compareRows(row func(...string), label, ratio string, a, b serveResult, totals bool) {
	type metric struct {
		name, suffix string
		a, b         []time.Duration
	}
	metrics := []metric{{"TTFT", "", a.ttft, b.ttft}, {"inter-token", "", a.gaps, b.gaps}}
	if totals {
		metrics = append(metrics, metric{"whole request", " (the turn is committed before [DONE])", a.totals, b.totals})
	}
	for _, m := range metrics {
		p50, p99 := percentile(m.a, 0.5), percentile(m.a, 0.99)
		b50, b99 := percentile(m.b, 0.5), percentile(m.b, 0.99)
		row(fmt.Sprintf("  %s: %s p50 / p99", label, m.name),
			fmt.Sprintf("%.1f / %.1f", ms(p50), ms(p99)), "ms",
			fmt.Sprintf("%s: %.2f / %.2f%s", ratio, p50.Seconds()/b50.Seconds(), p99.Seconds()/b99.Seconds(), m.suffix))
	}
}

func noCount() int64 { return 0 }

// storeOverhead runs 8 and 32 streaming clients against the daemon with
// its store and against the same scheduler without one, alternating in
// rounds, and prints TTFT, inter-token gap and whole-request p50/p99 with
// the store as a ratio of without.
func storeOverhead(row func(...string), withURL, withoutURL string, rounds int, window time.Duration, maxTokens int, generated func() uint64) error {
	for _, n := range []int{8, 32} {
		url := withURL
		ab := alternate(rounds, func(without bool) {
			url = withURL
			if without {
				url = withoutURL
			}
		}, func() serveResult { return runClients(url, n, window/2, maxTokens, 0, generated) }, noCount)
		if f := ab.off.failures + ab.on.failures; f > 0 {
			return fmt.Errorf("store overhead: %d requests with %d clients failed", f, n)
		}
		compareRows(row, fmt.Sprintf("store, %d clients", n), "with/without the store", ab.off, ab.on, true)
	}
	return nil
}

// trainLoad keeps a trainer stepping on synthetic samples (random prompts
// and responses, ±1 rewards) and publishing each step to the engine's
// versions while on is set: the load training puts on serving.
type trainLoad struct {
	on     atomic.Bool
	steps  atomic.Int64
	stop   chan struct{}
	done   chan struct{}
	tr     *trainer.Trainer // closed by the engine
	gate   *priority.Gate   // the engine's
	yields bool             // the trainer yields to serving through gate

	mu        sync.Mutex
	published map[uint64]time.Time     // version → when its step ended
	live      map[uint64]time.Duration // version → end of step to published (new requests run on it)
}

// stepEnds returns when each published version's step ended.
func (l *trainLoad) stepEnds() map[uint64]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.published)
}

// liveLatencies returns, per published version, the time from the end of
// its step until it was the store's current version.
func (l *trainLoad) liveLatencies() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Collect(maps.Values(l.live))
}

func (a *app) startTrainLoad(e *engine.Engine) (*trainLoad, error) {
	tc := a.cfg.Trainer
	opts := trainer.DefaultOptions()
	opts.LR, opts.LoRARank, opts.LoRAAlpha, opts.LoRATargets = tc.LR, tc.LoRARank, tc.LoRAAlpha, tc.LoRATargets
	opts.MicroBatchTokens, opts.Checkpointing = tc.MicroBatchTokens, tc.ActivationCheckpointing
	// The trainer runs where the daemon's would: on the actor group's
	// pool when devices.actor.threads is set (the engine closes it).
	tr, err := e.NewTrainer(opts)
	if err != nil {
		return nil, err
	}
	l := &trainLoad{stop: make(chan struct{}), done: make(chan struct{}), tr: tr, published: map[uint64]time.Time{}, live: map[uint64]time.Duration{},
		gate: e.Gate(), yields: e.TrainingYields()}
	vocab := int32(e.Model().Config.VocabSize)
	rng := rand.New(rand.NewPCG(1, 2))
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.stop:
				return
			default:
			}
			if !l.on.Load() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			batch := make([]trainer.Sample, max(1, tc.BatchSize))
			for i := range batch {
				s := trainer.Sample{Prompt: make([]int32, 256), Response: make([]int32, 64), Version: tr.Version(), Reward: 1}
				for j := range s.Prompt {
					s.Prompt[j] = rng.Int32N(vocab)
				}
				for j := range s.Response {
					s.Response[j] = rng.Int32N(vocab)
				}
				if i%2 == 1 {
					s.Reward = -1
				}
				batch[i] = s
			}
			if met, err := tr.Step(batch); err != nil || !met.Applied {
				continue
			}
			end := time.Now()
			v, err := tr.Publish(e.Versions())
			if err != nil {
				return
			}
			l.mu.Lock()
			l.published[v.Number()] = end
			l.live[v.Number()] = time.Since(end)
			l.mu.Unlock()
			l.steps.Add(1)
		}
	}()
	return l, nil
}

func (l *trainLoad) close() {
	close(l.stop)
	<-l.done
}

// trainOverhead runs 8 and 32 streaming clients sending back to back,
// and 8 users who read each reply for about a second before the next
// message, with the trainer idle and with it stepping, alternating in
// rounds, and prints TTFT and inter-token p50/p99 while training as a
// ratio of idle, the steps published meanwhile and, when training yields
// to serving, the gate's counters.
func trainOverhead(row func(...string), url string, rounds int, window time.Duration, maxTokens int, generated func() uint64, load *trainLoad) error {
	var all serveResult
	for _, sc := range []struct {
		n     int
		think time.Duration
		label string
	}{{8, 0, "8 clients"}, {32, 0, "32 clients"}, {8, time.Second, "8 users reading ~1 s"}} {
		win := window / 2
		if sc.think > 0 {
			win = 2 * window // enough requests to read a p99
		}
		g0 := load.gate.Stats()
		ab := alternate(rounds, load.on.Store, func() serveResult { return runClients(url, sc.n, win, maxTokens, sc.think, generated) }, load.steps.Load)
		if f := ab.off.failures + ab.on.failures; f > 0 {
			return fmt.Errorf("training overhead: %d requests with %s failed", f, sc.label)
		}
		all.add(ab.off)
		all.add(ab.on)
		label := "training, " + sc.label
		compareRows(row, label, "training/idle (goal p99 <= 1.25)", ab.on, ab.off, false)
		row(fmt.Sprintf("  %s: steps published", label), fmt.Sprint(ab.onCount), "", fmt.Sprintf("over %d training rounds, %.0f s", rounds, ab.onWall.Seconds()))
		if g1 := load.gate.Stats(); load.yields && g1.TrainingSlices > g0.TrainingSlices {
			row(fmt.Sprintf("  %s: time trained while serving was busy", label),
				fmt.Sprintf("%.1f", 100*(g1.BusyTraining-g0.BusyTraining).Seconds()/ab.onWall.Seconds()), "%",
				fmt.Sprintf("share_under_load %.2f; %d slices, %d yields; longest slice so far %.1f ms", load.gate.Share(), g1.TrainingSlices-g0.TrainingSlices, g1.Yields-g0.Yields, ms(g1.MaxSlice)))
		}
	}
	if live := load.liveLatencies(); len(live) > 0 {
		row("  weight swap: end of step → live (requests admitted from then on run on it), p50 / p99 / max",
			fmt.Sprintf("%.0f / %.0f / %.0f", ms(percentile(live, 0.5)), ms(percentile(live, 0.99)), ms(slices.Max(live))), "ms",
			fmt.Sprintf("%d swaps under load, 0 of %d requests failed (goal < 1 s)", len(live), all.requests()))
	}
	if lat := swapLatencies(load.stepEnds(), all.firsts); len(lat) > 0 {
		row("  weight swap: end of step → first token on the new version, p50 / p99 / max",
			fmt.Sprintf("%.0f / %.0f / %.0f", ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(slices.Max(lat))), "ms",
			"includes waiting for the next request to arrive (readers pause ~1 s)")
	}
	return nil
}

// swapLatencies is, per published version, the time from the end of its
// training step to the first token any client received from it or a later
// version; versions no response came from are left out.
func swapLatencies(ends map[uint64]time.Time, firsts []servedFirst) []time.Duration {
	var out []time.Duration
	for v, end := range ends {
		var first time.Time
		for _, f := range firsts {
			if f.version >= v && !f.at.Before(end) && (first.IsZero() || f.at.Before(first)) {
				first = f.at
			}
		}
		if !first.IsZero() {
			out = append(out, first.Sub(end))
		}
	}
	return out
}
