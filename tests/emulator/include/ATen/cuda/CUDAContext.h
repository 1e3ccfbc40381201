#pragma once
// The emulator's stand-in for ATen's CUDA context: one stream, the default.
#include <cuda_runtime.h>

namespace at {
namespace cuda {
inline cudaStream_t getCurrentCUDAStream() { return nullptr; }
}  // namespace cuda
}  // namespace at
