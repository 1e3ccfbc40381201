#pragma once
// The emulator's stand-in for the MUSA runtime header (see rlk_emu_runtime.h).
#include "rlk_emu_runtime.h"

using musaStream_t = rlk_emu::stream_t;
using musaError_t = rlk_emu::error_t;
using musaFuncAttribute = rlk_emu::FuncAttribute;
constexpr musaError_t musaSuccess = rlk_emu::kSuccess;
constexpr musaError_t musaErrorInvalidValue = rlk_emu::kInvalidValue;
constexpr musaFuncAttribute musaFuncAttributeMaxDynamicSharedMemorySize = rlk_emu::kMaxDynamicSharedMemorySize;

inline musaError_t musaGetLastError() { return rlk_emu::get_last_error(); }
inline const char* musaGetErrorString(musaError_t e) { return rlk_emu::error_string(e); }
inline musaError_t musaFuncSetAttribute(const void* f, musaFuncAttribute a, int v) { return rlk_emu::set_function_attribute(f, a, v); }
