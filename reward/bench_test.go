package reward

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/tokenizer"
)

// BenchmarkScoreLocal20M scores turns through Run's workers with the local
// backend on a ~20M-parameter random Llama (model.SpecLlama20M, its 8192
// vocabulary kept; the trained test tokenizer uses the first 1024 ids):
// 3 votes and 3 hint votes of at most 16 tokens per turn, every turn with
// its own question and next state. It reports turns/s.
//
//	go test -run '^$' -bench ScoreLocal20M -benchtime 20x ./reward/
func BenchmarkScoreLocal20M(b *testing.B) {
	tk := testTokenizer(b)
	spec := model.SpecLlama20M()
	eos, _ := tk.EOS()
	spec.EOSTokenIDs = []int{int(eos)}
	dir := b.TempDir()
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: 512 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer kv.Close()
	sched, err := rollout.New(rollout.Options{Model: m, Cache: kv, MaxBatch: 32, QueueSize: 64, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	schedDone := make(chan error, 1)
	go func() { schedDone <- sched.Run(ctx) }()
	defer func() { cancel(); <-schedDone }()

	backend, err := NewLocalBackend(sched, tk, LocalOptions{})
	if err != nil {
		b.Fatal(err)
	}
	tkv, err := m.NewKVCache(model.KVCacheOptions{Budget: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer tkv.Close()
	teacher, err := NewModelTeacher(m, tkv, nil)
	if err != nil {
		b.Fatal(err)
	}
	c := DefaultConfig()
	c.MaxTokens, c.HintMaxTokens = 16, 16
	c.Workers, c.MaxConcurrent, c.QueueSize = 4, 8, 8
	c.Timeout = time.Minute
	s, err := New(Options{Config: c, Judge: backend, Teacher: teacher, Tokenizer: tk, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()

	turns := make([]Turn, b.N)
	for i := range turns {
		turn := tokenTurn(b)
		turn.ID = fmt.Sprint(i)
		turn.Messages = []tokenizer.Message{msg("system", "Be brief."), msg("user", fmt.Sprintf("What is %d + %d?", i, i+3))}
		turn.NextState = []tokenizer.Message{msg("user", fmt.Sprintf("No, that's wrong. Try %d again.", i))}
		turns[i] = turn
	}
	b.ResetTimer()
	start := time.Now()
	submitted := make([]time.Time, b.N)
	var subMu sync.Mutex
	go func() {
		for i, t := range turns {
			subMu.Lock()
			submitted[i] = time.Now()
			subMu.Unlock()
			for {
				err := s.Submit(t)
				if !errors.Is(err, ErrBusy) {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}()
	var lat []float64
	votes := map[int]int{}
	var invalid, ties, hintVotes, hintAccepts int
	for range b.N {
		r := <-s.Results()
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		if r.Sample.Source != SourceJudge {
			b.Fatalf("turn %s: %s (%s)", r.TurnID, r.Sample.Source, r.Sample.Note)
		}
		var i int
		fmt.Sscan(r.TurnID, &i)
		subMu.Lock()
		lat = append(lat, time.Since(submitted[i]).Seconds())
		subMu.Unlock()
		for _, v := range r.Sample.Votes {
			votes[v]++
		}
		invalid += r.Sample.InvalidVotes
		hintVotes += r.Sample.HintVotes
		hintAccepts += r.Sample.HintAccepts
		if r.Sample.Tie {
			ties++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "turns/s")
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "p50-s")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "p99-s")
	// A random model's votes mostly fail to parse; the counts show the
	// accounting, not judgement.
	b.ReportMetric(float64(votes[1]), "votes+1")
	b.ReportMetric(float64(votes[-1]), "votes-1")
	b.ReportMetric(float64(votes[0]), "votes0")
	b.ReportMetric(float64(invalid), "unparsed")
	b.ReportMetric(float64(ties), "ties")
	if hintVotes > 0 {
		b.ReportMetric(float64(hintAccepts)/float64(hintVotes), "hint-accept")
	}
	st := sched.Stats()
	b.ReportMetric(float64(st.CachedTokens)/float64(st.CachedTokens+st.PromptTokens), "prefix-hit")
	cancel()
	<-runDone
}
