"""rlk_lanes.h's operations give the scalar definitions' bits on every lanes type.

- round_bf16 gives float_to_bf16_bits' bits for every float32.  det_gemm_ktree's host kernel
  rounds each leaf and each node of its tree with the lanes types' round_bf16 (integer
  operations on AVX2 and AVX-512, the scalar conversion on the generic copy); its bits must be
  rlk_numerics.h's float_to_bf16_bits: round to nearest even, every NaN the canonical one
  (whatever its payload: one whose low half is all ones would carry into the exponent),
  infinities kept, overflow to infinity, subnormals rounded like any other value.  The harness
  runs each lanes type the CPU has over every high half of a float32 with low halves around each
  rounding boundary, and over a stride through all 2^32 patterns.
- The operations across lanes that attention's host kernels use for a block's sum and maximum:
  sum_halves is the halving tree lane l + lane l + W/2, ..., lane 0 + lane 1, a rounding each
  (rlk_reduce.h's lanes tree's last levels); max and max_lane give the maximum's value.  Checked
  on vectors of mixed magnitudes, signed zeros, subnormals, infinities and NaN.

The CPU rendering of rlk_lanes.h is compiled into small harnesses with the package's host flags;
each prints the mismatches it finds.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import REPO

CPU_HEADER_DIR = REPO / "generated" / "cpu" / "csrc" / "kernels" / "cpu"
HOST_FLAGS = ["-std=c++17", "-O2", "-ffp-contract=off"]

ROUNDING_HARNESS = r"""
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "rlk_lanes.h"

using namespace rlk::cpu;

// Low halves around every rounding boundary: exact, just below, at and above the half, the
// largest (which carries into the high half, or into a NaN's exponent).
static const uint32_t kLows[] = {0x0000u, 0x0001u, 0x4000u, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu};

// Checks lanes type L on `count` patterns from next(i); prints and returns the mismatches.
template <typename L, typename Next>
inline long check(const char* name, uint64_t count, const Next& next) {
  constexpr int W = L::kWidth;
  long bad = 0;
  float in[W], out[W];
  for (uint64_t i = 0; i < count; i += W) {
    for (int j = 0; j < W; ++j) in[j] = bits_float(next(i + j));
    typename L::V v;
    L::load(v, in);
    L::round_bf16(v);
    L::store(out, v);
    for (int j = 0; j < W; ++j) {
      const uint32_t want = static_cast<uint32_t>(float_to_bf16_bits(in[j])) << 16;
      if (float_bits(out[j]) != want && bad++ < 5)
        std::printf("%s: %08x gives %08x, expected %08x\n", name, float_bits(in[j]), float_bits(out[j]), want);
    }
  }
  return bad;
}

inline uint32_t boundary(uint64_t i) { return static_cast<uint32_t>(i / 8) << 16 | kLows[i % 8]; }
inline uint32_t strided(uint64_t i) { return static_cast<uint32_t>(i * 4099u); }
constexpr uint64_t kBoundaries = uint64_t{65536} * 8, kStrided = uint64_t{1} << 21;

template <typename L>
inline long check_all(const char* name) {
  return check<L>(name, kBoundaries, boundary) + check<L>(name, kStrided, strided);
}

#ifdef RLK_HOST_X86_LANES
RLK_LANES_AVX2 __attribute__((flatten)) long check_avx2() { return check_all<Avx2Lanes>("avx2"); }
RLK_LANES_AVX512 __attribute__((flatten)) long check_avx512() { return check_all<Avx512Lanes>("avx512"); }
#endif

int main() {
  std::printf("generic %ld\n", check_all<GenericLanes>("generic"));
#ifdef RLK_HOST_X86_LANES
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) std::printf("avx2 %ld\n", check_avx2());
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq"))
    std::printf("avx512 %ld\n", check_avx512());
#endif
  return 0;
}
"""


# The lanes types' operations across lanes, on vectors drawn from mixed patterns.
ACROSS_HARNESS = r"""
#include <cstdint>
#include <cstdio>

#include "rlk_lanes.h"

using namespace rlk::cpu;

// A float32 of a mixed kind: ordinary magnitudes from 2^-30 to 2^30 of either sign most often,
// then signed zeros, subnormals, infinities and the canonical NaN.
inline float draw(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  const uint32_t r = static_cast<uint32_t>(*state >> 32);
  const uint32_t sign = (r & 1u) << 31, kind = (r >> 1) % 16;
  if (kind == 0) return bits_float(sign);                                   // a zero
  if (kind == 1) return bits_float(sign | ((r >> 5) & 0x7fffffu) | 1u);     // a subnormal
  if (kind == 2) return bits_float(sign | 0x7f800000u);                     // an infinity
  if (kind == 3) return bits_float(kCanonicalNan);
  return bits_float(sign | (97u + (r >> 5) % 60u) << 23 | (r >> 9 & 0x7fffffu));
}

inline bool is_nan_bits(float x) { return x != x; }

// The mismatches of lanes type L over `count` vectors: sum_halves against the scalar halving tree
// (bits; where both are NaN, which NaN is the instruction set's choice and the compiler's operand
// order, so any NaN matches), and, on vectors without a NaN, max and max_lane against the scalar
// maximum by value (a pair of zeros of either sign compares equal).
template <typename L>
inline long check_across(const char* name, long count) {
  constexpr int W = L::kWidth;
  long bad = 0;
  uint64_t state = 2024;
  for (long n = 0; n < count; ++n) {
    float in[W], other[W], lane[W], out[W];
    bool nan = false;
    for (int j = 0; j < W; ++j) {
      in[j] = draw(&state);
      other[j] = draw(&state);
      lane[j] = in[j];
      nan = nan || is_nan_bits(in[j]) || is_nan_bits(other[j]);
    }
    for (int half = W / 2; half > 0; half /= 2)
      for (int j = 0; j < half; ++j) lane[j] = lane[j] + lane[j + half];
    typename L::V v, x;
    L::load(v, in);
    const float sum = L::sum_halves(v);
    if (!(is_nan_bits(sum) && is_nan_bits(lane[0])) && float_bits(sum) != float_bits(lane[0]) && bad++ < 5)
      std::printf("%s: sum_halves gives %08x, expected %08x\n", name, float_bits(sum), float_bits(lane[0]));
    if (nan) continue;
    L::load(x, other);
    L::max(v, x);
    L::store(out, v);
    float best = out[0];
    for (int j = 0; j < W; ++j) {
      const float want = other[j] > in[j] ? other[j] : in[j];
      if (out[j] != want && bad++ < 5) std::printf("%s: max gives %g, expected %g\n", name, out[j], want);
      best = out[j] > best ? out[j] : best;
    }
    const float top = L::max_lane(v);
    if (top != best && bad++ < 5) std::printf("%s: max_lane gives %g, expected %g\n", name, top, best);
  }
  return bad;
}

constexpr long kVectors = 200000;

#ifdef RLK_HOST_X86_LANES
RLK_LANES_AVX2 __attribute__((flatten)) long check_avx2() { return check_across<Avx2Lanes>("avx2", kVectors); }
RLK_LANES_AVX512 __attribute__((flatten)) long check_avx512() { return check_across<Avx512Lanes>("avx512", kVectors); }
#endif

int main() {
  std::printf("generic %ld\n", check_across<GenericLanes>("generic", kVectors));
#ifdef RLK_HOST_X86_LANES
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) std::printf("avx2 %ld\n", check_avx2());
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq"))
    std::printf("avx512 %ld\n", check_avx512());
#endif
  return 0;
}
"""


def run_harness(source_text: str, work) -> tuple[dict[str, int], str]:
    """Compiles and runs a harness; its mismatches per lanes type the CPU runs."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found: apt-get install -y g++")
    header = CPU_HEADER_DIR / "rlk_lanes.h"
    assert header.is_file(), f"{header} missing: run `make generate`"
    source, binary = work / "harness.cpp", work / "harness"
    source.write_text(source_text)
    built = subprocess.run([compiler, *HOST_FLAGS, f"-I{CPU_HEADER_DIR}", str(source), "-o", str(binary)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    counts = {}
    for line in ran.stdout.splitlines():
        name, _, count = line.rpartition(" ")
        if name in ("generic", "avx2", "avx512"):
            counts[name] = int(count)
    assert "generic" in counts, ran.stdout
    return counts, ran.stdout


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict[str, int], str]:
    """round_bf16's mismatches per lanes type the CPU runs, and the harness's output."""
    return run_harness(ROUNDING_HARNESS, tmp_path_factory.mktemp("rounding"))


@pytest.fixture(scope="module")
def across(tmp_path_factory) -> tuple[dict[str, int], str]:
    """sum_halves', max's and max_lane's mismatches per lanes type, and the harness's output."""
    return run_harness(ACROSS_HARNESS, tmp_path_factory.mktemp("across"))


def assert_no_mismatches(found: tuple[dict[str, int], str], lanes: str) -> None:
    counts, output = found
    if lanes not in counts:
        pytest.skip(f"this CPU does not run the {lanes} lanes")
    assert counts[lanes] == 0, output


@pytest.mark.parametrize("lanes", ["generic", "avx2", "avx512"])
def test_round_bf16_is_float_to_bf16_bits(results, lanes):
    assert_no_mismatches(results, lanes)


def test_the_patterns_reach_each_rule():
    """The harness's patterns hold each case the rounding distinguishes: a tie to even in both
    directions, a carry into the exponent, overflow to infinity, a NaN whose low half would carry."""
    def bf16(u: int) -> int:  # float_to_bf16_bits, in Python
        if (u & 0x7FFFFFFF) > 0x7F800000:
            return 0x7FC0
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF

    patterns = {hi << 16 | lo for hi in range(65536) for lo in (0x0000, 0x0001, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF)}
    assert {0x3F808000, 0x3F818000} <= patterns and bf16(0x3F808000) == 0x3F80 and bf16(0x3F818000) == 0x3F82  # ties to even
    assert 0x3FFFFFFF in patterns and bf16(0x3FFFFFFF) == 0x4000  # carry into the exponent
    assert 0x7F7FFFFF in patterns and bf16(0x7F7FFFFF) == 0x7F80  # overflow to infinity
    assert 0x7FFFFFFF in patterns and ((0x7FFFFFFF + 0x8000) >> 16) & 0xFFFF == 0x8000  # a NaN that the plain rule turns into -0
    assert 0x00018000 in patterns and bf16(0x00018000) == 0x0002  # a subnormal tie, to even


@pytest.mark.parametrize("lanes", ["generic", "avx2", "avx512"])
def test_sum_halves_and_maxima_are_the_scalar_ones(across, lanes):
    assert_no_mismatches(across, lanes)
