// Runs one det_gemm-family launcher in the emulator on integer-valued operands and
// compares every element with the exact product, rounded once to the output dtype.
//
//   gemm_driver DTYPE M K N OFFSET OUT_FP32 [random]
//
// With `random`, the operands are non-integers whose sums round, and the driver prints a
// digest of the result's bits instead: two builds (tile configurations) that add the same
// products in the same order print the same digest.
// DTYPE is float32, float16 or bfloat16.  OFFSET (elements) shifts both operands off
// 16-byte alignment.  The build defines RLK_EMU_LAUNCHER (the launcher's name),
// RLK_EMU_LHS_T / RLK_EMU_RHS_T (operand layouts), RLK_EMU_DIMS (the launcher's
// dimension arguments in its order, e.g. K, M, N) and includes the rewritten kernel
// sources before this file.  A launcher that takes a bias [N] (det_linear) is built with
// RLK_EMU_BIAS=1; it gets an integer-valued bias when the environment sets
// RLK_EMU_USE_BIAS=1 (added to the expected sums), else a null pointer.

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

namespace {

using rlk::Dtype;

// `bytes` of memory that end exactly where an inaccessible page begins, so any read
// or write past the end stops the run.
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
  using namespace rlk::cuda;
  switch (d) {
    case Dtype::float32: static_cast<float*>(base)[i] = v; break;
    case Dtype::float16: static_cast<half_t*>(base)[i] = from_float<half_t>(v); break;
    case Dtype::bfloat16: static_cast<bfloat16_t*>(base)[i] = from_float<bfloat16_t>(v); break;
  }
}

uint32_t stored_bits(Dtype d, const void* base, int64_t i) {
  if (d == Dtype::float32) {
    uint32_t u;
    std::memcpy(&u, static_cast<const float*>(base) + i, 4);
    return u;
  }
  uint16_t u;
  std::memcpy(&u, static_cast<const uint16_t*>(base) + i, 2);
  return u;
}

// Small integers: every product and partial sum is exact in float32 for K < 1800.
float value(uint64_t seed, int64_t i) {
  uint64_t x = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<int64_t>(x % 7) - 3);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7 && !(argc == 8 && std::string(argv[7]) == "random")) {
    std::fprintf(stderr, "usage: %s DTYPE M K N OFFSET OUT_FP32 [random]\n", argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  const Dtype dtype = name == "float32" ? Dtype::float32 : name == "float16" ? Dtype::float16 : Dtype::bfloat16;
  const int64_t M = std::atoll(argv[2]), K = std::atoll(argv[3]), N = std::atoll(argv[4]);
  const int64_t offset = std::atoll(argv[5]);
  const bool out_fp32 = std::atoi(argv[6]) != 0;
  const bool random = argc == 8;
  const Dtype out = out_fp32 ? Dtype::float32 : dtype;
  rlk_emu::configure_from_environment();

  const size_t es = element_bytes(dtype);
  auto* a = guarded((M * K + offset) * es) + offset * es;
  auto* b = guarded((K * N + offset) * es) + offset * es;
  auto* c = guarded(M * N * element_bytes(out));
  rlk_emu::register_buffer(a, M * K * es);
  rlk_emu::register_buffer(b, K * N * es);
  std::memset(c, 0xEE, M * N * element_bytes(out));
  // Logical A(m, k) and B(k, n), stored as the launcher expects.
  // Random values: the integers scaled by an irrational-looking factor per element.
  auto operand = [random](uint64_t seed, int64_t i) { return random ? value(seed, i) * (1.0f + 0.0123457f * value(seed + 7, i)) + 0.3183099f * value(seed + 11, i) : value(seed, i); };
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) store(dtype, a, RLK_EMU_LHS_T ? k * M + m : m * K + k, operand(1, m * K + k));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) store(dtype, b, RLK_EMU_RHS_T ? n * K + k : k * N + n, operand(2, k * N + n));
  const char* use_bias = std::getenv("RLK_EMU_USE_BIAS");
  const bool with_bias = RLK_EMU_BIAS && use_bias != nullptr && std::string(use_bias) == "1";
  unsigned char* bias = nullptr;
  if (with_bias) {
    bias = guarded(N * es);
    rlk_emu::register_buffer(bias, N * es);
    for (int64_t n = 0; n < N; ++n) store(dtype, bias, n, operand(3, n));
  }

#if RLK_EMU_BIAS
  const auto status = rlk::cuda::RLK_EMU_LAUNCHER(a, b, bias, c, dtype, out, RLK_EMU_DIMS, out_fp32, nullptr);
#else
  const auto status = rlk::cuda::RLK_EMU_LAUNCHER(a, b, c, dtype, out, RLK_EMU_DIMS, out_fp32, nullptr);
#endif
  if (status != cudaSuccess) {
    std::printf("launcher returned error %d\n", status);
    return 1;
  }

  if (random) {
    uint64_t digest = 1469598103934665603ull;  // FNV-1a over the result's bits
    for (int64_t i = 0; i < M * N; ++i) {
      digest ^= stored_bits(out, c, i);
      digest *= 1099511628211ull;
    }
    std::printf("bits %016" PRIx64 "\n", digest);
    return 0;
  }
  auto* expected = guarded(M * N * element_bytes(out));
  int64_t wrong = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double sum = with_bias ? value(3, n) : 0;
      for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(value(1, m * K + k)) * value(2, k * N + n);
      store(out, expected, m * N + n, static_cast<float>(sum));
      const uint32_t got = stored_bits(out, c, m * N + n), want = stored_bits(out, expected, m * N + n);
      if (got != want && ++wrong <= 5)
        std::printf("c[%" PRId64 ", %" PRId64 "]: bits %#x, expected %#x (exact sum %g)\n", m, n, got, want, sum);
    }
  if (wrong) {
    std::printf("%" PRId64 " of %" PRId64 " elements wrong\n", wrong, M * N);
    return 1;
  }
  std::printf("ok: %" PRId64 " elements exact\n", M * N);
  return 0;
}
