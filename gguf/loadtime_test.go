package gguf

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/model"
)

// TestLoadTime0_6B measures how long a model of Qwen3-0.6B's shape takes
// to load from its safetensors checkpoint and from GGUF files of it (BF16,
// Q8_0, Q4_K) on the CPU backend the engine makes. It writes about 4 GB,
// so it runs only with CLAWRL_GGUF_LOADTIME=1.
func TestLoadTime0_6B(t *testing.T) {
	if os.Getenv("CLAWRL_GGUF_LOADTIME") == "" {
		t.Skip("set CLAWRL_GGUF_LOADTIME=1 to measure (writes ~4 GB)")
	}
	dir := t.TempDir()
	hf := filepath.Join(dir, "hf")
	if err := model.WriteRandomCheckpoint(hf, model.SpecQwen3_0_6B()); err != nil {
		t.Fatal(err)
	}
	files := map[TensorType]string{}
	for _, typ := range []TensorType{BF16, Q8_0, Q4_K} {
		src, err := model.OpenDir(hf)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "m-"+typ.String()+".gguf")
		start := time.Now()
		if err := WriteModel(path, src, nil, typ); err != nil {
			t.Fatal(err)
		}
		src.Close()
		st, _ := os.Stat(path)
		t.Logf("wrote %s: %.0f MB in %v", typ, float64(st.Size())/1e6, time.Since(start).Round(time.Millisecond))
		files[typ] = path
	}
	measure := func(what string, load func() (*model.Model, error)) {
		best := time.Duration(1 << 62)
		for range 3 {
			start := time.Now()
			m, err := load()
			if err != nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(start))
			m.Close()
		}
		t.Logf("load %-22s best of 3: %v", what, best.Round(time.Millisecond))
	}
	measure("safetensors (BF16)", func() (*model.Model, error) { return model.Load(cpu.New(), hf) })
	for _, typ := range []TensorType{BF16, Q8_0, Q4_K} {
		measure("GGUF "+typ.String(), func() (*model.Model, error) {
			src, err := OpenModel(files[typ])
			if err != nil {
				return nil, err
			}
			return model.LoadFrom(cpu.New(), src)
		})
	}
}
