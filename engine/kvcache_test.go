package engine

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/tokenizer"
)

// TestQ8_0KVCache opens the engine with model.kv_cache_dtype: q8_0 on the
// CPU: serving's cache and the teacher's (TeacherCache) store Q8_0, the
// scheduler generates, and a teacher pass through the Q8_0 cache scores a
// response within 0.05 (mean |Δ log p|) of an F32 cache: the Q8_0 cache
// moves the logits of random test models like this one by 1-3% of the
// largest (TestQ8_0CacheMatchesReference), here 0.012 in log p, where a
// cache read wrong moves them by whole units (the bundled, trained
// model's log-probs move by 0.0002-0.006, TestQuantizedLogProbs). A
// checkpoint
// whose head dim is not a multiple of 32 is refused at Open with the
// reason.
func TestQ8_0KVCache(t *testing.T) {
	dir := kvTestCheckpoint(t, 32)
	cfg := Defaults()
	cfg.Model.KVCacheDType = "q8_0"
	e, err := Open(cfg, Options{Model: dir, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.KVDType() != compute.Q8_0 {
		t.Fatalf("engine KV dtype %v, want Q8_0", e.KVDType())
	}
	prompt := e.Tokenizer().Encode("hello world! the quick brown")
	if got, _ := greedy(t, e.Scheduler(), prompt, 8); len(got) == 0 {
		t.Error("generated nothing on a Q8_0 cache")
	}
	teacher, err := e.TeacherCache(0)
	if err != nil {
		t.Fatal(err)
	}
	if teacher.DType() != compute.Q8_0 {
		t.Errorf("teacher cache %v, want Q8_0", teacher.DType())
	}
	response := e.Tokenizer().Encode(" fox jumps over the lazy dog. hello world!")
	score := func(kv *model.KVCache) []float32 {
		s, err := e.Model().LogProbs(kv, prompt, response, 0)
		if err != nil {
			t.Fatal(err)
		}
		return s.LogProbs
	}
	ref, err := e.Model().NewKVCache(model.KVCacheOptions{Budget: 4 << 20, DType: compute.F32})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	got, want := score(teacher), score(ref)
	sum := 0.0
	for i := range got {
		sum += math.Abs(float64(got[i] - want[i]))
	}
	if mean := sum / float64(len(got)); !(mean < 0.05) || slices.Equal(got, want) {
		t.Errorf("teacher pass on the Q8_0 cache: mean |Δ log p| %.4g against an F32 cache (want below 0.05, not 0)", mean)
	} else {
		t.Logf("teacher pass on the Q8_0 cache: mean |Δ log p| %.4g against an F32 cache over %d tokens", mean, len(got))
	}

	// Head dim 8: refused with the reason.
	e2, err := Open(cfg, Options{Model: kvTestCheckpoint(t, 8), Log: zerolog.Nop()})
	if err == nil {
		e2.Close()
		t.Fatal("a Q8_0 cache of head dim 8 was opened")
	}
	if !strings.Contains(err.Error(), "Q8_0 KV cache needs a head dim that is a multiple of 32, not 8") {
		t.Errorf("head dim 8: %v", err)
	}
}

// kvTestCheckpoint is testCheckpoint's model and tokenizer with heads of hd.
func kvTestCheckpoint(t *testing.T, hd int) string {
	t.Helper()
	dir := testCheckpoint(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeTestModel(t, dir, tok, 64, 96, hd)
	return dir
}
