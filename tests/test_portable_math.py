"""Portable float32 math (rlk_math.h): accuracy against libm, exact special cases, device compiles.

The CPU rendering (generated/cpu/csrc/kernels/cpu/rlk_math.h) is compiled into a small C++
harness with the package's host flags (g++ -std=c++17 -O2 -ffp-contract=off). It evaluates each
function over float32 bit patterns and compares with the double-precision C library, whose
result is accurate far beyond float32: the error is counted in float32 ulps at the exact value
(subnormal spacing below 2^-126). The device renderings are compiled with nvcc and hipcc to show
they are well-formed there and contain no approximate hardware instructions. Where a CUDA GPU is
present, its results are compared with the CPU's bit for bit.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, compiles

GENERATED = REPO / "generated"
CPU_HEADER_DIR = GENERATED / "cpu" / "csrc" / "kernels" / "cpu"

# Bounds on the error in ulps, kept equal to those stated in runtime/kernels/rlk_math.h:
# every function is faithful (error below one ulp); sqrt is correctly rounded (0.5).
MAX_ULP = {
    "exp": 1.0,
    "expm1": 1.0,
    "log": 1.0,
    "log1p": 1.0,
    "sigmoid": 1.0,
    "tanh": 1.0,
    "sqrt": 0.5,
    "rsqrt": 1.0,
    "sin": 1.0,
    "cos": 1.0,
}
FUNCTIONS = sorted(MAX_ULP)
HOST_FLAGS = ["-std=c++17", "-O2", "-ffp-contract=off"]

HARNESS = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "rlk_math.h"

using namespace rlk::cpu;

static const char* const NAMES[] = {"exp", "expm1", "log", "log1p", "sigmoid", "tanh", "sqrt", "rsqrt", "sin", "cos"};
static const int COUNT = 10;

static float eval(int f, float x) {
  switch (f) {
    case 0: return exp_f32(x);
    case 1: return expm1_f32(x);
    case 2: return log_f32(x);
    case 3: return log1p_f32(x);
    case 4: return sigmoid_f32(x);
    case 5: return tanh_f32(x);
    case 6: return sqrt_f32(x);
    case 7: return rsqrt_f32(x);
    case 8: return sin_f32(x);
    default: return cos_f32(x);
  }
}

// The C library in double precision: within a few double ulps, i.e. exact at float32 scale.
static double reference(int f, float xf) {
  const double x = xf;
  switch (f) {
    case 0: return std::exp(x);
    case 1: return std::expm1(x);
    case 2: return std::log(x);
    case 3: return std::log1p(x);
    case 4: return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
    case 5: return std::tanh(x);
    case 6: return std::sqrt(x);
    case 7: return 1.0 / std::sqrt(x);
    case 8: return std::sin(x);  // glibc reduces exactly too, for every double
    default: return std::cos(x);
  }
}

static uint32_t bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static float from_bits(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }

// |y - d| in float32 ulps at d. Infinities and NaN must match exactly (else the error is inf).
static double ulp_error(float y, double d) {
  if (std::isnan(d) || std::isnan(y)) return std::isnan(d) && std::isnan(y) ? 0.0 : INFINITY;
  const float rounded = static_cast<float>(d);
  if (std::isinf(y) || std::isinf(rounded)) return y == rounded ? 0.0 : INFINITY;
  int e = 0;
  std::frexp(d, &e);
  const int exponent = d == 0.0 ? -126 : std::max(e - 1, -126);
  return std::fabs(static_cast<double>(y) - d) / std::ldexp(1.0, exponent - 23);
}

struct Tally {
  double max_ulp = 0.0;
  uint32_t worst = 0;
  uint64_t count = 0;
  uint64_t not_correctly_rounded = 0;
};

static void sweep(int f, uint64_t lo, uint64_t hi, uint64_t step, Tally& t) {
  for (uint64_t b = lo; b < hi; b += step) {
    const float x = from_bits(static_cast<uint32_t>(b));
    const float y = eval(f, x);
    const double d = reference(f, x);
    const double err = ulp_error(y, d);
    const float rounded = static_cast<float>(d);
    const bool same = bits(y) == bits(rounded) || (std::isnan(y) && std::isnan(rounded));
    t.count += 1;
    t.not_correctly_rounded += same ? 0 : 1;
    if (!(err <= t.max_ulp)) {
      t.max_ulp = err;
      t.worst = static_cast<uint32_t>(b);
    }
  }
}

static int function_index(const char* name) {
  for (int i = 0; i < COUNT; ++i)
    if (!std::strcmp(name, NAMES[i])) return i;
  std::fprintf(stderr, "unknown function %s\n", name);
  std::exit(2);
}

int main(int argc, char** argv) {
  if (argc >= 3 && !std::strcmp(argv[1], "eval")) {  // eval FUNC HEX...: one result's bits per line
    if (!std::strcmp(argv[2], "fma")) {
      for (int i = 3; i + 2 < argc; i += 3)
        std::printf("%08x\n", bits(fma_rn(from_bits(std::strtoul(argv[i], 0, 16)), from_bits(std::strtoul(argv[i + 1], 0, 16)),
                                          from_bits(std::strtoul(argv[i + 2], 0, 16)))));
      return 0;
    }
    if (!std::strcmp(argv[2], "div")) {
      for (int i = 3; i + 1 < argc; i += 2)
        std::printf("%08x\n", bits(div_rn(from_bits(std::strtoul(argv[i], 0, 16)), from_bits(std::strtoul(argv[i + 1], 0, 16)))));
      return 0;
    }
    const int f = function_index(argv[2]);
    for (int i = 3; i < argc; ++i) std::printf("%08x\n", bits(eval(f, from_bits(std::strtoul(argv[i], 0, 16)))));
    return 0;
  }
  if (argc >= 4 && !std::strcmp(argv[1], "sweep")) {  // sweep FUNC THREADS [LO HI STEP]...: bit ranges, HI exclusive
    const int f = function_index(argv[2]);
    const int threads = std::max(1, std::atoi(argv[3]));
    Tally total;
    for (int i = 4; i + 2 < argc; i += 3) {
      const uint64_t lo = std::strtoull(argv[i], 0, 0), hi = std::strtoull(argv[i + 1], 0, 0), step = std::strtoull(argv[i + 2], 0, 0);
      const uint64_t n = (hi - lo + step - 1) / step, per = (n + threads - 1) / threads;
      std::vector<Tally> part(threads);
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        const uint64_t a = lo + t * per * step, b = std::min<uint64_t>(hi, a + per * step);
        if (a < b) workers.emplace_back(sweep, f, a, b, step, std::ref(part[t]));
      }
      for (auto& w : workers) w.join();
      for (const Tally& p : part) {
        total.count += p.count;
        total.not_correctly_rounded += p.not_correctly_rounded;
        if (!(p.max_ulp <= total.max_ulp)) {
          total.max_ulp = p.max_ulp;
          total.worst = p.worst;
        }
      }
    }
    std::printf("%s %.6f %08x %llu %llu\n", NAMES[f], total.max_ulp, total.worst, static_cast<unsigned long long>(total.count),
                static_cast<unsigned long long>(total.not_correctly_rounded));
    return 0;
  }
  if (argc == 6 && !std::strcmp(argv[1], "digest")) {  // digest FUNC LO HI STEP: FNV-1a of the result bits, in order
    const int f = function_index(argv[2]);
    const uint64_t lo = std::strtoull(argv[3], 0, 0), hi = std::strtoull(argv[4], 0, 0), step = std::strtoull(argv[5], 0, 0);
    uint64_t h = 0xcbf29ce484222325ull, n = 0;
    for (uint64_t b = lo; b < hi; b += step, ++n) h = (h ^ bits(eval(f, from_bits(static_cast<uint32_t>(b))))) * 0x100000001b3ull;
    std::printf("%s %016llx %llu\n", NAMES[f], static_cast<unsigned long long>(h), static_cast<unsigned long long>(n));
    return 0;
  }
  if (argc == 3 && !std::strcmp(argv[1], "near")) {  // near STEP: sigmoid_near_f32 against sigmoid_f32, and its range check
    uint64_t differ = 0, count = 0;
    const uint32_t limit = bits(kSigmoidNear);
    const uint64_t step = std::max(1ull, std::strtoull(argv[2], 0, 0)), dense = 1u << 16;
    // Magnitudes up to 80, both signs: every STEPth bit pattern, and every one of the first and last 2^16.
    for (uint64_t b = 0; b <= limit; b += (b < dense || b + dense >= limit) ? 1 : step)
      for (uint32_t sign : {0u, 0x80000000u}) {
        const float x = from_bits(static_cast<uint32_t>(b) | sign);
        differ += bits(sigmoid_near_f32(x)) != bits(sigmoid_f32(x));
        count += 1;
      }
    // The range check on single values and on a block with one value out of range at its end.
    const uint32_t probes[] = {0u, 0x80000000u, limit, limit | 0x80000000u, limit + 1, (limit + 1) | 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u};
    std::vector<float> block(300, 1.0f);
    for (uint32_t probe : probes) {
      const float x = from_bits(probe);
      const bool near = (probe & 0x7fffffffu) <= limit;
      block.back() = x;
      std::printf("%08x %d %d %d\n", probe, near ? 1 : 0, sigmoid_near_all(&x, 1) ? 1 : 0, sigmoid_near_all(block.data(), 300) ? 1 : 0);
    }
    std::printf("%llu %llu\n", static_cast<unsigned long long>(differ), static_cast<unsigned long long>(count));
    return 0;
  }
  std::fprintf(stderr, "usage: harness eval FUNC HEX... | sweep FUNC THREADS [LO HI STEP]... | digest FUNC LO HI STEP | near STEP\n");
  return 2;
}
"""


def f2b(x: float) -> int:
    """float32 bits of x (which must be representable)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def b2f(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u))[0]


def round_to_float_bits(d: float) -> int:
    """Bits of d rounded to nearest float32 (overflow to infinity)."""
    if math.isinf(d) or abs(d) >= 2.0**128 - 2.0**103:
        return 0x7F800000 | (0x80000000 if d < 0 else 0)
    return f2b(d)


def both_signs(lo: int, hi: int, step: int) -> list[tuple[int, int, int]]:
    """A range of positive bit patterns and the same magnitudes with the sign bit set."""
    return [(lo, hi, step), (lo | 0x80000000, hi | 0x80000000, step)]


def window(x: float, half: int = 1 << 14) -> tuple[int, int, int]:
    """Every bit pattern within `half` ulps of the float x (same sign)."""
    u = f2b(x)
    return (u - half, u + half, 1)


WHOLE_RANGE = (0, 1 << 32, 97)  # every 97th bit pattern: both signs, every binade, NaNs and infinities
BELOW_ONE = f2b(1.0) + 1  # HI is exclusive

# Floats nearest to k pi/2, where reducing sin's and cos's argument cancels the most: small k,
# k around the 2^24 and 10^6 that rotary positions reach, and 0x1.f37c8ap+95, the float32
# nearest a multiple of pi/2 of all (|x - k pi/2| = 2^-29.2, found by scanning every float).
HALF_PI_MULTIPLES = [f2b(k * math.pi / 2) for k in (1, 2, 3, 4, 5, 7, 100, 1000, 636620, 10680707, 2**24 + 1)]
TRIG_DENSE = [
    # the switch to the reduction at pi/4; tiny and subnormal arguments; near multiples of pi/2
    *both_signs(0x3F490FDB - (1 << 14), 0x3F490FDB + (1 << 14), 1),
    *both_signs(0, f2b(2.0**-10), 4099),
    *(window(b2f(u), 1 << 12) for u in HALF_PI_MULTIPLES),
    window(b2f(0x6F79BE45)),
    window(-b2f(0x6F79BE45)),
    # where the angles of long contexts lie (10^6 rad and beyond), and the top of the range
    (f2b(2.0**19), f2b(2.0**25), 29),
    (0x7F000000, 0x7F800001, 3),
]

# Dense regions: thresholds, where the argument reduction switches, where cancellation threatens.
DENSE: dict[str, list[tuple[int, int, int]]] = {
    "exp": [
        # overflow; underflow to zero; subnormal results
        window(88.72283172607421875),
        window(-103.97207641601562),
        (f2b(87.0) | 0x80000000, f2b(104.0) | 0x80000000, 3),
        # n changes from 0 to +-1; e^x near 1
        window(0.3465735912322998),
        window(-0.3465735912322998),
        *both_signs(f2b(2.0**-28), f2b(2.0**-22), 11),
    ],
    "expm1": [
        # the thresholds of the special paths
        window(2.0**-24),
        window(-(2.0**-24)),
        window(-18.0),
        window(88.0),
        window(88.72283172607421875),
        # n changes from 0 to +-1; -1 + 2^n (1 + r) cancels; 2^n reaches 2^-25
        window(0.3465735912322998),
        window(-0.3465735912322998),
        *both_signs(f2b(0.125), f2b(1.0), 31),
        window(-17.328680038452148),
    ],
    "log": [
        # near 1, where log(x) is small; subnormal inputs; where m is halved; up to FLT_MAX and +inf
        (f2b(0.9375), f2b(1.0625), 1),
        (1, 0x00800000, 17),
        window(1.4142135381698608),
        window(0.7071067690849304),
        (0x7F700000, 0x7F800001, 7),
    ],
    "log1p": [
        # near 0; near -1; the edges of the directly reduced range; where 1 + x is rounded; the top
        *both_signs(f2b(2.0**-30), f2b(2.0**-20), 61),
        (f2b(0.9375) | 0x80000000, BELOW_ONE | 0x80000000, 1),
        window(0.41421356797218323),
        window(-0.29289323091506958),
        (f2b(2.0**23), f2b(2.0**25), 61),
        (0x7F700000, 0x7F800001, 7),
    ],
    "sigmoid": [
        # near 0; where 1 + e^-|x| rounds to 1; the switch to exp; subnormal results
        *both_signs(0, f2b(1.0), 257),
        *both_signs(f2b(8.0), f2b(20.0), 17),
        window(80.0),
        window(-80.0),
        window(87.33654022216797),
        window(-87.33654022216797),
    ],
    "tanh": [
        # the thresholds of the special paths; small and moderate arguments
        window(2.0**-12),
        window(-(2.0**-12)),
        window(10.0),
        window(-10.0),
        window(0.55),
        window(-0.55),
        *both_signs(f2b(2.0**-5), f2b(1.0), 61),
    ],
    # sqrt and rsqrt scale exactly by powers of 4: all of [1, 4) and every subnormal is exhaustive.
    "sqrt": [(f2b(1.0), f2b(4.0), 1), (1, 0x00800000, 1), (0x7F000000, 0x7F800001, 3)],
    "rsqrt": [(f2b(1.0), f2b(4.0), 1), (1, 0x00800000, 1), (0x7F000000, 0x7F800001, 3)],
    "sin": TRIG_DENSE,
    "cos": TRIG_DENSE,
}


def threads() -> int:
    return max(1, min(2, os.cpu_count() or 1))


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found: apt-get install -y g++")
    header = CPU_HEADER_DIR / "rlk_math.h"
    assert header.is_file(), f"{header} missing: run `make generate`"
    work = tmp_path_factory.mktemp("portable_math")
    source = work / "harness.cpp"
    source.write_text(HARNESS)
    binary = work / "harness"
    cmd = [compiler, *HOST_FLAGS, "-pthread", f"-I{CPU_HEADER_DIR}", str(source), "-o", str(binary)]
    result = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return binary


def sweep(harness: Path, function: str, ranges: list[tuple[int, int, int]]) -> dict[str, float | int]:
    args = [str(harness), "sweep", function, str(threads())]
    for lo, hi, step in ranges:
        args += [str(lo), str(hi), str(step)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=900, check=True).stdout.split()
    assert out[0] == function
    return {"max_ulp": float(out[1]), "worst": int(out[2], 16), "count": int(out[3]), "not_cr": int(out[4])}


def evaluate(harness: Path, function: str, inputs: list[int]) -> list[int]:
    args = [str(harness), "eval", function, *(f"{u:08x}" for u in inputs)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    return [int(v, 16) for v in out]


def check_accuracy(harness: Path, function: str, ranges: list[tuple[int, int, int]]) -> None:
    r = sweep(harness, function, ranges)
    where = f"{b2f(int(r['worst']))!r} (0x{int(r['worst']):08x})"
    print(f"{function}: max {r['max_ulp']:.4f} ulp at {where} over {r['count']} inputs, {r['not_cr']} not correctly rounded")
    if MAX_ULP[function] == 0.5:  # correctly rounded: every result is the reference rounded to float
        assert r["not_cr"] == 0, f"{function}: {r['not_cr']} results not correctly rounded; worst {r['max_ulp']:.4f} ulp at {where}"
    else:
        assert r["max_ulp"] < MAX_ULP[function], f"{function}: {r['max_ulp']:.4f} ulp at {where}, bound {MAX_ULP[function]}"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_accuracy_on_a_coarse_sample(harness, function):
    """Quick: every 9973rd bit pattern (about 430 000 inputs per function), all dense regions thinned."""
    thinned = [(lo, hi, step * 97) for lo, hi, step in DENSE[function]]
    check_accuracy(harness, function, [(0, 1 << 32, 9973), *thinned])


@pytest.mark.slow
@pytest.mark.parametrize("function", FUNCTIONS)
def test_accuracy_every_97th_pattern_and_dense_regions(harness, function):
    """Every 97th of all 2^32 bit patterns (44 million inputs) plus the dense regions, in full."""
    check_accuracy(harness, function, [WHOLE_RANGE, *DENSE[function]])


NAN = 0x7FC00000  # the NaN an invalid operation returns
INF, NEG_INF = 0x7F800000, 0xFF800000
ZERO, NEG_ZERO = 0x00000000, 0x80000000
ONE = 0x3F800000
MIN_SUBNORMAL, MAX_FLOAT = 0x00000001, 0x7F7FFFFF

# Input bits -> expected output bits, per function: the rules of each function, exactly.
NEG_ONE = 0xBF800000
SPECIAL_CASES: dict[str, dict[int, int]] = {
    "exp": {INF: INF, NEG_INF: ZERO, ZERO: ONE, NEG_ZERO: ONE, MIN_SUBNORMAL: ONE, 0x42B17218: INF, f2b(-104.0): ZERO, MAX_FLOAT: INF},
    "expm1": {
        INF: INF,
        NEG_INF: NEG_ONE,
        ZERO: ZERO,
        NEG_ZERO: NEG_ZERO,
        MIN_SUBNORMAL: MIN_SUBNORMAL,
        0x42B17218: INF,
        f2b(-20.0): NEG_ONE,
    },
    "log": {ZERO: NEG_INF, NEG_ZERO: NEG_INF, ONE: ZERO, INF: INF, NEG_ONE: NAN, NEG_INF: NAN, MIN_SUBNORMAL | 0x80000000: NAN},
    "log1p": {ZERO: ZERO, NEG_ZERO: NEG_ZERO, NEG_ONE: NEG_INF, INF: INF, f2b(-2.0): NAN, NEG_INF: NAN, MIN_SUBNORMAL: MIN_SUBNORMAL},
    "sigmoid": {ZERO: f2b(0.5), NEG_ZERO: f2b(0.5), INF: ONE, NEG_INF: ZERO, f2b(100.0): ONE, f2b(-200.0): ZERO, MAX_FLOAT: ONE},
    "tanh": {ZERO: ZERO, NEG_ZERO: NEG_ZERO, INF: ONE, NEG_INF: NEG_ONE, MIN_SUBNORMAL: MIN_SUBNORMAL, f2b(20.0): ONE},
    "sqrt": {
        ZERO: ZERO,
        NEG_ZERO: NEG_ZERO,
        INF: INF,
        NEG_INF: NAN,
        NEG_ONE: NAN,
        f2b(4.0): f2b(2.0),
        ONE: ONE,
        f2b(2.0**-148): f2b(2.0**-74),
    },
    "rsqrt": {ZERO: INF, NEG_ZERO: NEG_INF, INF: ZERO, NEG_ONE: NAN, NEG_INF: NAN, f2b(4.0): f2b(0.5), f2b(2.0**-148): f2b(2.0**74)},
    "sin": {ZERO: ZERO, NEG_ZERO: NEG_ZERO, INF: NAN, NEG_INF: NAN, MIN_SUBNORMAL: MIN_SUBNORMAL, MIN_SUBNORMAL | 0x80000000: MIN_SUBNORMAL | 0x80000000},
    "cos": {ZERO: ONE, NEG_ZERO: ONE, INF: NAN, NEG_INF: NAN, MIN_SUBNORMAL: ONE},
}
# A NaN input comes back with its quiet bit set, sign and payload kept.
NAN_INPUTS = {0x7F800001: 0x7FC00001, 0x7FC00000: 0x7FC00000, 0xFFC00000: 0xFFC00000, 0xFFBFFFFF: 0xFFFFFFFF, 0x7FA5A5A5: 0x7FE5A5A5}


@pytest.mark.parametrize("function", FUNCTIONS)
def test_special_cases_are_exact(harness, function):
    cases = [*SPECIAL_CASES[function].items(), *NAN_INPUTS.items()]
    got = evaluate(harness, function, [x for x, _ in cases])
    wrong = [f"{function}(0x{x:08x} = {b2f(x)!r}) = 0x{g:08x}, expected 0x{y:08x}" for (x, y), g in zip(cases, got) if g != y]
    assert not wrong, "\n".join(wrong)


REFERENCE = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh, "sin": math.sin, "cos": math.cos}


@pytest.mark.parametrize(
    "function, x",
    [("exp", 1.0), ("exp", -1.0), ("log", 2.0), ("log", 10.0), ("sqrt", 2.0), ("tanh", 0.5), ("sin", 1.0), ("cos", 1.0), ("sin", 1.0e6), ("cos", 1.0e6)],
)
def test_common_values_are_correctly_rounded(harness, function, x):
    (got,) = evaluate(harness, function, [f2b(x)])
    assert got == round_to_float_bits(REFERENCE[function](x))


def test_sigmoid_near_gives_the_bits_of_sigmoid_over_its_range(harness):
    """sigmoid_near_f32, which host loops call on a block whose every value sigmoid_near_all has
    found in [-80, 80], leaves out sigmoid_f32's steps for the far tails and NaN: over every 97th
    float32 of magnitude up to 80 and every one near 0 and near 80 (both signs, about 23 million
    inputs; all 2.2 billion of them were checked once, in 5 minutes) it must give the same bits,
    and the range check must refuse 80's successor, infinities and NaN, alone and at the end of a block."""
    out = subprocess.run([str(harness), "near", "97"], capture_output=True, text=True, timeout=900, check=True).stdout.split("\n")
    *probes, total = [line for line in out if line]
    differ, count = (int(v) for v in total.split())
    assert count > 20_000_000
    assert differ == 0, f"sigmoid_near_f32 differs from sigmoid_f32 on {differ} of {count} inputs"
    for line in probes:
        probe, expected, alone, in_block = line.split()
        assert alone == expected and in_block == expected, f"sigmoid_near_all on 0x{probe}: {alone}/{in_block}, expected {expected}"


def test_fma_rn_rounds_once_and_div_rn_is_ieee(harness):
    # (1 + 2^-23)(1 - 2^-23) - 1 = -2^-46 exactly; a separately rounded product gives 0.
    one_plus, one_minus = f2b(1.0 + 2.0**-23), f2b(1.0 - 2.0**-23)
    out = subprocess.run(
        [str(harness), "eval", "fma", f"{one_plus:08x}", f"{one_minus:08x}", "bf800000"], capture_output=True, text=True, check=True
    )
    assert int(out.stdout.split()[0], 16) == f2b(-(2.0**-46))
    out = subprocess.run([str(harness), "eval", "div", "3f800000", "40400000"], capture_output=True, text=True, check=True)
    assert int(out.stdout.split()[0], 16) == round_to_float_bits(1.0 / 3.0)


# ---------------------------------------------------------------- device renderings compile

DEVICE_SOURCE = """
#include "rlk_math.h"

using namespace rlk::{ns};

__global__ void every_function(const float* x, float* y, int n) {{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  y[12 * i + 0] = exp_f32(v);
  y[12 * i + 1] = expm1_f32(v);
  y[12 * i + 2] = log_f32(v);
  y[12 * i + 3] = log1p_f32(v);
  y[12 * i + 4] = sigmoid_f32(v);
  y[12 * i + 5] = tanh_f32(v);
  y[12 * i + 6] = sqrt_f32(v);
  y[12 * i + 7] = rsqrt_f32(v);
  y[12 * i + 8] = fma_rn(v, v, v);
  y[12 * i + 9] = div_rn(v, 3.0f);
  sincos_f32(v, y[12 * i + 10], y[12 * i + 11]);
}}

// The same functions from host code in the same translation unit.
float on_host(float v) {{
  return exp_f32(v) + expm1_f32(v) + log_f32(v) + log1p_f32(v) + sigmoid_f32(v) + tanh_f32(v) + sqrt_f32(v) +
         rsqrt_f32(v) + fma_rn(v, v, v) + div_rn(v, 3.0f) + sin_f32(v) + cos_f32(v);
}}
"""


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found is None:
        candidate = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
        found = str(candidate) if candidate.is_file() else None
    return found


@compiles
def test_cuda_rendering_compiles_without_approximate_instructions(tmp_path):
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA toolkit and set CUDA_HOME=/usr/local/cuda")
    source = tmp_path / "math_check.cu"
    source.write_text(DEVICE_SOURCE.format(ns="cuda"))
    include = GENERATED / "cuda" / "csrc" / "kernels" / "cuda"
    common = [nvcc, "-std=c++17", "-fmad=false", "-arch=sm_90", f"-I{include}"]
    result = subprocess.run(
        [*common, "-c", str(source), "-o", str(tmp_path / "math_check.o")], check=False, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ptx = tmp_path / "math_check.ptx"
    result = subprocess.run([*common, "-ptx", str(source), "-o", str(ptx)], check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    text = ptx.read_text()
    assert "fma.rn.f32" in text
    # No hardware approximations (ex2/lg2/rcp/sqrt/rsqrt .approx) and no library calls.
    for banned in (".approx", "ex2.", "lg2.", "sqrt.", "call"):
        assert banned not in text, f"PTX contains {banned!r}"


@compiles
def test_rocm_rendering_compiles_without_approximate_instructions(tmp_path):
    hipcc = shutil.which("hipcc")
    if hipcc is None:
        pytest.skip("hipcc not found: apt-get install -y --no-install-recommends hipcc libamdhip64-dev rocm-device-libs")
    source = tmp_path / "math_check.hip"
    source.write_text(DEVICE_SOURCE.format(ns="rocm"))
    include = GENERATED / "rocm" / "csrc" / "kernels" / "rocm"
    env = {**os.environ, "HIP_PLATFORM": "amd"}
    common = [hipcc, "-std=c++17", "-ffp-contract=off", "--offload-arch=gfx90a", f"-I{include}"]
    result = subprocess.run(
        [*common, "-c", str(source), "-o", str(tmp_path / "math_check.o")],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    asm = tmp_path / "math_check.s"
    result = subprocess.run(
        [*common, "--cuda-device-only", "-S", str(source), "-o", str(asm)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = asm.read_text()
    assert "v_fma_f32" in text or "v_fmac_f32" in text
    # No hardware transcendental or square root instructions, no unfused multiply-add, subnormals kept.
    for banned in ("v_exp_f32", "v_log_f32", "v_sqrt_f32", "v_rsq_f32", "v_mad_f32", "v_mac_f32", "s_swappc"):
        assert banned not in text, f"device assembly contains {banned!r}"
    assert ".amdhsa_float_denorm_mode_32 3" in text


# ---------------------------------------------------------------- same bits on a GPU as on the CPU

GPU_DIGEST = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rlk_math.h"

using namespace rlk::cuda;

static const char* const NAMES[] = {"exp", "expm1", "log", "log1p", "sigmoid", "tanh", "sqrt", "rsqrt", "sin", "cos"};
static const int COUNT = 10;

__host__ __device__ float eval(int f, float x) {
  switch (f) {
    case 0: return exp_f32(x);
    case 1: return expm1_f32(x);
    case 2: return log_f32(x);
    case 3: return log1p_f32(x);
    case 4: return sigmoid_f32(x);
    case 5: return tanh_f32(x);
    case 6: return sqrt_f32(x);
    case 7: return rsqrt_f32(x);
    case 8: return sin_f32(x);
    default: return cos_f32(x);
  }
}

__global__ void evaluate(int f, uint64_t lo, uint64_t step, uint64_t n, uint32_t* out) {
  const uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = float_bits(eval(f, bits_float(static_cast<uint32_t>(lo + i * step))));
}

// gpu_digest FUNC LO HI STEP: FNV-1a of the device's result bits in order (as `harness digest`),
// and a cross-check of every 61st result against this file's own host-side evaluation.
int main(int argc, char** argv) {
  if (argc != 5) return 2;
  int f = 0;
  while (f < COUNT && std::strcmp(argv[1], NAMES[f])) ++f;
  if (f == COUNT) return 2;
  const uint64_t lo = std::strtoull(argv[2], 0, 0), hi = std::strtoull(argv[3], 0, 0), step = std::strtoull(argv[4], 0, 0);
  const uint64_t n = (hi - lo + step - 1) / step;
  uint32_t* device = nullptr;
  if (cudaMalloc(&device, n * sizeof(uint32_t)) != cudaSuccess) return 3;
  evaluate<<<static_cast<unsigned>((n + 255) / 256), 256>>>(f, lo, step, n, device);
  std::vector<uint32_t> out(n);
  if (cudaMemcpy(out.data(), device, n * sizeof(uint32_t), cudaMemcpyDeviceToHost) != cudaSuccess) return 4;
  cudaFree(device);
  uint64_t h = 0xcbf29ce484222325ull, mismatches = 0;
  for (uint64_t i = 0; i < n; ++i) {
    h = (h ^ out[i]) * 0x100000001b3ull;
    if (i % 61 == 0) {
      const uint32_t x = static_cast<uint32_t>(lo + i * step), host = float_bits(eval(f, bits_float(x)));
      if (host != out[i] && mismatches++ < 5) std::fprintf(stderr, "%s(0x%08x): device 0x%08x, host 0x%08x\n", NAMES[f], x, out[i], host);
    }
  }
  std::printf("%s %016llx %llu %llu\n", NAMES[f], static_cast<unsigned long long>(h), static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(mismatches));
  return 0;
}
"""


def gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    result = subprocess.run([smi, "-L"], check=False, capture_output=True, text=True, timeout=60)
    return result.returncode == 0 and "GPU" in result.stdout


@compiles
def test_gpu_results_are_the_cpu_bits(harness, tmp_path):
    """On a machine with a CUDA GPU: every 97th bit pattern gives the same bits on the device as on the CPU."""
    nvcc = find_nvcc()
    if nvcc is None or not gpu_present():
        pytest.skip("needs nvcc and a CUDA GPU (nvidia-smi -L lists none here)")
    source = tmp_path / "gpu_digest.cu"
    source.write_text(GPU_DIGEST)
    binary = tmp_path / "gpu_digest"
    include = GENERATED / "cuda" / "csrc" / "kernels" / "cuda"
    cmd = [
        nvcc,
        "-std=c++17",
        "-O3",
        "-fmad=false",
        "-Xcompiler",
        "-ffp-contract=off",
        "-arch=native",
        f"-I{include}",
        str(source),
        "-o",
        str(binary),
    ]
    result = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lo, hi, step = WHOLE_RANGE
    differ = []
    for function in FUNCTIONS:
        args = [function, str(lo), str(hi), str(step)]
        gpu = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=600, check=True)
        cpu = subprocess.run([str(harness), "digest", *args], capture_output=True, text=True, timeout=600, check=True)
        _, digest, count, mismatches = gpu.stdout.split()
        print(f"{function}: {count} inputs, device digest {digest}, CPU digest {cpu.stdout.split()[1]}")
        if int(mismatches) or cpu.stdout.split()[1] != digest:
            differ.append(f"{function}: device and CPU bits differ ({mismatches} of the cross-checked results)\n{gpu.stderr}")
    assert not differ, "\n".join(differ)
