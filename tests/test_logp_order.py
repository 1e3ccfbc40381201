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


# ---------------------------------------------------------------------------- temperature
#
# A sampler at temperature t draws from softmax(z / t); vLLM divides its float32 logits in place,
# logits.div_(temperature[:, None]), then reports log_softmax of that (processed log-probs).  The
# ops take the temperature as an attribute and divide each float32 logit by it once, correctly
# rounded, before the reduction; torch's float32 division by a tensor is correctly rounded too,
# so z / t in torch, logp(z, ids, temperature=t) and linear_logp(h, weight, ids, temperature=t)
# are one arithmetic.

TEMPERATURES = (0.7, 1.3, 0.05)


def float32_quotients(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x / t correctly rounded to float32: the quotient in float64, rounded once to float32.  A
    float64 quotient of float32 operands rounds to float32 as the exact quotient would (float64
    has more than 2 x 24 + 2 bits of precision)."""
    return (x.double() / t.double()).float()


def test_torch_float32_division_by_a_tensor_is_correctly_rounded():
    """What the engine's division (torch, vLLM's apply_temperature) gives is the correctly rounded
    quotient, the kernels' div_rn: on every float32 bit pattern with a stride (normal, subnormal,
    zeros, infinities), at several temperatures, through torch's vectorised and scalar loops (a
    [rows, 4099] tensor by a [rows, 1] tensor, as vLLM divides).  Multiplying by the reciprocal,
    which torch on CUDA does for a Python-number divisor, fails the same check."""
    patterns = torch.arange(-(2**31), 2**31, 4099, dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = patterns[torch.isfinite(patterns) | torch.isinf(patterns)]
    x = torch.cat([x, torch.tensor([0.0, -0.0, 1e-45, -1e-45, 3.4028235e38, float("inf"), float("-inf")])])
    cols = 4099
    x = torch.nn.functional.pad(x, (0, -x.shape[0] % cols)).view(-1, cols)
    for t in TEMPERATURES:
        temps = torch.full((x.shape[0], 1), t, dtype=torch.float32)
        want = float32_quotients(x, temps)
        got = x.clone().div_(temps)
        assert torch.equal(bits(got), bits(want)), f"t={t}: torch's float32 division is not correctly rounded"
        assert torch.equal(bits(x / temps[0, 0]), bits(want)), f"t={t}: division by a 0-d tensor"
        reciprocal = x * (1.0 / temps)
        assert not torch.equal(bits(reciprocal), bits(want)), f"t={t}: the check cannot tell a reciprocal multiply"


@pytest.mark.parametrize(("simd", "threads"), PATHS[:2] + PATHS[3:4], ids=[f"{s or 'native'}-{t}thread" for s, t in PATHS[:2] + PATHS[3:4]])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_tempered_logp_of_det_linear_logits_is_tempered_linear_logp(rlkernels, dtype, simd, threads, monkeypatch):
    """At a temperature t: logp(z, ids, temperature=t) is linear_logp(h, weight, ids, temperature=t)
    (lp and lse), and is logp of the logits torch divides, z / t, at temperature 1; the full
    log-probabilities z / t - lse hold lp at the selected id.  At t = 1 the attribute changes no bit."""
    if simd is None:
        monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
    else:
        monkeypatch.setenv("RLK_CPU_SIMD", simd)
    monkeypatch.setenv("RLK_NUM_THREADS", threads)
    for seed, (N, H, V) in enumerate(SHAPES[:4]):
        h, weight, ids = inputs(N, H, V, dtype, seed)
        z = rlkernels.det_linear(h, weight, out_fp32=True)
        valid = (ids >= 0) & (ids < V)
        base = rlkernels.linear_logp(h, weight, ids)
        same = rlkernels.linear_logp(h, weight, ids, temperature=1.0)
        assert all(torch.equal(bits(a), bits(b)) for a, b in zip(base, same)), "temperature=1 changed a bit"
        for t in TEMPERATURES:
            what = f"N={N} H={H} V={V} {dtype} t={t}"
            lp, lse = rlkernels.logp(z, ids, temperature=t)
            want_lp, want_entropy, want_lse = rlkernels.linear_logp(h, weight, ids, temperature=t)
            assert torch.equal(bits(lse), bits(want_lse)), f"{what}: lse differs from linear_logp's"
            assert torch.equal(bits(lp), bits(want_lp)), f"{what}: lp differs from linear_logp's"
            scaled = z / torch.full((N, 1), t, dtype=torch.float32)
            lp1, lse1 = rlkernels.logp(scaled, ids)
            assert torch.equal(bits(lse1), bits(lse)) and torch.equal(bits(lp1), bits(lp)), f"{what}: the kernel's division is not torch's"
            picked = (scaled - lse[:, None]).gather(1, torch.where(valid, ids, 0)[:, None])[:, 0]
            assert torch.equal(bits(picked[valid]), bits(lp[valid])), f"{what}: z / t - lse at the selected id is not lp"
            # The distribution is the tempered one (within float32 error of float64).
            ref = torch.log_softmax(z.double() / t, dim=-1).gather(1, torch.where(valid, ids, 0)[:, None])[:, 0]
            torch.testing.assert_close(lp[valid].double(), ref[valid], rtol=1e-5, atol=1e-4)
            assert not torch.equal(bits(want_lp[valid]), bits(base[0][valid])), f"{what}: the temperature changed nothing"
            assert torch.isfinite(want_entropy[ids != IGNORE]).all()


def test_tempered_gradients_are_the_tempered_distributions(rlkernels):
    """The gradients at a temperature t carry its 1/t (the incoming gradients divided by t once,
    the logits as in the forward): linear_logp's and logp's backwards against float64 autograd
    of log_softmax(z / t), and at t = 1 the bits of the default."""
    h, weight, ids = inputs(9, 24, 300, torch.float32, 5)
    ids[ids >= 300] = 7
    ids[ids < 0] = 7
    for t in (1.0, 0.7):
        hh, ww = h.clone().requires_grad_(), weight.clone().requires_grad_()
        lp, entropy, _ = rlkernels.linear_logp(hh, ww, ids, temperature=t)
        (lp.sum() + 0.5 * entropy.sum()).backward()
        hd, wd = h.double().requires_grad_(), weight.double().requires_grad_()
        logprobs = torch.log_softmax(hd @ wd.T / t, dim=-1)
        keep = ids != IGNORE
        ref_lp = logprobs.gather(1, torch.where(keep, ids, 0)[:, None])[:, 0] * keep
        ref_entropy = -(logprobs.exp() * logprobs).sum(-1) * keep
        (ref_lp.sum() + 0.5 * ref_entropy.sum()).backward()
        torch.testing.assert_close(hh.grad.double(), hd.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ww.grad.double(), wd.grad, rtol=1e-4, atol=1e-5)
        z = rlkernels.det_linear(h, weight, out_fp32=True).requires_grad_()
        rlkernels.logp(z, ids, temperature=t)[0].sum().backward()
        zd = (h.double() @ weight.double().T).requires_grad_()
        (torch.log_softmax(zd / t, dim=-1).gather(1, torch.where(keep, ids, 0)[:, None])[:, 0] * keep).sum().backward()
        torch.testing.assert_close(z.grad.double(), zd.grad, rtol=1e-4, atol=1e-6)
        if t == 1.0:
            hh1 = h.clone().requires_grad_()
            lp1, entropy1, _ = rlkernels.linear_logp(hh1, weight, ids)
            (lp1.sum() + 0.5 * entropy1.sum()).backward()
            assert torch.equal(bits(hh1.grad), bits(hh.grad)), "temperature=1 changed a gradient bit"
