package rollout

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPool runs two replicas of one model: every request's greedy tokens
// are the reference's whichever replica ran it, a prompt returns to the
// replica that has its prefix cached, load spills to the other replica,
// and the pool's counters and metrics are the replicas' summed.
func TestPool(t *testing.T) {
	m := tinyModel(t)
	a := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256), MaxBatch: 8})
	b := startScheduler(t, Options{Model: m, Cache: newCache(t, m, 256), MaxBatch: 8})
	p := NewPool(a, b)
	if len(p.Replicas()) != 2 {
		t.Fatalf("%d replicas", len(p.Replicas()))
	}

	// Affinity: the same prompt goes to the same replica, and the second
	// time its prefix is cached there.
	pr := prompt(40, 1)
	first := collect(t, must(p.Generate(context.Background(), greedyReq(pr, 4))))
	again := collect(t, must(p.Generate(context.Background(), greedyReq(pr, 4))))
	if again.cached == 0 {
		t.Errorf("the prompt's second request found no cached prefix (first cached %d)", first.cached)
	}
	if !slices.Equal(first.tokens, again.tokens) || !slices.Equal(first.tokens, greedyRef(t, m, pr, 4, nil)) {
		t.Errorf("tokens %v and %v, want the reference's", first.tokens, again.tokens)
	}

	// Spill: with Slack 0 and many concurrent prompts, both replicas work.
	p.Slack = 0
	var chans []<-chan Event
	var prompts [][]int32
	for i := range 24 {
		pr := prompt(30, 100+i)
		prompts = append(prompts, pr)
		chans = append(chans, must(p.Generate(context.Background(), greedyReq(pr, 6))))
	}
	for i, ch := range chans {
		if c := collect(t, ch); !slices.Equal(c.tokens, greedyRef(t, m, prompts[i], 6, nil)) {
			t.Errorf("request %d: %v", i, c.tokens)
		}
	}
	sa, sb, sp := a.Stats(), b.Stats(), p.Stats()
	if sa.Completed == 0 || sb.Completed == 0 {
		t.Errorf("completed %d and %d: the load did not spread", sa.Completed, sb.Completed)
	}
	if sp.Completed != sa.Completed+sb.Completed || sp.GeneratedTokens != sa.GeneratedTokens+sb.GeneratedTokens {
		t.Errorf("pool stats %+v are not the sum of %+v and %+v", sp, sa, sb)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(p.Collector())
	want := `
# HELP clawrl_replicas Serving replicas (one scheduler per device) the requests are spread over.
# TYPE clawrl_replicas gauge
clawrl_replicas 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "clawrl_replicas"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "clawrl_scheduler_finished_total"); err != nil || n != 2 {
		t.Errorf("finished metrics: %d, %v", n, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
