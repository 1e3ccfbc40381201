#pragma once
// The emulator's stand-in for the CUDA runtime header (see rlk_emu_runtime.h).
#include "rlk_emu_runtime.h"

using cudaStream_t = rlk_emu::stream_t;
using cudaError_t = rlk_emu::error_t;
using cudaFuncAttribute = rlk_emu::FuncAttribute;
constexpr cudaError_t cudaSuccess = rlk_emu::kSuccess;
constexpr cudaError_t cudaErrorInvalidValue = rlk_emu::kInvalidValue;
constexpr cudaFuncAttribute cudaFuncAttributeMaxDynamicSharedMemorySize = rlk_emu::kMaxDynamicSharedMemorySize;

inline cudaError_t cudaGetLastError() { return rlk_emu::get_last_error(); }
inline const char* cudaGetErrorString(cudaError_t e) { return rlk_emu::error_string(e); }
inline cudaError_t cudaFuncSetAttribute(const void* f, cudaFuncAttribute a, int v) { return rlk_emu::set_function_attribute(f, a, v); }
