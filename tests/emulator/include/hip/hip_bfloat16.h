#pragma once
// The emulator's bfloat16 storage type: the kernels only move its bits.
#include <cstdint>
struct hip_bfloat16 {
  uint16_t data;
};
