// Copied from runtime/csrc/rlk_bf16_tiles.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
// rlk_bf16_tiles.h -- the bfloat16 GEMM family's host kernel, in AMX's order.
// Hand-written (not generated); copied as it is next to the CPU kernels that include it.
//
// The order (the specs' `reduction: {order: pair_chunks, chunk: 32}`), for each output c[m, n]:
//
//   K is cut into chunks of 32 values from k = 0 (the last one padded with zeros in both
//   operands).  For each chunk, in ascending order: two float32 sums start at +0, `even` over
//   k = 0, 2, ..., 30 of the chunk and `odd` over k = 1, 3, ..., 31, each a chain of fused
//   multiply-adds in ascending k, then c = c + (even + odd).  c starts at +0.  A bfloat16 input
//   whose exponent field is 0 (a subnormal) reads as a zero of its sign; every result (of each
//   fma and of both adds) whose magnitude, rounded to nearest even with an unbounded exponent,
//   is below 2^-126 becomes a zero of its sign.  A bias joins c after the last chunk as one more
//   such add; the result is rounded once to the output dtype by the caller.
//
// That is what Intel's TDPBF16PS computes for one tile step of 16 pairs into its float32 C tile,
// so a whole K loop accumulated into one C tile, chunk after chunk, is this order; the kernel
// never splits K between threads, and its tiles depend on K alone, so a row's bits depend on
// neither M, nor the thread count, nor the other rows.  A bfloat16 product is exact in float32,
// so each fused step is one rounded add, and the same order runs everywhere else:
//
//   amx      TDPBF16PS on 16 x 16 C tiles, 2 x 2 tiles per 32 x 32 block (Linux grants the tile
//            state per process: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); the tile
//            configuration is loaded by each thread before each block of work, since other
//            code on the thread may load its own)
//   dpbf16   AVX512-BF16's VDPBF16PS, whose two fused steps per lane take the pair's odd element
//            first: each chain's pairs are stored (k + 2, k), so it adds k, then k + 2
//   fma      float32 fused multiply-adds on AVX-512 (16 lanes) or AVX2 (8 lanes) with MXCSR's DAZ
//            and FTZ set for the call (x86 detects tininess after rounding, as above)
//   generic  the same steps in C++, the flush rules written out (any CPU)
//
// Operand layouts are the template parameters: A is [M, K] or, transposed, [K, M]; B is [K, N] or,
// transposed, [N, K] (det_gemm: <false, false>, det_gemm_nt: <false, true>, det_gemm_tn:
// <true, false>).  The layout changes where an element is read, never the order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define RLK_TILES_X86 1
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace rlk {
namespace bf16_tiles {

constexpr int kChunk = 32;      // values of k per tile step
constexpr int kChainLen = 16;   // fused steps per chain
constexpr int64_t kDepthChunks = 8;  // chunks per k-block a block of work keeps in cache

// ---------------------------------------------------------------------------------------------
// Scalar model of the order (the generic path, and the reference the others must equal).

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// A bfloat16 input as the order reads it: a subnormal is a zero of its sign.
inline uint16_t daz_bits(uint16_t u) { return (u & 0x7f80u) == 0 ? static_cast<uint16_t>(u & 0x8000u) : u; }
inline float bf16_value(uint16_t u) { return bits_to_float(static_cast<uint32_t>(daz_bits(u)) << 16); }

// A result below 2^-126 in magnitude becomes a zero of its sign.
inline float flush(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; }

// fma(a, b, c) under the flush rules, a and b bfloat16 values (read as above), c never subnormal.
// fmaf rounds on the subnormal grid; it agrees with rounding on an unbounded exponent everywhere
// except where it gives exactly 2^-126: there the unbounded rounding gives 2^-126 when the exact
// result is at least 2^-126 - 2^-151 in magnitude (a tie goes to 2^-126, whose significand is
// even) and a number below 2^-126, flushed, otherwise.  a * b is exact in double, and so is the
// sum where it is that close to 2^-126 (the two terms cancel within a factor of two, or both are
// small); elsewhere its error is far below the 2^-151 that decides.
inline float fma_flush(float a, float b, float c) {
  const float r = std::fma(a, b, c);
  if (std::fabs(r) == 0x1p-126f) {
    const double exact = static_cast<double>(c) + static_cast<double>(a) * static_cast<double>(b);
    return std::fabs(exact) >= 0x1p-126 - 0x1p-151 ? r : std::copysign(0.0f, r);
  }
  return flush(r);
}

// x + y under the flush rules: a sum in the subnormal range is exact, so rounding is no question.
inline float add_flush(float x, float y) { return flush(x + y); }

// ---------------------------------------------------------------------------------------------
// Operands.

template <bool kTransA, bool kTransB>
struct Operands {
  const uint16_t* a;
  const uint16_t* b;
  int64_t M, K, N;
  uint16_t a_at(int64_t m, int64_t k) const { return daz_bits(kTransA ? a[k * M + m] : a[m * K + k]); }
  uint16_t b_at(int64_t k, int64_t n) const { return daz_bits(kTransB ? b[n * K + k] : b[k * N + n]); }
};

// Where each path stores the 32 values of k of a chunk, per row of A and per column of B:
// slot s (0..31) of a chunk holds k = k0 + kOf(s).  The slots are read in ascending order; the
// bfloat16 layouts keep two slots per 32-bit word (slot 2w in the low half, 2w + 1 in the high).
enum class Path { generic, avx2, avx512, dpbf16, amx };

inline int k_of(Path path, int s) {
  switch (path) {
    case Path::amx:
      return s;  // natural order: the instruction takes the pairs (2i, 2i + 1) itself
    case Path::dpbf16: {
      // word w < 8: the even chain's pair (4w, 4w + 2), high half first; w >= 8: the odd chain's.
      const int w = s / 2, high = s % 2;
      const int base = w < 8 ? 4 * w : 4 * (w - 8) + 1;
      return high ? base : base + 2;
    }
    default:
      return s < 16 ? 2 * s : 2 * (s - 16) + 1;  // the even chain's 16 values, then the odd chain's
  }
}

inline bool packs_bf16(Path path) { return path == Path::amx || path == Path::dpbf16; }

// ---------------------------------------------------------------------------------------------
// CPU features.

#ifdef RLK_TILES_X86
inline bool amx_usable() {
  static const bool usable = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    const bool tile = edx & (1u << 24), bf16 = edx & (1u << 22);
    if (!tile || !bf16) return false;
    uint32_t xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;  // XTILECFG and XTILEDATA enabled
#if defined(__linux__)
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

inline bool cpu_has(const char* what) {
  if (std::strcmp(what, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (std::strcmp(what, "avx512") == 0)
    return cpu_has("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (std::strcmp(what, "avx512_bf16") == 0) return cpu_has("avx512") && __builtin_cpu_supports("avx512bf16");
  return false;
}
#endif

// The path a call runs: RLK_CPU_SIMD (generic, avx2, avx512, avx512_bf16, amx) caps it, read on
// every call; unset, the widest the CPU has.  Every path gives the same bits.
inline Path choose_path() {
#ifdef RLK_TILES_X86
  const char* cap = std::getenv("RLK_CPU_SIMD");
  const auto allowed = [cap](const char* level) {
    if (cap == nullptr || std::strcmp(cap, "amx") == 0) return true;
    static const char* const order[] = {"generic", "avx2", "avx512", "avx512_bf16", "amx"};
    int cap_at = 4, level_at = 0;
    for (int i = 0; i < 5; ++i) {
      if (std::strcmp(cap, order[i]) == 0) cap_at = i;
      if (std::strcmp(level, order[i]) == 0) level_at = i;
    }
    return level_at <= cap_at;
  };
  if (allowed("amx") && amx_usable()) return Path::amx;
  if (allowed("avx512_bf16") && cpu_has("avx512_bf16")) return Path::dpbf16;
  if (allowed("avx512") && cpu_has("avx512")) return Path::avx512;
  if (allowed("avx2") && cpu_has("avx2")) return Path::avx2;
#endif
  return Path::generic;
}

// Rows of A per strip and columns of B per panel, per path.
inline int strip_rows(Path path) {
  switch (path) {
    case Path::amx: return 32;
    case Path::avx2: return 3;
    default: return 6;
  }
}
inline int panel_cols(Path path) { return path == Path::avx2 ? 16 : 32; }

// ---------------------------------------------------------------------------------------------
// Packing.  A strip: [chunk][row][32 slots]; a panel of B: [chunk][32 slots / E][col][E] with
// E = 2 (bfloat16 pairs in 32-bit words) or 1 (float32).  Outside A, B or K: zeros.

template <bool TA, bool TB>
void pack_a_strip(const Operands<TA, TB>& x, Path path, int rows, int64_t chunks, int64_t s, void* dst) {
  const bool bf = packs_bf16(path);
  int slot_k[kChunk];
  for (int i = 0; i < kChunk; ++i) slot_k[i] = k_of(path, i);
  for (int64_t ch = 0; ch < chunks; ++ch)
    for (int r = 0; r < rows; ++r) {
      const int64_t m = s * rows + r;
      const int64_t at = (ch * rows + r) * kChunk;
      for (int i = 0; i < kChunk; ++i) {
        const int64_t k = ch * kChunk + slot_k[i];
        const uint16_t v = m < x.M && k < x.K ? x.a_at(m, k) : uint16_t{0};
        if (bf)
          static_cast<uint16_t*>(dst)[at + i] = v;
        else
          static_cast<float*>(dst)[at + i] = bits_to_float(static_cast<uint32_t>(v) << 16);
      }
    }
}

template <bool TA, bool TB>
void pack_b_panel(const Operands<TA, TB>& x, Path path, int cols, int64_t chunks, int64_t q, void* dst) {
  const bool bf = packs_bf16(path);
  const int e = bf ? 2 : 1;
  int slot_k[kChunk];
  for (int i = 0; i < kChunk; ++i) slot_k[i] = k_of(path, i);
  for (int64_t ch = 0; ch < chunks; ++ch)
    for (int c = 0; c < cols; ++c) {
      const int64_t n = q * cols + c;
      for (int i = 0; i < kChunk; ++i) {
        const int64_t k = ch * kChunk + slot_k[i];
        const uint16_t v = n < x.N && k < x.K ? x.b_at(k, n) : uint16_t{0};
        const int64_t at = ch * kChunk * cols + (i / e * cols + c) * e + i % e;
        if (bf)
          static_cast<uint16_t*>(dst)[at] = v;
        else
          static_cast<float*>(dst)[at] = bits_to_float(static_cast<uint32_t>(v) << 16);
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels: `chunks` chunks of one strip (rows x 32 slots per chunk) times one panel, into
// acc[rows][cols] (float32 in memory, which holds it exactly between k-blocks).

// The generic path: the order written out.
inline void micro_generic(const float* a, const float* b, int rows, int cols, int64_t chunks, float* acc) {
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const float* ac = a + ch * rows * kChunk;
    const float* bc = b + ch * kChunk * cols;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        float even = 0.0f, odd = 0.0f;
        for (int i = 0; i < kChainLen; ++i) even = fma_flush(ac[r * kChunk + i], bc[i * cols + c], even);
        for (int i = kChainLen; i < kChunk; ++i) odd = fma_flush(ac[r * kChunk + i], bc[i * cols + c], odd);
        acc[r * cols + c] = add_flush(acc[r * cols + c], add_flush(even, odd));
      }
  }
}

#ifdef RLK_TILES_X86
#define RLK_TILES_AVX2 __attribute__((target("avx2,fma")))
#define RLK_TILES_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define RLK_TILES_DPBF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define RLK_TILES_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx2,fma")))

// The fma paths (MXCSR's DAZ and FTZ set by the caller): kRows rows x 2 vectors of columns.
template <int kRows>
RLK_TILES_AVX512 inline void micro_avx512(const float* a, const float* b, int64_t chunks, float* acc) {
  constexpr int kCols = 32;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const float* ac = a + ch * kRows * kChunk;
    const float* bc = b + ch * kChunk * kCols;
    __m512 even[kRows][2], odd[kRows][2];
    for (int r = 0; r < kRows; ++r) even[r][0] = even[r][1] = odd[r][0] = odd[r][1] = _mm512_setzero_ps();
    for (int i = 0; i < kChainLen; ++i) {
      const __m512 b0 = _mm512_loadu_ps(bc + i * kCols), b1 = _mm512_loadu_ps(bc + i * kCols + 16);
      for (int r = 0; r < kRows; ++r) {
        const __m512 av = _mm512_set1_ps(ac[r * kChunk + i]);
        even[r][0] = _mm512_fmadd_ps(av, b0, even[r][0]);
        even[r][1] = _mm512_fmadd_ps(av, b1, even[r][1]);
      }
    }
    for (int i = kChainLen; i < kChunk; ++i) {
      const __m512 b0 = _mm512_loadu_ps(bc + i * kCols), b1 = _mm512_loadu_ps(bc + i * kCols + 16);
      for (int r = 0; r < kRows; ++r) {
        const __m512 av = _mm512_set1_ps(ac[r * kChunk + i]);
        odd[r][0] = _mm512_fmadd_ps(av, b0, odd[r][0]);
        odd[r][1] = _mm512_fmadd_ps(av, b1, odd[r][1]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < 2; ++h) {
        float* p = acc + r * kCols + 16 * h;
        _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), _mm512_add_ps(even[r][h], odd[r][h])));
      }
  }
}

template <int kRows>
RLK_TILES_AVX2 inline void micro_avx2(const float* a, const float* b, int64_t chunks, float* acc) {
  constexpr int kCols = 16;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const float* ac = a + ch * kRows * kChunk;
    const float* bc = b + ch * kChunk * kCols;
    __m256 even[kRows][2], odd[kRows][2];
    for (int r = 0; r < kRows; ++r) even[r][0] = even[r][1] = odd[r][0] = odd[r][1] = _mm256_setzero_ps();
    for (int i = 0; i < kChainLen; ++i) {
      const __m256 b0 = _mm256_loadu_ps(bc + i * kCols), b1 = _mm256_loadu_ps(bc + i * kCols + 8);
      for (int r = 0; r < kRows; ++r) {
        const __m256 av = _mm256_broadcast_ss(ac + r * kChunk + i);
        even[r][0] = _mm256_fmadd_ps(av, b0, even[r][0]);
        even[r][1] = _mm256_fmadd_ps(av, b1, even[r][1]);
      }
    }
    for (int i = kChainLen; i < kChunk; ++i) {
      const __m256 b0 = _mm256_loadu_ps(bc + i * kCols), b1 = _mm256_loadu_ps(bc + i * kCols + 8);
      for (int r = 0; r < kRows; ++r) {
        const __m256 av = _mm256_broadcast_ss(ac + r * kChunk + i);
        odd[r][0] = _mm256_fmadd_ps(av, b0, odd[r][0]);
        odd[r][1] = _mm256_fmadd_ps(av, b1, odd[r][1]);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < 2; ++h) {
        float* p = acc + r * kCols + 8 * h;
        _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), _mm256_add_ps(even[r][h], odd[r][h])));
      }
  }
}

// VDPBF16PS: per 32-bit word, the high (odd) element's product first, then the low one's, each
// fused, inputs read and results flushed as the order says, whatever MXCSR holds.  Words 0..7 of a
// chunk are the even chain, 8..15 the odd one (see k_of).  The adds take MXCSR's FTZ.
template <int kRows>
RLK_TILES_DPBF16 inline void micro_dpbf16(const uint16_t* a, const uint16_t* b, int64_t chunks, float* acc) {
  constexpr int kCols = 32;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const uint16_t* ac = a + ch * kRows * kChunk;
    const uint16_t* bc = b + ch * kChunk * kCols;
    __m512 even[kRows][2], odd[kRows][2];
    for (int r = 0; r < kRows; ++r) even[r][0] = even[r][1] = odd[r][0] = odd[r][1] = _mm512_setzero_ps();
    for (int w = 0; w < 8; ++w) {
      const __m512i b0 = _mm512_loadu_si512(bc + 2 * w * kCols), b1 = _mm512_loadu_si512(bc + 2 * w * kCols + 32);
      for (int r = 0; r < kRows; ++r) {
        uint32_t word;
        std::memcpy(&word, ac + r * kChunk + 2 * w, sizeof word);
        const __m512i av = _mm512_set1_epi32(static_cast<int>(word));
        even[r][0] = _mm512_dpbf16_ps(even[r][0], (__m512bh)av, (__m512bh)b0);
        even[r][1] = _mm512_dpbf16_ps(even[r][1], (__m512bh)av, (__m512bh)b1);
      }
    }
    for (int w = 8; w < 16; ++w) {
      const __m512i b0 = _mm512_loadu_si512(bc + 2 * w * kCols), b1 = _mm512_loadu_si512(bc + 2 * w * kCols + 32);
      for (int r = 0; r < kRows; ++r) {
        uint32_t word;
        std::memcpy(&word, ac + r * kChunk + 2 * w, sizeof word);
        const __m512i av = _mm512_set1_epi32(static_cast<int>(word));
        odd[r][0] = _mm512_dpbf16_ps(odd[r][0], (__m512bh)av, (__m512bh)b0);
        odd[r][1] = _mm512_dpbf16_ps(odd[r][1], (__m512bh)av, (__m512bh)b1);
      }
    }
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < 2; ++h) {
        float* p = acc + r * kCols + 16 * h;
        _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), _mm512_add_ps(even[r][h], odd[r][h])));
      }
  }
}

// AMX: a 32 x 32 block as 2 x 2 C tiles (tmm0..3), A tiles tmm4..5 (16 rows x 32 values),
// B tiles tmm6..7 (16 pairs x 16 columns, each column's pair in one 32-bit word).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

RLK_TILES_AMX inline void load_tile_config() {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

// `chunks` chunks of a 32-row strip ([chunk][32 rows][32 values]) times a 32-column panel
// ([chunk][16 pairs][32 columns][2]) into acc[32][32].
RLK_TILES_AMX inline void micro_amx(const uint16_t* a, const uint16_t* b, int64_t chunks, float* acc) {
  constexpr int kStride = 32 * 4;  // bytes per row of acc, of a strip chunk's rows (64) and of a panel's pairs (128)
  _tile_loadd(0, acc, kStride);
  _tile_loadd(1, acc + 16, kStride);
  _tile_loadd(2, acc + 16 * 32, kStride);
  _tile_loadd(3, acc + 16 * 32 + 16, kStride);
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const uint16_t* ac = a + ch * 32 * kChunk;
    const uint16_t* bc = b + ch * kChunk * 32;
    _tile_loadd(4, ac, 64);
    _tile_loadd(5, ac + 16 * kChunk, 64);
    _tile_loadd(6, bc, 128);
    _tile_loadd(7, bc + 32, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, acc, kStride);
  _tile_stored(1, acc + 16, kStride);
  _tile_stored(2, acc + 16 * 32, kStride);
  _tile_stored(3, acc + 16 * 32 + 16, kStride);
}

RLK_TILES_AMX inline void release_tiles() { _tile_release(); }

// MXCSR with DAZ (bit 6) and FTZ (bit 15) for the fma paths' float32 operations, restored after.
class FlushToZero {
 public:
  FlushToZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~FlushToZero() { _mm_setcsr(saved_); }
  FlushToZero(const FlushToZero&) = delete;
  FlushToZero& operator=(const FlushToZero&) = delete;

 private:
  unsigned saved_;
};
#endif

// ---------------------------------------------------------------------------------------------
// The GEMM.  store(m, n, value) receives each output's float32 value (bias included) once;
// parallel(count, body) calls body(i) for i in [0, count), on any threads, in any order.

template <bool kTransA, bool kTransB, typename Store, typename Parallel>
void gemm(const uint16_t* a, const uint16_t* b, const uint16_t* bias, int64_t M, int64_t K, int64_t N, Path path,
          const Store& store, const Parallel& parallel) {
  const Operands<kTransA, kTransB> x{a, b, M, K, N};
  const int rows = strip_rows(path), cols = panel_cols(path);
  const int64_t chunks = (K + kChunk - 1) / kChunk;
  const int64_t strips = (M + rows - 1) / rows, panels = (N + cols - 1) / cols;
  const size_t elem = packs_bf16(path) ? 2 : 4;
  const int64_t strip_elems = chunks * rows * kChunk, panel_elems = chunks * kChunk * cols;
  std::unique_ptr<unsigned char[]> a_packed(new unsigned char[static_cast<size_t>(strips * strip_elems) * elem + 64]);
  std::unique_ptr<unsigned char[]> b_packed(new unsigned char[static_cast<size_t>(panels * panel_elems) * elem + 64]);
  unsigned char* const a_base = a_packed.get();
  unsigned char* const b_base = b_packed.get();
  parallel(strips + panels, [&](int64_t i) {
    if (i < panels)
      pack_b_panel(x, path, cols, chunks, i, b_base + static_cast<size_t>(i * panel_elems) * elem);
    else
      pack_a_strip(x, path, rows, chunks, i - panels, a_base + static_cast<size_t>((i - panels) * strip_elems) * elem);
  });

  // A work item: a group of strips times a group of panels, K in blocks of kDepthChunks chunks
  // (every strip and panel of the item through one block before the next); each output's chunks
  // still arrive in ascending order into its one accumulator.
  const int64_t strips_per_item = std::max<int64_t>(1, 96 / rows), panels_per_item = std::max<int64_t>(1, 128 / cols);
  const int64_t strip_items = (strips + strips_per_item - 1) / strips_per_item;
  const int64_t panel_items = (panels + panels_per_item - 1) / panels_per_item;
  float bias_value[1] = {0.0f};
  (void)bias_value;
  parallel(strip_items * panel_items, [&](int64_t item) {
    const int64_t s0 = item / panel_items * strips_per_item, q0 = item % panel_items * panels_per_item;
    const int64_t ns = std::min(strips_per_item, strips - s0), nq = std::min(panels_per_item, panels - q0);
    const int64_t tile = static_cast<int64_t>(rows) * cols;
    std::unique_ptr<float[]> acc(new float[static_cast<size_t>(ns * nq * tile)]());
#ifdef RLK_TILES_X86
    if (path == Path::amx) load_tile_config();
#endif
    for (int64_t c0 = 0; c0 < chunks || c0 == 0; c0 += kDepthChunks) {
      const int64_t depth = std::min(kDepthChunks, chunks - c0);
      if (depth <= 0) break;
      for (int64_t q = q0; q < q0 + nq; ++q)
        for (int64_t s = s0; s < s0 + ns; ++s) {
          float* t = acc.get() + ((q - q0) * ns + (s - s0)) * tile;
          const unsigned char* ap = a_base + static_cast<size_t>(s * strip_elems + c0 * rows * kChunk) * elem;
          const unsigned char* bp = b_base + static_cast<size_t>(q * panel_elems + c0 * kChunk * cols) * elem;
          switch (path) {
#ifdef RLK_TILES_X86
            case Path::amx:
              micro_amx(reinterpret_cast<const uint16_t*>(ap), reinterpret_cast<const uint16_t*>(bp), depth, t);
              break;
            case Path::dpbf16:
              micro_dpbf16<6>(reinterpret_cast<const uint16_t*>(ap), reinterpret_cast<const uint16_t*>(bp), depth, t);
              break;
            case Path::avx512:
              micro_avx512<6>(reinterpret_cast<const float*>(ap), reinterpret_cast<const float*>(bp), depth, t);
              break;
            case Path::avx2:
              micro_avx2<3>(reinterpret_cast<const float*>(ap), reinterpret_cast<const float*>(bp), depth, t);
              break;
#endif
            default:
              micro_generic(reinterpret_cast<const float*>(ap), reinterpret_cast<const float*>(bp), rows, cols, depth, t);
          }
        }
    }
#ifdef RLK_TILES_X86
    if (path == Path::amx) release_tiles();
#endif
    for (int64_t q = q0; q < q0 + nq; ++q)
      for (int64_t s = s0; s < s0 + ns; ++s) {
        const float* t = acc.get() + ((q - q0) * ns + (s - s0)) * tile;
        for (int r = 0; r < rows; ++r) {
          const int64_t m = s * rows + r;
          if (m >= M) break;
          for (int c = 0; c < cols; ++c) {
            const int64_t n = q * cols + c;
            if (n >= N) break;
            const float v = t[r * cols + c];
            store(m, n, bias != nullptr ? add_flush(v, bf16_value(bias[n])) : v);
          }
        }
      }
  });
}

// Runs gemm on the path RLK_CPU_SIMD and the CPU allow, with MXCSR's DAZ and FTZ set for the
// vector paths (parallel must run its bodies in the caller's floating-point environment).
template <bool kTransA, bool kTransB, typename Store, typename Parallel>
void run(const uint16_t* a, const uint16_t* b, const uint16_t* bias, int64_t M, int64_t K, int64_t N, const Store& store,
         const Parallel& parallel) {
  const Path path = choose_path();
#ifdef RLK_TILES_X86
  if (path != Path::generic) {
    const FlushToZero ftz;
    gemm<kTransA, kTransB>(a, b, bias, M, K, N, path, store, parallel);
    return;
  }
#endif
  gemm<kTransA, kTransB>(a, b, bias, M, K, N, path, store, parallel);
}

}  // namespace bf16_tiles
}  // namespace rlk
