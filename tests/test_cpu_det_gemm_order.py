"""CPU det_gemm computes exactly the order its contract states, bit for bit.

Every output element is one float32 accumulator starting at 0.0 that adds
a[m,k] * b[k,n] for k = 0..K-1 in ascending order, each by one fused multiply-add
(acc = fma(a, b, acc), one rounding; the spec's `step: fma`), and is rounded once to
the output dtype.  `emulate` writes that sequence out in NumPy, with an fma that
rounds exactly once (`fma_f32`).  The kernel's tiling, vector width
(AVX2 or the portable path) and thread count must not show in the bits, and one
row computed alone must equal the same row computed in a batch.  det_linear's bias
is one float32 add to that accumulator before the rounding, and its gradient,
column_sum, adds the rows of each column in ascending order in float32.

det_gemm_ktree's leaves are that sequence over 32 values of k each, from 0.0, rounded to
bfloat16, and the leaves are added by the mid-split tree in bfloat16: checked against the same
emulation, and against the package's Python reference (rlkernels._references.det_gemm_ktree) on
inputs whose leaf sums are exact in float32, so that the reference's own float32 product has one
answer.  Shapes, code paths and thread counts are drawn by hypothesis.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
np = pytest.importorskip("numpy", reason="the emulation needs numpy (make test installs it)")
hypothesis = pytest.importorskip("hypothesis", reason="the K-tree's property tests need hypothesis (make test installs it)")
from hypothesis import given, settings
from hypothesis import strategies as st

from bitwise import bits, same_bits
from package_build import import_built

pytestmark = pytest.mark.slow

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# (M, K, N): none a multiple of the register tile (12, 8, 6, 4 or 3 rows x 16, 32 or 64 columns),
# plus K = 0, K = 1, M = 1, N = 1, the few-row tiles with K and N past the sixteen-value packing
# blocks, one product large enough to be split over threads, and one whose output passes the size
# the kernel stores past the caches (2 MiB, in every output dtype), in rows that do and do not start
# on a cache line (N = 1030).
SHAPES = [
    (3, 0, 5),
    (1, 1, 1),
    (1, 7, 5),
    (5, 1, 17),
    (7, 13, 33),
    (2, 33, 130),
    (6, 40, 70),
    (37, 65, 17),
    (13, 300, 129),
    (131, 257, 301),
    (1024, 5, 1030),
]
# Code paths and thread counts the kernel reads from the environment on every call: the CPU's own
# (its widest instructions; bfloat16 pairs where it runs them faster), the portable one, and the
# bfloat16 pairs path asked for (the CPU's own where it has no AVX512-BF16).
SIMD = ["native", "generic", "avx512_bf16"]
THREADS = ["1", "4"]


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


@pytest.fixture
def configure(monkeypatch):
    def apply(simd: str, threads: str) -> None:
        if simd == "native":
            monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
        else:
            monkeypatch.setenv("RLK_CPU_SIMD", simd)
        monkeypatch.setenv("RLK_NUM_THREADS", threads)

    return apply


def inputs(m: int, k: int, n: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Normal values spread over 2^-8..2^8, so sums lose different bits in different orders."""
    g = torch.Generator().manual_seed(seed)

    def make(rows: int, cols: int) -> torch.Tensor:
        scale = torch.exp2(torch.randint(-8, 9, (rows, cols), generator=g).float())
        return (torch.randn(rows, cols, generator=g) * scale).to(dtype)

    return make(m, k), make(k, n)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c for float32 arrays, rounded once to float32 (IEEE fusedMultiplyAdd).

    The product of two float32 values is exact in float64 (48 of its 53 bits); the float64 sum
    is rounded to odd (its error, found by TwoSum, decides the last bit), and a float64 value
    rounded to odd rounds to float32 as the exact sum would, float64 having more than 24 + 1
    bits.  Finite inputs whose products neither overflow nor underflow float64 (these tests')."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    s = p + c64
    t = s - p
    err = (p - (s - t)) + (c64 - t)  # TwoSum: s + err == p + c64 exactly
    even = (s.view(np.int64) & 1) == 0
    toward = np.where(err > 0, np.inf, -np.inf)
    odd = np.where((err != 0) & even, np.nextafter(s, toward), s)
    return odd.astype(np.float32)


def emulate(
    a: torch.Tensor, b: torch.Tensor, reverse: bool = False, bias: torch.Tensor | None = None, fused: bool = True
) -> torch.Tensor:
    a32 = a.float().numpy()
    b32 = b.float().numpy()
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    steps = range(a.shape[1] - 1, -1, -1) if reverse else range(a.shape[1])
    for k in steps:
        if fused:
            acc = fma_f32(np.broadcast_to(a32[:, k : k + 1], acc.shape), np.broadcast_to(b32[k : k + 1, :], acc.shape), acc)
        else:
            acc = acc + a32[:, k : k + 1] * b32[k : k + 1, :]  # the product rounded, then the sum
    if bias is not None:
        acc = acc + bias.float().numpy()[None, :]  # one float32 add after the last k
    return torch.from_numpy(acc).to(a.dtype)  # the one rounding to the output dtype


def emulate_column_sum(x: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    x32 = x.float().numpy()
    acc = np.zeros(x.shape[1], dtype=np.float32)
    for m in range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0]):
        acc = acc + x32[m]  # float32 sum, rounded
    return torch.from_numpy(acc).to(x.dtype)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("simd", SIMD)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_output_is_the_ascending_k_float32_sum(rlkernels, configure, shape, dtype, simd, threads):
    configure(simd, threads)
    a, b = inputs(*shape, dtype)
    got = rlkernels.det_gemm(a, b)
    want = emulate(a, b)
    assert same_bits(got, want), f"{shape} {dtype}: differs from the ascending-k float32 sum in {(got != want).sum()} elements"


def test_emulation_can_tell_orders_apart(rlkernels):
    # Guards the test above: on these inputs another summation order gives other bits, and so
    # does a separate multiply and add in the same order (float32; 16-bit products are exact).
    a, b = inputs(131, 257, 301, torch.float32)
    assert not same_bits(emulate(a, b, reverse=True), emulate(a, b))
    assert not same_bits(emulate(a, b, fused=False), emulate(a, b))


def test_fma_f32_rounds_once():
    """The emulation's fma against exact rational arithmetic, on cases where rounding the product
    first, or the float64 sum to nearest, would give another float32: ties broken by the part of
    the product below float64's last bit, products below half an ulp of c, and random values."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    one_plus = np.float32(1 + 2.0**-23)
    a = [one_plus, one_plus, np.float32(1 + 2.0**-12), np.float32(3.0), np.float32(2.0**-30)]
    b = [one_plus, -one_plus, np.float32(1 + 2.0**-12), np.float32(2.0**-25 + 2.0**-48), np.float32(1.5)]
    c = [np.float32(-1.0), np.float32(1.0), np.float32(-(1 + 2.0**-11)), np.float32(1.0), np.float32(-1.0)]
    a += list(rng.standard_normal(2000).astype(np.float32))
    b += list(rng.standard_normal(2000).astype(np.float32))
    c += list((rng.standard_normal(2000) * 4).astype(np.float32))
    a32, b32, c32 = (np.array(x, dtype=np.float32) for x in (a, b, c))
    got = fma_f32(a32, b32, c32)

    def nearest_f32(x: Fraction) -> np.float32:
        # Round the exact value to float32 through float64 neighbours, checking the tie rule exactly.
        low = np.float32(float(x))
        candidates = {low, np.nextafter(low, np.float32(np.inf)), np.nextafter(low, np.float32(-np.inf))}
        best = min(candidates, key=lambda f: (abs(Fraction(float(f)) - x), int(np.float32(f).view(np.int32)) & 1))
        return np.float32(best)

    want = np.array([nearest_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))) for x, y, z in zip(a32, b32, c32)], dtype=np.float32)
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    # The separate multiply and add differs on the constructed cases, so they test the rounding.
    separate = c32[:5] + a32[:5] * b32[:5]
    assert not np.array_equal(separate.view(np.int32), got[:5].view(np.int32))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("simd", SIMD)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_alone_equals_row_in_batch(rlkernels, configure, dtype, simd, threads):
    configure(simd, threads)
    a, b = inputs(131, 257, 301, dtype, seed=1)
    batch = rlkernels.det_gemm(a, b)
    for i in (0, 1, 5, 6, 64, 130):
        assert same_bits(rlkernels.det_gemm(a[i : i + 1], b), batch[i : i + 1]), f"row {i}"
    assert same_bits(rlkernels.det_gemm(a[3:10], b), batch[3:10]), "rows 3..9"


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("simd", SIMD)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_linear_bias_is_one_float32_add_before_the_rounding(rlkernels, configure, shape, dtype, simd, threads):
    configure(simd, threads)
    a, b = inputs(*shape, dtype)
    bias = inputs(1, 1, shape[2], dtype, seed=2)[1].reshape(-1)
    got = rlkernels.det_linear(a, b.T.contiguous(), bias)
    want = emulate(a, b, bias=bias)
    assert same_bits(got, want), f"{shape} {dtype}: differs from the ascending-k float32 sum plus bias in {(got != want).sum()} elements"
    assert same_bits(rlkernels.det_linear(a, b.T.contiguous()), rlkernels.det_gemm(a, b)), "without a bias, det_linear is det_gemm"


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0, 5), (1, 1), (7, 65), (300, 129), (1031, 70)], ids=lambda s: "x".join(map(str, s)))
def test_column_sum_is_the_ascending_float32_sum(rlkernels, configure, shape, dtype, threads):
    configure("native", threads)
    x = inputs(shape[0], shape[1], 1, dtype, seed=3)[0]
    got = rlkernels.column_sum(x)
    assert same_bits(got, emulate_column_sum(x)), f"{shape} {dtype}: differs from the rows-ascending float32 sum"


def test_column_sum_emulation_can_tell_orders_apart():
    x = inputs(1031, 70, 1, torch.float32, seed=3)[0]
    assert not same_bits(emulate_column_sum(x, reverse=True), emulate_column_sum(x))


def cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as info:
            return any(line.startswith("flags") and flag in line.split() for line in info)
    except OSError:
        return False


def scaled(rows: int, cols: int, exponent: int, seed: int) -> torch.Tensor:
    """bfloat16 values of magnitude about 2^exponent, random signs and significands."""
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(rows, cols, generator=g) + 1) * torch.randn(rows, cols, generator=g).sign() * 2.0**exponent).to(torch.bfloat16)


# (what it is, A's exponent, B's exponent, a value planted in A or None).  The first two run the
# AVX512-BF16 pairs path (ea + eb >= -112); the others must fall back to the fma path, where the
# instruction would flush subnormal products and sums (2^-65 x 2^-65 = 2^-130), read a subnormal
# input as zero (2^-130 x 2^10), or pick another NaN.
PAIR_CASES = [
    ("normal", 0, 0, None),
    ("small, at the bound", -56, -56, None),
    ("subnormal products", -65, -65, None),
    ("a subnormal input", 0, 10, 2.0**-130),
    ("an infinity", 0, 0, float("inf")),
    ("a NaN", 0, 0, float("nan")),
]


@pytest.mark.skipif(not cpu_has("avx512_bf16"), reason="this CPU has no AVX512-BF16: bfloat16 det_gemm runs the fma path, tested above")
@pytest.mark.parametrize("case, ea, eb, planted", PAIR_CASES, ids=[c[0] for c in PAIR_CASES])
def test_bfloat16_pairs_path_gives_the_fma_paths_bits(rlkernels, configure, monkeypatch, case, ea, eb, planted):
    """On AVX512-BF16, bfloat16 det_gemm and linear_logp's logits (forward and backward) add two products per vdpbf16ps
    where that is exact and fall back to the fma path where it is not: every layout, an odd K
    (the last pair padded), float32 and bfloat16 outputs, all give the bits of the AVX-512 fma
    path (RLK_CPU_SIMD=avx512) and of the ascending-k emulation.  RLK_CPU_SIMD=avx512_bf16 asks
    for the pairs even where this CPU runs them slower than fmas (by default it would not)."""
    M, K, N = 29, 77, 45
    a, b = scaled(M, K, ea, 20), scaled(K, N, eb, 21)
    if planted is not None:  # alone in its row, so that row 3 is what it makes of it
        a[3] = 0
        a[3, 5] = planted
    runs = {
        "det_gemm": lambda: rlkernels.det_gemm(a, b, out_fp32=True),
        "det_gemm bf16 out": lambda: rlkernels.det_gemm(a, b),
        "det_gemm_nt": lambda: rlkernels.det_gemm_nt(a, b.T.contiguous(), out_fp32=True),
        "det_gemm_tn": lambda: rlkernels.det_gemm_tn(a.T.contiguous(), b, out_fp32=True),
        # linear_logp's logits are det_gemm_nt's sums, in its own tiles: lp, entropy and lse
        "linear_logp": lambda: torch.cat(rlkernels.linear_logp(a, b.T.contiguous(), torch.arange(M) % N)),
        # and its backward recomputes them so
        "linear_logp_backward": lambda: torch.cat(
            [g.reshape(-1) for g in rlkernels.linear_logp_backward(torch.ones(M), torch.full((M,), 0.5), a, b.T.contiguous(), torch.arange(M) % N, torch.zeros(M), torch.zeros(M))]
        ),
    }
    configure("avx512_bf16", "4")
    got = {name: run() for name, run in runs.items()}
    monkeypatch.setenv("RLK_CPU_SIMD", "avx512")
    for name, run in runs.items():
        want = run()
        assert got[name].view(torch.int32 if want.dtype == torch.float32 else torch.int16).equal(
            want.view(torch.int32 if want.dtype == torch.float32 else torch.int16)
        ), f"{case}: {name} differs from the fma path in {(got[name] != want).sum()} elements"
    if planted is None or planted == 2.0**-130:
        want = emulate(a.float(), b.float())  # float32 inputs: the same exact values, a float32 output
        assert same_bits(got["det_gemm"], want), f"{case}: differs from the ascending-k emulation"
        if ea + eb < -112:
            assert (got["det_gemm"] != 0).any(), f"{case}: the case no longer has nonzero results to lose"


# ---------------------------------------------------------------- det_gemm_ktree

KTREE_LEAF = 32
# Every host code path the kernel has (RLK_CPU_SIMD; "native" is the CPU's own, "avx512_bf16" the
# AVX512-BF16 pairs path where the operands allow it), on one thread and on two.
HOST_SIMD = ["native", "avx512_bf16", "avx512", "avx2", "generic"]
HOST_THREADS = [1, 2]
CI = os.environ.get("CI") == "true"
# Deterministic in CI (a red build must be reproducible); fresh examples on developers' runs.
KTREE_EXAMPLES = settings(max_examples=30, deadline=None, derandomize=CI, database=None if CI else settings.default.database)


@contextlib.contextmanager
def host_settings(simd: str, threads: int) -> Iterator[None]:
    """The code path and thread count the kernels read from the environment on every call."""
    saved = {name: os.environ.get(name) for name in ("RLK_CPU_SIMD", "RLK_NUM_THREADS")}
    os.environ["RLK_NUM_THREADS"] = str(threads)
    if simd == "native":
        os.environ.pop("RLK_CPU_SIMD", None)
    else:
        os.environ["RLK_CPU_SIMD"] = simd
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def ktree_emulated(a: torch.Tensor, b: torch.Tensor, mid=lambda lo, hi: lo + (hi - lo) // 2) -> torch.Tensor:
    """det_gemm_ktree's order written out: each leaf of 32 values of k the ascending-k fma sequence
    from 0.0 (``emulate``), rounded to bfloat16; leaves [lo, hi) combined as [lo, mid) + [mid, hi),
    a bfloat16 add (the float32 sum rounded to bfloat16)."""
    leaves = [emulate(a[:, k : k + KTREE_LEAF], b[k : k + KTREE_LEAF]) for k in range(0, a.shape[1], KTREE_LEAF)]

    def combine(lo: int, hi: int) -> torch.Tensor:
        if hi == lo:  # K = 0: an empty sum
            return torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
        if hi - lo == 1:
            return leaves[lo]
        m = mid(lo, hi)
        return combine(lo, m) + combine(m, hi)

    return combine(0, len(leaves))


# (exponent, spread) of spread_inputs: normal values, and values whose products are subnormal.
NORMAL, SUBNORMAL = (0, 8), (-66, 0)


def spread_inputs(m: int, k: int, n: int, scale: tuple[int, int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bfloat16 normals times 2^e, e drawn from exponent - spread .. exponent + spread: with NORMAL a
    leaf's sum loses different bits in different orders; with SUBNORMAL every product and leaf sum
    is subnormal (about 2^-132), which the AVX512-BF16 pairs path would flush to zero (it must fall
    back to the fma path) and the bfloat16 roundings must keep."""
    exponent, spread = scale
    g = torch.Generator().manual_seed(seed)

    def make(rows: int, cols: int) -> torch.Tensor:
        scale = torch.exp2(torch.randint(exponent - spread, exponent + spread + 1, (rows, cols), generator=g).float())
        return (torch.randn(rows, cols, generator=g) * scale).to(torch.bfloat16)

    return make(m, k), make(k, n)


def exact_leaf_inputs(m: int, k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bfloat16 values i * 2^e, |i| <= 15 and e in [-3, 2]: every product is a multiple of 2^-6 below
    2^12, so every partial sum of a leaf (at most 32 products, below 2^17: 23 bits) is a float32
    exactly, in any order, fused or not.  The leaves' roundings to bfloat16 and the tree's adds
    still round (a leaf holds up to 23 significant bits, a bfloat16 8)."""
    g = torch.Generator().manual_seed(seed)

    def make(rows: int, cols: int) -> torch.Tensor:
        integers = torch.randint(-15, 16, (rows, cols), generator=g).float()
        return (integers * torch.exp2(torch.randint(-3, 3, (rows, cols), generator=g).float())).to(torch.bfloat16)

    return make(m, k), make(k, n)


def differing(got: torch.Tensor, want: torch.Tensor) -> int:
    return int((bits(got) != bits(want)).sum())


# M and N on either side of the register tiles (3, 6 and 12 rows by 16 and 32 columns) and of a
# work item's 8 strips; K in whole leaves (the op's constraint), across the k-blocks of 256 and
# up to 3072, where the tree is 7 levels deep; hypothesis shrinks a failure to its smallest shape.
ROWS = st.integers(1, 130)
COLUMNS = st.integers(1, 130)


@KTREE_EXAMPLES
@given(m=ROWS, leaves=st.integers(0, 96), n=COLUMNS, simd=st.sampled_from(HOST_SIMD), threads=st.sampled_from(HOST_THREADS), seed=st.integers(0, 2**16))
def test_ktree_equals_the_python_reference_bitwise(rlkernels, m, leaves, n, simd, threads, seed):
    from rlkernels import _references

    a, b = exact_leaf_inputs(m, leaves * KTREE_LEAF, n, seed)
    with host_settings(simd, threads):
        got = rlkernels.det_gemm_ktree(a, b)
    want = _references.det_gemm_ktree(a, b).to(torch.bfloat16)  # bfloat16 values, held in float32
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    assert differing(got, want) == 0, f"{m}x{leaves * KTREE_LEAF}x{n} ({simd}, {threads} threads): {differing(got, want)} elements differ from the reference"


@KTREE_EXAMPLES
@given(
    m=ROWS, leaves=st.integers(0, 40), n=COLUMNS, simd=st.sampled_from(HOST_SIMD), threads=st.sampled_from(HOST_THREADS),
    scale=st.sampled_from([NORMAL, SUBNORMAL]), seed=st.integers(0, 2**16),
)
def test_ktree_is_fma_leaves_and_a_bfloat16_tree(rlkernels, m, leaves, n, simd, threads, scale, seed):
    a, b = spread_inputs(m, leaves * KTREE_LEAF, n, scale, seed)
    with host_settings(simd, threads):
        got = rlkernels.det_gemm_ktree(a, b)
    want = ktree_emulated(a, b)
    assert differing(got, want) == 0, f"{m}x{leaves * KTREE_LEAF}x{n} ({simd}, {threads} threads, scale {scale}): {differing(got, want)} elements differ from the emulation"


@KTREE_EXAMPLES
@given(
    m=ROWS, leaves=st.integers(0, 12), n=COLUMNS, simd=st.sampled_from(HOST_SIMD), scale=st.sampled_from([NORMAL, SUBNORMAL]),
    seed=st.integers(0, 2**16),
)
def test_ktree_of_the_transposes_is_the_transpose(rlkernels, m, leaves, n, simd, scale, seed):
    """det_gemm_ktree(b^T, a^T)^T has det_gemm_ktree(a, b)'s bits: each output is the same leaves of
    the same fma chains over k, a product's two factors commuting exactly.  rlkernels.distributed
    multiplies by a transposed weight that way (copying the smaller operand)."""
    a, b = spread_inputs(m, leaves * KTREE_LEAF, n, scale, seed)
    if seed % 2 and leaves:  # an infinity and a NaN (odd seeds; even ones take the pairs path where the CPU has it)
        a[0, 0], b[0, n - 1] = float("inf"), float("nan")
    with host_settings(simd, "1"):
        got = rlkernels.det_gemm_ktree(b.t().contiguous(), a.t().contiguous()).t()
        want = rlkernels.det_gemm_ktree(a, b)
    assert differing(got, want) == 0


def test_ktree_emulation_and_inputs_can_tell_orders_apart():
    """Guards the two tests above: on their inputs another split of the tree, or one float32
    accumulator over all of K, gives other bits; the subnormal inputs give nonzero results; and the
    exact-leaf inputs still round (their tree differs from one exact float32 sum)."""
    a, b = spread_inputs(37, 21 * KTREE_LEAF, 45, NORMAL, 1)
    tree = ktree_emulated(a, b)
    assert differing(ktree_emulated(a, b, mid=lambda lo, hi: lo + (hi - lo + 1) // 2), tree) > 0
    assert differing(emulate(a, b), tree) > 0
    tiny = ktree_emulated(*spread_inputs(37, 4 * KTREE_LEAF, 45, SUBNORMAL, 1)).float()
    assert ((tiny != 0) & (tiny.abs() < 2.0**-126)).float().mean() > 0.5, "the subnormal case no longer has subnormal results to lose"
    exact = exact_leaf_inputs(37, 21 * KTREE_LEAF, 45, 1)
    assert differing(ktree_emulated(*exact), emulate(*exact)) > 0


@pytest.mark.parametrize("threads", HOST_THREADS)
def test_ktree_special_values_agree_on_every_code_path(rlkernels, threads):
    """Infinities, NaNs and overflows give the same bits on every code path (the pairs path refuses
    such operands), each NaN the canonical one, and a row alone the bits it has in the batch."""
    a, b = spread_inputs(29, 9 * KTREE_LEAF, 45, NORMAL, 5)
    a[3, 7], a[4, 40], a[5] = float("inf"), float("nan"), 2.0**120  # row 5's products overflow to infinities of both signs
    outputs = {}
    for simd in HOST_SIMD:
        with host_settings(simd, threads):
            outputs[simd] = rlkernels.det_gemm_ktree(a, b)
            assert differing(rlkernels.det_gemm_ktree(a[5:6], b), outputs[simd][5:6]) == 0, f"{simd}: row 5 alone"
    for simd in HOST_SIMD[1:]:
        assert differing(outputs[simd], outputs["native"]) == 0, f"{simd} differs from the CPU's own path"
    nan = outputs["native"].isnan()
    assert nan[4].all() and nan[5].any() and (bits(outputs["native"])[nan] == 0x7FC0).all()
    assert outputs["native"][3].isinf().any()
