"""linear_logp where a logit overflowed to -inf: its probability is 0, and so are its terms.

A logit of -inf (a product past float32's range) has p = 0.  The entropy's sum of p z and the
entropy's gradient term p (z - mu) go to 0 with p, but computed as written they are 0 * inf = NaN,
which made the row's entropy NaN and, through the backward, every gradient of the row NaN --
even where the entropy is only a metric, left out of the loss (autograd then hands the backward
zeros for it).  So a logit whose p is 0 adds nothing to either (specs/ops/linear_logp.yaml,
linear_logp_backward.yaml), checked here on the built CPU package's every host code path against
float64 autograd, where the same product is -1e40 and nothing overflows; the device kernels share
the functions (tests/test_device_emulated.py checks their bits against the CPU's).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")

from package_build import import_built

pytestmark = pytest.mark.slow

PATHS = (("generic", "1"), ("avx2", "2"), (None, "1"), (None, "2"))
OVERFLOW_ROW = 2


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


def overflowing(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """h, weight and ids where logit (OVERFLOW_ROW, 5) is h[2, 0] * weight[5, 0] = -1e40: -inf in
    float32; column 0 is zero elsewhere, so every other logit is ordinary."""
    gen = torch.Generator().manual_seed(4)
    h = torch.randn(8, 48, generator=gen).to(dtype)
    weight = (torch.randn(300, 48, generator=gen) * 0.3).to(dtype)
    h[:, 0], weight[:, 0] = 0, 0
    h[OVERFLOW_ROW, 0], weight[5, 0] = 1e20, -1e20
    return h, weight, torch.randint(0, 300, (8,), generator=gen)


def float64_step(h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor, entropy_weight: float):
    """The entropy, and d(sum of the log-probs + entropy_weight * sum of the entropies) / d(h, weight),
    by autograd in float64, where nothing overflows."""
    h64, w64 = h.double().requires_grad_(True), weight.double().requires_grad_(True)
    logprobs = torch.log_softmax(h64 @ w64.t(), dim=1)
    entropy = -(logprobs.exp() * logprobs).sum(dim=1)
    (logprobs.gather(1, ids.unsqueeze(1)).sum() + entropy_weight * entropy.sum()).backward()
    return entropy.detach(), h64.grad, w64.grad


def check_step(rlkernels, dtype: torch.dtype, entropy_weight: float) -> None:
    h, weight, ids = overflowing(dtype)
    logits = rlkernels.det_linear(h, weight, None, out_fp32=True)
    assert logits[OVERFLOW_ROW, 5] == float("-inf"), "the case no longer overflows a logit: it shows nothing"
    hh, ww = h.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    lp, entropy = rlkernels.linear_logp(hh, ww, ids)[:2]
    loss = lp.sum() + entropy_weight * entropy.sum() if entropy_weight else lp.sum()
    loss.backward()
    want_entropy, want_h, want_w = float64_step(h, weight, ids, entropy_weight)
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    assert torch.isfinite(entropy).all(), f"entropy {entropy.tolist()}: the -inf logit's 0 * inf reached it"
    torch.testing.assert_close(entropy.double(), want_entropy, atol=1e-4, rtol=1e-4)
    for name, got, want in (("grad h", hh.grad, want_h), ("grad weight", ww.grad, want_w)):
        assert torch.isfinite(got.float()).all(), f"{name} is not finite: the -inf logit's 0 * inf reached it"
        torch.testing.assert_close(got.double(), want, **tolerance, msg=lambda m, n=name: f"{n}: {m}")


ENTROPY_WEIGHTS = {"entropy-unused": 0.0, "entropy-in-the-loss": 0.5}


@pytest.mark.parametrize("entropy_weight", list(ENTROPY_WEIGHTS.values()), ids=list(ENTROPY_WEIGHTS))
@pytest.mark.parametrize("simd,threads", PATHS, ids=[f"{s or 'native'}-{t}" for s, t in PATHS])
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_an_overflowed_logit_adds_nothing(rlkernels, dtype, simd, threads, entropy_weight, monkeypatch):
    """The entropy a metric (its gradient reaches the backward as zeros), or an entropy bonus in
    the loss: either way the overflowed logit's terms are 0, not NaN, forward and backward."""
    if simd is not None:
        monkeypatch.setenv("RLK_CPU_SIMD", simd)
    monkeypatch.setenv("RLK_NUM_THREADS", threads)
    check_step(rlkernels, dtype, entropy_weight)
