// Copied from runtime/kernels/rlk_reduce.h by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
#pragma once
// Fixed-order float32 reductions for every platform: the device and host versions
// below add the same terms in the same order, so they return the same bits.
//
// lanes_tree<LANES>: lane l sums terms l, l + LANES, l + 2*LANES, ... in ascending order
// (one rounding per add), then lanes are combined by a pairwise tree:
// for half = LANES/2, LANES/4, ..., 1: lane[i] = lane[i] + lane[i + half] for i < half.
// LANES is fixed per op in its spec, never derived from the batch or the hardware warp size.

#include "rlk_numerics.h"

// The platform's namespace, rlk::cpu on the host (rlk_numerics.h names it).
namespace rlk {
namespace RLK_TARGET_NAMESPACE {

// The start of a running maximum.
RLK_ARITH float negative_infinity() { return bits_float(0xff800000u); }

// One step of a running maximum, the rule of block_max and host_max: max is exact, so only
// NaN handling needs care -- a NaN, once seen, wins.
RLK_ARITH float max_step(float best, float v) { return (best != best || best > v) ? best : v; }

#if RLK_DEVICE_CODE
// Every thread of a block of exactly LANES threads passes its partial sum; all get the total.
// `scratch` is LANES floats of shared memory.
template <int LANES>
__device__ __forceinline__ float block_sum_lanes_tree(float partial, float* scratch) {
  static_assert((LANES & (LANES - 1)) == 0, "LANES must be a power of two");
  const int lane = static_cast<int>(threadIdx.x);
  scratch[lane] = partial;
  __syncthreads();
  for (int half = LANES / 2; half > 0; half >>= 1) {
    if (lane < half) scratch[lane] = add_rn(scratch[lane], scratch[lane + half]);
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();  // scratch may be reused right after
  return total;
}

// Maximum over the block, by max_step.
template <int LANES>
__device__ __forceinline__ float block_max(float value, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x);
  scratch[lane] = value;
  __syncthreads();
  for (int half = LANES / 2; half > 0; half >>= 1) {
    if (lane < half) {
      scratch[lane] = max_step(scratch[lane], scratch[lane + half]);
    }
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();
  return total;
}
#endif

// Host version of lanes_tree: term(i) gives the i-th float32 term, i in [0, n).
template <int LANES, typename Term>
inline float host_sum_lanes_tree(int64_t n, Term term) {
  static_assert((LANES & (LANES - 1)) == 0, "LANES must be a power of two");
  float lane[LANES];
  for (int l = 0; l < LANES; ++l) lane[l] = 0.0f;
  // Whole rows of LANES terms, then the rest: each lane still adds its terms in ascending
  // order, and the inner loop, one term per lane, vectorizes.
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int l = 0; l < LANES; ++l) lane[l] = lane[l] + term(i + l);
  for (int l = 0; i + l < n; ++l) lane[l] = lane[l] + term(i + l);
  for (int half = LANES / 2; half > 0; half >>= 1)
    for (int l = 0; l < half; ++l) lane[l] = lane[l] + lane[l + half];
  return lane[0];
}

#if !RLK_DEVICE_CODE
// Host maximum, by max_step, like block_max: the largest term, a NaN if any term is one.  The
// maximum is exact, so any order gives the same number; here 16 running maxima over every
// 16th term, then combined, because one running maximum is a chain of dependent compares
// that no vector unit can shorten.  Which NaN, and the sign of a zero maximum, depend on the
// order (they do on the device too): callers use neither.
template <typename Term>
inline float host_max(int64_t n, Term term, float init) {
  constexpr int kRunning = 16;
  float best[kRunning];
  for (int l = 0; l < kRunning; ++l) best[l] = init;
  int64_t i = 0;
  for (; i + kRunning <= n; i += kRunning)
    for (int l = 0; l < kRunning; ++l) best[l] = max_step(best[l], term(i + l));
  for (int l = 0; i + l < n; ++l) best[l] = max_step(best[l], term(i + l));
  for (int l = 1; l < kRunning; ++l) best[0] = max_step(best[0], best[l]);
  return best[0];
}
#endif

}  // namespace RLK_TARGET_NAMESPACE
}  // namespace rlk
