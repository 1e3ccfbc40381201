#pragma once
// Shim for MUSA's runtime header: the stream, error and launch-status names, as CUDA's.
#ifndef RLK_MUSA_SHIM
#error "tools/musa_shim is a compile-check shim, not MUSA: use it only with -include musa_shim.h"
#endif

#include <cuda_runtime.h>

using musaStream_t = cudaStream_t;
using musaError_t = cudaError_t;
constexpr musaError_t musaSuccess = cudaSuccess;
constexpr musaError_t musaErrorInvalidValue = cudaErrorInvalidValue;

inline musaError_t musaGetLastError() { return cudaGetLastError(); }
inline const char* musaGetErrorString(musaError_t error) { return cudaGetErrorString(error); }

constexpr cudaFuncAttribute musaFuncAttributeMaxDynamicSharedMemorySize = cudaFuncAttributeMaxDynamicSharedMemorySize;
inline musaError_t musaFuncSetAttribute(const void* func, cudaFuncAttribute attribute, int value) {
  return cudaFuncSetAttribute(func, attribute, value);
}
