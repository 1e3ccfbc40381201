#pragma once
// The emulator's stand-ins for torch_musa's device guard and launch check.
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <musa_runtime.h>

namespace c10 {
namespace musa {
struct OptionalMUSAGuard {
  explicit OptionalMUSAGuard(c10::Device) {}
};
}  // namespace musa
}  // namespace c10

#define C10_MUSA_KERNEL_LAUNCH_CHECK() TORCH_CHECK(musaGetLastError() == musaSuccess, "emulated kernel launch failed")
