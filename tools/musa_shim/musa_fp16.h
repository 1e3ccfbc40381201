#pragma once
// Shim for MUSA's half header: MUSA names its half type __half, as CUDA does.
#ifndef RLK_MUSA_SHIM
#error "tools/musa_shim is a compile-check shim, not MUSA: use it only with -include musa_shim.h"
#endif

#include <cuda_fp16.h>
