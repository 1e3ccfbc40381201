#pragma once
// Shim for MUSA's bfloat16 header: __mt_bfloat16 stands in as CUDA's 16-bit bfloat16 type.
#ifndef RLK_MUSA_SHIM
#error "tools/musa_shim is a compile-check shim, not MUSA: use it only with -include musa_shim.h"
#endif

#include <cuda_bf16.h>

using __mt_bfloat16 = __nv_bfloat16;
