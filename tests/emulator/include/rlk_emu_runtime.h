#pragma once
// The emulator's device runtime, behind each vendor's names (cuda_runtime.h,
// hip/hip_runtime.h, musa_runtime.h next to this file, each one RLK_EMU_RUNTIME_NAMES
// line): one stream, error codes, the last-error slot a refused launch sets, and the
// shared-memory opt-in of a kernel.
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

enum DeviceAttribute { kComputeMajor = 75, kComputeMinor = 76, kMultiprocessors = 16 };

inline error_t get_device(int* device) {
  *device = 0;
  return kSuccess;
}

inline error_t device_attribute(int* value, DeviceAttribute attribute, int device) {
  if (device != 0) return kInvalidValue;
  *value = attribute == kComputeMajor ? state().arch_major : attribute == kComputeMinor ? state().arch_minor : state().multiprocessors;
  return kSuccess;
}

// A device variable is a host variable here.
template <typename T>
inline error_t copy_from_symbol(void* dst, const T& symbol, size_t bytes) {
  if (bytes > sizeof(T)) return kInvalidValue;
  std::memcpy(dst, &symbol, bytes);
  return kSuccess;
}

inline error_t set_function_attribute(const void* func, FuncAttribute attribute, int value) {
  if (attribute != kMaxDynamicSharedMemorySize || value < 0 || value > kMaxOptInSharedBytes) return kInvalidValue;
  state().max_dynamic_shared[func] = value;
  return kSuccess;
}
}  // namespace rlk_emu

// Single roundings; the emulator is compiled with -ffp-contract=off.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

// The runtime names of a vendor whose API spells them <prefix>Stream_t, <prefix>Success, ...
// (cuda, hip and musa all do).
#define RLK_EMU_RUNTIME_NAMES(prefix)                                                                  \
  using prefix##Stream_t = rlk_emu::stream_t;                                                          \
  using prefix##Error_t = rlk_emu::error_t;                                                            \
  using prefix##FuncAttribute = rlk_emu::FuncAttribute;                                                \
  constexpr prefix##Error_t prefix##Success = rlk_emu::kSuccess;                                       \
  constexpr prefix##Error_t prefix##ErrorInvalidValue = rlk_emu::kInvalidValue;                        \
  constexpr prefix##FuncAttribute prefix##FuncAttributeMaxDynamicSharedMemorySize =                    \
      rlk_emu::kMaxDynamicSharedMemorySize;                                                            \
  inline prefix##Error_t prefix##GetLastError() { return rlk_emu::get_last_error(); }                  \
  inline const char* prefix##GetErrorString(prefix##Error_t e) { return rlk_emu::error_string(e); }    \
  inline prefix##Error_t prefix##FuncSetAttribute(const void* f, prefix##FuncAttribute a, int v) {     \
    return rlk_emu::set_function_attribute(f, a, v);                                                   \
  }                                                                                                    \
  using prefix##DeviceAttr = rlk_emu::DeviceAttribute;                                                 \
  constexpr prefix##DeviceAttr prefix##DevAttrComputeCapabilityMajor = rlk_emu::kComputeMajor;         \
  constexpr prefix##DeviceAttr prefix##DevAttrComputeCapabilityMinor = rlk_emu::kComputeMinor;         \
  constexpr prefix##DeviceAttr prefix##DevAttrMultiProcessorCount = rlk_emu::kMultiprocessors;         \
  inline prefix##Error_t prefix##GetDevice(int* d) { return rlk_emu::get_device(d); }                  \
  inline prefix##Error_t prefix##DeviceGetAttribute(int* v, prefix##DeviceAttr a, int d) {             \
    return rlk_emu::device_attribute(v, a, d);                                                         \
  }                                                                                                    \
  template <typename T>                                                                                \
  inline prefix##Error_t prefix##MemcpyFromSymbol(void* dst, const T& symbol, size_t bytes) {          \
    return rlk_emu::copy_from_symbol(dst, symbol, bytes);                                              \
  }
