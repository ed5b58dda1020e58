package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/config"
	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cuda"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/sample"
	"github.com/clawrl/clawrl/tokenizer"
	"github.com/clawrl/clawrl/weights"
)

// fakeDriver stands in for the CUDA driver: n "GPUs", each a CPU backend
// of its own, so that the engine's replica machinery (one model per
// device, versions copied between models, requests spread over replicas)
// runs here without a GPU. The CUDA backend itself is tested in package
// cuda, and end to end through the fake libcuda in package cli.
type fakeDriver struct {
	n      int
	err    error
	opened atomic.Int32
	closed atomic.Int32
}

type fakeGPU struct {
	*cpu.Backend
	d *fakeDriver
}

func (g fakeGPU) MemInfo() (uint64, uint64, error) { return 2 << 30, 4 << 30, nil }
func (g fakeGPU) Close() error                     { g.d.closed.Add(1); return nil }

func (d *fakeDriver) Count() (int, error) { return d.n, d.err }
func (d *fakeDriver) Open(i int) (accelerator, error) {
	if i >= d.n {
		return nil, fmt.Errorf("no GPU %d", i)
	}
	d.opened.Add(1)
	return fakeGPU{cpu.New(), d}, nil
}

func withDriver(t *testing.T, d gpuDriver) {
	old := drivers
	drivers = d
	t.Cleanup(func() { drivers = old })
}

func TestPlanGPUs(t *testing.T) {
	noDriver := fmt.Errorf("cuda: %w", cuda.ErrNoDriver)
	for _, tc := range []struct {
		name           string
		rollout, judge []int
		actor          []int
		kvDType        string
		n              int
		err            error
		want           plan
		wantErr        string
	}{
		{name: "no driver, no lists: the CPU", err: noDriver},
		{name: "no GPUs, no lists", n: 0},
		{name: "one GPU: all of it serves, the judge shares it", n: 1, want: plan{rollout: []int{0}, auto: true}},
		{name: "two GPUs", n: 2, want: plan{rollout: []int{0, 1}, auto: true}},
		{name: "eight GPUs: the actor's share serves until training runs on GPUs", n: 8, want: plan{rollout: []int{0, 1, 2, 3, 4, 5}, judge: []int{6, 7}, auto: true}},
		{name: "explicit", n: 4, rollout: []int{1, 2}, judge: []int{3}, want: plan{rollout: []int{1, 2}, judge: []int{3}}},
		{name: "judge only", n: 4, judge: []int{3}, want: plan{judge: []int{3}}},
		{name: "explicit without a driver", err: noDriver, rollout: []int{0}, wantErr: "devices.rollout.gpus: [0]: cuda: no CUDA driver found (libcuda.so.1)"},
		{name: "a GPU that is not there", n: 2, rollout: []int{0, 2}, wantErr: "GPU 2 is not there: the driver reports 2 GPU(s)"},
		{name: "actor GPUs", n: 8, actor: []int{0}, wantErr: "devices.actor.gpus: [0]: training on GPUs is not built yet"},
		{name: "a driver error", n: 0, err: errors.New("cuInit: CUDA_ERROR_UNKNOWN"), wantErr: "finding GPUs: cuInit"},
		{name: "q8_0 cache on listed GPUs", n: 4, rollout: []int{1}, kvDType: "q8_0", wantErr: "model.kv_cache_dtype: q8_0: a Q8_0 KV cache is built for the CPU backend only, not for the CUDA backend that serves on devices.rollout.gpus [1]"},
		{name: "q8_0 cache on a judge GPU", n: 4, judge: []int{3}, kvDType: "q8_0", wantErr: "built for the CPU backend only"},
		{name: "q8_0 cache on the GPUs found", n: 2, kvDType: "q8_0", wantErr: "the GPUs found (rollout [0 1]"},
		{name: "q8_0 cache without GPUs: the CPU", n: 0, kvDType: "q8_0"},
		{name: "q8_0 cache without a driver", err: noDriver, kvDType: "q8_0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Defaults()
			cfg.Devices = config.Devices{Rollout: config.DeviceGroup{GPUs: tc.rollout}, Judge: config.DeviceGroup{GPUs: tc.judge}, Actor: config.DeviceGroup{GPUs: tc.actor}}
			if tc.kvDType != "" {
				cfg.Model.KVCacheDType = tc.kvDType
			}
			got, err := planGPUs(cfg, &fakeDriver{n: tc.n, err: tc.err})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.rollout, tc.want.rollout) || !slices.Equal(got.judge, tc.want.judge) || got.auto != tc.want.auto {
				t.Errorf("plan %+v, want %+v", got, tc.want)
			}
		})
	}
}

// testCheckpoint writes a small Qwen3 checkpoint with a tokenizer.
func testCheckpoint(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	docs := slices.Repeat([]string{"the quick brown fox jumps over the lazy dog. hello world! "}, 40)
	tok, err := tokenizer.Train(slices.Values(docs), tokenizer.TrainOptions{VocabSize: 300, SpecialTokens: []string{"<|im_end|>"}, EOS: "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	writeTestModel(t, dir, tok, 32, 64, 8)
	return dir
}

// writeTestModel writes into dir a random two-layer Qwen3 model of
// hidden size hidden, MLP size inter and heads of hd, with tok's
// vocabulary and end-of-sequence token.
func writeTestModel(t *testing.T, dir string, tok *tokenizer.Tokenizer, hidden, inter, hd int) {
	t.Helper()
	spec := model.RandomSpec{Arch: model.ArchQwen3, Hidden: hidden, Intermediate: inter, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: hd,
		Vocab: tok.VocabSize(), MaxPositions: 512, DType: "bfloat16", Seed: 5, InitStd: 0.2}
	if eos, ok := tok.EOS(); ok {
		spec.EOSTokenIDs = []int{int(eos)}
	}
	if err := model.WriteRandomCheckpoint(dir, spec); err != nil {
		t.Fatal(err)
	}
}

// greedy generates n greedy tokens of prompt on g and returns them and
// the version they ran on.
func greedy(t *testing.T, g rollout.Generator, prompt []int32, n int) ([]int32, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	outs, err := rollout.GenerateAll(ctx, g, []rollout.Request{{Prompt: prompt, MaxTokens: n, Sampling: sample.Params{Temperature: 0}}})
	if err != nil || outs[0].Err != nil {
		t.Fatalf("generate: %v %v", err, outs)
	}
	return outs[0].Tokens, outs[0].Version
}

// TestReplicas opens the engine with serving on two (fake) GPUs and the
// judge on a third: requests on the replicas answer the CPU engine's
// greedy tokens; a version published by the trainer side reaches every
// replica and new requests run on it; the judge's replica keeps the
// frozen weights; Close closes every device.
func TestReplicas(t *testing.T) {
	dir := testCheckpoint(t)
	cpuEng, err := Open(Defaults(), Options{Model: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cpuEng.Close()
	prompt := cpuEng.Tokenizer().Encode("hello world! the quick brown")
	want, v := greedy(t, cpuEng.Scheduler(), prompt, 12)
	if v != 1 {
		t.Fatalf("the CPU engine ran version %d", v)
	}

	drv := &fakeDriver{n: 3}
	withDriver(t, drv)
	cfg := Defaults()
	cfg.Devices.Rollout.GPUs, cfg.Devices.Judge.GPUs = []int{0, 1}, []int{2}
	e, err := Open(cfg, Options{Model: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if !e.OnGPUs() || len(e.Scheduler().Replicas()) != 2 || e.TrainingYields() {
		t.Fatalf("on GPUs %v, %d replicas, yields %v", e.OnGPUs(), len(e.Scheduler().Replicas()), e.TrainingYields())
	}
	for i, r := range e.Scheduler().Replicas() {
		if got, v := greedy(t, r, prompt, 12); !slices.Equal(got, want) || v != 1 {
			t.Errorf("replica %d: %v on version %d, want %v on 1", i, got, v, want)
		}
	}

	// A new version (another checkpoint's weights, as a trainer's step
	// would publish) reaches both replicas.
	other := filepath.Join(t.TempDir(), "other")
	spec := model.RandomSpec{Arch: model.ArchQwen3, Hidden: 32, Intermediate: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Vocab: e.Model().Config.VocabSize, MaxPositions: 512, DType: "bfloat16", Seed: 99, InitStd: 0.2}
	if err := model.WriteRandomCheckpoint(other, spec); err != nil {
		t.Fatal(err)
	}
	w2, err := e.Model().LoadWeights(other)
	if err != nil {
		t.Fatal(err)
	}
	wantNew := greedyOn(t, e.Model(), w2, prompt, 12)
	if slices.Equal(wantNew, want) {
		t.Fatal("the new weights answer as the old: the test would not see a missed swap")
	}
	if _, err := e.Versions().Publish(w2, 1, weights.Meta{Note: "test"}); err != nil {
		t.Fatal(err)
	}
	for i, r := range e.Scheduler().Replicas() {
		deadline := time.Now().Add(time.Minute)
		for {
			got, v := greedy(t, r, prompt, 12)
			if v == 2 {
				if !slices.Equal(got, wantNew) {
					t.Errorf("replica %d on version 2: %v, want %v", i, got, wantNew)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d still serves version %d a minute after the publication", i, v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// The judge's replica runs the frozen checkpoint weights.
	judge, err := e.JudgeScheduler(2)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := greedy(t, judge, prompt, 12); !slices.Equal(got, want) {
		t.Errorf("judge replica: %v, want the checkpoint's %v", got, want)
	}
	if again, _ := e.JudgeScheduler(2); again != judge {
		t.Error("the judge group was made twice")
	}
	e.Close()
	if drv.opened.Load() != 3 || drv.closed.Load() != 3 {
		t.Errorf("%d devices opened, %d closed", drv.opened.Load(), drv.closed.Load())
	}
}

// greedyOn is the greedy continuation of prompt under weight set w of m,
// one token at a time with no scheduler.
func greedyOn(t *testing.T, m *model.Model, w *model.Weights, prompt []int32, n int) []int32 {
	t.Helper()
	kv, err := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	seq := kv.NewSequence()
	defer seq.Free()
	var out []int32
	next := prompt
	for range n {
		logits, err := m.Run(w, []model.Step{{Seq: seq, Tokens: next}}, model.LastLogits, nil)
		if err != nil {
			t.Fatal(err)
		}
		best := int32(slices.Index(logits, slices.Max(logits)))
		out = append(out, best)
		next = []int32{best}
	}
	return out
}
