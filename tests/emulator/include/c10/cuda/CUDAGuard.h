#pragma once
// The emulator's stand-ins for c10's device guard and launch check: there is one
// emulated device, and a refused launch is reported by cudaGetLastError as on hardware.
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

namespace at {
namespace cuda {
struct OptionalCUDAGuard {
  explicit OptionalCUDAGuard(c10::Device) {}
};
}  // namespace cuda
}  // namespace at

#define C10_CUDA_KERNEL_LAUNCH_CHECK() TORCH_CHECK(cudaGetLastError() == cudaSuccess, "emulated kernel launch failed")
