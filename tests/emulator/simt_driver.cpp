// Runs one det_gemm-family simt launcher of a device package in the emulator and the CPU
// package's kernel of the same op on the same operands, and compares every output bit.
//
//   simt_driver DTYPE OUT_FP32 M K N A_OFFSET B_OFFSET [bias]
//
// DTYPE is float32, float16 or bfloat16.  A_OFFSET and B_OFFSET (elements) shift each
// operand's start off 16-byte alignment.  The operands are values whose products and sums
// round, spread over several binades with both signs, so that any change in the order in
// which an accumulator takes its products, or in the values it takes, changes bits.  Every
// buffer ends where an inaccessible page begins, so a read past an operand stops the run.
//
// The build defines RLK_EMU_NS (the device platform's namespace), RLK_EMU_LAUNCHER (the op's
// simt launcher, the same name in both packages), RLK_EMU_DIMS (its dimension arguments in
// its order, e.g. K, M, N) and RLK_EMU_BIAS=1 where the launcher takes a bias [N] after b;
// it includes both launchers' headers before this file.

#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifndef RLK_EMU_BIAS
#define RLK_EMU_BIAS 0
#endif

// The CPU kernels run their work items through the bindings' worker pool; here, one thread.
void rlk::run_host_workers(int64_t workers, HostTask task, void* context) {
  for (int64_t w = 0; w < workers; ++w) task(context, w);
}

namespace {

using rlk::Dtype;

unsigned char* guarded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t span = (bytes + page - 1) / page * page;
  auto* base = static_cast<unsigned char*>(mmap(nullptr, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (base == MAP_FAILED) std::exit(4);
  mprotect(base + span, page, PROT_NONE);
  return base + span - bytes;
}

size_t element_bytes(Dtype d) { return d == Dtype::float32 ? 4 : 2; }

void store(Dtype d, void* base, int64_t i, float v) {
  using namespace rlk::RLK_EMU_NS;
  switch (d) {
    case Dtype::float32: static_cast<float*>(base)[i] = v; break;
    case Dtype::float16: static_cast<half_t*>(base)[i] = from_float<half_t>(v); break;
    case Dtype::bfloat16: static_cast<bfloat16_t*>(base)[i] = from_float<bfloat16_t>(v); break;
  }
}

uint32_t stored_bits(Dtype d, const void* base, int64_t i) {
  uint32_t u = 0;
  std::memcpy(&u, static_cast<const unsigned char*>(base) + i * element_bytes(d), element_bytes(d));
  return u;
}

// A value in about [-4, 4] with 24 significant bits (fewer once stored in a 16-bit type).
float value(uint64_t seed, int64_t i) {
  uint64_t x = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ (seed * 0xD1B54A32D192ED03ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  const float mantissa = 1.0f + static_cast<float>(x & 0x7fffff) / 8388608.0f;
  const int exponent = static_cast<int>((x >> 23) % 7) - 4;
  return ((x >> 40) & 1 ? -mantissa : mantissa) * static_cast<float>(1 << (exponent + 4)) / 16.0f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8 && !(argc == 9 && std::string(argv[8]) == "bias")) {
    std::fprintf(stderr, "usage: %s DTYPE OUT_FP32 M K N A_OFFSET B_OFFSET [bias]\n", argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  const Dtype dtype = name == "float32" ? Dtype::float32 : name == "float16" ? Dtype::float16 : Dtype::bfloat16;
  const bool out_fp32 = std::atoi(argv[2]) != 0;
  const int64_t M = std::atoll(argv[3]), K = std::atoll(argv[4]), N = std::atoll(argv[5]);
  const int64_t a_offset = std::atoll(argv[6]), b_offset = std::atoll(argv[7]);
  const bool with_bias = argc == 9;
  const Dtype out = out_fp32 ? Dtype::float32 : dtype;
  rlk_emu::configure_from_environment();

  // Each operand is M*K or K*N elements whatever its layout; both kernels read the same buffer.
  const size_t es = element_bytes(dtype), os = element_bytes(out);
  auto* a = guarded((M * K + a_offset) * es) + a_offset * es;
  auto* b = guarded((K * N + b_offset) * es) + b_offset * es;
  for (int64_t i = 0; i < M * K; ++i) store(dtype, a, i, value(1, i));
  for (int64_t i = 0; i < K * N; ++i) store(dtype, b, i, value(2, i));
  unsigned char* bias = nullptr;
  if (with_bias) {
    bias = guarded(N * es);
    for (int64_t n = 0; n < N; ++n) store(dtype, bias, n, value(3, n));
  }
  auto* device = guarded(M * N * os);
  auto* host = guarded(M * N * os);
  std::memset(device, 0xEE, M * N * os);
  std::memset(host, 0xDD, M * N * os);

#if RLK_EMU_BIAS
  const auto status = rlk::RLK_EMU_NS::RLK_EMU_LAUNCHER(a, b, bias, device, dtype, out, RLK_EMU_DIMS, out_fp32, nullptr);
  rlk::cpu::RLK_EMU_LAUNCHER(a, b, bias, host, dtype, out, RLK_EMU_DIMS, out_fp32, 1);
#else
  if (with_bias) {
    std::fprintf(stderr, "this launcher takes no bias\n");
    return 2;
  }
  const auto status = rlk::RLK_EMU_NS::RLK_EMU_LAUNCHER(a, b, device, dtype, out, RLK_EMU_DIMS, out_fp32, nullptr);
  rlk::cpu::RLK_EMU_LAUNCHER(a, b, host, dtype, out, RLK_EMU_DIMS, out_fp32, 1);
#endif
  if (status != rlk_emu::kSuccess) {
    std::printf("launcher returned error %d\n", static_cast<int>(status));
    return 1;
  }

  int64_t wrong = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const uint32_t got = stored_bits(out, device, m * N + n), want = stored_bits(out, host, m * N + n);
      if (got != want && ++wrong <= 5) std::printf("c[%" PRId64 ", %" PRId64 "]: device bits %#x, cpu bits %#x\n", m, n, got, want);
    }
  if (wrong) {
    std::printf("%" PRId64 " of %" PRId64 " elements differ\n", wrong, M * N);
    return 1;
  }
  std::printf("identical: %" PRId64 " elements\n", M * N);
  return 0;
}
