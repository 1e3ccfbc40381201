"""The bfloat16 GEMMs' `amx` kernel computes AMX's order (`pair_chunks`), bit for bit, on every path.

The order, for each output: K in chunks of 32 from k = 0 (the last padded with zeros); per chunk
two float32 sums from +0, `even` over the chunk's even k and `odd` over its odd k, each a chain of
fused multiply-adds in ascending k, then acc = acc + (even + odd); subnormal inputs read as zeros
of their sign, every result below 2^-126 (rounded with an unbounded exponent) a zero of its sign.
`pair_chunks` below writes it out in NumPy with exact arithmetic: an fma rounded to odd in float64,
then to float32 with an unbounded exponent (scaled up by 2^100 where tiny), then flushed.

The kernel runs it on AMX (TDPBF16PS), AVX512-BF16 (VDPBF16PS), AVX-512 and AVX2 (float32 fmas
with MXCSR's DAZ and FTZ) and the portable path (the flush rules in C++); every path must give the
reference's bits, at every thread count, for a row alone as in a batch, on inputs with subnormal
products, signed zeros, infinities, NaN and results on either side of 2^-126.  The AMX tests run
only on a CPU with AMX-BF16 and skip, saying so, elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
np = pytest.importorskip("numpy", reason="the reference needs numpy (make test installs it)")

from package_build import import_built

pytestmark = pytest.mark.slow

CHUNK = 32


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


FLAGS = cpu_flags()
HAS_AMX = {"amx_tile", "amx_bf16"} <= FLAGS
# The paths RLK_CPU_SIMD can ask for, those this CPU has; "native" is the widest (AMX where present).
PATHS = ["native", "generic"]
if {"avx2", "fma"} <= FLAGS:
    PATHS.append("avx2")
if "avx512f" in FLAGS and "avx512bw" in FLAGS:
    PATHS.append("avx512")
if "avx512_bf16" in FLAGS:
    PATHS.append("avx512_bf16")
NO_AMX = "this CPU has no AMX-BF16 (amx_tile and amx_bf16 are not in /proc/cpuinfo's flags): TDPBF16PS cannot run here"


# --- the reference ---------------------------------------------------------------------------


def daz(x: torch.Tensor) -> np.ndarray:
    """bfloat16 values as the order reads them, in float64: a subnormal is a zero of its sign."""
    bits = x.contiguous().view(torch.int16).numpy().astype(np.int32) & 0xFFFF
    bits = np.where((bits & 0x7F80) == 0, bits & 0x8000, bits)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_flush(x: np.ndarray) -> np.ndarray:
    """float64 values (rounded to odd from the exact ones) to float32 with an unbounded exponent,
    then every magnitude below 2^-126 a zero of its sign."""
    with np.errstate(over="ignore", invalid="ignore"):
        tiny = np.abs(x) < 2.0**-100
        scaled = np.where(tiny, x * 2.0**100, x).astype(np.float32).astype(np.float64)
        back = np.where(tiny, scaled * 2.0**-100, scaled)
        out = np.where(np.abs(back) < 2.0**-126, np.copysign(0.0, back), back)
    return out.astype(np.float32)


def fma_flush(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c under the order's rules: a * b exact in float64 (a and b bfloat16 values or one
    of them 1), the sum rounded to odd by TwoSum, then round_flush."""
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * b
        c64 = c.astype(np.float64)
        s = p + c64
        t = s - p
        err = (p - (s - t)) + (c64 - t)
        even = (s.view(np.int64) & 1) == 0
        toward = np.where(err > 0, np.inf, -np.inf)
        odd = np.where(np.isfinite(s) & (err != 0) & even, np.nextafter(s, toward), s)
    return round_flush(odd)


def pair_chunks(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> np.ndarray:
    """The order over a [M, K] and b [K, N] (bfloat16), as float32 [M, N]."""
    m, k = a.shape
    n = b.shape[1]
    kp = -(-k // CHUNK) * CHUNK
    a64 = np.zeros((m, kp))
    b64 = np.zeros((kp, n))
    a64[:, :k] = daz(a)
    b64[:k] = daz(b)
    one = np.ones((m, n))
    acc = np.zeros((m, n), dtype=np.float32)
    for c0 in range(0, kp, CHUNK):
        sums = []
        for parity in (0, 1):
            s = np.zeros((m, n), dtype=np.float32)
            for kk in range(c0 + parity, c0 + CHUNK, 2):
                s = fma_flush(a64[:, kk : kk + 1], b64[kk : kk + 1, :], s)
            sums.append(s)
        acc = fma_flush(acc.astype(np.float64), one, fma_flush(sums[0].astype(np.float64), one, sums[1]))
    if bias is not None:
        acc = fma_flush(np.broadcast_to(daz(bias)[None, :], (m, n)), one, acc)
    return acc


def ascending(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """The op's other order (one accumulator, ascending k, no flush), for telling them apart."""
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    a64, b64 = a.double().numpy(), b.double().numpy()
    for kk in range(a.shape[1]):
        p = a64[:, kk : kk + 1] * b64[kk : kk + 1, :]
        s = p + acc
        t = s - p
        err = (p - (s - t)) + (acc - t)
        even = (s.view(np.int64) & 1) == 0
        odd = np.where((err != 0) & even, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        acc = odd.astype(np.float32)
    return acc


def bits32(x: np.ndarray | torch.Tensor) -> np.ndarray:
    """float32 bits, every NaN the canonical quiet NaN (as the kernels store them)."""
    v = np.ascontiguousarray(x.numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float32)
    return np.where(np.isnan(v), np.uint32(0x7FC00000), v.view(np.uint32))


def bf16_bits(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
    return np.where(torch.isnan(t).numpy(), np.int16(0x7FC0), t.view(torch.int16).numpy())


# --- inputs ----------------------------------------------------------------------------------


def normal_inputs(m: int, k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Values spread over 2^-8..2^8, so that orders differ in their last bits."""
    g = torch.Generator().manual_seed(seed)

    def make(rows: int, cols: int) -> torch.Tensor:
        scale = torch.exp2(torch.randint(-8, 9, (rows, cols), generator=g).float())
        return (torch.randn(rows, cols, generator=g) * scale).to(torch.bfloat16)

    return make(m, k), make(k, n)


def special_inputs(m: int, k: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiny normals (products and partial sums below 2^-126), subnormals, signed zeros, a few
    infinities and NaN among ordinary values."""
    g = np.random.default_rng(seed)

    def make(rows: int, cols: int) -> torch.Tensor:
        size = rows * cols
        sign = g.integers(0, 2, size) << 15
        kind = g.integers(0, 100, size)
        exponent = np.where(kind < 30, g.integers(1, 8, size), g.integers(112, 140, size))
        bits = sign | (exponent << 7) | g.integers(0, 128, size)
        bits = np.where((kind >= 30) & (kind < 40), sign | g.integers(0, 128, size), bits)  # subnormals and zeros
        bits = np.where(kind == 40, sign | 0x7F80, bits)  # infinities
        bits = np.where(kind == 41, 0x7FC1, bits)  # NaN
        return torch.from_numpy(bits.astype(np.uint16).view(np.int16).reshape(rows, cols)).view(torch.bfloat16)

    return make(m, k), make(k, n)


def edge_inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk whose even chain is 2^-126 (k = 0) plus a tiny negative product (k = 2) of
    magnitude d: 2^-126 - d rounds, with an unbounded exponent, to 2^-126 where d <= 2^-151 (the tie
    at 2^-151 to the even significand) and to 2^-126 - 2^-150, flushed to zero, where
    2^-151 < d < 2^-150; rounding on the subnormal grid would give 2^-126 for both."""
    a = torch.zeros(1, CHUNK, dtype=torch.float64)
    b = torch.zeros(CHUNK, n, dtype=torch.float64)
    a[0, 0], a[0, 2] = 1.0, 2.0**-75
    for j in range(n):
        b[0, j] = 2.0**-126
        b[2, j] = -(2.0 ** (-76 - j % 2)) * (1 + (j // 2 % 128) / 128)
    return a.to(torch.bfloat16), b.to(torch.bfloat16)


# --- harness ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


@pytest.fixture
def configure(monkeypatch):
    def apply(path: str, threads: int) -> None:
        if path == "native":
            monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
        else:
            monkeypatch.setenv("RLK_CPU_SIMD", path)
        monkeypatch.setenv("RLK_NUM_THREADS", str(threads))

    return apply


def run(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, out_fp32: bool = True) -> torch.Tensor:
    """op's amx kernel on a [M, K] and b [K, N] given in the op's own layouts."""
    kernel = getattr(torch.ops.rlkernels, op).amx
    if op == "det_gemm":
        return kernel(a, b, out_fp32)
    if op == "det_gemm_nt":
        return kernel(a, b.t().contiguous(), bias, out_fp32)
    return kernel(a.t().contiguous(), b, out_fp32)


def check(got: torch.Tensor, want: np.ndarray, out_fp32: bool) -> None:
    if out_fp32:
        g, w = bits32(got), bits32(want)
    else:
        g, w = np.where(torch.isnan(got).numpy(), np.int16(0x7FC0), got.view(torch.int16).numpy()), bf16_bits(want)
    bad = np.argwhere(g != w)
    assert bad.size == 0, f"{len(bad)} of {g.size} outputs differ, first at {tuple(bad[0])}: {g[tuple(bad[0])]:#x} vs {w[tuple(bad[0])]:#x}"


# (M, K, N): K below, at and past chunks (not a multiple of 32 too), M = 1, and ragged tails of the
# 32-row AMX strips, 6- and 3-row strips and 32- and 16-column panels; K past a k-block (256).
SHAPES = [(1, 1, 1), (1, 31, 5), (3, 32, 17), (7, 33, 33), (33, 64, 31), (6, 95, 40), (37, 300, 70), (65, 290, 129)]
OPS = ["det_gemm", "det_gemm_nt", "det_gemm_tn"]


def test_the_reference_tells_the_orders_apart():
    a, b = normal_inputs(8, 96, 8, seed=1)
    assert (bits32(pair_chunks(a, b)) != bits32(ascending(a, b))).any()
    # and the flush: a product of 2^-70 and 2^-70 survives an ascending sum, not this order
    a = torch.full((1, 1), 2.0**-70, dtype=torch.bfloat16)
    assert pair_chunks(a, a.t())[0, 0] == 0.0 and ascending(a, a.t())[0, 0] == 2.0**-140


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", OPS)
def test_every_path_gives_the_reference_bits(rlkernels, configure, op, path, threads):
    configure(path, threads)
    for i, (m, k, n) in enumerate(SHAPES):
        a, b = normal_inputs(m, k, n, seed=i)
        bias = normal_inputs(1, 1, n, seed=100 + i)[1][0] if op == "det_gemm_nt" else None
        want = pair_chunks(a, b, bias)
        check(run(op, a, b, bias, out_fp32=True), want, True)
        check(run(op, a, b, bias, out_fp32=False), want, False)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("op", OPS)
def test_special_values_give_the_reference_bits(rlkernels, configure, op, path):
    configure(path, 2)
    for seed, (m, k, n) in enumerate([(5, 70, 37), (33, 96, 33), (1, 7, 3)]):
        a, b = special_inputs(m, k, n, seed)
        bias = special_inputs(1, 1, n, seed + 50)[1][0] if op == "det_gemm_nt" else None
        check(run(op, a, b, bias), pair_chunks(a, b, bias), True)


@pytest.mark.parametrize("path", PATHS)
def test_results_next_to_the_smallest_normal(rlkernels, configure, path):
    configure(path, 1)
    a, b = edge_inputs(64)
    want = pair_chunks(a, b)
    check(run("det_gemm", a, b), want, True)
    # the inputs reach both sides of the flush: the tie and the smaller d keep 2^-126, the rest flush
    assert (want[0, 0::2][1:] == 0).all() and (want[0, 1::2] == np.float32(2.0**-126)).all() and want[0, 0] == np.float32(2.0**-126)


@pytest.mark.parametrize("path", PATHS)
def test_row_alone_equals_row_in_batch_and_threads_do_not_show(rlkernels, configure, path):
    a, b = normal_inputs(71, 200, 45, seed=7)
    configure(path, 1)
    whole = run("det_gemm_nt", a, b)
    for threads in (1, 2, 4):
        configure(path, threads)
        assert torch.equal(run("det_gemm_nt", a, b).view(torch.int32), whole.view(torch.int32))
        for lo, hi in ((0, 1), (5, 6), (32, 33), (70, 71), (3, 40)):
            assert torch.equal(run("det_gemm_nt", a[lo:hi], b).view(torch.int32), whole[lo:hi].view(torch.int32))


def test_float32_and_float16_run_the_simt_kernel(rlkernels):
    a, b = normal_inputs(9, 64, 10, seed=3)
    for dtype in (torch.float32, torch.float16):
        x, y = a.to(dtype), b.to(dtype)
        for out_fp32 in (False, True):
            want = torch.ops.rlkernels.det_gemm.simt(x, y, out_fp32)
            assert torch.equal(torch.ops.rlkernels.det_gemm.amx(x, y, out_fp32).view(torch.int8), want.view(torch.int8))


@pytest.mark.skipif(not HAS_AMX, reason=NO_AMX)
@pytest.mark.parametrize("op", OPS)
def test_amx_gives_the_vector_paths_bits(rlkernels, configure, op):
    for i, (m, k, n) in enumerate(SHAPES):
        for make in (normal_inputs, special_inputs):
            a, b = make(m, k, n, i)
            configure("amx", 2)
            got = run(op, a, b)
            check(got, pair_chunks(a, b), True)
            configure("avx512", 2)
            assert np.array_equal(bits32(run(op, a, b)), bits32(got))


@pytest.mark.skipif(not HAS_AMX, reason=NO_AMX)
def test_amx_results_next_to_the_smallest_normal(rlkernels, configure):
    configure("amx", 1)
    a, b = edge_inputs(64)
    check(run("det_gemm", a, b), pair_chunks(a, b), True)
