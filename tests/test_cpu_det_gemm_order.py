"""CPU det_gemm computes exactly the order its contract states, bit for bit.

Every output element is one float32 accumulator starting at 0.0 that adds
a[m,k] * b[k,n] for k = 0..K-1 in ascending order, with the product and the sum
rounded separately (no fused multiply-add), and is rounded once to the output dtype.
`emulate` writes that sequence out in NumPy.  The kernel's tiling, vector width
(AVX2 or the portable path) and thread count must not show in the bits, and one
row computed alone must equal the same row computed in a batch.  det_linear's bias
is one float32 add to that accumulator before the rounding, and its gradient,
column_sum, adds the rows of each column in ascending order in float32.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
np = pytest.importorskip("numpy", reason="the emulation needs numpy (make test installs it)")

from package_build import import_built

pytestmark = pytest.mark.slow

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}

# (M, K, N): none a multiple of the register tile (6 or 3 rows x 16 columns), plus
# K = 0, K = 1, M = 1, N = 1, and one product large enough to be split over threads.
SHAPES = [
    (3, 0, 5),
    (1, 1, 1),
    (1, 7, 5),
    (5, 1, 17),
    (7, 13, 33),
    (37, 65, 17),
    (13, 300, 129),
    (131, 257, 301),
]
# Code paths and thread counts the kernel reads from the environment on every call.
SIMD = ["native", "generic"]
THREADS = ["1", "4"]


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


@pytest.fixture
def configure(monkeypatch):
    def apply(simd: str, threads: str) -> None:
        if simd == "generic":
            monkeypatch.setenv("RLK_CPU_SIMD", "generic")
        else:
            monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
        monkeypatch.setenv("RLK_NUM_THREADS", threads)

    return apply


def inputs(m: int, k: int, n: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Normal values spread over 2^-8..2^8, so sums lose different bits in different orders."""
    g = torch.Generator().manual_seed(seed)

    def make(rows: int, cols: int) -> torch.Tensor:
        scale = torch.exp2(torch.randint(-8, 9, (rows, cols), generator=g).float())
        return (torch.randn(rows, cols, generator=g) * scale).to(dtype)

    return make(m, k), make(k, n)


def emulate(a: torch.Tensor, b: torch.Tensor, reverse: bool = False, bias: torch.Tensor | None = None) -> torch.Tensor:
    a32 = a.float().numpy()
    b32 = b.float().numpy()
    acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    steps = range(a.shape[1] - 1, -1, -1) if reverse else range(a.shape[1])
    for k in steps:
        product = a32[:, k : k + 1] * b32[k : k + 1, :]  # float32 product, rounded
        acc = acc + product  # float32 sum, rounded again
    if bias is not None:
        acc = acc + bias.float().numpy()[None, :]  # one float32 add after the last k
    return torch.from_numpy(acc).to(a.dtype)  # the one rounding to the output dtype


def emulate_column_sum(x: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    x32 = x.float().numpy()
    acc = np.zeros(x.shape[1], dtype=np.float32)
    for m in range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0]):
        acc = acc + x32[m]  # float32 sum, rounded
    return torch.from_numpy(acc).to(x.dtype)


def same_bits(x: torch.Tensor, y: torch.Tensor) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and torch.equal(x.view(BITS[x.dtype]), y.view(BITS[y.dtype]))


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
    # Guards the test above: on these inputs another summation order gives other bits.
    a, b = inputs(131, 257, 301, torch.float32)
    assert not same_bits(emulate(a, b, reverse=True), emulate(a, b))


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
