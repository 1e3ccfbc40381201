"""logp and linear_logp are one arithmetic over the vocabulary.

An engine that materialises the logits (vLLM's LM head, then its sampler) reports
logp(z, ids) with z = det_linear(h, weight, out_fp32=True); the trainer computes
linear_logp(h, weight, ids) (rlkernels.transformers.token_logprobs).  Both reduce each row in
the same steps (specs/ops/logp.yaml, specs/ops/linear_logp.yaml): the row's maximum, the
exponentials shifted by it summed over 256 lanes in chunks of the vocabulary, then the lanes'
pairwise tree, lse = shift + log(S), lp = z[id] - lse.  So lp and lse must agree bit for bit,
on the built CPU package's every host code path and thread count, for every dtype of h and the
weight, on vocabularies that are and are not a multiple of the lanes, with ignore_index rows and
ids outside the vocabulary among them.  The full log-probabilities z - lse[:, None] (for top-k
reporting) hold lp bit for bit at the selected id.  The device kernels give the CPU kernels'
bits (tests/test_device_emulated.py), so the same holds on every platform.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")

from bitwise import bits
from package_build import import_built

pytestmark = pytest.mark.slow

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (N, H, V): V below, at and past the 256 lanes, not a multiple of them, and past the device's
# batch of 4096 terms; N past the host's group of 96 rows (linear_logp computes a group's logits
# at a time) and a single row (a decode step).
SHAPES = ((7, 24, 50), (1, 33, 256), (33, 40, 777), (20, 16, 4099), (100, 8, 300), (3, 64, 9000))
# Host code paths (RLK_CPU_SIMD; None: the CPU's own; avx512_bf16: its bfloat16 pairs asked for) and threads
# (RLK_NUM_THREADS).
PATHS = (("generic", "1"), ("avx2", "2"), ("avx512_bf16", "2"), (None, "1"), (None, "2"))
IGNORE = -100


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


def inputs(N: int, H: int, V: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """h, weight and ids: ignore_index and ids outside [0, V) (-1, V, 2^40) planted among valid ones."""
    g = torch.Generator().manual_seed(seed)
    h = (torch.randn(N, H, generator=g) * 1.5).to(dtype)
    weight = torch.randn(V, H, generator=g).to(dtype)
    ids = torch.randint(0, V, (N,), generator=g)
    for start, value in ((1, -1), (2, V), (3, 2**40), (5, IGNORE)):
        ids[start::6] = value
    return h, weight, ids


@pytest.mark.parametrize(("simd", "threads"), PATHS, ids=[f"{s or 'native'}-{t}thread" for s, t in PATHS])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_logp_of_det_linear_logits_is_linear_logp(rlkernels, dtype, simd, threads, monkeypatch):
    if simd is None:
        monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
    else:
        monkeypatch.setenv("RLK_CPU_SIMD", simd)
    monkeypatch.setenv("RLK_NUM_THREADS", threads)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for seed, (N, H, V) in enumerate(SHAPES):
            h, weight, ids = inputs(N, H, V, dtype, seed)
            z = rlkernels.det_linear(h, weight, out_fp32=True)
            lp, lse = rlkernels.logp(z, ids)
            want_lp, _, want_lse = rlkernels.linear_logp(h, weight, ids)
            what = f"N={N} H={H} V={V} {dtype}"
            assert torch.equal(bits(lse), bits(want_lse)), f"{what}: lse differs from linear_logp's"
            assert torch.equal(bits(lp), bits(want_lp)), f"{what}: lp differs from linear_logp's"
            valid = (ids >= 0) & (ids < V)
            assert valid.any() and (N < 6 or ((ids == IGNORE).any() and not valid.all()))
            # The full log-probabilities, as an engine reports its top-k: at the selected id, lp.
            full = z - lse[:, None]
            picked = full.gather(1, torch.where(valid, ids, 0)[:, None])[:, 0]
            assert torch.equal(bits(picked[valid]), bits(lp[valid])), f"{what}: logits - lse at the selected id is not lp"
            assert torch.isnan(lp[~valid & (ids != IGNORE)]).all() and (lp[ids == IGNORE] == 0).all()
    finally:
        torch.set_num_threads(previous)


def test_the_comparison_sees_the_summation_order(rlkernels):
    """The bitwise comparison above is not vacuous: the same logits in another order along the
    vocabulary (the same terms, summed by other lanes) give another lse for some rows, so a logp
    whose order were not linear_logp's would fail it."""
    h, weight, _ = inputs(64, 32, 1000, torch.float32, 99)
    z = rlkernels.det_linear(h, weight, out_fp32=True)
    ids = torch.zeros(64, dtype=torch.int64)
    _, lse = rlkernels.logp(z, ids)
    _, reordered = rlkernels.logp(z.flip(1).contiguous(), ids)
    torch.testing.assert_close(lse, reordered)
    assert not torch.equal(bits(lse), bits(reordered))
