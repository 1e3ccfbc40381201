#pragma once
// The emulator's 16-bit float storage type: the kernels only move its bits.
#include <cstdint>
struct __half {
  uint16_t bits;
};
