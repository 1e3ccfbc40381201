#pragma once
// The emulator's stand-in for the CUDA runtime header: the handful of names the
// generated kernels use, mapped onto tests/emulator/rlk_emu.h.
#include "../rlk_emu.h"

using cudaStream_t = void*;
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorInvalidValue = 1;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = rlk_emu::state().last_error;
  rlk_emu::state().last_error = 0;
  return e;
}
inline const char* cudaGetErrorString(cudaError_t e) { return e == 0 ? "no error" : "invalid argument"; }

inline cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 227 * 1024) return cudaErrorInvalidValue;
  rlk_emu::state().max_dynamic_shared[func] = value;
  return cudaSuccess;
}

// Single roundings; the emulator is compiled with -ffp-contract=off.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
