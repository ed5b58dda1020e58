package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/clawrl/clawrl/cpu"
	"github.com/clawrl/clawrl/cuda"
	"github.com/clawrl/clawrl/model"
)

// TestLoadModelGPU loads a checkpoint onto a stand-in GPU as `clawrl bench
// --gpu` does, runs it, and releases the device; a GPU that is not there
// and a missing driver are clear errors.
func TestLoadModelGPU(t *testing.T) {
	dir := testCheckpoint(t)
	d := &fakeDriver{n: 2}
	withDriver(t, d)
	m, closeModel, err := LoadModelGPU(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := m.NewKVCache(model.KVCacheOptions{Budget: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	logits, err := m.Forward([]model.Step{{Seq: kv.NewSequence(), Tokens: []int32{1, 2, 3}}}, model.LastLogits, nil)
	if err != nil || len(logits) != m.Config.VocabSize {
		t.Fatalf("forward on the GPU model: %d logits, %v", len(logits), err)
	}
	kv.Close()
	closeModel()
	if d.opened.Load() != 1 || d.closed.Load() != 1 {
		t.Errorf("opened %d, closed %d devices; want 1 and 1", d.opened.Load(), d.closed.Load())
	}
	if _, _, err := LoadModelGPU(dir, 2); err == nil || !strings.Contains(err.Error(), "GPU 2 is not there: the driver reports 2 GPU(s)") {
		t.Errorf("GPU 2 of 2: %v", err)
	}
	withDriver(t, &fakeDriver{err: cuda.ErrNoDriver})
	if _, _, err := LoadModelGPU(dir, 0); !errors.Is(err, ErrNoDriver) {
		t.Errorf("no driver: %v", err)
	}
}

// TestGPUsWithoutDriver: `clawrl devices` on a machine without the driver.
func TestGPUsWithoutDriver(t *testing.T) {
	t.Setenv(cuda.LibraryEnv, "/nonexistent/libcuda.so.1")
	if _, _, err := GPUs(); !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), "no CUDA driver found (libcuda.so.1)") {
		t.Errorf("GPUs without a driver: %v", err)
	}
}

// TestMeasureDeviceCopy: the copy bandwidth of a backend's memory.
func TestMeasureDeviceCopy(t *testing.T) {
	gbs, err := MeasureDeviceCopy(cpu.New(), 1<<20, 5*time.Millisecond)
	if err != nil || !(gbs > 0) {
		t.Fatalf("%.1f GB/s, %v", gbs, err)
	}
}

// TestMeasureVersionCopy copies a full version from a model on one
// backend to a model of the same checkpoint on another through the
// replica's mirror, and counts every weight.
func TestMeasureVersionCopy(t *testing.T) {
	dir := testCheckpoint(t)
	src, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := model.Load(cpu.New(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	took, bytes, err := MeasureVersionCopy(src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if took <= 0 || bytes != src.Weights().Bytes() {
		t.Errorf("took %v for %d bytes; the checkpoint has %d", took, bytes, src.Weights().Bytes())
	}
}
