// Copied from runtime/kernels/rlk_math.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
#pragma once
// Portable float32 math for every platform, built from +, x, correctly rounded fma,
// comparisons, bit operations and (in the sigmoid) IEEE division only, so every platform
// returns the same bits.
//
// Why these results are the same everywhere:
//   * Every operation used is exactly specified by IEEE 754 (one rounding to nearest even):
//     float +, x, fma (fmaf is correctly rounded by C99/IEEE 754 on hosts and devices alike), /,
//     integer and bit operations, and comparisons. No library transcendental or vendor
//     intrinsic is called. Each function evaluates its steps in one fixed order.
//   * This requires the build flags every generated package uses: FP contraction off (so a*b+c
//     is never silently fused; rlk_numerics.h, included below, also turns it off in the source
//     for clang-based compilers), no fast-math options (which may reassociate, approximate or
//     flush), and subnormals kept (no flush-to-zero), on the host and on the device.
//   * div_rn is IEEE division and depends, in addition, on the device compiler's default of
//     correctly rounded float32 division (the fast-math options above turn it off).  Of the
//     other functions here, only sigmoid_f32 divides (through div_rn); none calls a library
//     square root.
//   * NaN results have fixed bits: a NaN input comes back with its quiet bit set (sign and payload
//     kept); an invalid operation (log of a negative number, ...) returns 0x7fc00000. Hardware
//     differs in the NaN it would produce, so no NaN here comes from arithmetic.
//
// Accuracy: error in float32 ulps at the exact result (subnormal spacing below 2^-126), against
// the C library in double precision. Bound asserted by tests/test_portable_math.py (MAX_ULP there
// is kept equal to these), then the largest error measured over every input of the range shown:
//   exp_f32      < 1 ulp   0.758   2^-26 <= |x| <= 104 (outside it the result is 1, 0 or inf)
//   expm1_f32    < 1 ulp   0.866   2^-24 <= |x| <= 88
//   log_f32      < 1 ulp   0.792   every positive finite x
//   log1p_f32    < 1 ulp   0.792   2^-30 <= x < inf and -1 < x <= -2^-30
//   sigmoid_f32  < 1 ulp   0.601   2^-26 <= |x| <= 80 (beyond: 1, or e^x with exp's error)
//   tanh_f32     < 1 ulp   0.767   2^-12 <= |x| <= 10 (outside it: x or +-1)
//   sqrt_f32     correctly rounded  every x in [1, 4) and every subnormal (the rest scales exactly)
//   rsqrt_f32    < 1 ulp   0.501   likewise
//   sin_f32      < 1 ulp   0.745   every finite x (reduction by pi/2 exact for all of them)
//   cos_f32      < 1 ulp   0.751   likewise
// Each function is faithful, and correctly rounded for all but 0.01% (rsqrt) to 2% (expm1) of inputs.

#include <math.h>  // fmaf only

#include "rlk_numerics.h"

// The platform's namespace, rlk::cpu on the host (rlk_numerics.h names it).
namespace rlk {
namespace RLK_TARGET_NAMESPACE {

// ---------------------------------------------------------------- basic operations
// a*b + c with one rounding. fmaf is correctly rounded by definition (C99 7.12.13.1, IEEE 754
// fusedMultiplyAdd) on every host and device compiler; on a host without an fma instruction the
// C library computes it exactly in software, so the bits do not change.
RLK_HD float fma_rn(float a, float b, float c) { return ::fmaf(a, b, c); }

// a / b, correctly rounded: IEEE division. Device compilers divide float32 with correct
// rounding unless fast-math style options are given, which the generated builds never pass.
RLK_HD float div_rn(float a, float b) { return a / b; }

namespace math_detail {

// An unevaluated sum hi + lo, |lo| small against |hi|: about 48 bits of a value.
struct f32x2 {
  float hi;
  float lo;
};

// hi + lo == a + b exactly, hi = a + b rounded (Knuth's TwoSum; any a, b that do not overflow).
RLK_HD f32x2 two_sum(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  const float aa = s - bb;
  return {s, (a - aa) + (b - bb)};
}

// hi + lo == a + b exactly, hi = a + b rounded; needs |a| >= |b| or a == 0 (Dekker's Fast2Sum).
RLK_HD f32x2 fast_two_sum(float a, float b) {
  const float s = a + b;
  return {s, b - (s - a)};
}

// 2^n, exactly, for -126 <= n <= 127 (a normal float built from its exponent field).
RLK_HD float pow2i(int n) { return bits_float(static_cast<uint32_t>(n + 127) << 23); }

RLK_HD bool is_nan(float x) { return (float_bits(x) & 0x7fffffffu) > 0x7f800000u; }

// The input NaN, made quiet; sign and payload kept. A bit operation, so no platform's NaN rules apply.
RLK_HD float quiet(float x) { return bits_float(float_bits(x) | 0x00400000u); }

// The NaN returned for an invalid operation.
RLK_HD float invalid() { return bits_float(0x7fc00000u); }

RLK_HD float infinity() { return bits_float(0x7f800000u); }

// a if c else b, on bit patterns and without a branch.
RLK_HD uint32_t pick_bits(bool c, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(c);
  return (a & mask) | (b & ~mask);
}

RLK_HD float with_sign_of(float magnitude, float sign) {
  return bits_float((float_bits(magnitude) & 0x7fffffffu) | (float_bits(sign) & 0x80000000u));
}

// 1/d for a positive normal d below 2^125, to about 1 ulp; callers that need more refine with an
// exact residual. The start is the classic bit-pattern estimate (subtracting the bits from a
// constant negates the exponent and roughly inverts the mantissa): its relative error is below
// 0.051 over a whole binade (measured over all mantissas), and three Newton steps
// y <- y + y(1 - d y) square it each time: 0.051 -> 2.6e-3 -> 6.5e-6 -> 4.2e-11, below rounding.
RLK_HD float rcp(float d) {
  float y = bits_float(0x7ef311c3u - float_bits(d));
  for (int i = 0; i < 3; ++i) y = fma_rn(y, fma_rn(-d, y, 1.0f), y);
  return y;
}

// ---------------------------------------------------------------- e^x, core
// For -104 <= x <= 88.73: e^x = 2^n * (hi + lo), hi = e^r rounded (0.70 < hi < 1.42), |lo| <= ulp(hi)/2.
struct exp_parts {
  int n;
  float hi;
  float lo;
};

RLK_HD exp_parts exp_core(float x) {
  // n = nearest integer to x / ln 2. Adding 1.5 * 2^23 inside the fma rounds x*log2(e) to an
  // integer (the sum lies in [2^23, 2^24), where floats are the integers); n's low bits are then
  // the low bits of the sum. log2(e) need not be exact: it only chooses n.
  const float kLog2e = 0x1.715476p+0f;  // 1/ln 2 rounded
  const float kShift = 0x1.8p+23f;
  const float j = fma_rn(x, kLog2e, kShift);
  const int n = static_cast<int>(float_bits(j)) - static_cast<int>(float_bits(kShift));
  const float nf = j - kShift;  // n as a float, exact

  // Cody-Waite: r = x - n ln 2 with ln 2 = kLn2Hi + kLn2Lo (the pair is within 1e-16 of ln 2).
  // r1 = x - n kLn2Hi is exact: fma forms it before its one rounding, and the result is a
  // multiple of 2^-25 (kLn2Hi is, and so is x whenever n != 0) below 1/2 in magnitude, which
  // fits in 24 bits. Then r + r_lo = r1 - n kLn2Lo to about 2^-45.
  const float kLn2Hi = 0x1.62e430p-1f;   // ln 2 rounded to float
  const float kLn2Lo = -0x1.05c610p-29f;  // ln 2 - kLn2Hi, rounded
  const float r1 = fma_rn(-nf, kLn2Hi, x);
  const float r = fma_rn(-nf, kLn2Lo, r1);
  const float r_lo = fma_rn(-nf, kLn2Lo, r1 - r);

  // e^r - 1 - r = r^2 q(r), q the Taylor series 1/2! + r/3! + ... + r^6/8!. |r| <= 0.3466, so
  // the first omitted term, r^9/9!, is below 2e-10 (2^-32): far below half an ulp of e^r.
  float q = 0x1.a01a02p-16f;      // 1/8!
  q = fma_rn(q, r, 0x1.a01a02p-13f);  // 1/7!
  q = fma_rn(q, r, 0x1.6c16c2p-10f);  // 1/6!
  q = fma_rn(q, r, 0x1.111112p-7f);   // 1/5!
  q = fma_rn(q, r, 0x1.555556p-5f);   // 1/4!
  q = fma_rn(q, r, 0x1.555556p-3f);   // 1/3!
  q = fma_rn(q, r, 0.5f);             // 1/2!, exact
  // e^(r + r_lo) = 1 + r + [r_lo (1 + r) + r^2 q] up to r_lo^2: the bracket is below 0.07, so
  // its rounding errors stay far below an ulp of the result.
  const float tail = fma_rn(r * r, q, fma_rn(r_lo, r, r_lo));
  // 1 + r split exactly (|r| < 1, so Fast2Sum applies); the tail joins the low part, and the
  // pair is renormalised (exactly) so that hi is e^r rounded and lo is small against it.
  const f32x2 one_r = fast_two_sum(1.0f, r);
  const f32x2 sum = fast_two_sum(one_r.hi, one_r.lo + tail);
  return {n, sum.hi, sum.lo};
}

// e^x - 1 = hi + lo (to about 2^-40 relative) for -87 <= x <= 88 (-126 <= n <= 127).
RLK_HD f32x2 expm1_parts(float x) {
  const exp_parts e = exp_core(x);
  const float scale = pow2i(e.n);
  // 2^n hi is exact; 2^n hi - 1 is split exactly, then the small terms are added to the low part.
  const f32x2 head = two_sum(e.hi * scale, -1.0f);
  return fast_two_sum(head.hi, head.lo + e.lo * scale);
}

// ---------------------------------------------------------------- log, core
// k ln 2 + log1p(f) + c, for f in [sqrt(1/2) - 1, sqrt(2) - 1], integer |k| <= 150 and a small
// correction c (|c| < 2^-22).
RLK_HD float log_reduced(int k, float f, float c) {
  // log1p(f) = 2 atanh(s) with s = f / (2 + f), |s| <= 0.1716. Written as
  //   log1p(f) = f - f^2/2 + s (f^2/2 + R),  R = 2 s^2/3 + 2 s^4/5 + 2 s^6/7 + 2 s^8/9,
  // the leading terms f and f^2/2 are exact (f^2 is split with an fma) and s only enters a term
  // below 0.02, so s needs no more than the reciprocal's accuracy. The first omitted term,
  // 2 s^11/11, is below 7e-10 (2^-30).
  const float s = f * rcp(2.0f + f);
  const float z = s * s;
  float R = 0x1.c71c72p-3f;         // 2/9
  R = fma_rn(R, z, 0x1.24924ap-2f);  // 2/7
  R = fma_rn(R, z, 0x1.99999ap-2f);  // 2/5
  R = fma_rn(R, z, 0x1.555556p-1f);  // 2/3
  R = R * z;
  const float ff = f * f;
  const float hfsq = 0.5f * ff;                     // f^2/2 = hfsq + hfsq_lo exactly
  const float hfsq_lo = 0.5f * fma_rn(f, f, -ff);

  // ln 2 = kLn2Hi + kLn2Lo: kLn2Hi has 16 significant bits, so k kLn2Hi (|k| <= 2^8) is exact.
  const float kLn2Hi = 0x1.62e4p-1f;      // ln 2 truncated to 16 bits
  const float kLn2Lo = 0x1.7f7d1cp-20f;  // ln 2 - kLn2Hi, rounded; the pair is within 6e-14 of ln 2
  const float kf = static_cast<float>(k);  // exact
  const float tail = fma_rn(s, hfsq + R, fma_rn(kf, kLn2Lo, c - hfsq_lo));
  // k kLn2Hi + f, split exactly (|k kLn2Hi| >= ln 2 / 2 > |f| unless k == 0).
  const f32x2 head = fast_two_sum(kf * kLn2Hi, f);
  return head.hi + (head.lo + (tail - hfsq));
}

// x = m * 4^k with m in [1, 4), for a positive finite x (subnormals included).
RLK_HD float reduce_by_four(float x, int& k) {
  uint32_t u = float_bits(x);
  int e = -127;
  if (u < 0x00800000u) {  // subnormal: scale by 2^24 (exact) first
    u = float_bits(x * 0x1p24f);
    e -= 24;
  }
  e += static_cast<int>(u >> 23);  // unbiased exponent of x
  const int odd = e & 1;           // two's complement: also right for negative e
  k = (e - odd) / 2;               // exact: e - odd is even
  return bits_float((u & 0x007fffffu) | (static_cast<uint32_t>(127 + odd) << 23));
}

// 1/sqrt(m) for m in [1, 4), within about 0.5 ulp.
RLK_HD float rsqrt_reduced(float m) {
  // Bit-pattern start (relative error below 0.035, measured over [1, 4)), then two Newton steps
  // y <- y + y (1 - m y^2) / 2: 0.035 -> 1.8e-3 -> 4.7e-6.
  float y = bits_float(0x5f375a86u - (float_bits(m) >> 1));
  for (int i = 0; i < 2; ++i) y = fma_rn(0.5f * y, fma_rn(-(m * y), y, 1.0f), y);
  // A last step with the residual 1 - m y^2 computed nearly exactly: m y = p + p_lo exactly,
  // then 1 - p y is exact in one fma. The step's own error, 3/8 e^2 with e < 1e-5, is negligible.
  const float p = m * y;
  const float p_lo = fma_rn(m, y, -p);
  const float e = fma_rn(-p_lo, y, fma_rn(-p, y, 1.0f));
  return fma_rn(0.5f * y, e, y);
}

// ---------------------------------------------------------------- sine and cosine, reduction
// Word j of the binary expansion of 2/pi after a word of zeros: floor(2/pi 2^(32 j)) mod 2^32,
// so word 1 holds the bits of weight 2^-1 .. 2^-32. Words 0 to 9 cover every window
// reduce_half_pi reads. A switch rather than an array, so that host and device code share it
// without a device-memory declaration.
RLK_HD uint32_t two_over_pi_word(int j) {
  switch (j) {
    case 1: return 0xA2F9836Eu;
    case 2: return 0x4E441529u;
    case 3: return 0xFC2757D1u;
    case 4: return 0xF534DDC0u;
    case 5: return 0xDB629599u;
    case 6: return 0x3C439041u;
    case 7: return 0xFE5163ABu;
    case 8: return 0xDEBBC561u;
    case 9: return 0xB7246E3Au;
    default: return 0u;
  }
}

// The 32 bits of the expansion above that start `offset` (0..31) bits into word j.
RLK_HD uint32_t two_over_pi_bits(int j, int offset) {
  const uint64_t pair = (static_cast<uint64_t>(two_over_pi_word(j)) << 32) | two_over_pi_word(j + 1);
  return static_cast<uint32_t>((pair << offset) >> 32);
}

// a = (q + f) pi/2 with q an integer and |f| <= 1/2, for a finite a >= pi/4: q mod 4, and
// r = f pi/2 as hi + lo (|lo| <= ulp(hi)/2; absolute error below 2^-60, relative below 2^-31).
//
// Payne-Hanek in integer arithmetic, exact for every finite float32, however large. a = M 2^E
// with M a 24-bit integer and -24 <= E <= 104, so a 2/pi = sum over k >= 1 of M b_k 2^(E-k),
// b_k the bits of 2/pi. The terms with k <= E-2 are multiples of 4 and drop out modulo 4. The
// 96 bits k = E-1 .. E+94 form an integer W, and (a 2/pi mod 4) 2^62 = floor(M W 2^-32) mod 2^64
// up to the bits past k = E+94, which add less than 2 in those units (M < 2^24 times a tail
// below 2^-32, plus the floor): f is known to 2^-61 absolutely. The float32 nearest to a
// multiple of pi/2 (searched over all of them) is 0x1.f37c8ap+95, with |r| = 2^-29.2, so r
// keeps 31 correct bits or more; elsewhere its error is set by the 48 bits kept of s and by
// pi/2's pair (2^-47 relative). tests/test_portable_math.py sweeps around that input.
struct half_pi_reduced {
  int q;
  float hi;
  float lo;
};

RLK_HD half_pi_reduced reduce_half_pi(float a) {
  const uint32_t u = float_bits(a);
  const uint64_t M = (u & 0x007fffffu) | 0x00800000u;
  const int t = static_cast<int>(u >> 23) - 150 + 30;  // the bit of weight 2^-(E-1) in the expansion
  const int j = t >> 5;
  const int offset = t & 31;
  const uint64_t p0 = M * two_over_pi_bits(j, offset);
  const uint64_t p1 = M * two_over_pi_bits(j + 1, offset);
  const uint64_t p2 = M * two_over_pi_bits(j + 2, offset);
  const uint64_t y = (p0 << 32) + p1 + (p2 >> 32);  // (a 2/pi mod 4) 2^62, wrapping modulo 2^64
  // The nearest quadrant; f = s 2^-62 with -2^61 <= s < 2^61.
  const uint64_t q = (y + (uint64_t{1} << 61)) >> 62;
  const int64_t s = static_cast<int64_t>(y - (q << 62));
  // s = s_hi + s_lo to 48 bits: int64 -> float rounds to nearest, and the difference is exact.
  const float s_hi = static_cast<float>(s);
  const float s_lo = static_cast<float>(s - static_cast<int64_t>(s_hi));
  const float f_hi = s_hi * 0x1p-62f;  // exact scalings
  const float f_lo = s_lo * 0x1p-62f;
  // r = f pi/2, pi/2 = kHalfPiHi + kHalfPiLo within 2^-50 relative: f_hi kHalfPiHi is split
  // exactly with an fma, and the small products join its low part.
  const float kHalfPiHi = 0x1.921fb6p+0f;
  const float kHalfPiLo = -0x1.777a5cp-25f;
  const float r = f_hi * kHalfPiHi;
  const float r_lo = fma_rn(f_hi, kHalfPiHi, -r) + fma_rn(f_hi, kHalfPiLo, f_lo * kHalfPiHi);
  const f32x2 sum = fast_two_sum(r, r_lo);
  return {static_cast<int>(q & 3u), sum.hi, sum.lo};
}

// sin(r) and cos(r) for r = hi + lo, |r| <= pi/4 (a rounding beyond is fine), |lo| <= ulp(hi):
//   sin r = r + r^3 S(r^2),        S = -1/3! + z/5! - ... + z^5/13!  (Taylor, z = r^2)
//   cos r = 1 - r^2/2 + r^4 C(r^2), C = 1/4! - z/6! + ... - z^5/14!
// The first omitted terms, r^15/15! and r^16/16!, are below 2^-44 at pi/4. The leading terms are
// exact: r itself, and 1 - r^2/2 from the square split with an fma and an exact sum; what is
// left is below 0.081 (sin) and 0.016 (cos), so its rounding errors stay far below an ulp of the
// result, which is rounded once at the end. lo enters to first order: sin(hi + lo) = sin(hi) +
// lo (1 - hi^2/2), and in cos through r^2 = hi^2 + 2 hi lo.
RLK_HD void sincos_reduced(float hi, float lo, float& sin_r, float& cos_r) {
  const float z = hi * hi;
  float S = 0x1.612462p-33f;          // 1/13!
  S = fma_rn(S, z, -0x1.ae6456p-26f);  // -1/11!
  S = fma_rn(S, z, 0x1.71de3ap-19f);   // 1/9!
  S = fma_rn(S, z, -0x1.a01a02p-13f);  // -1/7!
  S = fma_rn(S, z, 0x1.111112p-7f);    // 1/5!
  S = fma_rn(S, z, -0x1.555556p-3f);   // -1/3!
  sin_r = hi + fma_rn(hi * z, S, fma_rn(-0.5f * z, lo, lo));

  float C = -0x1.93974ap-37f;          // -1/14!
  C = fma_rn(C, z, 0x1.1eed8ep-29f);   // 1/12!
  C = fma_rn(C, z, -0x1.27e4fcp-22f);  // -1/10!
  C = fma_rn(C, z, 0x1.a01a02p-16f);   // 1/8!
  C = fma_rn(C, z, -0x1.6c16c2p-10f);  // -1/6!
  C = fma_rn(C, z, 0x1.555556p-5f);    // 1/4!
  const float half_z = 0.5f * z;                              // r^2/2 = half_z + half_z_lo
  const float half_z_lo = fma_rn(0.5f * hi, hi, -half_z) + hi * lo;
  const f32x2 head = fast_two_sum(1.0f, -half_z);             // exact: half_z <= 0.31
  cos_r = head.hi + fma_rn(z * z, C, head.lo - half_z_lo);
}

}  // namespace math_detail

// ---------------------------------------------------------------- exponential
// e^x. Overflows to +inf above 88.7228317 (the largest float whose e^x rounds below 2^128);
// underflows through the subnormals to +0 (e^-104 < 2^-150 rounds to 0).
//
// Written without branches: every case is computed and the answer picked on the bits, so a
// loop of exponentials (a softmax row) vectorizes; picking on bits rather than with a float
// ?: keeps the compiler from moving a case's arithmetic back behind a branch.  When it
// replaced the branching form, the two agreed on all 2^32 inputs; test_portable_math keeps
// checking its accuracy and its special cases.
RLK_HD float exp_f32(float x) {
  using namespace math_detail;
  const exp_parts e = exp_core(x);  // meaningful for -104 <= x <= 88.72 (n in [-150, 128]); picked only there
  const float p = e.hi;             // e^r, rounded once
  const uint32_t in_range = float_bits(p * pow2i(e.n));
  // 2^128 is not a float: the first product is exact, the second rounds once (to inf past FLT_MAX).
  const uint32_t past_127 = float_bits(p * 0x1p127f * 2.0f);
  // Exact, then one rounding into the subnormals.
  const uint32_t below_126 = float_bits(p * pow2i(e.n + 100) * 0x1p-100f);
  uint32_t r = pick_bits(e.n < -126, below_126, in_range);
  r = pick_bits(e.n > 127, past_127, r);
  r = pick_bits(x < -104.0f, 0u, r);                          // includes -inf
  r = pick_bits(x > 0x1.62e42ep+6f, float_bits(infinity()), r);  // includes +inf
  return bits_float(pick_bits(is_nan(x), float_bits(quiet(x)), r));
}

// e^x - 1, accurate near 0 (expm1(x) = x for |x| < 2^-24, signed zeros kept).
RLK_HD float expm1_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x > 88.0f) return exp_f32(x);  // e^x > 2^126: subtracting 1 moves it by < 2^-100 ulp
  if (x < -18.0f) return -1.0f;      // e^x < 2^-25, half an ulp of 1 from below: rounds to -1
  if ((float_bits(x) & 0x7fffffffu) < 0x33800000u) return x;  // |x| < 2^-24: x + x^2/2 rounds to x
  const f32x2 e = expm1_parts(x);
  return e.hi + e.lo;
}

// ---------------------------------------------------------------- logarithms
// Natural logarithm: log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, log(1) = +0.
RLK_HD float log_f32(float x) {
  using namespace math_detail;
  uint32_t u = float_bits(x);
  if (u >= 0x7f800000u) {                       // sign bit set, +inf or NaN
    if (is_nan(x)) return quiet(x);
    if (u == 0x7f800000u) return x;             // +inf
    if (u == 0x80000000u) return -infinity();  // -0
    return invalid();                           // negative
  }
  if (u == 0) return -infinity();
  int k = -127;
  if (u < 0x00800000u) {  // subnormal: scale by 2^25 (exact) first
    u = float_bits(x * 0x1p25f);
    k -= 25;
  }
  k += static_cast<int>(u >> 23);
  float m = bits_float((u & 0x007fffffu) | 0x3f800000u);  // x = m 2^k, m in [1, 2)
  if (m > 0x1.6a09e6p+0f) {                              // above sqrt(2) rounded down
    m *= 0.5f;
    k += 1;
  }
  return math_detail::log_reduced(k, m - 1.0f, 0.0f);  // m - 1 exact (Sterbenz)
}

// log(1 + x), accurate near 0: log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(+-0) = +-0.
RLK_HD float log1p_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x == infinity()) return x;
  if (x == -1.0f) return -infinity();
  if (x < -1.0f) return invalid();  // includes -inf
  if (x == 0.0f) return x;          // keeps the sign of zero
  if (x > -0x1.2bec34p-2f && x < 0x1.a8279ap-2f) {  // inside [sqrt(1/2) - 1, sqrt(2) - 1]: reduced already
    return log_reduced(0, x, 0.0f);
  }
  // 1 + x = u + c exactly; log(u + c) = log(u) + c/u + O((c/u)^2) with |c/u| <= 2^-24.
  const f32x2 sum = two_sum(1.0f, x);
  const uint32_t bits = float_bits(sum.hi);  // u is a positive normal: u >= 2^-24
  int k = static_cast<int>(bits >> 23) - 127;
  float m = bits_float((bits & 0x007fffffu) | 0x3f800000u);
  if (m > 0x1.6a09e6p+0f) {
    m *= 0.5f;
    k += 1;
  }
  // c/u = (c 2^-k) / m; 2^-k is applied in two halves since k may reach 128.
  const float c = sum.lo * pow2i(-(k / 2)) * pow2i(-(k - k / 2)) * rcp(m);
  return log_reduced(k, m - 1.0f, c);
}

// ---------------------------------------------------------------- logistic and tanh
namespace math_detail {

// sigmoid(x) for a number x with |x| <= 80, from p = exp_core(-|x|).  Without branches, like
// exp_f32 and for the same reason (a loop of them vectorizes): both signs' quotients are
// computed, and the answer picked on the sign.
RLK_HD float sigmoid_quotients(float x, const exp_parts& p) {
  const float scale = pow2i(p.n);
  const float e = p.hi * scale;         // exact while |x| <= 80 (n >= -115)
  const float e_lo = p.lo * scale;      // likewise
  const f32x2 d0 = fast_two_sum(1.0f, e);  // 1 + e = d + d_lo, d in [1, 2]
  const float d = d0.hi;
  const float d_lo = d0.lo + e_lo;
  // 1/d correctly rounded: an IEEE division costs less than rcp's three Newton steps, and both
  // quotients below are corrected with their exact residuals anyway -- over all 2^32 inputs,
  // the results differ from those with rcp(d) at one only (x = 0x1.000002p-23, where this one
  // is the correctly rounded result and rcp's was faithful).
  const float y = div_rn(1.0f, d);
  // x >= 0: 1/(d + d_lo), one Newton step from y on the exact residual 1 - y d (a single fma).
  const float res_pos = fma_rn(-d_lo, y, fma_rn(-d, y, 1.0f));
  const float pos = fma_rn(y, res_pos, y);
  // x < 0: (e + e_lo)/(d + d_lo), quotient estimate e y corrected with its residual (e - q d exact in one fma).
  const float q = e * y;
  const float res_neg = fma_rn(-q, d_lo, e_lo) + fma_rn(-q, d, e);
  const float neg = fma_rn(res_neg, y, q);
  return bits_float(pick_bits(x >= 0.0f, float_bits(pos), float_bits(neg)));
}

}  // namespace math_detail

// The largest |x| for which sigmoid_near_f32 applies.
constexpr float kSigmoidNear = 80.0f;

// 1 / (1 + e^-x), computed from e^-|x| so that nothing overflows and 1 - sigmoid never cancels.
// The quotients above, and the far tails and NaN picked on the bits.
RLK_HD float sigmoid_f32(float x) {
  using namespace math_detail;
  const float a = bits_float(float_bits(x) & 0x7fffffffu);
  const exp_parts p = exp_core(-a);  // e^-a = 2^n (p.hi + p.lo), n in [-150, 0] while a <= 104
  // a > 80: e^-a < 2^-115, so 1/(1 + e) rounds to 1, and e/(1 + e) = e (1 - e + ...) rounds like
  // e, i.e. to exp_f32(x): 2^n p.hi rounded once (2^(n+100) p.hi is exact for n >= -150), and
  // 0 below x = -104.
  const float tiny = p.hi * pow2i(p.n + 100) * 0x1p-100f;
  const uint32_t far = pick_bits(x > 0.0f, float_bits(1.0f), pick_bits(a > 104.0f, 0u, float_bits(tiny)));
  const uint32_t r = pick_bits(a > kSigmoidNear, far, float_bits(sigmoid_quotients(x, p)));
  return bits_float(pick_bits(is_nan(x), float_bits(quiet(x)), r));
}

// sigmoid_f32(x) for a number with |x| <= kSigmoidNear, without the steps that only the far
// tails and NaN need: the same bits there.  For loops that check a block's range first.
RLK_HD float sigmoid_near_f32(float x) {
  using namespace math_detail;
  return sigmoid_quotients(x, exp_core(-bits_float(float_bits(x) & 0x7fffffffu)));
}

// Whether every x[i], i < n, is a number with |x| <= kSigmoidNear: the largest magnitude's bits,
// a loop that vectorizes (a NaN's bits exceed those of every number).
RLK_HD bool sigmoid_near_all(const float* x, int64_t n) {
  uint32_t widest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = float_bits(x[i]) & 0x7fffffffu;
    widest = bits > widest ? bits : widest;
  }
  return widest <= float_bits(kSigmoidNear);
}

// Hyperbolic tangent: tanh(x) = -m / (2 + m) with m = e^(-2|x|) - 1, sign of x restored.
RLK_HD float tanh_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  const float a = bits_float(float_bits(x) & 0x7fffffffu);
  if (a > 10.0f) return with_sign_of(1.0f, x);  // 1 - tanh(a) < 2^-27 rounds to 1; includes inf
  if (a < 0x1p-12f) return x;  // tanh(a) = a - a^3/3 + ...: rounds to a (signed zeros kept)
  const f32x2 m = expm1_parts(-2.0f * a);  // m in (-1, 0]
  const f32x2 d0 = fast_two_sum(2.0f, m.hi);  // 2 + m = d + d_lo, d in [1, 2]
  const float d = d0.hi;
  const float d_lo = d0.lo + m.lo;
  const float y = rcp(d);
  const float q = -m.hi * y;
  const float res = fma_rn(-q, d_lo, -m.lo) + fma_rn(-q, d, -m.hi);  // -m - q (d + d_lo)
  return with_sign_of(fma_rn(res, y, q), x);
}

// ---------------------------------------------------------------- square roots
// sqrt(x), correctly rounded, without a library or hardware square root: sqrt(-0) = -0,
// sqrt(x < 0) = NaN, sqrt(+inf) = +inf.
RLK_HD float sqrt_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x == 0.0f || x == infinity()) return x;
  if (x < 0.0f) return invalid();
  int k;
  const float m = reduce_by_four(x, k);  // sqrt(x) = sqrt(m) 2^k, m in [1, 4)
  const float y = rsqrt_reduced(m);
  float s = m * y;
  s = fma_rn(fma_rn(-s, s, m), 0.5f * y, s);  // one Newton step: s within an ulp of sqrt(m)
  // Final rounding decision. s is in [1, 2], where floats are 2^-23 apart. With r = m - s^2
  // (exact in one fma when s is that close), sqrt(m) lies above the midpoint s + 2^-24 exactly
  // when r > s 2^-23 + 2^-48, and below s - 2^-24 exactly when r < -s 2^-23 + 2^-48. r and
  // s 2^-23 are multiples of 2^-46, so the 2^-48 drops out of both tests. (No tie is possible: a
  // midpoint's square needs more than 24 bits.)
  const float r = fma_rn(-s, s, m);
  const float gap = s * 0x1p-23f;
  if (r > gap) {
    s += 0x1p-23f;
  } else if (r <= -gap) {
    s -= 0x1p-23f;
  }
  return s * pow2i(k);  // exact: k in [-75, 63]
}

// 1/sqrt(x): rsqrt(+-0) = +-inf, rsqrt(x < 0) = NaN, rsqrt(+inf) = +0.
RLK_HD float rsqrt_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x == 0.0f) return with_sign_of(infinity(), x);
  if (x < 0.0f) return invalid();
  if (x == infinity()) return 0.0f;
  int k;
  const float m = reduce_by_four(x, k);  // 1/sqrt(x) = 1/sqrt(m) 2^-k, m in [1, 4)
  return rsqrt_reduced(m) * pow2i(-k);  // exact: -k in [-63, 75]
}

// ---------------------------------------------------------------- sine and cosine
// sin(x) and cos(x) together (one argument reduction), for every float32 x: exact Payne-Hanek
// reduction by pi/2 whatever the size of x (rotary embeddings reach angles of 10^6 and more),
// then the polynomials on [-pi/4, pi/4]. sin(+-0) = +-0, cos(+-0) = 1; sin and cos of +-inf
// are NaN (0x7fc00000), and a NaN comes back quiet.
RLK_HD void sincos_f32(float x, float& sin_x, float& cos_x) {
  using namespace math_detail;
  if (is_nan(x)) {
    sin_x = cos_x = quiet(x);
    return;
  }
  const float a = bits_float(float_bits(x) & 0x7fffffffu);
  if (a == infinity()) {
    sin_x = cos_x = invalid();
    return;
  }
  half_pi_reduced r{0, a, 0.0f};
  if (a >= 0x1.921fb6p-1f) r = reduce_half_pi(a);  // from pi/4 (rounded up) on
  float s, c;
  sincos_reduced(r.hi, r.lo, s, c);
  // sin(q pi/2 + r) and cos(q pi/2 + r) by quadrant; odd sine: the sign of x goes to sin_x.
  const uint32_t sign = float_bits(x) & 0x80000000u;
  const float sin_a = (r.q & 1) ? c : s;
  const float cos_a = (r.q & 1) ? s : c;
  sin_x = bits_float(float_bits(sin_a) ^ ((r.q & 2) ? 0x80000000u : 0u) ^ sign);
  cos_x = bits_float(float_bits(cos_a) ^ (((r.q + 1) & 2) ? 0x80000000u : 0u));
}

RLK_HD float sin_f32(float x) {
  float s, c;
  sincos_f32(x, s, c);
  return s;
}

RLK_HD float cos_f32(float x) {
  float s, c;
  sincos_f32(x, s, c);
  return c;
}

}  // namespace RLK_TARGET_NAMESPACE
}  // namespace rlk
