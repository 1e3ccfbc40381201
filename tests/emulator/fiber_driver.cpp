// Runs a block of fibers through barriers: tests/test_emulator_fibers.py builds it with each
// way of switching between fibers and compares what they print.
#include "rlk_emu.h"

#include <cstdio>
#include <cstring>

// Each round, every thread writes its slot, meets the others, and reads another's.
__global__ void rotate_through_shared(const int* in, int* out, int n, int rounds) {
  __shared__ int slots[256];
  const int t = threadIdx.x;
  for (int round = 0; round < rounds; ++round) {
    slots[t] = in[(t + round) % n] * (round + 1);
    __syncthreads();
    out[(blockIdx.x * rounds + round) * n + t] = slots[n - 1 - t] + t;
    __syncthreads();
  }
}

// Lane 0 leaves early: the rest of its warp waits in a warp-wide instruction it never reaches,
// and the other warps at a barrier that warp never reaches.
__global__ void leave_early(int* out) {
  if (threadIdx.x == 0) return;
  if (threadIdx.x < 32) ::rlk_emu::warp_barrier("shfl.sync");
  __syncthreads();
  out[threadIdx.x] = 1;
}

int main(int argc, char** argv) {
  constexpr int kThreads = 128, kBlocks = 2, kRounds = 3;
  static int in[kThreads], out[kBlocks * kRounds * kThreads];
  for (int i = 0; i < kThreads; ++i) in[i] = i * 7 + 1;
  if (argc > 1 && std::strcmp(argv[1], "deadlock") == 0) {
    ::rlk_emu::launch(::rlk_emu::config(dim3(1), dim3(kThreads)), leave_early, out);
    return 0;
  }
  ::rlk_emu::launch(::rlk_emu::config(dim3(kBlocks), dim3(kThreads)), rotate_through_shared, (const int*)in, out, kThreads, kRounds);
  for (int v : out) std::printf("%d\n", v);
  return 0;
}
