package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/clawrl/clawrl/compute"
	"github.com/clawrl/clawrl/cuda"
	"github.com/clawrl/clawrl/model"
	"github.com/clawrl/clawrl/weights"
)

// GPUs for the commands that look at them without serving: `clawrl
// devices` lists them, `clawrl bench --gpu N` loads a model onto one and
// measures it, and scripts/gpu-check runs both on a GPU box. The loading
// and the version copy are a serving replica's (openReplica, mirror).

// ErrNoDriver is the error (wrapped) of GPUs and LoadModelGPU on a machine
// without the CUDA driver: "no CUDA driver found (libcuda.so.1)".
var ErrNoDriver = cuda.ErrNoDriver

// GPU describes one GPU the driver reports.
type GPU struct {
	Index        int    // the ordinal of devices.*.gpus
	Name         string // e.g. "NVIDIA H100 80GB HBM3"
	Memory       uint64 // bytes
	SMs          int    // streaming multiprocessors
	Major, Minor int    // compute capability
}

// GPUs lists the GPUs the CUDA driver reports, with the CUDA version the
// driver supports (1000·major + 10·minor: 13000 for CUDA 13.0). Without
// a driver the error wraps ErrNoDriver.
func GPUs() (cudaVersion int, gpus []GPU, err error) {
	infos, err := cuda.Devices()
	if err != nil {
		return 0, nil, fmt.Errorf("listing GPUs: %w", err)
	}
	if cudaVersion, err = cuda.DriverVersion(); err != nil {
		return 0, nil, fmt.Errorf("reading the driver's CUDA version: %w", err)
	}
	for _, in := range infos {
		gpus = append(gpus, GPU{Index: in.Index, Name: in.Name, Memory: in.Memory, SMs: in.SMs, Major: in.Major, Minor: in.Minor})
	}
	return cudaVersion, gpus, nil
}

// LoadModelGPU loads the checkpoint in dir alone onto GPU gpu as a
// serving replica holds it (BF16 weights stay BF16; products round their
// activations to BF16), with no KV cache, versions or scheduler: for
// benchmarks and checks. closeFn frees the model and releases the GPU.
func LoadModelGPU(dir string, gpu int) (m *model.Model, closeFn func(), err error) {
	n, err := drivers.Count()
	if err != nil {
		return nil, nil, fmt.Errorf("GPU %d: %w", gpu, err)
	}
	if gpu < 0 || gpu >= n {
		return nil, nil, fmt.Errorf("GPU %d is not there: the driver reports %d GPU(s), numbered from 0", gpu, n)
	}
	b, err := drivers.Open(gpu)
	if err != nil {
		return nil, nil, fmt.Errorf("GPU %d: %w", gpu, err)
	}
	if m, err = loadModel(b, dir); err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("GPU %d: %w", gpu, err)
	}
	return m, func() { m.Close(); b.Close() }, nil
}

// MeasureDeviceCopy measures the copy bandwidth of backend b's memory
// (bytes read plus written, GB/s): it copies a buffer of bytes into
// another, in batches timed by the wall clock around a Synchronize, for
// about d. On a GPU it is the ceiling of the kernels that stream memory,
// as the host's copy bandwidth is the CPU's.
func MeasureDeviceCopy(b compute.Backend, bytes int, d time.Duration) (float64, error) {
	n := max(bytes/4, 1)
	src, err := b.NewTensor(compute.F32, n)
	if err != nil {
		return 0, fmt.Errorf("copy bandwidth: %w", err)
	}
	defer b.Free(src)
	dst, err := b.NewTensor(compute.F32, n)
	if err != nil {
		return 0, fmt.Errorf("copy bandwidth: %w", err)
	}
	defer b.Free(dst)
	b.Copy(dst, src) // warm-up
	if err := b.Synchronize(); err != nil {
		return 0, fmt.Errorf("copy bandwidth: %w", err)
	}
	var el time.Duration
	copies := 0
	for batch := 1; el < d || copies < 2; batch *= 2 {
		start := time.Now()
		for range batch {
			b.Copy(dst, src)
		}
		if err := b.Synchronize(); err != nil {
			return 0, fmt.Errorf("copy bandwidth: %w", err)
		}
		el += time.Since(start)
		copies += batch
	}
	return 2 * 4 * float64(n) * float64(copies) / el.Seconds() / 1e9, nil
}

// MeasureVersionCopy times what a serving replica does when training
// publishes a version: src is the checkpoint loaded where the trainer runs
// (the CPU), dst the same checkpoint on a GPU; a full copy of src's
// weights (every tensor changed: the most a version can differ from the
// checkpoint) is published in a versions store and the replica's mirror
// copies it onto dst's device (model.Import) and publishes it there. It
// returns the time from the mirror's start to the version being live on
// the GPU and the bytes of weights that crossed.
func MeasureVersionCopy(src, dst *model.Model) (took time.Duration, bytes int64, err error) {
	w, err := src.Weights().Clone()
	if err != nil {
		return 0, 0, fmt.Errorf("version copy: %w", err)
	}
	store := weights.NewStore(weights.StoreOptions{})
	defer store.Close()
	if _, err := store.Publish(w, 0, weights.Meta{}); err != nil {
		w.Free()
		return 0, 0, fmt.Errorf("version copy: %w", err)
	}
	r := &replica{m: dst, versions: weights.NewStore(weights.StoreOptions{})}
	defer r.versions.Close()
	_, took, err = r.mirrorOnce(store)
	if err != nil {
		return 0, 0, fmt.Errorf("version copy: %w", err)
	}
	if took == 0 {
		return 0, 0, errors.New("version copy: the replica copied nothing")
	}
	return took, w.Bytes(), nil
}
