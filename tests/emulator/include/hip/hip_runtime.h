#pragma once
// The emulator's stand-in for the HIP runtime header (see ../rlk_emu_runtime.h).
#include "../rlk_emu_runtime.h"

using hipStream_t = rlk_emu::stream_t;
using hipError_t = rlk_emu::error_t;
using hipFuncAttribute = rlk_emu::FuncAttribute;
constexpr hipError_t hipSuccess = rlk_emu::kSuccess;
constexpr hipError_t hipErrorInvalidValue = rlk_emu::kInvalidValue;
constexpr hipFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize = rlk_emu::kMaxDynamicSharedMemorySize;

inline hipError_t hipGetLastError() { return rlk_emu::get_last_error(); }
inline const char* hipGetErrorString(hipError_t e) { return rlk_emu::error_string(e); }
inline hipError_t hipFuncSetAttribute(const void* f, hipFuncAttribute a, int v) { return rlk_emu::set_function_attribute(f, a, v); }
