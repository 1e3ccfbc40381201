"""linear_logp's gradients where the entropy is a metric, not part of the loss.

Trainers report the entropy and leave it out of the loss; autograd then hands linear_logp's
backward no gradient for it (zeros, by the time it reaches the kernel).  The entropy's term of
dz, grad_entropy * p * (z - mu), must then add nothing -- also where a logit overflowed to -inf,
whose p is 0 and whose factor p * (z - mu) is 0 * inf = NaN.  So a row whose entropy gradient is
zero takes no entropy term (specs/ops/linear_logp_backward.yaml), on the built CPU package's
every host code path; the device kernels share the function (tests/test_device_emulated.py
checks their bits against the CPU's).  A nonzero entropy gradient in the same row still gives
NaN, which shows the case reaches the term.
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


def reference_gradients(h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """d(sum of the log-probs) / d(h, weight) by autograd in float64, where nothing overflows."""
    h64, w64 = h.double().requires_grad_(True), weight.double().requires_grad_(True)
    torch.log_softmax(h64 @ w64.t(), dim=1).gather(1, ids.unsqueeze(1)).sum().backward()
    return h64.grad, w64.grad


@pytest.mark.parametrize("simd,threads", PATHS, ids=[f"{s or 'native'}-{t}" for s, t in PATHS])
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_an_unused_entropy_adds_nothing_to_the_gradients(rlkernels, dtype, simd, threads, monkeypatch):
    if simd is not None:
        monkeypatch.setenv("RLK_CPU_SIMD", simd)
    monkeypatch.setenv("RLK_NUM_THREADS", threads)
    h, weight, ids = overflowing(dtype)
    hh, ww = h.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    lp, entropy = rlkernels.linear_logp(hh, ww, ids)[:2]
    assert torch.isnan(entropy[OVERFLOW_ROW]), "the case no longer overflows a logit: it shows nothing"
    lp.sum().backward()
    want_h, want_w = reference_gradients(h, weight, ids)
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
    for name, got, want in (("grad h", hh.grad, want_h), ("grad weight", ww.grad, want_w)):
        assert torch.isfinite(got.float()).all(), f"{name} is not finite: the unused entropy's term reached it"
        torch.testing.assert_close(got.double(), want, **tolerance, msg=lambda m, n=name: f"{n}: {m}")


def test_a_used_entropy_still_carries_its_nan(rlkernels):
    """The same row with an entropy gradient of 0.5: its term is NaN, and so is the row's gradient."""
    h, weight, ids = overflowing(torch.float32)
    _lp, entropy, lse = rlkernels.linear_logp(h, weight, ids)
    grad_entropy = torch.zeros(8)
    grad_entropy[OVERFLOW_ROW] = 0.5
    grad_h, _ = rlkernels.linear_logp_backward(torch.ones(8), grad_entropy, h, weight, ids, lse, entropy)
    assert torch.isnan(grad_h[OVERFLOW_ROW]).any()
    assert torch.isfinite(grad_h[torch.arange(8) != OVERFLOW_ROW]).all()
