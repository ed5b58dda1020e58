// Package cuda is the compute backend for NVIDIA GPUs: the CUDA driver API
// bound at run time, kernels for every op of compute.Backend, and device
// memory for tensors.
//
// Binding. The driver (libcuda.so.1, or the library named by
// CLAWRL_LIBCUDA) is loaded with purego when a device is first opened, not
// linked: the binary builds with CGO_ENABLED=0 and runs on any Linux
// machine, and uses GPUs where an NVIDIA driver is installed. Without one,
// every entry point returns an error wrapping ErrNoDriver ("no CUDA driver
// found (libcuda.so.1)"). Every failed driver call becomes an *Error that
// names the call and CUDA's status (e.g. "cuMemAlloc_v2:
// CUDA_ERROR_OUT_OF_MEMORY: out of memory"). A Device runs its driver calls
// on one goroutine locked to an OS thread, where its context is current
// (see Device).
//
// Kernels. The kernels are CUDA C in cuda/kernels, compiled ahead of time
// to PTX by Debian's clang (no CUDA toolkit is needed to build or run) and
// embedded; the driver JIT-compiles the PTX for the GPU it finds. They are
// written by hand rather than taken from a library because the backend
// needs fused ops of its own shapes (RMSNorm over head groups, RoPE by
// positions, attention over the paged KV cache in compute.Attention's
// layout) that cuBLAS and friends do not have, because those libraries are
// not on every machine (and never on the machines this is built on), and
// because a kernel that is C in this repository can be run without a GPU:
// each kernel's source also compiles for the host against an emulator of
// the CUDA thread model (blocks, threads as fibers, shared memory,
// barriers, warp shuffles in lockstep, the mma.sync fragment layouts), and
// the fake driver of cuda/fakecuda runs this package, kernels included, on
// the CPU in tests and CI.
//
// Backend. Backend implements compute.Backend (the serving forward pass;
// training ops are not here yet): see its documentation for memory, the
// order of work and errors, and attention.cu and gemm.cu in cuda/kernels
// for the algorithms. Products with BF16 weights use the tensor cores
// (mma.sync, sm_80 and later) with the activations rounded to BF16, and
// the same rounding in the GEMV kernels of decode steps, so results do not
// depend on the batch's size beyond the order of float32 sums.
//
// Testing. The tests run over the fake driver: the conformance suite of
// compute backends (compute/computetest) with every kernel choice forced,
// the driver binding, the emulator's own checks, and a model-level
// comparison with the CPU backend. With CLAWRL_CUDA_TEST_DRIVER=real the
// same test binary runs on the machine's GPU, and its benchmarks measure
// the kernels there.
package cuda
