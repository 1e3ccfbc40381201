#pragma once
// MUSA-to-CUDA header shim, force-included (-include musa_shim.h) when nvcc compile-checks
// the generated .mu sources on machines without mcc. It maps the few MUSA runtime names the
// kernels use onto CUDA's, so a passing compile shows that a .mu file is well-formed C++ and
// kernel code -- not that mcc accepts it or that it runs on Moore Threads hardware.
//
// The kernels reach the mapped names through their own #include <musa_*.h> lines, which
// resolve to the files next to this one; those refuse to be used without this header, so
// they can never be mistaken for the real MUSA headers.
#define RLK_MUSA_SHIM 1

// mcc defines this when compiling device code; code guarded by it must be checked too.
#ifndef __MUSACC__
#define __MUSACC__ 1
#endif
