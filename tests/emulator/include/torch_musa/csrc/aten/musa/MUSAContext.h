#pragma once
// The emulator's stand-in for torch_musa's context: one stream, the default.
#include <musa_runtime.h>

namespace at {
namespace musa {
inline musaStream_t getCurrentMUSAStream() { return nullptr; }
}  // namespace musa
}  // namespace at
