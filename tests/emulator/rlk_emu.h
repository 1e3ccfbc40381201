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
#include <ucontext.h>
#include <unistd.h>

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

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  uint3_ thread_idx;
  int linear = 0;
  enum State { kRunnable, kBlockBarrier, kWarpBarrier, kDone } state = kRunnable;
  std::vector<CopyRecord> open_group;
  std::vector<std::vector<CopyRecord>> committed;
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
  ucontext_t scheduler;
  Fiber* current = nullptr;
  uint3_ block_idx{0, 0, 0};
  dim3 block_dim, grid_dim;
  int block_arrived = 0;
  std::vector<unsigned char> shared;  // dynamic shared memory of the running block
  std::function<void()> body;
  bool deferred_copies = false;
  bool reverse_order = false;
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
}

// Global memory the kernels may read with asynchronous copies.
inline void register_buffer(const void* p, size_t bytes) { state().buffers.emplace_back(static_cast<const unsigned char*>(p), bytes); }

inline Fiber& self() { return *state().current; }

inline void yield() { swapcontext(&self().context, &state().scheduler); }

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

// ---------------------------------------------------------------- launches
struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
};

inline LaunchConfig config(dim3 grid, dim3 block, size_t shared_bytes = 0, void* = nullptr) { return {grid, block, shared_bytes}; }

inline void trampoline() {
  state().body();
  self().state = Fiber::kDone;
  // Returning resumes the scheduler through uc_link.
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
        swapcontext(&s.scheduler, &f.context);
        ran = true;
      }
    }
    if (ran) continue;
    if (all_done) break;
    int warp = 0, block = 0, done = 0;
    for (const Fiber& f : s.fibers) {
      warp += f.state == Fiber::kWarpBarrier;
      block += f.state == Fiber::kBlockBarrier;
      done += f.state == Fiber::kDone;
    }
    fail("deadlock: " + std::to_string(warp) + " threads wait in warp-wide instructions, " + std::to_string(block) + " at __syncthreads, " +
         std::to_string(done) + " have exited");
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
        s.block_arrived = 0;
        for (int t = 0; t < threads; ++t) {
          Fiber& f = s.fibers[t];
          f.linear = t;
          f.thread_idx = {t % cfg.block.x, t / cfg.block.x % cfg.block.y, t / (cfg.block.x * cfg.block.y)};
          if (static_cast<int>(s.stacks.size()) <= t) s.stacks.push_back(new_stack());
          f.stack = s.stacks[t];
          getcontext(&f.context);
          f.context.uc_stack.ss_sp = f.stack;
          f.context.uc_stack.ss_size = kStackBytes;
          f.context.uc_link = &s.scheduler;
          makecontext(&f.context, trampoline, 0);
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
