"""Mixture-of-experts models, bit for bit: rlkernels.moe's routing rule and rlkernels.transformers.patch
on tiny Qwen3-MoE and Mixtral decoders (random weights, built from configs).

A sequence's log-probs and every parameter's gradient of its GRPO loss must have the same bits
alone and at several rows of padded batches (where other tokens crowd its experts), run to run
and on 1 and 2 threads; the unpatched model fails the same comparison.  The router's rule is
checked on its own: equal scores pick the lower expert, a token's experts and an expert's rows do
not depend on the batch, every token may choose the same expert and most experts may stay empty.
Bitwise means the integer views of the bits.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the transformers integration tests need transformers (make test installs it)")

from test_transformers_chain import alone_run_to_run_and_on_threads, assert_same_step, grpo_step, padded, sequences

from bitwise import bits, same_bits
from package_build import import_built

pytestmark = pytest.mark.slow

MOE_SIZES = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
    "max_position_embeddings": 256, "initializer_range": 0.1, "attn_implementation": "sdpa", "num_experts_per_tok": 2,
}
TARGET = 70


def make_moe(family: str, dtype: torch.dtype, **overrides):
    """A 2-layer MoE decoder with 8 experts, top 2.  Qwen3-MoE: layer 0 sparse (renormalised
    weights rounded to the model dtype), layer 1 dense (mlp_only_layers); Qwen2-MoE: both sparse,
    weights not renormalised (its default), a shared expert and its sigmoid gate, q/k/v biases;
    Mixtral: both sparse (weights kept in float32).  The routers get weights large enough that tokens spread over the
    experts (Qwen3-MoE's start at zero, where every expert ties)."""
    if family == "qwen2_moe":
        config = transformers.Qwen2MoeConfig(
            **{**MOE_SIZES, "intermediate_size": 96, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 64, "num_experts": 8, **overrides}
        )
        cls = transformers.Qwen2MoeForCausalLM
    elif family == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(
            **{**MOE_SIZES, "intermediate_size": 96, "moe_intermediate_size": 48, "num_experts": 8, "norm_topk_prob": True, "mlp_only_layers": [1], **overrides}
        )
        cls = transformers.Qwen3MoeForCausalLM
    else:
        config = transformers.MixtralConfig(**{**MOE_SIZES, "intermediate_size": 48, "num_local_experts": 8, **overrides})
        cls = transformers.MixtralForCausalLM
    torch.manual_seed(0)
    model = cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.5)
    return model.to(dtype).eval()


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


@pytest.fixture(scope="module")
def rlkt(rlkernels):
    import rlkernels.transformers as module

    return module


@pytest.fixture(scope="module")
def moe(rlkernels):
    import rlkernels.moe as module

    return module


# ---- the rule on its own


def test_equal_scores_pick_the_lower_expert(moe):
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0], [0.0] * 6, [5.0, 5.0, 5.0, 5.0, 5.0, 6.0]], dtype=torch.bfloat16)
    weights, experts = moe.route(logits, top_k=2, renormalize=True)
    assert experts.tolist() == [[1, 2], [0, 1], [5, 0]]
    assert experts.dtype == torch.int64 and not experts.requires_grad
    assert weights.dtype == torch.float32 and weights[1].tolist() == [0.5, 0.5]
    # Alone or among other rows, a row's choice and weights keep their bits.
    for row in range(3):
        w, e = moe.route(logits[row : row + 1], top_k=2, renormalize=True)
        assert e.tolist() == experts[row : row + 1].tolist() and same_bits(w, weights[row : row + 1])
    w, _ = moe.route(logits, top_k=2, renormalize=True, weights_in_model_dtype=True)
    assert w.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="top_k must be an int in \\[1, 6\\]"):
        moe.route(logits, top_k=7, renormalize=True)


def expert_inputs(tokens: int, dtype: torch.dtype, seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, 32, generator=g).to(dtype)
    gate_up = (0.2 * torch.randn(6, 2 * 24, 32, generator=g)).to(dtype)
    down = (0.2 * torch.randn(6, 32, 24, generator=g)).to(dtype)
    logits = torch.randn(tokens, 6, generator=g).to(dtype)
    return x, logits, gate_up, down


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_tokens_output_does_not_depend_on_how_many_rows_its_experts_received(moe, dtype):
    x, logits, gate_up, down = expert_inputs(40, dtype)
    want = moe.experts_forward(x, logits, gate_up, down, 2, True)
    # Every token alone: each of its experts receives one row.
    for t in (0, 7, 39):
        got = moe.experts_forward(x[t : t + 1], logits[t : t + 1], gate_up, down, 2, True)
        assert same_bits(got, want[t : t + 1]), f"token {t} alone"
    # Every token choosing experts 4 and 1 (the others empty), 40 rows each, against one token alone.
    crowd = logits.clone()
    crowd[:, 4], crowd[:, 1] = 9.0, 8.0
    many = moe.experts_forward(x, crowd, gate_up, down, 2, False)
    for t in (0, 21):
        assert same_bits(moe.experts_forward(x[t : t + 1], crowd[t : t + 1], gate_up, down, 2, False), many[t : t + 1])
    assert not same_bits(many, want), "the crowded routing changed nothing: the experts are not what the logits choose"
    # No tokens at all.
    assert moe.experts_forward(x[:0], logits[:0], gate_up, down, 2, True).shape == (0, 32)


def test_the_experts_combine_as_the_rule_says(moe):
    """The module docstring's rule, token by token from the catalog's own ops: the output is the
    slot-ordered float32 sum of expert output times weight, rounded once."""
    import rlkernels

    x, logits, gate_up, down = expert_inputs(9, torch.bfloat16, seed=5)
    got = moe.experts_forward(x, logits, gate_up, down, 2, True, True)
    weights, experts = moe.route(logits, 2, True, True)
    for t in range(9):
        total = None
        for s in range(2):
            e = int(experts[t, s])
            h = rlkernels.det_linear(x[t : t + 1], gate_up[e])
            y = rlkernels.det_linear(rlkernels.swiglu(h[:, :24].contiguous(), h[:, 24:].contiguous()), down[e])
            term = y.float() * weights[t, s].float()
            total = term if total is None else total + term
        assert same_bits(got[t : t + 1], total.to(torch.bfloat16)), f"token {t}"


def test_gradients_are_deterministic_and_refuse_forward_mode(moe):
    x, logits, gate_up, down = expert_inputs(24, torch.float32, seed=6)
    runs = []
    for _ in range(2):
        leaves = [t.clone().requires_grad_(True) for t in (x, logits, gate_up, down)]
        y = moe.experts_forward(*leaves, 2, True)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        runs.append([leaf.grad for leaf in leaves])
    for a, b in zip(*runs):
        assert a is not None and same_bits(a, b)
    assert bool((runs[0][1] != 0).any()), "the router's logits get a gradient through the weights"
    # Against autograd of the same math in float64 (ties aside, the chosen experts are the same).
    leaves = [t.double().requires_grad_(True) for t in (x, logits, gate_up, down)]
    _, chosen = moe.route(logits, 2, True)
    probs = torch.softmax(leaves[1], -1)
    w = probs.gather(1, chosen)
    w = w / w.sum(-1, keepdim=True)
    y = torch.zeros_like(leaves[0])
    for s in range(2):
        gu = torch.einsum("th,tih->ti", leaves[0], leaves[2][chosen[:, s]])
        act = torch.nn.functional.silu(gu[:, :24]) * gu[:, 24:]
        y = y + torch.einsum("ti,thi->th", act, leaves[3][chosen[:, s]]) * w[:, s : s + 1]
    (y * torch.linspace(-1, 1, y.numel(), dtype=torch.float64).view_as(y)).sum().backward()
    for ours, ref in zip(runs[0], leaves):
        assert torch.allclose(ours.double(), ref.grad, atol=1e-4, rtol=1e-3)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(RuntimeError):
            moe.experts_forward(dual, logits, gate_up, down, 2, True)


def test_router_disagreement(moe):
    a = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])
    assert moe.router_disagreement(a, a.flip(1)) == 0.0  # slot order aside
    assert moe.router_disagreement(a, torch.tensor([[0, 1], [2, 4], [4, 5], [7, 6]])) == 0.25
    assert moe.router_disagreement(a[:0], a[:0]) == 0.0
    with pytest.raises(ValueError, match="one shape"):
        moe.router_disagreement(a, a[:2])


# ---- patched models


CASES = [("qwen3_moe", "bfloat16"), ("mixtral", "bfloat16"), ("qwen2_moe", "bfloat16"), ("qwen3_moe", "float32")]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize(("family", "dtype"), CASES)
def test_patched_moe_is_bitwise_batch_invariant(rlkernels, rlkt, family, dtype):
    model = make_moe(family, DTYPES[dtype])
    unpatched = model.config.vocab_size
    target, others = sequences(unpatched)
    target = target[:TARGET]
    with torch.no_grad():
        reference = model(target.unsqueeze(0)).logits.float().log_softmax(-1)[0, :-1].gather(-1, target[1:, None])[:, 0]
    rlkt.patch(model)
    want = alone_run_to_run_and_on_threads(rlkernels, rlkt, model, target)
    # The patched model computes what the model computes, within the rounding of another order; in
    # bfloat16 another rounding of a router logit may flip a near tie, and a token then takes
    # another expert: most tokens, not all, are close there.
    diff = (want.lp - reference).abs()
    if dtype == "bfloat16":
        assert float((diff < 0.05).float().mean()) >= 0.9, diff
    else:
        assert float(diff.max()) < 1e-4
    for side, row in (("right", 3), ("left", 7)):
        ids, mask, start = padded(target, others, row, side)
        lp = rlkt.token_logprobs(model, ids, mask)
        got = grpo_step(rlkernels, model, lp[row, start : start + TARGET - 1])
        assert_same_step(got, want, model, f"{side}-padded batch of 8, row {row}")
    # Every expert weight of the sparse layers got a gradient, and the routers too.
    grads = dict(zip([n for n, _ in model.named_parameters()], want.grads))
    assert bool(grads["model.layers.0.mlp.gate.weight"].abs().sum() > 0)
    assert bool(grads["model.layers.0.mlp.experts.gate_up_proj"].abs().sum() > 0)
    rlkt.unpatch(model)


def test_unpatched_moe_fails_the_same_comparison(rlkt):
    model = make_moe("qwen3_moe", torch.bfloat16)
    target, others = sequences(model.config.vocab_size)
    with torch.no_grad():
        one = model(target.unsqueeze(0)).logits[0].float()
        ids, mask, _ = padded(target, others, 3, "right")
        batch = model(ids, attention_mask=mask).logits[3, : len(target)].float()
    assert not same_bits(one, batch), "the unpatched model kept its bits in a batch: the comparison cannot fail"
    assert int((bits(one) != bits(batch)).sum()) > 0


@pytest.mark.parametrize(
    ("family", "overrides", "named"),
    [
        ("mixtral", {"router_jitter_noise": 0.1}, "router_jitter_noise=0.1"),
        ("qwen3_moe", {"output_router_logits": True}, "output_router_logits=True"),
        ("qwen3_moe", {"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_config_keys_the_patch_does_not_implement_are_refused(rlkt, family, overrides, named):
    model = make_moe(family, torch.float32, **overrides)
    with pytest.raises(rlkt.PatchError, match=named):
        rlkt.patch(model)
    assert not rlkt.is_patched(model)


def test_a_moe_family_without_a_rule_is_refused(rlkt):
    config = transformers.OlmoeConfig(**{**MOE_SIZES, "intermediate_size": 48, "num_experts": 8})
    model = transformers.OlmoeForCausalLM(config).eval()
    with pytest.raises(rlkt.PatchError, match="model_type='olmoe'"):
        rlkt.patch(model)
