#pragma once
// The emulator's rlk_tensor_core.h: the functions of the generated header, with the
// same names and signatures, modelled on the PTX ISA's definitions of cp.async,
// ldmatrix and mma.m16n8k16, and of mbarrier, cp.async.mbarrier.arrive, setmaxnreg and
// wgmma (fence, mma_async from shared-memory descriptors with 128-byte swizzling,
// commit_group, wait_group), instead of issuing them.  The test puts this file in place
// of the generated one.
//
// Not modelled: the proxy fence (fence.proxy.async) and the register budget of setmaxnreg
// are accepted and do nothing; swizzle modes other than 128 bytes, and a descriptor's base
// offset, stop the run.

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

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

// ---------------------------------------------------------------- warpgroup instructions

inline void barrier_init(uint32_t barrier, uint32_t count) { rlk_emu::barrier_init(barrier, static_cast<int>(count)); }
inline void barrier_arrive(uint32_t barrier) { rlk_emu::barrier_arrive(barrier); }
inline void barrier_arrive_after_copies(uint32_t barrier) { rlk_emu::barrier_arrive_after_copies(barrier); }
inline void barrier_wait(uint32_t barrier, uint32_t parity) { rlk_emu::barrier_wait(barrier, parity); }
inline void fence_shared_for_tensor_cores() {}

template <int Registers>
inline void registers_decrease() {
  rlk_emu::warpgroup_collective("setmaxnreg.dec", [](rlk_emu::WarpgroupExchange&) {});
}
template <int Registers>
inline void registers_increase() {
  rlk_emu::warpgroup_collective("setmaxnreg.inc", [](rlk_emu::WarpgroupExchange&) {});
}

// The element at logical (row, k) of an operand read through a descriptor: rows are m (A)
// or n (B).  K-major: row r at (r / 8) SBO + (r % 8) 128 bytes, k contiguous within it;
// transposed (MN-major): 64-row blocks LBO apart, 8-k groups SBO apart, k % 8 lines of 128
// bytes, rows contiguous within a line.  Then the 128-byte swizzle: address bits 4-6 XOR
// bits 7-9.
inline float descriptor_element(uint64_t desc, bool transposed, bool bf16, int row, int k) {
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4;
  const uint32_t leading = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4;
  const uint32_t stride = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  if (((desc >> 49) & 7) != 0) rlk_emu::fail("wgmma: a descriptor's base offset is not modelled");
  if ((desc >> 62) != 1) rlk_emu::fail("wgmma: only 128-byte swizzling is modelled (descriptor layout " + std::to_string(desc >> 62) + ")");
  uint32_t address = transposed ? start + (row / 64) * leading + (k / 8) * stride + (k % 8) * 128 + (row % 64) * 2
                                : start + (row / 8) * stride + (row % 8) * 128 + k * 2;
  address ^= ((address >> 7) & 7u) << 4;
  const uint16_t bits = rlk_emu::shared_u16(address, "wgmma operand");
  return bf16 ? to_float(from_storage_bits<bfloat16_t>(bits)) : to_float(from_storage_bits<half_t>(bits));
}

// D(64 x n) = A(64 x 16) B(16 x n) (+ D): each sum of 16 products formed exactly, added to
// D and rounded once (the hardware's own order is not modelled; the tests' values are exact).
inline void warpgroup_execute(const rlk_emu::WarpgroupOp& op) {
  static double a[64][16], b[16][256];
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k) a[m][k] = descriptor_element(op.desc_a, op.trans_a, op.bf16, m, k);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < op.n; ++n) b[k][n] = descriptor_element(op.desc_b, op.trans_b, op.bf16, n, k);
  for (int t = 0; t < 128; ++t) {
    float* d = op.d[t];
    for (int j = 0; j < op.n / 8; ++j)
      for (int r = 0; r < 4; ++r) {
        const int row = 16 * (t / 32) + t % 32 / 4 + 8 * (r / 2);
        const int col = 8 * j + 2 * (t % 4) + r % 2;
        double sum = 0.0;
        for (int k = 0; k < 16; ++k) sum += a[row][k] * b[k][col];
        d[4 * j + r] = static_cast<float>(sum + (op.scale_d ? static_cast<double>(d[4 * j + r]) : 0.0));
      }
  }
}

inline void warpgroup_fence() {
  rlk_emu::warpgroup_collective("wgmma.fence", [](rlk_emu::WarpgroupExchange&) {});
}

// Eager copies: an mma runs when issued.  Deferred: when a wait_group retires its group, so
// shared memory given back, or accumulators read, before that wait show up.
inline void warpgroup_commit() {
  rlk_emu::warpgroup_collective("wgmma.commit_group", [](rlk_emu::WarpgroupExchange& w) {
    w.committed.push_back(std::move(w.open));
    w.open.clear();
  });
}

template <int Pending>
inline void warpgroup_wait() {
  rlk_emu::warpgroup_collective("wgmma.wait_group", [](rlk_emu::WarpgroupExchange& w) {
    while (static_cast<int>(w.committed.size()) > Pending) {
      for (const rlk_emu::WarpgroupOp& op : w.committed.front()) warpgroup_execute(op);
      w.committed.erase(w.committed.begin());
    }
  });
}

template <int Count>
inline void warpgroup_hold(float (&)[Count]) {}

template <typename T, int N, bool TransA, bool TransB>
struct WarpgroupMma {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16: n is a multiple of 8 up to 256");
  static inline void run(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
    rlk_emu::WarpgroupExchange& w = rlk_emu::warpgroup_exchange();
    const int t = rlk_emu::self().linear % 128;
    if (w.arrived == 0) {
      w.op = rlk_emu::WarpgroupOp{};
      w.op.desc_a = desc_a, w.op.desc_b = desc_b, w.op.n = N, w.op.trans_a = TransA, w.op.trans_b = TransB;
      w.op.scale_d = scale_d != 0, w.op.bf16 = sizeof(T) == 2 && std::is_same<T, bfloat16_t>::value;
    } else if (w.op.desc_a != desc_a || w.op.desc_b != desc_b || w.op.scale_d != (scale_d != 0)) {
      rlk_emu::fail("wgmma.mma_async: the threads of a warpgroup give different descriptors or scale-d");
    }
    w.op.d[t] = d;
    rlk_emu::warpgroup_collective("wgmma.mma_async", [](rlk_emu::WarpgroupExchange& x) {
      if (rlk_emu::state().deferred_copies)
        x.open.push_back(x.op);
      else
        warpgroup_execute(x.op);
    });
  }
};

}  // namespace cuda
}  // namespace rlk
