// emu.cc: the fiber scheduler behind emu.h (see there for the model).
//
// Each OS thread that launches kernels has its own emulator state: the
// fibers (with their stacks, reused from launch to launch), the warps'
// exchange slots and the launch in progress. A launch never spans OS
// threads, so two devices of the fake driver (or two goroutines locked to
// two threads) emulate independently.

#include "emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__) || defined(EMU_USE_UCONTEXT)
#define EMU_UCONTEXT 1
#include <ucontext.h>
#endif

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

thread_local EmuThread* emu_self;
thread_local dim3 emu_block_idx, emu_block_dim, emu_grid_dim;

namespace {

// ------------------------------------------------------------ context switch

#if !defined(EMU_UCONTEXT)
// emu_switch saves the callee-saved registers and the SSE/x87 control words
// on the current stack, stores the stack pointer in *save, and resumes the
// context whose stack pointer is load (saved the same way, or made by
// new_context).
extern "C" void emu_switch(void** save, void* load) __attribute__((visibility("hidden")));
extern "C" void emu_fiber_start(void) __attribute__((visibility("hidden")));
asm(R"(
	.text
	.globl emu_switch
	.hidden emu_switch
	.type emu_switch,@function
emu_switch:
	pushq %rbp
	pushq %rbx
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %rbx
	popq %rbp
	ret
	.size emu_switch,.-emu_switch

	.globl emu_fiber_start
	.hidden emu_fiber_start
	.type emu_fiber_start,@function
emu_fiber_start:
	movq %r12, %rdi
	callq *%r13
	ud2
	.size emu_fiber_start,.-emu_fiber_start
)");

struct Context {
  void* sp = nullptr;
};

// new_context prepares ctx to start fn(arg) on the stack [lo, hi) at the
// next switch to it: the frame emu_switch pops, with emu_fiber_start as the
// return address and fn and arg in r13 and r12.
void new_context(Context* ctx, char* lo, char* hi, void (*fn)(void*), void* arg) {
  (void)lo;
  uintptr_t top = (uintptr_t)hi & ~(uintptr_t)15;
  void** sp = (void**)(top - 64);  // 16-aligned: emu_fiber_start is entered with rsp % 16 == 0
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  sp[0] = (void*)((uintptr_t)mxcsr | ((uintptr_t)fpucw << 32));
  sp[1] = nullptr;           // r15
  sp[2] = nullptr;           // r14
  sp[3] = (void*)fn;         // r13
  sp[4] = arg;               // r12
  sp[5] = nullptr;           // rbx
  sp[6] = nullptr;           // rbp
  sp[7] = (void*)emu_fiber_start;  // return address
  ctx->sp = sp;
}

void switch_context(Context* from, Context* to) { emu_switch(&from->sp, to->sp); }

#else
// Elsewhere: ucontext (slower: it saves the signal mask with a system call).
struct Context {
  ucontext_t uc;
};

void new_context(Context* ctx, char* lo, char* hi, void (*fn)(void*), void* arg) {
  getcontext(&ctx->uc);
  ctx->uc.uc_stack.ss_sp = lo;
  ctx->uc.uc_stack.ss_size = hi - lo;
  ctx->uc.uc_link = nullptr;
  // makecontext passes int arguments: split the pointer in two.
  uintptr_t p = (uintptr_t)arg;
  makecontext(&ctx->uc, (void (*)())+[](unsigned lo32, unsigned hi32) {
    uintptr_t a = (uintptr_t)lo32 | ((uintptr_t)hi32 << 32);
    void** pair = (void**)a;
    ((void (*)(void*))pair[0])(pair[1]);
  }, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
  (void)fn;
}

void switch_context(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

// ------------------------------------------------------------------- state

constexpr size_t kStackSize = 64 << 10;  // per thread of a block
constexpr int kMaxThreads = 1024;

enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

// Collective kinds: a shuffle kind (EMU_SHFL_*), a __syncwarp or an mma.
enum { KIND_SYNCWARP = 16, KIND_MMA = 17 };

struct Fiber {
  Context ctx;
  char* stack = nullptr;  // kStackSize bytes above a guard page
  EmuThread self;
  State state = DONE;
};

// WarpSlot is what a lane deposits for a warp collective.
struct WarpSlot {
  uint32_t v;
  uint32_t a[4], b[2];
  float c[4];
};

struct Warp {
  uint32_t exists;   // lanes of this warp that are threads of the block
  uint32_t exited;   // lanes that have returned from the kernel
  uint32_t arrived;  // lanes that have entered the pending collective
  uint32_t mask;     // its member mask
  int kind;          // its kind
  unsigned gen;      // collectives completed; slot[gen & 1] is the pending one's
  WarpSlot slot[2][32];
  uint32_t took_part[2];  // per slot set: the lanes that deposited in it
};

struct Emu {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Context sched;  // the scheduler (the launching thread's own stack)
  Fiber* cur = nullptr;
  int nthreads = 0, live = 0, at_barrier = 0;
  EmuKernelFn fn = nullptr;
  void** params = nullptr;
  char* dyn = nullptr;
  size_t dyn_cap = 0, dyn_size = 0;
  bool active = false, failed = false;
  std::string msg;
  unsigned long launches = 0;
#if defined(EMU_UCONTEXT)
  std::vector<void*> start_args;  // (fn, arg) pairs for makecontext
#endif
};

thread_local Emu* tls_emu;

Emu* state() {
  if (!tls_emu) tls_emu = new Emu();  // one per launching thread, kept for its life
  return tls_emu;
}

Emu* in_launch(const char* what) {
  Emu* e = tls_emu;
  if (!e || !e->active || !e->cur) {
    fprintf(stderr, "emu: %s called outside a kernel\n", what);
    abort();
  }
  return e;
}

char* alloc_stack() {
  long page = sysconf(_SC_PAGESIZE);
  size_t total = kStackSize + page;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  mprotect(p, page, PROT_NONE);  // guard page: an overflow faults instead of corrupting a neighbour
  return (char*)p + page;
}

// yield switches from the current fiber back to the scheduler.
void yield(Emu* e) { switch_context(&e->cur->ctx, &e->sched); }

[[noreturn]] void fail_fiber(Emu* e, const std::string& msg) {
  if (!e->failed) {
    e->failed = true;
    e->msg = msg;
  }
  e->cur->state = DONE;
  yield(e);
  abort();  // never resumed
}

std::string where(Emu* e) {
  char buf[160];
  snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", emu_block_idx.x, emu_block_idx.y,
           emu_block_idx.z, e->cur->self.tid.x, e->cur->self.tid.y, e->cur->self.tid.z);
  return buf;
}

// release_barrier lets the threads waiting at __syncthreads go once every
// thread that has not exited is waiting (exited threads count as arrived,
// as with bar.sync on sm_70 and later).
bool release_barrier(Emu* e) {
  if (e->at_barrier == 0 || e->at_barrier < e->live) return false;
  for (auto& f : e->fibers) {
    if (f.state == AT_BARRIER) f.state = RUNNABLE;
  }
  e->at_barrier = 0;
  return true;
}

// release_warp completes w's pending collective once every lane of its
// mask that exists and has not exited has entered it.
bool release_warp(Emu* e, Warp& w, int warp) {
  if (w.arrived == 0) return false;
  uint32_t need = w.mask & w.exists & ~w.exited;
  if ((w.arrived & need) != need) return false;
  for (int l = 0; l < 32; l++) {
    if (w.arrived >> l & 1) {
      Fiber& f = e->fibers[warp * 32 + l];
      if (f.state == AT_WARP) f.state = RUNNABLE;
    }
  }
  w.took_part[w.gen & 1] = w.arrived;
  w.arrived = 0;
  w.gen++;
  return true;
}

// collective enters the current lane into its warp's pending collective
// with its deposit, waits for the other lanes, and returns the slots of the
// completed collective (valid until this lane enters the next-but-one) and
// in *took_part the lanes that deposited in them.
const WarpSlot* collective(Emu* e, int kind, unsigned mask, const WarpSlot& mine, uint32_t* took_part = nullptr) {
  Fiber* f = e->cur;
  int lin = f->self.lin, lane = lin & 31;
  Warp& w = e->warps[lin >> 5];
  if (!(mask >> lane & 1)) fail_fiber(e, where(e) + ": warp collective with a member mask that leaves out the calling lane");
  if (w.arrived == 0) {
    w.kind = kind;
    w.mask = mask;
  } else if (w.kind != kind || w.mask != mask) {
    char buf[200];
    snprintf(buf, sizeof buf, ": lanes of a warp disagree on a collective (kind %d mask %#x against kind %d mask %#x)",
             kind, mask, w.kind, w.mask);
    fail_fiber(e, where(e) + buf);
  }
  unsigned parity = w.gen & 1;
  w.slot[parity][lane] = mine;
  w.arrived |= 1u << lane;
  if (!release_warp(e, w, lin >> 5)) {
    f->state = AT_WARP;
    yield(e);
  }
  if (took_part) *took_part = w.took_part[parity];
  return w.slot[parity];
}

void fiber_main(void* arg) {
  Emu* e = (Emu*)arg;
  e->fn(e->params);
  // The thread returned from the kernel: it no longer holds up barriers.
  Fiber* f = e->cur;
  f->state = DONE;
  e->live--;
  Warp& w = e->warps[f->self.lin >> 5];
  w.exited |= 1u << (f->self.lin & 31);
  release_warp(e, w, f->self.lin >> 5);
  release_barrier(e);
  yield(e);
  abort();  // never resumed
}

// run_block runs every thread of the current block to its end. Between two
// barriers the threads run one after another, in increasing order in half
// of the blocks and in decreasing order in the other half (reverse): a
// thread that reads what another writes without a barrier between them
// sees the old value in one of the two orders, so a missing barrier gives
// wrong results instead of passing by the luck of the order.
void run_block(Emu* e, bool reverse) {
  int n = e->nthreads;
  for (int i = 0; i < n; i++) {
    Fiber& f = e->fibers[i];
    f.state = RUNNABLE;
#if !defined(EMU_UCONTEXT)
    new_context(&f.ctx, f.stack, f.stack + kStackSize, fiber_main, e);
#else
    e->start_args[2 * i] = (void*)fiber_main;
    e->start_args[2 * i + 1] = e;
    new_context(&f.ctx, f.stack, f.stack + kStackSize, fiber_main, &e->start_args[2 * i]);
#endif
  }
  for (auto& w : e->warps) {
    w.exited = w.arrived = 0;
    w.gen = 0;
  }
  e->live = n;
  e->at_barrier = 0;
  if (e->dyn_size) memset(e->dyn, 0xff, e->dyn_size);  // uninitialised shared memory reads as NaN
  while (e->live > 0 && !e->failed) {
    bool ran = false;
    for (int j = 0; j < n && !e->failed; j++) {
      Fiber& f = e->fibers[reverse ? n - 1 - j : j];
      if (f.state != RUNNABLE) continue;
      ran = true;
      e->cur = &f;
      emu_self = &f.self;
      switch_context(&e->sched, &f.ctx);
    }
    if (!ran && !e->failed) {
      int bar = 0, warp = 0;
      for (int i = 0; i < n; i++) {
        bar += e->fibers[i].state == AT_BARRIER;
        warp += e->fibers[i].state == AT_WARP;
      }
      char buf[200];
      snprintf(buf, sizeof buf,
               "block (%u,%u,%u): deadlock: %d threads wait at __syncthreads and %d at a warp collective that cannot complete",
               emu_block_idx.x, emu_block_idx.y, emu_block_idx.z, bar, warp);
      e->failed = true;
      e->msg = buf;
    }
  }
  e->cur = nullptr;
  emu_self = nullptr;
}

std::mutex registry_mu;
std::unordered_map<std::string, EmuKernelFn>& registry() {
  static auto* m = new std::unordered_map<std::string, EmuKernelFn>();
  return *m;
}

}  // namespace

// ------------------------------------------------------------------ kernel API

void __syncthreads(void) {
  Emu* e = in_launch("__syncthreads");
  e->at_barrier++;
  if (!release_barrier(e)) {
    e->cur->state = AT_BARRIER;
    yield(e);
  }
}

void __syncwarp(unsigned mask) {
  Emu* e = in_launch("__syncwarp");
  WarpSlot s{};
  collective(e, KIND_SYNCWARP, mask, s);
}

uint32_t emu_shfl(unsigned mask, uint32_t v, int kind, int arg, int width) {
  Emu* e = in_launch("__shfl_*_sync");
  if (width <= 0 || width > 32 || (width & (width - 1))) fail_fiber(e, where(e) + ": shuffle width not a power of two up to 32");
  WarpSlot s{};
  s.v = v;
  uint32_t took_part;
  const WarpSlot* all = collective(e, kind, mask, s, &took_part);
  int lane = e->cur->self.lin & 31;
  int base = lane & ~(width - 1), in = lane & (width - 1), src = lane;
  switch (kind) {
    case EMU_SHFL_IDX:
      src = base + (arg & (width - 1));
      break;
    case EMU_SHFL_UP:
      src = in - arg >= 0 ? lane - arg : lane;
      break;
    case EMU_SHFL_DOWN:
      src = in + arg < width ? lane + arg : lane;
      break;
    case EMU_SHFL_XOR:
      src = lane ^ arg;
      if (src >= base + width) src = lane;  // later segments are out of reach
      break;
  }
  if (src < 0 || src > 31 || !(took_part >> src & 1)) {
    char buf[120];
    snprintf(buf, sizeof buf, ": shuffle reads lane %d, which did not take part (mask %#x)", src, mask);
    fail_fiber(e, where(e) + buf);
  }
  return all[src].v;
}

void emu_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  Emu* e = in_launch("mma.sync");
  Warp& w = e->warps[e->cur->self.lin >> 5];
  if (w.exists != 0xffffffffu || w.exited) fail_fiber(e, where(e) + ": mma.sync needs all 32 lanes of the warp");
  WarpSlot s{};
  memcpy(s.a, a, sizeof s.a);
  memcpy(s.b, b, sizeof s.b);
  memcpy(s.c, d, sizeof s.c);
  const WarpSlot* all = collective(e, KIND_MMA, 0xffffffffu, s);

  // Rebuild the tiles from every lane's fragments, per the PTX ISA's
  // tables for m16n8k16 with .bf16 (g = lane >> 2, t = lane % 4; the lower
  // index of a pair sits in the low 16 bits of its register):
  //   A: reg0 = A[g][2t, 2t+1]    reg1 = A[g+8][2t, 2t+1]
  //      reg2 = A[g][2t+8, 2t+9]  reg3 = A[g+8][2t+8, 2t+9]
  //   B: reg0 = B[2t, 2t+1][g]    reg1 = B[2t+8, 2t+9][g]
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    int g = l >> 2, t = l & 3;
    const uint32_t* ra = all[l].a;
    const uint32_t* rb = all[l].b;
    auto lo = [](uint32_t r) { return emu_u2f(r << 16); };
    auto hi = [](uint32_t r) { return emu_u2f(r & 0xffff0000u); };
    A[g][2 * t] = lo(ra[0]);
    A[g][2 * t + 1] = hi(ra[0]);
    A[g + 8][2 * t] = lo(ra[1]);
    A[g + 8][2 * t + 1] = hi(ra[1]);
    A[g][2 * t + 8] = lo(ra[2]);
    A[g][2 * t + 9] = hi(ra[2]);
    A[g + 8][2 * t + 8] = lo(ra[3]);
    A[g + 8][2 * t + 9] = hi(ra[3]);
    B[2 * t][g] = lo(rb[0]);
    B[2 * t + 1][g] = hi(rb[0]);
    B[2 * t + 8][g] = lo(rb[1]);
    B[2 * t + 9][g] = hi(rb[1]);
  }
  // This lane's part of D: d[i] = D[g + 8·(i ≥ 2)][2t + (i & 1)]. Products
  // of BF16 values are exact in float; they are added in k order.
  int lane = e->cur->self.lin & 31, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; i++) {
    int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float acc = all[lane].c[i];
    for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

void* emu_dynamic_smem(void) { return in_launch("dynamic shared memory")->dyn; }

void emu_fail(const char* msg) {
  Emu* e = in_launch("emu_fail");
  fail_fiber(e, where(e) + ": " + msg);
}

// ------------------------------------------------------------------ launching

int emu_launch(EmuKernelFn fn, void** params, dim3 grid, dim3 block, size_t dyn_smem, char* err, size_t errlen) {
  auto fail = [&](const std::string& m) {
    snprintf(err, errlen, "%s", m.c_str());
    return -1;
  };
  Emu* e = state();
  if (e->active) return fail("emu: launch from inside a kernel");
  uint64_t nt = (uint64_t)block.x * block.y * block.z;
  if (nt == 0 || nt > kMaxThreads) return fail("emu: block of " + std::to_string(nt) + " threads (1 to 1024)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return fail("emu: empty grid");
  int n = (int)nt;
  while ((int)e->fibers.size() < n) {
    Fiber f;
    f.stack = alloc_stack();
    if (!f.stack) return fail("emu: cannot map a fiber stack");
    e->fibers.push_back(f);
  }
#if defined(EMU_UCONTEXT)
  e->start_args.resize(2 * e->fibers.size());
#endif
  for (int i = 0; i < n; i++) {
    EmuThread& s = e->fibers[i].self;
    s.lin = i;
    s.tid.x = i % block.x;
    s.tid.y = (i / block.x) % block.y;
    s.tid.z = i / (block.x * block.y);
  }
  int nwarps = (n + 31) / 32;
  e->warps.assign(nwarps, Warp{});
  for (int w = 0; w < nwarps; w++) {
    int lanes = n - w * 32 < 32 ? n - w * 32 : 32;
    e->warps[w].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  if (dyn_smem > e->dyn_cap) {
    free(e->dyn);
    e->dyn_cap = (dyn_smem + 4095) & ~(size_t)4095;
    e->dyn = (char*)aligned_alloc(128, e->dyn_cap);
    if (!e->dyn) {
      e->dyn_cap = 0;
      return fail("emu: cannot allocate shared memory");
    }
  }
  e->dyn_size = dyn_smem;
  e->fn = fn;
  e->params = params;
  e->failed = false;
  e->msg.clear();
  e->nthreads = n;
  e->active = true;
  emu_grid_dim = grid;
  emu_block_dim = block;
  e->launches++;
  for (unsigned z = 0; z < grid.z && !e->failed; z++)
    for (unsigned y = 0; y < grid.y && !e->failed; y++)
      for (unsigned x = 0; x < grid.x && !e->failed; x++) {
        emu_block_idx = dim3{x, y, z};
        run_block(e, ((e->launches + x + y + z) & 1) != 0);
      }
  e->active = false;
  if (e->failed) return fail(e->msg);
  return 0;
}

void emu_register(const char* name, EmuKernelFn fn) {
  std::lock_guard<std::mutex> l(registry_mu);
  registry()[name] = fn;
}

EmuKernelFn emu_find(const char* name) {
  std::lock_guard<std::mutex> l(registry_mu);
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}
