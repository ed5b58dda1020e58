package dec

import (
	"os"
	"github.com/clawrl/clawrl/cpu/kernels"
	"testing"
	"time"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
)

func TestDec(t *testing.T) {
	dir := "/tmp/m20"
	if _, err := os.Stat(dir + "/config.json"); err != nil {
		if err := model.WriteRandomCheckpoint(dir, model.SpecLlama20M()); err != nil {
			t.Fatal(err)
		}
	}
	m, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := m.NewKVCache(model.KVCacheOptions{BlockSize: 16, Budget: m.Config.KVBytesPerToken() * 16 * 200})
	const B = 32
	st := make([]model.Step, B)
	for i := range st {
		st[i] = model.Step{Seq: kv.NewSequence(), Tokens: make([]int32, 40)}
	}
	var logits []float32
	logits, _ = m.Forward(st, model.LastLogits, logits)
	for i := range st {
		st[i].Tokens = []int32{5}
	}
	if os.Getenv("T1") != "" {
		kernels.SetThreads(1)
	}
	for k := range model.OpTime {
		delete(model.OpTime, k)
	}
	t0 := time.Now()
	const N = 400
	for i := 0; i < N; i++ {
		if i%40 == 39 {
			for _, x := range st {
				x.Seq.Truncate(40)
			}
		}
		logits, err = m.Forward(st, model.LastLogits, logits)
		if err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(t0)
	t.Logf("step %v", el/N)
	var sum time.Duration
	for k, v := range model.OpTime {
		t.Logf("%-12s %8v %4.1f%%", k, v/N, 100*v.Seconds()/el.Seconds())
		sum += v
	}
	t.Logf("other %v", (el-sum)/N)
}
