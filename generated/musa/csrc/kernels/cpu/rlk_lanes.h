// Copied from runtime/kernels/rlk_lanes.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
#pragma once
// Vector lanes for every platform's kernels: one type per instruction set, each with the
// same few IEEE operations, so that a kernel written once over a lanes type computes the same
// bits on every instruction set and only the speed differs.
//
//   GenericLanes   4 lanes, plain C++ (any CPU, and the RLK_CPU_SIMD=generic copy)
//   Avx2Lanes      8 lanes, AVX2 with FMA
//   Avx512Lanes    16 lanes, AVX-512 (F)
//
// Each lane is one float32; an operation acts on every lane alone, lanes never mix (no
// horizontal sums), so a vector only holds different elements side by side.  add and mul
// round once each and never fuse (the build's -ffp-contract=off and separate operations);
// fma rounds once for the product and the sum together: an fma instruction on AVX2 and
// AVX-512, the C library's fmaf on the generic copy, which is correctly rounded too (IEEE 754
// fusedMultiplyAdd; in software where the CPU has no fma instruction), so every copy gives
// the same bits.  round_bf16 rounds each lane to the nearest bfloat16 (ties to even, every NaN
// the canonical one), held in a float: rlk_numerics.h's float_to_bf16_bits, in integer
// operations on every copy, never an instruction that flushes subnormals.  Two operations work
// across lanes: sum_halves, whose additions are named one by one, and max_lane.  max and
// max_lane give a maximum's value, which is exact; only which NaN or which signed zero they
// return may differ between copies, so a caller tests NaN itself and uses the maximum where a
// zero's sign cannot reach an output.
//
// The AVX copies' member functions carry their instruction set as a target attribute; they are
// inlined into code compiled for that instruction set (rlk_parallel.h's run_piece copies, or a
// kernel's own target functions marked flatten), never called from the generic copy.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "rlk_numerics.h"
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define RLK_HOST_X86_LANES 1
#endif

#if RLK_DEVICE_CODE
#error "rlk_lanes.h holds the host's vector lanes; device kernels use their own threads"
#endif

// The platform's namespace, rlk::cpu on the host (rlk_numerics.h names it).
namespace rlk {
namespace RLK_TARGET_NAMESPACE {

// Vectors go in and out by reference: passing one by value to or from code compiled without
// its instruction set would change the ABI, which GCC warns about even where it is inlined.
struct GenericLanes {
  static constexpr int kWidth = 4;
  struct V {
    float lane[kWidth];
  };
  static void zero(V& v) {
    for (int i = 0; i < kWidth; ++i) v.lane[i] = 0.0f;
  }
  static void load(V& v, const float* p) { std::memcpy(v.lane, p, sizeof v.lane); }
  static void store(float* p, const V& v) { std::memcpy(p, v.lane, sizeof v.lane); }
  // kWidth values of a float32 or bfloat16 row as float32 (a bfloat16 widens exactly).
  static void load_widened(V& v, const float* p) { load(v, p); }
  static void load_widened(V& v, const bfloat16_t* p) {
    for (int i = 0; i < kWidth; ++i) v.lane[i] = bf16_bits_to_float(storage_bits(p[i]));
  }
  static void broadcast(V& v, float x) {
    for (int i = 0; i < kWidth; ++i) v.lane[i] = x;
  }
  // acc = a * b + acc, one rounding per lane.
  static void fma(V& acc, const V& a, const V& b) {
    for (int i = 0; i < kWidth; ++i) acc.lane[i] = std::fma(a.lane[i], b.lane[i], acc.lane[i]);
  }
  // acc = acc + (a * b), the product rounded, then the sum.
  static void mul_add(V& acc, const V& a, const V& b) {
    for (int i = 0; i < kWidth; ++i) {
      const float product = a.lane[i] * b.lane[i];
      acc.lane[i] = acc.lane[i] + product;
    }
  }
  // acc = acc + b, one rounding per lane.
  static void add(V& acc, const V& b) {
    for (int i = 0; i < kWidth; ++i) acc.lane[i] = acc.lane[i] + b.lane[i];
  }
  static void round_bf16(V& v) {
    for (int i = 0; i < kWidth; ++i) v.lane[i] = bf16_bits_to_float(float_to_bf16_bits(v.lane[i]));
  }
  // best = x where x > best, lane by lane; and the largest lane.  For the values, not the bits:
  // with a NaN, or zeros of both signs, which one comes back is unspecified.
  static void max(V& best, const V& x) {
    for (int i = 0; i < kWidth; ++i) best.lane[i] = x.lane[i] > best.lane[i] ? x.lane[i] : best.lane[i];
  }
  static float max_lane(const V& v) {
    float best = v.lane[0];
    for (int i = 1; i < kWidth; ++i) best = v.lane[i] > best ? v.lane[i] : best;
    return best;
  }
  // The lanes summed by halves: lane l + lane l + kWidth / 2 for each l of the lower half, then
  // again, down to lane 0 + lane 1 (rlk_reduce.h's lanes tree's last levels), a rounding each.
  static float sum_halves(const V& v) {
    float lane[kWidth];
    for (int i = 0; i < kWidth; ++i) lane[i] = v.lane[i];
    for (int half = kWidth / 2; half > 0; half /= 2)
      for (int i = 0; i < half; ++i) lane[i] = lane[i] + lane[i + half];
    return lane[0];
  }
};

#ifdef RLK_HOST_X86_LANES
#define RLK_LANES_AVX2 __attribute__((target("avx2,fma")))
#define RLK_LANES_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
// AVX-512 with the bfloat16 dot-product instruction (vdpbf16ps), for det_gemm's bfloat16 path.
#define RLK_LANES_AVX512_BF16 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,fma")))

struct Avx2Lanes {
  static constexpr int kWidth = 8;
  using V = __m256;
  RLK_LANES_AVX2 static void zero(V& v) { v = _mm256_setzero_ps(); }
  RLK_LANES_AVX2 static void load(V& v, const float* p) { v = _mm256_loadu_ps(p); }
  RLK_LANES_AVX2 static void store(float* p, const V& v) { _mm256_storeu_ps(p, v); }
  RLK_LANES_AVX2 static void load_widened(V& v, const float* p) { load(v, p); }
  RLK_LANES_AVX2 static void load_widened(V& v, const bfloat16_t* p) {
    v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  RLK_LANES_AVX2 static void broadcast(V& v, float x) { v = _mm256_set1_ps(x); }
  RLK_LANES_AVX2 static void fma(V& acc, const V& a, const V& b) { acc = _mm256_fmadd_ps(a, b, acc); }
  RLK_LANES_AVX2 static void mul_add(V& acc, const V& a, const V& b) { acc = _mm256_add_ps(acc, _mm256_mul_ps(a, b)); }
  RLK_LANES_AVX2 static void add(V& acc, const V& b) { acc = _mm256_add_ps(acc, b); }
  // float_to_bf16_bits on each lane: u + 0x7fff + (bit 16 of u), its low half cleared; NaN lanes canonical.
  RLK_LANES_AVX2 static void round_bf16(V& v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
    const __m256 rounded = _mm256_castsi256_ps(_mm256_and_si256(sum, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kCanonicalNan)));
    v = _mm256_blendv_ps(rounded, nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  RLK_LANES_AVX2 static void max(V& best, const V& x) { best = _mm256_max_ps(x, best); }
  // Halves folded onto each other: 8, 4, 2, then 1 lane.
  RLK_LANES_AVX2 static float max_lane(const V& v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
  RLK_LANES_AVX2 static float sum_halves(const V& v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
};

struct Avx512Lanes {
  static constexpr int kWidth = 16;
  using V = __m512;
  RLK_LANES_AVX512 static void zero(V& v) { v = _mm512_setzero_ps(); }
  RLK_LANES_AVX512 static void load(V& v, const float* p) { v = _mm512_loadu_ps(p); }
  RLK_LANES_AVX512 static void store(float* p, const V& v) { _mm512_storeu_ps(p, v); }
  RLK_LANES_AVX512 static void load_widened(V& v, const float* p) { load(v, p); }
  RLK_LANES_AVX512 static void load_widened(V& v, const bfloat16_t* p) {
    v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
  }
  RLK_LANES_AVX512 static void broadcast(V& v, float x) { v = _mm512_set1_ps(x); }
  RLK_LANES_AVX512 static void fma(V& acc, const V& a, const V& b) { acc = _mm512_fmadd_ps(a, b, acc); }
  RLK_LANES_AVX512 static void mul_add(V& acc, const V& a, const V& b) { acc = _mm512_add_ps(acc, _mm512_mul_ps(a, b)); }
  RLK_LANES_AVX512 static void add(V& acc, const V& b) { acc = _mm512_add_ps(acc, b); }
  // As Avx2Lanes::round_bf16 in five instructions: bit 16 and the lanes that are not NaN as masks,
  // the low half cleared where not NaN and the canonical NaN written where NaN by one masked and.
  RLK_LANES_AVX512 static void round_bf16(V& v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    const __m512i half = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
    const __m512i sum = _mm512_mask_add_epi32(half, odd, half, _mm512_set1_epi32(1));
    const __mmask16 number = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    v = _mm512_castsi512_ps(
        _mm512_mask_and_epi32(_mm512_set1_epi32(static_cast<int>(kCanonicalNan)), number, sum, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  RLK_LANES_AVX512 static void max(V& best, const V& x) { best = _mm512_max_ps(x, best); }
  RLK_LANES_AVX512 static float max_lane(const V& v) {
    __m256 x = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 y = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    y = _mm_max_ps(y, _mm_movehl_ps(y, y));
    y = _mm_max_ss(y, _mm_movehdup_ps(y));
    return _mm_cvtss_f32(y);
  }
  RLK_LANES_AVX512 static float sum_halves(const V& v) {
    __m256 x = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 y = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    y = _mm_add_ps(y, _mm_movehl_ps(y, y));
    y = _mm_add_ss(y, _mm_movehdup_ps(y));
    return _mm_cvtss_f32(y);
  }
};

// ---------------------------------------------------------------- bfloat16 pairs
// On CPUs with AVX512-BF16, vdpbf16ps adds two products to each float32 lane, each addition an
// fma rounded to nearest even (Intel's definition), the pair's high half first.  With k in a
// pair's high half and k + 1 in its low half, one instruction is then the fma step's
// acc = fma(a_k, b_k, acc), acc = fma(a_k+1, b_k+1, acc) -- at twice its rate, a bfloat16
// product being exact in float32 either way.  The instruction also reads subnormal inputs as
// zero and flushes subnormal results to zero, which the fma step does not; so kernels use it
// only on operands where neither can happen (bf16_pairs_exact): every value finite, and the
// smallest nonzero magnitudes of the two operands at least 2^ea and 2^eb with ea + eb >= -112.
// Every product, and so every partial sum, is then a multiple of 2^(ea + eb - 14) >= 2^-126
// (a bfloat16 has 8 significant bits): no subnormal ever arises, and the bits are the fma
// step's (tests/test_cpu_det_gemm_order.py compares them, and the fallback past that bound).
// A sum over an odd count ends with a pair whose low half is -0 x +0: adding -0 changes no
// accumulator, not even a zero's sign.

// A pair word, stored in a float's place: bfloat16 bits `high` in its high half, `low` in its low.
inline float bf16_pair_word(uint16_t high, uint16_t low) { return bits_float(static_cast<uint32_t>(high) << 16 | low); }

// The exponent fields of n bfloat16 values: the largest, and the smallest of the nonzero ones.
struct Bf16ExponentRange {
  uint32_t smallest_nonzero = 0xffu, largest = 0;
};

RLK_LANES_AVX512 __attribute__((flatten)) inline Bf16ExponentRange bf16_exponent_range(const bfloat16_t* x, int64_t n) {
  uint32_t smallest = 0xffu, largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t magnitude = storage_bits(x[i]) & 0x7fffu;
    const uint32_t e = magnitude >> 7;
    const uint32_t key = magnitude == 0 ? 0xffu : e;
    largest = e > largest ? e : largest;
    smallest = key < smallest ? key : smallest;
  }
  return {smallest, largest};
}

// Packing sixteen words at a time.  These functions only move bits: a float32 operand's words
// are its values, and pair words are the ones bf16_pair_word(high, low) makes, so a packed
// operand is the same whichever code packs it.
//
// transpose_words_16x16: dst[t * stride + r] = word w0 + t of rows[r], for t in [0, 16) and the
// rows r whose bit is set in `lanes` (a null row gives zeros); nothing else in dst is written, so
// rows may be fewer than the stride, or the stride shorter than 16.  A row's words are (kSource):
//   words               its 32-bit values as stored (float32 rows); each row holds [0, w0 + 16)
//   bf16_pairs_swapped  its 32-bit words with their halves swapped (pack_pair_words_16x16)
//   bf16_widened        its bfloat16 values, each widened to the float32 of the same value
//                       (the bits shifted into the high half: exact); each row holds [0, w0 + 16)
// A 16 x 16 transpose: 32-bit, 64-bit and 128-bit interleaves in turn.
//
// pack_pair_words_16x16: rows whose pairs of k lie side by side in memory (x[2j], x[2j + 1]):
// pair word j of a row is the row's 32-bit word j with its halves swapped (memory holds the low
// address in the low half); j0 counts pairs, and each row must hold 2 * j0 + 32 values.
//
// pack_bf16_as_float_16x16: bfloat16 rows, sixteen values of each from k0, as float32 columns.
//
// GCC 12's AVX-512 integer intrinsics pass an "undefined" vector it then reports as
// uninitialised wherever they are inlined (GCC bug 105593, fixed in GCC 13): quieted here only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
enum class WordSource { words, bf16_pairs_swapped, bf16_widened };

template <WordSource kSource, typename E>
RLK_LANES_AVX512 inline void transpose_words_16x16(const E* const* rows, __mmask16 lanes, int64_t w0, float* dst, int64_t stride) {
  static_assert(sizeof(E) == (kSource == WordSource::words ? 4 : 2), "float32 words, or bfloat16 values");
  __m512i r[16], a[16], b[16];
  for (int i = 0; i < 16; ++i) {
    if ((lanes >> i & 1) == 0 || rows[i] == nullptr) {
      r[i] = _mm512_setzero_si512();
    } else if constexpr (kSource == WordSource::bf16_widened) {
      r[i] = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + w0))), 16);
    } else {
      r[i] = _mm512_loadu_si512(rows[i] + (4 / sizeof(E)) * w0);
      if constexpr (kSource == WordSource::bf16_pairs_swapped) r[i] = _mm512_rol_epi32(r[i], 16);
    }
  }
  for (int i = 0; i < 8; ++i) {  // a[2i], a[2i + 1]: rows 2i and 2i + 1 interleaved word by word
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // b[4i + c], 128-bit lane L: word 4L + c of rows 4i .. 4i + 3
    b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // word 4L + c of all sixteen rows: lane L of b[c], b[4 + c], ...
    const __m512i x0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44), x1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44), y1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xee);
    _mm512_mask_storeu_epi32(dst + c * stride, lanes, _mm512_shuffle_i32x4(x0, y0, 0x88));
    _mm512_mask_storeu_epi32(dst + (4 + c) * stride, lanes, _mm512_shuffle_i32x4(x0, y0, 0xdd));
    _mm512_mask_storeu_epi32(dst + (8 + c) * stride, lanes, _mm512_shuffle_i32x4(x1, y1, 0x88));
    _mm512_mask_storeu_epi32(dst + (12 + c) * stride, lanes, _mm512_shuffle_i32x4(x1, y1, 0xdd));
  }
}

RLK_LANES_AVX512 inline void pack_pair_words_16x16(const bfloat16_t* const* rows, __mmask16 lanes, int64_t j0, float* dst, int64_t stride) {
  transpose_words_16x16<WordSource::bf16_pairs_swapped>(rows, lanes, j0, dst, stride);
}

RLK_LANES_AVX512 inline void pack_bf16_as_float_16x16(const bfloat16_t* const* rows, __mmask16 lanes, int64_t k0, float* dst, int64_t stride) {
  transpose_words_16x16<WordSource::bf16_widened>(rows, lanes, k0, dst, stride);
}

// widen_row: count values of one row (float32 or bfloat16, side by side in memory) as float32 at
// dst, sixteen at a time: a bfloat16 widens exactly (its bits shifted into the high half).
template <typename T>
RLK_LANES_AVX512 inline void widen_row(const T* src, int64_t count, float* dst) {
  static_assert(std::is_same<T, float>::value || std::is_same<T, bfloat16_t>::value, "float32 or bfloat16 rows");
  int64_t i = 0;
  if constexpr (std::is_same<T, float>::value) {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
    return;
  } else {
    for (; i + 16 <= count; i += 16)
      _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))), 16));
    for (; i < count; ++i) dst[i] = bf16_bits_to_float(storage_bits(src[i]));
  }
}

// Columns whose pairs of k lie in two rows (high: k, low: k + 1), sixteen columns side by side:
// dst[jj] = bf16_pair_word(high[jj], low[jj]) for jj in [0, 16).
RLK_LANES_AVX512 inline void pack_pair_words_of_rows16(const bfloat16_t* high, const bfloat16_t* low, float* dst) {
  const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(high)));
  const __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(low)));
  _mm512_storeu_si512(dst, _mm512_or_si512(_mm512_slli_epi32(h, 16), l));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Whether vdpbf16ps, two values of k per instruction, runs bfloat16 products faster than the fma
// path's one per instruction on this CPU: some issue it at the fma's rate, which doubles the
// speed, others at a quarter of it, which halves it.  Measured once per process (about a tenth
// of a millisecond): twelve independent chains, as in a register tile, of n dot products against
// 2n fmas, the best of three tries of each.  Only the speed depends on the answer: both paths
// give the same bits.
template <bool kPairs>
RLK_LANES_AVX512_BF16 __attribute__((noinline)) inline double chain_seconds(int64_t steps) {
  __m512 acc[12];
  __m512 x = _mm512_set1_ps(1.0f);
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_setzero_ps();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      if constexpr (kPairs)
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)x, (__m512bh)x);
      else
        acc[i] = _mm512_fmadd_ps(x, x, acc[i]);
    }
    __asm__ volatile("" : "+v"(x));  // a value the compiler cannot see through: every step runs
  }
  const auto stop = std::chrono::steady_clock::now();
  volatile float sink = 0.0f;
  for (int i = 0; i < 12; ++i) sink = sink + _mm512_reduce_add_ps(acc[i]);
  return std::chrono::duration<double>(stop - start).count();
}

inline bool bf16_pairs_faster() {
  constexpr int64_t kSteps = 2048;
  double pairs = 1e30, fmas = 1e30;
  for (int attempt = 0; attempt < 3; ++attempt) {
    pairs = std::min(pairs, chain_seconds<true>(kSteps));
    fmas = std::min(fmas, chain_seconds<false>(2 * kSteps));
  }
  return pairs < fmas;
}

// Whether vdpbf16ps gives the fma step's bits on every product of a value of `a` and one of
// `b`: no infinity or NaN (exponent field 0xff), no subnormal (a nonzero value with exponent
// field 0), and biased exponents ea + eb >= 2 * 127 - 112.  Call only where AVX-512 runs.
inline bool bf16_pairs_exact(const bfloat16_t* a, int64_t a_count, const bfloat16_t* b, int64_t b_count) {
  const Bf16ExponentRange ra = bf16_exponent_range(a, a_count), rb = bf16_exponent_range(b, b_count);
  return ra.largest < 0xffu && rb.largest < 0xffu && ra.smallest_nonzero >= 1 && rb.smallest_nonzero >= 1 &&
         ra.smallest_nonzero + rb.smallest_nonzero >= 2 * 127 - 112;
}
#endif

}  // namespace RLK_TARGET_NAMESPACE
}  // namespace rlk
