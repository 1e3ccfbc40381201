#pragma once
// The emulator's rlk_tensor_core.h: the functions of the generated header, with the
// same names and signatures, modelled on the PTX ISA's definitions of cp.async,
// ldmatrix and mma.m16n8k16 instead of issuing them.  The test puts this file in
// place of the generated one.

#include <cstdint>
#include <cstring>

#include "rlk_emu.h"
#include "rlk_numerics.h"

namespace rlk {
namespace cuda {

inline uint32_t shared_address(const void* pointer) { return rlk_emu::shared_offset(pointer); }

inline void copy_async_16(uint32_t dst, const void* src, int bytes) { rlk_emu::copy_async(dst, src, bytes); }

inline void copy_async_commit() { rlk_emu::copy_commit(); }

template <int Pending>
inline void copy_async_wait() {
  rlk_emu::copy_wait(Pending);
}

inline void store_shared_16(uint32_t dst, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  const uint32_t v[4] = {x, y, z, w};
  std::memcpy(rlk_emu::shared_at(dst, 16, 16, "st.shared.v4"), v, 16);
}

inline uint16_t shared_b16(uint32_t address) {
  uint16_t v;
  std::memcpy(&v, rlk_emu::shared_at(address, 2, 2, "ldmatrix"), 2);
  return v;
}

// ldmatrix.m8n8.x4(.trans).b16: lane i gives the address of row i % 8 of matrix i / 8
// (16-byte aligned); lane i receives, per matrix, the pair of row i / 4 at columns
// 2 (i % 4) and 2 (i % 4) + 1 -- or, transposed, of column i / 4 at rows 2 (i % 4)
// and 2 (i % 4) + 1 -- the first in the low half.
inline void load_matrix(uint32_t (&r)[4], uint32_t address, bool trans) {
  rlk_emu::WarpExchange& w = rlk_emu::warp_exchange();
  const int lane = rlk_emu::lane();
  rlk_emu::shared_at(address, 16, 16, "ldmatrix row");
  w.address[lane] = address;
  rlk_emu::warp_barrier(trans ? "ldmatrix.x4.trans" : "ldmatrix.x4");
  for (int j = 0; j < 4; ++j) {
    uint16_t lo, hi;
    if (!trans) {
      const uint32_t row = w.address[8 * j + lane / 4];
      lo = shared_b16(row + 2 * (2 * (lane % 4)));
      hi = shared_b16(row + 2 * (2 * (lane % 4) + 1));
    } else {
      lo = shared_b16(w.address[8 * j + 2 * (lane % 4)] + 2 * (lane / 4));
      hi = shared_b16(w.address[8 * j + 2 * (lane % 4) + 1] + 2 * (lane / 4));
    }
    r[j] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  rlk_emu::warp_barrier(trans ? "ldmatrix.x4.trans (done)" : "ldmatrix.x4 (done)");
}

inline void load_matrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t address) {
  uint32_t r[4];
  load_matrix(r, address, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

inline void load_matrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, uint32_t address) {
  uint32_t r[4];
  load_matrix(r, address, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

// mma.m16n8k16.row.col.f32: D = A B + C with A 16 x 16, B 16 x 8 spread over the
// warp as the PTX ISA's fragment tables give (g = lane / 4, t = lane % 4):
// A(g + 8 (r % 2), 2t + 8 (r / 2) + h) in half h of a[r]; B(2t + 8 r + h, g) in half h
// of b[r]; C and D(g + 8 (r / 2), 2t + r % 2) in c[r].
template <typename T>
inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  rlk_emu::WarpExchange& w = rlk_emu::warp_exchange();
  const int lane = rlk_emu::lane();
  std::memcpy(w.a[lane], a, sizeof a);
  std::memcpy(w.b[lane], b, sizeof b);
  std::memcpy(w.c[lane], d, sizeof d);
  rlk_emu::warp_barrier("mma.m16n8k16");
  auto half_of = [](uint32_t v, int h) { return to_float(from_storage_bits<T>(static_cast<uint16_t>(h ? v >> 16 : v & 0xffffu))); };
  auto a_at = [&](int row, int k) { return half_of(w.a[(row % 8) * 4 + (k % 8) / 2][(row / 8) + 2 * (k / 8)], k % 2); };
  auto b_at = [&](int k, int col) { return half_of(w.b[col * 4 + (k % 8) / 2][k / 8], k % 2); };
  float out[4];
  for (int r = 0; r < 4; ++r) {
    const int row = lane / 4 + 8 * (r / 2);
    const int col = 2 * (lane % 4) + r % 2;
    double sum = 0.0;  // exact for the tests' values; the hardware's own order is not modelled
    for (int k = 0; k < 16; ++k) sum += static_cast<double>(a_at(row, k)) * static_cast<double>(b_at(k, col));
    out[r] = static_cast<float>(sum + static_cast<double>(w.c[lane][r]));
  }
  rlk_emu::warp_barrier("mma.m16n8k16 (done)");
  std::memcpy(d, out, sizeof out);
}

template <typename T>
struct Mma {
  static inline void run(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { mma_16x8x16<T>(d, a, b); }
};

}  // namespace cuda
}  // namespace rlk
