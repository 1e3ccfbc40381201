"""Forward-mode AD through a patched transformers model is refused, naming the op that met the
tangent, where the unpatched model gives one; reverse mode through the same model still works.

The contract suite holds every op and overload to the rule (test_forward_mode_ad_is_refused and
test_gradient_under_a_torch_func_transform_is_refused in runtime/tests/test_autograd.py); this
shows it reaches a model, whose parameters carry the tangents.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the transformers integration tests need transformers (make test installs it)")

from package_build import import_built

pytestmark = pytest.mark.slow

SIZES = {
    "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64,
    "intermediate_size": 48, "max_position_embeddings": 32, "attn_implementation": "sdpa",
}


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


def make_model(attention: str = "sdpa") -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**{**SIZES, "attn_implementation": attention})).eval()


def logits_jvp(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The logits' tangent along a random direction of every parameter (torch.func.jvp)."""
    params = {name: p.detach() for name, p in model.named_parameters()}
    g = torch.Generator().manual_seed(1)
    tangents = {name: torch.randn(p.shape, generator=g) for name, p in params.items()}
    _, tangent = torch.func.jvp(lambda ps: torch.func.functional_call(model, ps, (ids,)).logits, (params,), (tangents,))
    return tangent


def test_forward_mode_through_a_patched_model_is_refused(rlkernels):
    import rlkernels.transformers as rlkt

    ids = torch.randint(0, SIZES["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(2))
    # Unpatched, torch's own kernels give a tangent (eager attention: sdpa on the CPU has no forward
    # derivative): the call below is one that can give one.
    assert bool(logits_jvp(make_model("eager"), ids).abs().sum() > 0)
    model = rlkt.patch(make_model())
    with pytest.raises(RuntimeError, match=r"rlkernels\.\w+ does not support forward-mode AD"):
        logits_jvp(model, ids)
    # Dual tensors, with no parameter requiring grad, reach the same refusal.
    embeds = model.get_input_embeddings()(ids).detach()
    with torch.autograd.forward_ad.dual_level(), torch.no_grad():
        dual = torch.autograd.forward_ad.make_dual(embeds, torch.ones_like(embeds))
        with pytest.raises(RuntimeError, match=r"rlkernels\.\w+ does not support forward-mode AD"):
            model(inputs_embeds=dual)
    # Reverse mode is untouched.
    model.zero_grad()
    model(ids).logits.float().square().sum().backward()
    assert all(p.grad is not None and bool(p.grad.isfinite().all()) for p in model.parameters())
