// misuse.cu: kernels that break the rules of the thread model on purpose,
// so that the tests can check that the emulator reports each misuse instead
// of computing something or hanging. Host-only: never compiled to PTX.
#include "../cuda_compat.h"

// emutest_misuse fails in the way mode says:
//   1: lane 0 waits at __syncthreads while lanes 1-31 wait for it in a
//      shuffle (deadlock);
//   2: lanes of a warp disagree on the kind of collective;
//   3: a shuffle reads a lane that has exited;
//   4: emu_fail (a trap);
//   5: a data race: threads read their neighbour's slot of shared memory
//      without a barrier after writing their own (the emulator's thread
//      order exposes it: uninitialised shared memory reads as NaN).
extern "C" __global__ void emutest_misuse(float* out, int mode) {
  int lane = threadIdx.x & 31;
  float v = (float)threadIdx.x;
  switch (mode) {
    case 1:
      if (lane == 0) {
        __syncthreads();
      } else {
        v = __shfl_xor_sync(FULL_MASK, v, 1);
      }
      break;
    case 2:
      if (lane < 16) {
        v = __shfl_xor_sync(FULL_MASK, v, 1);
      } else {
        v = __shfl_down_sync(FULL_MASK, v, 1);
      }
      break;
    case 3:
      if (lane == 5) return;
      v = __shfl_sync(0xffffffdfu, v, 5);
      break;
    case 4:
      if (threadIdx.x == 7) emu_fail("trap from the kernel");
      break;
    case 5: {
      DYNAMIC_SHARED(float, buf);
      buf[threadIdx.x] = v;
      v = buf[(threadIdx.x + 1) % blockDim.x];  // missing __syncthreads
      break;
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
