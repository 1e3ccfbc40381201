#pragma once
// A small SIMT emulator that runs the generated device kernels on the host, so that
// their data movement (tiling, swizzles, copy pipelines, fragment layouts, bounds)
// is tested where no GPU is: every thread of a block is a fiber on one OS thread,
// __syncthreads and the warp-wide instructions are barriers between fibers, and
// shared memory, asynchronous copies and the tensor-core instructions are modelled
// after their PTX definitions (see rlk_tensor_core.h next to this file).
//
// What it checks, beyond the results: shared-memory accesses stay inside the
// launch's dynamic shared memory and are aligned; asynchronous copies read only
// inside registered global buffers (where the caller registers them); every lane of a warp takes part in each
// warp-wide instruction and every thread of a block in each barrier (otherwise
// the run stops as deadlocked); a launch asking for more than the default shared
// memory must have opted in.
//
// Two knobs make ordering bugs visible.  RLK_EMU_COPIES=deferred completes a
// thread's asynchronous copies only when it waits for them (eager: at once), so a
// read before the wait sees stale data.  RLK_EMU_ORDER=reverse runs the highest-
// numbered runnable thread first (forward: the lowest), so one warp races ahead of
// the others up to the next barrier, and a write into a buffer another warp is
// still reading shows up.
//
// It does not model timing, caches, bank conflicts, or the exact rounding inside
// a tensor-core instruction (the sum of a step is formed exactly, then rounded
// once); tests use values whose sums are exact, so every order gives the same bits.

#ifndef RLK_EMULATOR
#error "rlk_emu.h is the test emulator; compile with -DRLK_EMULATOR"
#endif

#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__) || defined(RLK_EMU_UCONTEXT)
#include <ucontext.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

// ---------------------------------------------------------------- language keywords
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// Static shared arrays: one block runs at a time, so a function-local static is shared
// by exactly the threads of the running block.
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct uint3_ {
  unsigned x, y, z;
};

namespace rlk_emu {

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "rlk_emu: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(3);  // not exit(): that would free the fiber stacks while running on one
}

struct CopyRecord {
  uint32_t dst;
  unsigned char bytes[16];
};

// ---------------------------------------------------------------- fiber switches
// A kernel's threads meet in a barrier at every warp-wide instruction, so a launch switches
// between fibers hundreds of thousands of times.  On x86-64 a switch is a few instructions:
// the callee-saved registers and the SSE/x87 control words pushed on the running stack, the
// stack pointer exchanged.  (swapcontext also saves the signal mask, a system call each time,
// which made it most of a launch's cost.)  Elsewhere, or with RLK_EMU_UCONTEXT defined, ucontext.
#if defined(__x86_64__) && !defined(RLK_EMU_UCONTEXT)
struct FiberContext {
  void* sp = nullptr;
};

// Saves the running context on its stack and in *from, resumes `to`.
[[gnu::naked, gnu::noinline]] inline void switch_context(FiberContext* /*from*/, const FiberContext* /*to*/) {
  asm volatile(
      "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
      "subq $8, %rsp\n\tstmxcsr (%rsp)\n\tfnstcw 4(%rsp)\n\t"
      "movq %rsp, (%rdi)\n\tmovq (%rsi), %rsp\n\t"
      "ldmxcsr (%rsp)\n\tfldcw 4(%rsp)\n\taddq $8, %rsp\n\t"
      "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret");
}

// A context that starts `entry` (which never returns) at the top of the stack [base, base + bytes).
inline void start_context(FiberContext& c, char* base, size_t bytes, void (*entry)()) {
  auto* sp = reinterpret_cast<uint64_t*>(base + bytes);  // 16-byte aligned: page-aligned base and size
  *--sp = 0;                                   // entry's return address: it never returns
  *--sp = reinterpret_cast<uint64_t>(entry);   // where switch_context's ret goes
  for (int i = 0; i < 6; ++i) *--sp = 0;       // rbp, rbx, r12-r15
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpucw));
  *--sp = mxcsr | (static_cast<uint64_t>(fpucw) << 32);  // the caller's control words
  c.sp = sp;
}
#else
struct FiberContext {
  ucontext_t uc;
};

inline void switch_context(FiberContext* from, const FiberContext* to) { swapcontext(&from->uc, &to->uc); }

inline void start_context(FiberContext& c, char* base, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = base;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;  // entry never returns
  makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
  FiberContext context;
  char* stack = nullptr;
  uint3_ thread_idx;
  int linear = 0;
  enum State { kRunnable, kBlockBarrier, kWarpBarrier, kGroupBarrier, kBarrierWait, kDone } state = kRunnable;
  std::vector<CopyRecord> open_group;
  std::vector<std::vector<CopyRecord>> committed;
  uint32_t waits_on = 0;  // the shared-memory barrier a kBarrierWait fiber waits on
};

// A shared-memory barrier (mbarrier): it completes a phase, and flips the phase's parity,
// once `count` arrivals have been made.  An arrival made on behalf of a thread's copies
// (cp.async.mbarrier.arrive) is held with those copies until they land.
struct Mbarrier {
  int count = 0;
  int pending = 0;
  uint32_t phase = 0;
  std::vector<std::vector<CopyRecord>> arrivals_after_copies;
};

// A warpgroup mma in flight: what it reads and where its results go, fixed at issue.
struct WarpgroupOp {
  uint64_t desc_a = 0, desc_b = 0;
  int n = 0;
  bool trans_a = false, trans_b = false, scale_d = true, bf16 = true;
  float* d[128] = {};
};

// The 128 threads of a warpgroup meeting in one warpgroup-wide instruction, and the
// warpgroup mmas it has issued: open (not yet committed) and committed groups, oldest first.
struct WarpgroupExchange {
  int arrived = 0;
  const char* instruction = nullptr;
  WarpgroupOp op;
  std::vector<WarpgroupOp> open;
  std::vector<std::vector<WarpgroupOp>> committed;
};

struct WarpExchange {
  int arrived = 0;
  const char* instruction = nullptr;  // the warp-wide instruction the arrived lanes are in
  uint32_t address[32];
  uint32_t a[32][4];
  uint32_t b[32][2];
  float c[32][4];
};

struct State {
  std::vector<Fiber> fibers;
  std::vector<WarpExchange> warps;
  std::vector<WarpgroupExchange> warpgroups;
  std::map<uint32_t, Mbarrier> barriers;  // by shared address, for the running block
  FiberContext scheduler;
  Fiber* current = nullptr;
  uint3_ block_idx{0, 0, 0};
  dim3 block_dim, grid_dim;
  int block_arrived = 0;
  std::vector<unsigned char> shared;  // dynamic shared memory of the running block
  std::function<void()> body;
  bool deferred_copies = false;
  bool reverse_order = false;
  int arch_major = 9, arch_minor = 0;  // the emulated device (RLK_EMU_ARCH, e.g. 8.0)
  int multiprocessors = 2;             // RLK_EMU_MULTIPROCESSORS
  int last_error = 0;
  std::map<const void*, int> max_dynamic_shared;  // opt-ins, by kernel
  std::vector<std::pair<const unsigned char*, size_t>> buffers;
  std::vector<char*> stacks;  // one per thread slot, reused by every block, never freed
};

inline State& state() {
  static State s;
  return s;
}

inline void configure_from_environment() {
  const char* copies = std::getenv("RLK_EMU_COPIES");
  const char* order = std::getenv("RLK_EMU_ORDER");
  state().deferred_copies = copies != nullptr && std::string(copies) == "deferred";
  state().reverse_order = order != nullptr && std::string(order) == "reverse";
  if (const char* arch = std::getenv("RLK_EMU_ARCH")) std::sscanf(arch, "%d.%d", &state().arch_major, &state().arch_minor);
  if (const char* sms = std::getenv("RLK_EMU_MULTIPROCESSORS")) state().multiprocessors = std::atoi(sms);
}

// Global memory the kernels may read with asynchronous copies.
inline void register_buffer(const void* p, size_t bytes) { state().buffers.emplace_back(static_cast<const unsigned char*>(p), bytes); }

inline Fiber& self() { return *state().current; }

inline void yield() { switch_context(&self().context, &state().scheduler); }

inline int lane() { return self().linear % 32; }
inline WarpExchange& warp_exchange() { return state().warps[self().linear / 32]; }

// All 32 lanes of this thread's warp arrive, in the same warp-wide instruction, before any
// continues (on hardware, lanes meeting in different .aligned instructions is undefined).
inline void warp_barrier(const char* instruction) {
  WarpExchange& w = warp_exchange();
  State& s = state();
  if (w.arrived == 0) w.instruction = instruction;
  if (std::strcmp(w.instruction, instruction) != 0)
    fail(std::string("lanes of one warp meet in different warp-wide instructions: ") + w.instruction + " and " + instruction);
  const int first = self().linear / 32 * 32;
  if (++w.arrived == 32) {
    w.arrived = 0;
    for (int l = 0; l < 32; ++l) s.fibers[first + l].state = Fiber::kRunnable;
    return;
  }
  self().state = Fiber::kWarpBarrier;
  yield();
}

inline void block_barrier() {
  State& s = state();
  int done = 0;
  for (const Fiber& f : s.fibers) done += f.state == Fiber::kDone;
  if (++s.block_arrived + done == static_cast<int>(s.fibers.size())) {
    s.block_arrived = 0;
    for (Fiber& f : s.fibers)
      if (f.state == Fiber::kBlockBarrier) f.state = Fiber::kRunnable;
    return;
  }
  self().state = Fiber::kBlockBarrier;
  yield();
}

// ---------------------------------------------------------------- shared memory
inline unsigned char* shared_at(uint32_t address, size_t bytes, size_t alignment, const char* what) {
  State& s = state();
  if (address % alignment != 0) fail(std::string(what) + ": shared address " + std::to_string(address) + " is not " + std::to_string(alignment) + "-byte aligned");
  if (address + bytes > s.shared.size())
    fail(std::string(what) + ": shared address " + std::to_string(address) + " + " + std::to_string(bytes) + " is past the " + std::to_string(s.shared.size()) +
         " bytes of dynamic shared memory");
  return s.shared.data() + address;
}

inline void* dynamic_shared() { return state().shared.data(); }

inline uint32_t shared_offset(const void* p) {
  const unsigned char* base = state().shared.data();
  const unsigned char* q = static_cast<const unsigned char*>(p);
  if (q < base || q > base + state().shared.size()) fail("shared_address of a pointer outside dynamic shared memory");
  return static_cast<uint32_t>(q - base);
}

// ---------------------------------------------------------------- asynchronous copies
inline void apply(const std::vector<CopyRecord>& group) {
  for (const CopyRecord& r : group) std::memcpy(shared_at(r.dst, 16, 16, "cp.async"), r.bytes, 16);
}

inline void copy_async(uint32_t dst, const void* src, int bytes) {
  shared_at(dst, 16, 16, "cp.async");
  if (bytes < 0 || bytes > 16) fail("cp.async: source size " + std::to_string(bytes) + " outside 0..16");
  CopyRecord r{dst, {}};
  if (bytes > 0) {
    const unsigned char* p = static_cast<const unsigned char*>(src);
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) fail("cp.async: global source is not 16-byte aligned");
    // Checked when the caller registered its buffers (the torch-extension build does not).
    bool inside = state().buffers.empty();
    for (const auto& [base, size] : state().buffers) inside = inside || (p >= base && p + bytes <= base + size);
    if (!inside) fail("cp.async: global read outside every input buffer");
    std::memcpy(r.bytes, p, static_cast<size_t>(bytes));
  }
  if (state().deferred_copies)
    self().open_group.push_back(r);
  else
    apply({r});
}

inline void copy_commit() {
  self().committed.push_back(std::move(self().open_group));
  self().open_group.clear();
}

inline void copy_wait(int pending) {
  Fiber& f = self();
  while (static_cast<int>(f.committed.size()) > pending) {
    apply(f.committed.front());
    f.committed.erase(f.committed.begin());
  }
}

// ---------------------------------------------------------------- shared-memory barriers
inline Mbarrier& barrier_at(uint32_t address, const char* what) {
  shared_at(address, 8, 8, what);
  auto found = state().barriers.find(address);
  if (found == state().barriers.end()) fail(std::string(what) + ": no barrier was initialised at shared address " + std::to_string(address));
  return found->second;
}

inline void wake_waiters(uint32_t address) {
  for (Fiber& f : state().fibers)
    if (f.state == Fiber::kBarrierWait && f.waits_on == address) f.state = Fiber::kRunnable;
}

inline void barrier_init(uint32_t address, int count) {
  shared_at(address, 8, 8, "mbarrier.init");
  if (count < 1) fail("mbarrier.init: count " + std::to_string(count));
  state().barriers[address] = Mbarrier{count, count, 0, {}};
}

inline void barrier_arrive(uint32_t address) {
  Mbarrier& b = barrier_at(address, "mbarrier.arrive");
  if (--b.pending == 0) {
    b.phase ^= 1u;
    b.pending = b.count;
    wake_waiters(address);
  }
}

// Every copy this thread has issued and not yet seen land travels with the arrival.
inline void barrier_arrive_after_copies(uint32_t address) {
  barrier_at(address, "cp.async.mbarrier.arrive");
  Fiber& f = self();
  std::vector<CopyRecord> copies;
  for (auto& group : f.committed) copies.insert(copies.end(), group.begin(), group.end());
  copies.insert(copies.end(), f.open_group.begin(), f.open_group.end());
  f.committed.clear();
  f.open_group.clear();
  if (!state().deferred_copies) {
    apply(copies);
    barrier_arrive(address);
    return;
  }
  state().barriers[address].arrivals_after_copies.push_back(std::move(copies));
  wake_waiters(address);
}

// Blocks until the phase of parity `parity` has completed.  Deferred copies land (and make
// their arrivals) only here, when a thread needs them: as late as the hardware may.
inline void barrier_wait(uint32_t address, uint32_t parity) {
  for (;;) {
    Mbarrier& b = barrier_at(address, "mbarrier.try_wait");
    if ((b.phase & 1u) != (parity & 1u)) return;
    if (!b.arrivals_after_copies.empty()) {
      std::vector<CopyRecord> copies = std::move(b.arrivals_after_copies.front());
      b.arrivals_after_copies.erase(b.arrivals_after_copies.begin());
      apply(copies);
      barrier_arrive(address);
      continue;
    }
    self().state = Fiber::kBarrierWait;
    self().waits_on = address;
    yield();
  }
}

// ---------------------------------------------------------------- warpgroup-wide instructions
inline WarpgroupExchange& warpgroup_exchange() { return state().warpgroups[self().linear / 128]; }

// All 128 threads of this thread's warpgroup arrive in the same instruction; the last to
// arrive runs `last` before any continues.
template <typename Last>
inline void warpgroup_collective(const char* instruction, Last last) {
  WarpgroupExchange& w = warpgroup_exchange();
  State& s = state();
  if (static_cast<int>(s.fibers.size()) < (self().linear / 128 + 1) * 128) fail(std::string(instruction) + ": the block has no whole warpgroup here");
  if (w.arrived == 0) w.instruction = instruction;
  if (std::strcmp(w.instruction, instruction) != 0)
    fail(std::string("threads of one warpgroup meet in different warpgroup-wide instructions: ") + w.instruction + " and " + instruction);
  const int first = self().linear / 128 * 128;
  if (++w.arrived == 128) {
    w.arrived = 0;
    last(w);
    for (int t = 0; t < 128; ++t)
      if (s.fibers[first + t].state == Fiber::kGroupBarrier) s.fibers[first + t].state = Fiber::kRunnable;
    return;
  }
  self().state = Fiber::kGroupBarrier;
  yield();
}

inline uint16_t shared_u16(uint32_t address, const char* what) {
  uint16_t v;
  std::memcpy(&v, shared_at(address, 2, 2, what), 2);
  return v;
}

// ---------------------------------------------------------------- launches
struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
};

inline LaunchConfig config(dim3 grid, dim3 block, size_t shared_bytes = 0, void* = nullptr) { return {grid, block, shared_bytes}; }

// A fiber's first and only frame: the kernel, then back to the scheduler for good.
[[noreturn]] inline void fiber_main() {
  state().body();
  self().state = Fiber::kDone;
  switch_context(&self().context, &state().scheduler);  // a finished fiber is never resumed
  std::abort();
}

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// A fiber stack with an inaccessible page below it, so an overflow faults instead of
// writing into the next stack.
inline char* new_stack() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* base = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) fail("cannot map a fiber stack");
  mprotect(base, page, PROT_NONE);
  return static_cast<char*>(base) + page;
}

inline void run_block() {
  State& s = state();
  for (;;) {
    bool all_done = true;
    bool ran = false;
    const int n = static_cast<int>(s.fibers.size());
    for (int step = 0; step < n && !ran; ++step) {
      Fiber& f = s.fibers[s.reverse_order ? n - 1 - step : step];
      if (f.state != Fiber::kDone) all_done = false;
      if (f.state == Fiber::kRunnable) {
        s.current = &f;
        switch_context(&s.scheduler, &f.context);
        ran = true;
      }
    }
    if (ran) continue;
    if (all_done) break;
    int warp = 0, block = 0, done = 0, group = 0, barrier = 0;
    for (const Fiber& f : s.fibers) {
      warp += f.state == Fiber::kWarpBarrier;
      group += f.state == Fiber::kGroupBarrier;
      block += f.state == Fiber::kBlockBarrier;
      barrier += f.state == Fiber::kBarrierWait;
      done += f.state == Fiber::kDone;
    }
    fail("deadlock: " + std::to_string(warp) + " threads wait in warp-wide instructions, " + std::to_string(group) + " in warpgroup-wide ones, " +
         std::to_string(block) + " at __syncthreads, " + std::to_string(barrier) + " on shared-memory barriers, " + std::to_string(done) + " have exited");
  }
}

template <typename Kernel, typename... Args>
void launch(LaunchConfig cfg, Kernel kernel, Args... args) {
  State& s = state();
  const void* key = reinterpret_cast<const void*>(kernel);
  if (cfg.shared_bytes > kDefaultSharedBytes) {
    auto opted = s.max_dynamic_shared.find(key);
    if (opted == s.max_dynamic_shared.end() || static_cast<size_t>(opted->second) < cfg.shared_bytes) {
      s.last_error = 1;  // the hardware refuses such a launch
      return;
    }
  }
  const int threads = static_cast<int>(cfg.block.x * cfg.block.y * cfg.block.z);
  if (threads % 32 != 0) fail("blocks must be whole warps");
  s.block_dim = cfg.block;
  s.grid_dim = cfg.grid;
  s.body = [&] { kernel(args...); };
  for (unsigned bz = 0; bz < cfg.grid.z; ++bz)
    for (unsigned by = 0; by < cfg.grid.y; ++by)
      for (unsigned bx = 0; bx < cfg.grid.x; ++bx) {
        s.block_idx = {bx, by, bz};
        s.shared.assign(cfg.shared_bytes, 0xFF);  // garbage that reads as NaN in every float type
        s.fibers.clear();
        s.fibers.resize(threads);
        s.warps.assign(threads / 32, WarpExchange{});
        s.warpgroups.assign((threads + 127) / 128, WarpgroupExchange{});
        s.barriers.clear();
        s.block_arrived = 0;
        for (int t = 0; t < threads; ++t) {
          Fiber& f = s.fibers[t];
          f.linear = t;
          f.thread_idx = {t % cfg.block.x, t / cfg.block.x % cfg.block.y, t / (cfg.block.x * cfg.block.y)};
          if (static_cast<int>(s.stacks.size()) <= t) s.stacks.push_back(new_stack());
          f.stack = s.stacks[t];
          start_context(f.context, f.stack, kStackBytes, fiber_main);
        }
        run_block();
      }
  s.fibers.clear();
}

}  // namespace rlk_emu

#define threadIdx (::rlk_emu::self().thread_idx)
#define blockIdx (::rlk_emu::state().block_idx)
#define blockDim (::rlk_emu::state().block_dim)
#define gridDim (::rlk_emu::state().grid_dim)

inline void __syncthreads() { rlk_emu::block_barrier(); }
