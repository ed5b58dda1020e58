package rollout

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// scripted starts up to len(streams) generations, each replaying its
// events until its context ends, and refuses the rest.
type scripted struct {
	streams [][]Event
	started int
	drained chan struct{}
}

func (s *scripted) Generate(ctx context.Context, _ Request) (<-chan Event, error) {
	if s.started == len(s.streams) {
		return nil, ErrQueueFull
	}
	evs := s.streams[s.started]
	s.started++
	ch := make(chan Event)
	go func() {
		defer close(ch)
		for _, e := range evs {
			select {
			case ch <- e:
			case <-ctx.Done():
				ch <- Event{Finish: FinishCancelled}
				s.drained <- struct{}{}
				return
			}
		}
	}()
	return ch, nil
}

func TestGenerateAll(t *testing.T) {
	tok := func(id int32, lp float32) Event { return Event{Token: id, HasToken: true, LogProb: lp, Version: 3} }
	g := &scripted{streams: [][]Event{
		{tok(1, -0.5), {Token: 2, HasToken: true, LogProb: -0.25, Version: 4, Finish: FinishStop}},
		{tok(7, -1), {Finish: FinishError, Err: errors.New("boom")}},
	}, drained: make(chan struct{}, 4)}
	outs, err := GenerateAll(context.Background(), g, make([]Request, 2))
	if err != nil {
		t.Fatal(err)
	}
	if o := outs[0]; !slices.Equal(o.Tokens, []int32{1, 2}) || !slices.Equal(o.LogProbs, []float32{-0.5, -0.25}) || o.Version != 4 || o.Finish != FinishStop || o.Err != nil {
		t.Errorf("first output %+v", o)
	}
	if o := outs[1]; o.Finish != FinishError || o.Err == nil || len(o.Tokens) != 1 {
		t.Errorf("failed output %+v", o)
	}
	// A request that cannot start: the started ones are cancelled and
	// read to their end, and the refusal is the error.
	long := make([]Event, 100)
	for i := range long {
		long[i] = tok(int32(i), -1)
	}
	g = &scripted{streams: [][]Event{long, long}, drained: make(chan struct{}, 4)}
	if _, err := GenerateAll(context.Background(), g, make([]Request, 3)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err %v; want the refusal", err)
	}
	for range 2 {
		<-g.drained
	}
}
