// Copied from runtime/kernels/rlk_parallel.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
#pragma once
// Host threads for every platform's kernels.  Work is split only into pieces whose
// results do not depend on each other (rows, elements, output tiles), never inside a
// reduction, so which thread computes a piece, and how many threads there are, never
// changes a bit of the result.
//
// Threads: those of the caller's pool, which the bindings lend through rlk_abi.h's
// run_host_workers (torch's intra-op pool).  Kernels stay free of torch, and a kernel never
// starts threads of its own that would compete for the cores with the pool's threads, which
// keep spinning for a while after each parallel torch op.  A call uses the caller's request
// (torch.get_num_threads() through the bindings), unless the environment's RLK_NUM_THREADS,
// read on every call, asks for fewer; fewer still for small work, where waking a thread
// costs more than it saves.
//
// Instructions: on x86 CPUs, parallel_rows runs each piece in a copy of its code compiled
// for the widest vector instructions the CPU has among AVX-512 (F, VL, BW, DQ) and AVX2 with
// FMA; RLK_CPU_SIMD, read on every call, caps them (`avx512` without AVX512-BF16's dot
// products, `avx2`, or `generic` for the baseline copy; `avx512_bf16` asks for the dot products
// even where this CPU runs them slower than fmas).  Every copy performs the same IEEE operations in the same order -- the build never
// contracts a multiply and an add, vector lanes only hold different elements side by side,
// and rlk_math.h's explicit fused multiply-adds are exact either way, in an instruction
// instead of a library call -- so they give the same bits; only the speed differs.  A body
// that takes a third argument is handed the copy's lanes type (rlk_lanes.h) as a value, to
// write its vector code once for every instruction set.

#include <algorithm>
#include <atomic>
#include <cfenv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "../../rlk_abi.h"
#include "rlk_lanes.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#if RLK_DEVICE_CODE
#error "rlk_parallel.h shares host work among threads; device kernels have their own grids"
#endif

// The platform's namespace, rlk::cpu on the host (rlk_numerics.h names it).
namespace rlk {
namespace RLK_TARGET_NAMESPACE {

// IEEE 754's default floating-point mode for the life of a launcher call: round to nearest,
// subnormals kept as inputs and results.  The caller may have set another for its thread
// (torch.set_flush_denormal(True) sets x86's FTZ and DAZ bits, Arm's FZ bit; fesetround the
// rounding mode), which would change the bits of every kernel that meets a subnormal; each host
// launcher sets this one and gives the caller's back when it returns, and parallel_for hands it
// to every worker, so no kernel depends on the mode of the thread that called it.
class DefaultFloatingPointMode {
 public:
  DefaultFloatingPointMode() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = _mm_getcsr();
    // MXCSR: FTZ is bit 15, DAZ bit 6, the rounding mode bits 13-14 (00: to nearest).
    constexpr unsigned kNotDefault = (1u << 15) | (1u << 6) | (3u << 13);
    if (saved_ & kNotDefault) _mm_setcsr(saved_ & ~kNotDefault);
#elif defined(__aarch64__)
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved_));
    // FPCR: FZ is bit 24, FZ16 bit 19, the rounding mode bits 22-23 (00: to nearest).
    constexpr uint64_t kNotDefault = (uint64_t{1} << 24) | (uint64_t{1} << 19) | (uint64_t{3} << 22);
    if (saved_ & kNotDefault) __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_ & ~kNotDefault));
#else
    saved_ = std::fegetround();
    std::fesetround(FE_TONEAREST);
#endif
  }
  ~DefaultFloatingPointMode() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(saved_);
#elif defined(__aarch64__)
    __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_));
#else
    std::fesetround(saved_);
#endif
  }
  DefaultFloatingPointMode(const DefaultFloatingPointMode&) = delete;
  DefaultFloatingPointMode& operator=(const DefaultFloatingPointMode&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved_;
#elif defined(__aarch64__)
  uint64_t saved_;
#else
  int saved_;
#endif
};

// `work` in units of which `min_work_per_thread` pay for waking one thread.
inline int thread_count(int64_t work, int64_t min_work_per_thread, int64_t requested) {
  int64_t threads = requested > 0 ? requested : std::max(1u, std::thread::hardware_concurrency());
  if (const char* env = std::getenv("RLK_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) threads = std::min<int64_t>(threads, n);
  }
  const int64_t by_work = std::max<int64_t>(1, work / std::max<int64_t>(1, min_work_per_thread));
  return static_cast<int>(std::min({threads, by_work, int64_t{256}}));
}

// Calls body(i) for i in [0, count) on up to `threads` threads of the pool, the caller's
// included.  Indices are handed out from a shared counter, so a thread that starts late
// or is slowed by other work simply takes fewer of them.
template <typename Body>
void parallel_for(int64_t count, int threads, const Body& body) {
  struct Shared {
    const Body& body;
    int64_t count;
    std::atomic<int64_t> next{0};
    std::fenv_t env;

    void drain() {
      for (int64_t i = next++; i < count; i = next++) body(i);
    }
  } shared{body, count};
  if (threads <= 1 || count <= 1) {
    shared.drain();
    return;
  }
  // Every worker runs in the caller's floating-point environment -- the default mode the
  // launcher set (see DefaultFloatingPointMode) -- so each piece is computed alike; a pool
  // thread gets its own back afterwards.
  std::fegetenv(&shared.env);
  const HostTask task = [](void* context, int64_t) {
    Shared& s = *static_cast<Shared*>(context);
    std::fenv_t own;
    std::fegetenv(&own);
    std::fesetenv(&s.env);
    s.drain();
    std::fesetenv(&own);
  };
  run_host_workers(std::min<int64_t>(threads, count), task, &shared);
}

// The instruction sets a piece may run with, widest last.  avx512_bf16 adds vdpbf16ps, which
// only det_gemm's bfloat16 path uses; every other kernel runs its AVX-512 copy there.
enum class Simd { generic, avx2, avx512, avx512_bf16 };

// body(begin, end, Lanes{}) where the body takes the lanes type, else body(begin, end).
template <typename Lanes, typename Body>
inline void call_piece(const Body& body, int64_t begin, int64_t end) {
  if constexpr (std::is_invocable_v<const Body&, int64_t, int64_t, Lanes>)
    body(begin, end, Lanes{});
  else
    body(begin, end);
}

#ifdef RLK_HOST_X86_LANES
// Call body(begin, end) with everything it calls inlined and compiled for these instructions.
template <typename Body>
RLK_LANES_AVX2 __attribute__((flatten)) void run_piece_avx2(const Body& body, int64_t begin, int64_t end) {
  call_piece<Avx2Lanes>(body, begin, end);
}

template <typename Body>
RLK_LANES_AVX512 __attribute__((flatten)) void run_piece_avx512(const Body& body, int64_t begin, int64_t end) {
  call_piece<Avx512Lanes>(body, begin, end);
}

// The widest copy this CPU runs, capped by RLK_CPU_SIMD (generic, avx2 or avx512).  avx512_bf16
// counts as wider only where its dot products run faster than the fma path (bf16_pairs_faster,
// measured once); RLK_CPU_SIMD=avx512_bf16 asks for it wherever the CPU has it.
inline Simd host_simd() {
  static const Simd widest = [] {
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    return bf16 ? Simd::avx512_bf16 : avx512 ? Simd::avx512 : avx2 ? Simd::avx2 : Simd::generic;
  }();
  const char* cap = std::getenv("RLK_CPU_SIMD");
  if (cap != nullptr && std::strcmp(cap, "generic") == 0) return Simd::generic;
  if (cap != nullptr && std::strcmp(cap, "avx2") == 0) return std::min(widest, Simd::avx2);
  if (cap != nullptr && std::strcmp(cap, "avx512") == 0) return std::min(widest, Simd::avx512);
  if (widest != Simd::avx512_bf16 || (cap != nullptr && std::strcmp(cap, "avx512_bf16") == 0)) return widest;
  static const bool pairs_faster = bf16_pairs_faster();
  return pairs_faster ? Simd::avx512_bf16 : Simd::avx512;
}

template <typename Body>
void run_piece(Simd simd, const Body& body, int64_t begin, int64_t end) {
  if (simd >= Simd::avx512)
    run_piece_avx512(body, begin, end);
  else if (simd == Simd::avx2)
    run_piece_avx2(body, begin, end);
  else
    call_piece<GenericLanes>(body, begin, end);
}
#else
inline Simd host_simd() { return Simd::generic; }

template <typename Body>
void run_piece(Simd, const Body& body, int64_t begin, int64_t end) {
  call_piece<GenericLanes>(body, begin, end);
}
#endif

// About this many element operations per piece of a parallel_rows split.
constexpr int64_t kPieceWork = int64_t{1} << 16;
// And per thread woken.
constexpr int64_t kThreadWork = int64_t{1} << 18;
// Element operations of one element of an activation-like kernel (an exp or a log, a few
// multiplies and adds): the `cost` those kernels pass to parallel_rows.
constexpr int64_t kActivationCost = 32;

// Calls body(begin, end) over [0, count) in pieces of consecutive indices, each about
// kPieceWork element operations (`cost` per index), on up to `requested` threads.
template <typename Body>
void parallel_rows(int64_t count, int64_t cost, int64_t requested, const Body& body) {
  if (count <= 0) return;
  const int64_t per_piece = std::max<int64_t>(1, kPieceWork / std::max<int64_t>(1, cost));
  const int64_t pieces = (count + per_piece - 1) / per_piece;
  const int threads = thread_count(count * std::max<int64_t>(1, cost), kThreadWork, requested);
  const Simd simd = host_simd();
  parallel_for(pieces, threads, [&](int64_t piece) {
    const int64_t begin = piece * per_piece;
    run_piece(simd, body, begin, std::min(count, begin + per_piece));
  });
}

}  // namespace RLK_TARGET_NAMESPACE
}  // namespace rlk
