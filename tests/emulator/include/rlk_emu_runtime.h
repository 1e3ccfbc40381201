#pragma once
// The emulator's device runtime, behind each vendor's names (cuda_runtime.h,
// hip/hip_runtime.h, musa_runtime.h next to this file): one stream, error codes, the
// last-error slot a refused launch sets, and the shared-memory opt-in of a kernel.
#include "../rlk_emu.h"

namespace rlk_emu {
using stream_t = void*;
using error_t = int;
constexpr error_t kSuccess = 0;
constexpr error_t kInvalidValue = 1;
enum FuncAttribute { kMaxDynamicSharedMemorySize = 8 };

inline error_t get_last_error() {
  const error_t e = state().last_error;
  state().last_error = kSuccess;
  return e;
}

inline const char* error_string(error_t e) { return e == kSuccess ? "no error" : "invalid argument"; }

// The most dynamic shared memory a block may opt in to (an sm_90 device's 227 KiB).
constexpr int kMaxOptInSharedBytes = 227 * 1024;

inline error_t set_function_attribute(const void* func, FuncAttribute attribute, int value) {
  if (attribute != kMaxDynamicSharedMemorySize || value < 0 || value > kMaxOptInSharedBytes) return kInvalidValue;
  state().max_dynamic_shared[func] = value;
  return kSuccess;
}
}  // namespace rlk_emu

// Single roundings; the emulator is compiled with -ffp-contract=off.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
