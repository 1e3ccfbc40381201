"""The chain gate: a transformers decoder patched with rlkernels.transformers gives bitwise
batch-invariant per-token log-probs and GRPO gradients.

Tiny Qwen2 and Llama models built from configs (no downloads), float32 and bfloat16:
embedding → RoPE → RMSNorm → QKV → attention → gated MLP → LM head → log-prob (linear_logp) →
ratio_kl → grpo_loss → backward.  A sequence's log-probs and every parameter's gradient of its
GRPO loss must have the same bits alone, at several rows of a right- and a left-padded batch of 8
with sequences of other lengths, packed into one row with others, on 1 and 2 threads and run to run;
its log-probs also with chunked prefill and token-by-token decode against the KV cache.  Bitwise
means the integer views of the bits.  The unpatched model with sdpa fails the same comparison,
which shows the comparison can fail.
"""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the transformers integration tests need transformers (make test installs it)")

from bitwise import bits, same_bits
from package_build import CACHE, import_built

pytestmark = pytest.mark.slow

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FAMILIES = ("qwen2", "llama")
TARGET = 70  # tokens: more than one 64-key block of the attention op
OTHERS = (5, 90, 33, 1, 64, 12, 47)  # the batch's other sequences, shorter and longer
ROWS = (0, 3, 7)  # where the target sits in the batch of 8
SIZES = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "intermediate_size": 176, "max_position_embeddings": 256, "initializer_range": 0.1, "attn_implementation": "sdpa",
}


# The devices the chain test runs on: the CPU, and those RLK_CHAIN_DEVICES names (make gpu-check
# sets "cpu,cuda", with RLK_CHAIN_PACKAGE naming its CUDA build, which carries both platforms' kernels).
CHAIN_DEVICES = [d for d in os.environ.get("RLK_CHAIN_DEVICES", "cpu").split(",") if d]


def _device_param(device: str):
    present = device == "cpu" or (device == "cuda" and torch.cuda.is_available())
    why = f"no {device.upper()} device: torch.cuda.is_available() is False" if device == "cuda" else f"unknown device {device!r}"
    return pytest.param(device, id=device, marks=pytest.mark.skipif(not present, reason=why))


@pytest.fixture(scope="module")
def rlkernels(request):
    package = os.environ.get("RLK_CHAIN_PACKAGE")
    if package:  # a package built elsewhere (make gpu-check's CUDA build), imported as it is
        sys.path.insert(0, package)
        request.addfinalizer(lambda: sys.path.remove(package))
        for name in [m for m in sys.modules if m == "rlkernels" or m.startswith("rlkernels.")]:
            del sys.modules[name]
        import rlkernels as module

        assert module.NATIVE_ERROR is None, module.NATIVE_ERROR
        return module
    return import_built("cpu", request)


@pytest.fixture(scope="module")
def rlkt(rlkernels):
    import rlkernels.transformers as module

    return module


def make_model(family: str, dtype: torch.dtype, device: str = "cpu", **overrides):
    """A 2-layer decoder, hidden 64, 4 heads over 2 KV heads (GQA), vocabulary 512, random weights
    large enough that attention is far from uniform."""
    if family == "qwen2":
        config = transformers.Qwen2Config(**{**SIZES, **overrides})  # q/k/v with bias, untied LM head
        cls = transformers.Qwen2ForCausalLM
    else:
        config = transformers.LlamaConfig(**{**SIZES, "tie_word_embeddings": True, **overrides})  # tied LM head
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    return cls(config).to(dtype).to(device).eval()


def sequences(vocab: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    target = torch.randint(1, vocab, (TARGET,), generator=g)
    others = [torch.randint(1, vocab, (n,), generator=g) for n in OTHERS]
    return target, others


def padded(target: torch.Tensor, others: list[torch.Tensor], row: int, side: str, pad_id: int = 0):
    """A batch of 8 with ``target`` at ``row``: ids [8, T], mask [8, T], and the target's first column."""
    seqs = list(others)
    seqs.insert(row, target)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.int64, device=target.device)
    mask = torch.zeros(len(seqs), width, dtype=torch.int64, device=target.device)
    for i, s in enumerate(seqs):
        start = 0 if side == "right" else width - len(s)
        ids[i, start : start + len(s)] = s
        mask[i, start : start + len(s)] = 1
    return ids, mask, 0 if side == "right" else width - len(target)


@dataclass(frozen=True)
class Step:
    lp: torch.Tensor  # [TARGET - 1] float32: the target's scored log-probs
    grads: tuple[torch.Tensor, ...]  # one per parameter, in named_parameters order


def grpo_step(rlkernels, model, lp: torch.Tensor) -> Step:
    """One GRPO step on the target alone: its completion against a zero-reward, fully masked one
    (so the advantage is not 0), fixed old and reference log-probs, then every parameter's gradient.
    The loss reads only the target's log-probs, so another row's tokens add exact zeros."""
    n = lp.shape[0]
    g = torch.Generator().manual_seed(2)
    old = (-6.2 + 0.3 * torch.randn(2, n, generator=g)).to(lp.dtype).to(lp.device)
    ref = (-6.2 + 0.3 * torch.randn(2, n, generator=g)).to(lp.dtype).to(lp.device)
    lp2 = torch.stack([lp, torch.zeros_like(lp)])
    mask = torch.zeros(2, n, dtype=torch.bool, device=lp.device)
    mask[0] = True
    ratio, kl = rlkernels.ratio_kl(lp2, old, ref, mask)
    rewards = torch.tensor([[1.0, 0.0]], device=lp.device)
    loss, _ = rlkernels.grpo_loss(ratio.view(1, 2, n), kl.view(1, 2, n), mask.view(1, 2, n), rewards)
    params = [p for _, p in model.named_parameters()]
    return Step(lp.detach(), tuple(torch.autograd.grad(loss, params)))


def alone(rlkernels, rlkt, model, target: torch.Tensor) -> Step:
    lp = rlkt.token_logprobs(model, target.unsqueeze(0))
    return grpo_step(rlkernels, model, lp[0, :-1])


def alone_run_to_run_and_on_threads(rlkernels, rlkt, model, target: torch.Tensor) -> Step:
    """The target's step alone on 2 threads, checked to have the same bits run to run and on 1 thread."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        want = alone(rlkernels, rlkt, model, target)
        assert_same_step(alone(rlkernels, rlkt, model, target), want, model, "run to run")
        torch.set_num_threads(1)
        assert_same_step(alone(rlkernels, rlkt, model, target), want, model, "1 thread vs 2")
    finally:
        torch.set_num_threads(threads)
    return want


def assert_same_step(got: Step, want: Step, model, what: str) -> None:
    assert same_bits(got.lp, want.lp), f"{what}: log-probs differ in {int((bits(got.lp) != bits(want.lp)).sum())} of {want.lp.numel()} tokens"
    names = [name for name, _ in model.named_parameters()]
    differing = [name for name, a, b in zip(names, got.grads, want.grads) if not same_bits(a, b)]
    assert not differing, f"{what}: gradients of {differing} differ"


@pytest.mark.parametrize("device", [_device_param(d) for d in CHAIN_DEVICES])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("family", FAMILIES)
def test_chain_is_bitwise_batch_invariant(rlkernels, rlkt, family, dtype, device):
    model = rlkt.patch(make_model(family, DTYPES[dtype], device))
    target, others = sequences(model.config.vocab_size)
    target, others = target.to(device), [o.to(device) for o in others]
    want = alone_run_to_run_and_on_threads(rlkernels, rlkt, model, target)

    for side in ("right", "left"):
        for row in ROWS:
            ids, mask, start = padded(target, others, row, side)
            lp = rlkt.token_logprobs(model, ids, mask)
            got = grpo_step(rlkernels, model, lp[row, start : start + TARGET - 1])
            assert_same_step(got, want, model, f"{side}-padded batch of 8, row {row}")
            assert torch.isfinite(lp).all() and (lp[mask == 0] == 0).all(), "padding positions give finite zeros"

    # Packed: one row holding three sequences, positions restarting at 0 at each.
    before, after = others[2], others[0]
    ids = torch.cat([before, target, after]).unsqueeze(0)
    positions = torch.cat([torch.arange(len(before)), torch.arange(TARGET), torch.arange(len(after))]).unsqueeze(0).to(device)
    lp = rlkt.token_logprobs(model, ids, position_ids=positions)
    assert lp[0, len(before) - 1] == 0, "no label across the end of a packed sequence"
    got = grpo_step(rlkernels, model, lp[0, len(before) : len(before) + TARGET - 1])
    assert_same_step(got, want, model, "packed with two others")

    # Chunked prefill and token-by-token decode against the KV cache (log-probs).
    ids = target.unsqueeze(0)
    labels = torch.full_like(ids, -100)
    labels[0, :-1] = target[1:]
    with torch.no_grad():
        for bounds, what in (((0, 17, 50, TARGET), "chunked prefill"), ((0, 40, *range(41, TARGET + 1)), "prefill then decode")):
            cache = transformers.DynamicCache(config=model.config)
            parts = [
                rlkt.token_logprobs(model, ids[:, a:b], labels=labels[:, a:b], cache=cache, use_cache=True)
                for a, b in itertools.pairwise(bounds)
            ]
            lp = torch.cat(parts, dim=1)[0, :-1]
            assert same_bits(lp, want.lp), f"{what}: log-probs differ in {int((bits(lp) != bits(want.lp)).sum())} tokens"


def test_chain_under_autocast_is_bitwise_batch_invariant(rlkernels, rlkt):
    """A float32 Qwen2 under torch.autocast(bfloat16): every linear layer computes in bfloat16, as
    unpatched under autocast; a sequence's log-probs and GRPO gradients keep their bits alone and
    in padded batches; and the model traces under autocast without graph breaks."""
    model = rlkt.patch(make_model("qwen2", torch.float32))
    target, others = sequences(model.config.vocab_size)
    linear_dtypes: set[torch.dtype] = set()
    hooks = [m.register_forward_hook(lambda _m, _i, out: linear_dtypes.add(out.dtype)) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = alone(rlkernels, rlkt, model, target)
        for hook in hooks:
            hook.remove()
        for side, row in (("right", 7), ("left", 3)):
            ids, mask, start = padded(target, others, row, side)
            lp = rlkt.token_logprobs(model, ids, mask)
            got = grpo_step(rlkernels, model, lp[row, start : start + TARGET - 1])
            assert_same_step(got, want, model, f"autocast, {side}-padded batch of 8, row {row}")
        explained = torch._dynamo.explain(model.model)(ids, attention_mask=mask)
    assert linear_dtypes == {torch.bfloat16}, f"linear layers gave {linear_dtypes} under autocast(bfloat16)"
    assert want.lp.dtype == torch.float32 and all(g.dtype == torch.float32 for g in want.grads), "float32 log-probs, gradients in the parameters' dtype"
    with torch.no_grad():
        full = rlkt.token_logprobs(model, target.unsqueeze(0))[0, :-1]
    assert not same_bits(full, want.lp), "autocast changed nothing: the ops ran in float32"
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("family", FAMILIES)
def test_chain_is_accurate_against_float64(rlkernels, rlkt, family, dtype):
    """Log-probs within the package's logprob tolerance of a float64 copy of the unpatched model
    (same weights); each parameter's GRPO gradient within the reduction tolerance's rtol, in norm."""
    model = make_model(family, DTYPES[dtype])
    reference = copy.deepcopy(model).double()
    rlkt.patch(model)
    target, _ = sequences(model.config.vocab_size)
    got = alone(rlkernels, rlkt, model, target)

    from rlkernels import _references

    logits = reference(target.unsqueeze(0)).logits[0, :-1]
    lp = torch.log_softmax(logits, dim=-1).gather(-1, target[1:, None])[:, 0]
    atol, _ = rlkernels.TOLERANCES["logprob"][dtype]
    torch.testing.assert_close(got.lp.double(), lp.detach(), atol=atol, rtol=0)

    n = lp.shape[0]
    g = torch.Generator().manual_seed(2)
    old = (-6.2 + 0.3 * torch.randn(2, n, generator=g)).double()  # the values grpo_step draws
    ref = (-6.2 + 0.3 * torch.randn(2, n, generator=g)).double()
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[0] = True
    ratio, kl = _references.ratio_kl(torch.stack([lp, torch.zeros_like(lp)]), old, ref, mask)
    loss, _ = _references.grpo_loss(ratio.view(1, 2, n), kl.view(1, 2, n), mask.view(1, 2, n), torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    want = torch.autograd.grad(loss, list(reference.parameters()))
    _, rtol = rlkernels.TOLERANCES["reduction"][dtype]
    for (name, _), a, b in zip(model.named_parameters(), got.grads, want):
        error = float((a.double() - b).norm() / b.norm())
        assert error <= rtol, f"{name}: gradient off by {error:.3g} (relative, in norm) > {rtol}"


def test_unpatched_sdpa_model_is_not_batch_invariant(rlkernels, rlkt):
    """The same comparison fails without patch(): it can tell batch-variant from invariant."""
    found = []
    for family in FAMILIES:
        for dtype in DTYPES.values():
            model = make_model(family, dtype)
            target, others = sequences(model.config.vocab_size)
            with torch.no_grad():
                want = rlkt.token_logprobs(model, target.unsqueeze(0))[0, :-1]
                for side in ("right", "left"):
                    ids, mask, start = padded(target, others, 3, side)
                    got = rlkt.token_logprobs(model, ids, mask)[3, start : start + TARGET - 1]
                    found.append(not same_bits(got, want))
    assert any(found), "the unpatched model gave the same bits in every layout: the check cannot fail"


def test_patch_keeps_parameters_and_unpatch_restores_exactly(rlkt):
    model = make_model("qwen2", torch.float32)
    ids = torch.randint(1, 512, (2, 9), generator=torch.Generator().manual_seed(3))
    before = model(ids).logits
    state = model.state_dict()
    with rlkt.batch_invariant(model):
        assert rlkt.is_patched(model) and model.config._attn_implementation == rlkt.ATTN_IMPLEMENTATION
        patched_state = model.state_dict()
        assert list(patched_state) == list(state)
        assert all(patched_state[k].data_ptr() == state[k].data_ptr() for k in state), "parameters are the same tensors"
        assert torch.isfinite(model(ids).logits).all()
    assert not rlkt.is_patched(model) and model.config._attn_implementation == "sdpa"
    assert not [name for name, m in model.named_modules() if "forward" in m.__dict__], "every module has its class's forward again"
    assert same_bits(model(ids).logits, before)


def test_patch_refuses_what_it_cannot_convert_and_changes_nothing(rlkt):
    model = make_model("qwen2", torch.float32)
    model.model.layers[1].mlp.act_fn = torch.nn.GELU(approximate="tanh")  # a config patch implements, a module it does not
    with pytest.raises(rlkt.PatchError, match=r"model\.layers\.1\.mlp \(Qwen2MLP\): gated MLP whose activation GELU is not SiLU"):
        rlkt.patch(model)
    assert not rlkt.is_patched(model) and model.config._attn_implementation == "sdpa"
    assert not [name for name, m in model.named_modules() if "forward" in m.__dict__]
    model = make_model("qwen2", torch.float32, hidden_act="gelu_pytorch_tanh")
    with pytest.raises(rlkt.PatchError, match=r"rlkernels\.transformers does not implement hidden_act='gelu_pytorch_tanh' of qwen2; only the SiLU"):
        rlkt.patch(model)

    model = make_model("llama", torch.float32)
    model.model.norm = torch.nn.LayerNorm(64)  # has a bias: not an RMS norm
    with pytest.raises(rlkt.PatchError, match=r"model\.norm \(LayerNorm\): a module with parameters"):
        rlkt.patch(model)
    model.model.norm = torch.nn.LayerNorm(64, bias=False)  # an RMS norm's structure, another computation
    with pytest.raises(rlkt.PatchError, match=r"model\.norm \(LayerNorm\): an RMS norm by its structure, but its batch-invariant replacement differs"):
        rlkt.patch(model)

    model = make_model("llama", torch.float32, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    with pytest.raises(rlkt.PatchError, match=r"does not implement rope_parameters=\{'rope_type': 'linear', .* of llama; only the default, unscaled RoPE"):
        rlkt.patch(model)

    sizes = {**SIZES, "num_hidden_layers": 1, "head_dim": 16}
    gemma = transformers.GemmaForCausalLM(transformers.GemmaConfig(**sizes))  # RMS norm with (1 + weight)
    with pytest.raises(rlkt.PatchError, match=r"does not implement model_type='gemma'; it implements granite, llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, smollm3"):
        rlkt.patch(gemma)
    moe = transformers.OlmoeForCausalLM(transformers.OlmoeConfig(**sizes, num_experts=4, num_experts_per_tok=2))
    with pytest.raises(rlkt.PatchError, match=r"does not implement model_type='olmoe'"):
        rlkt.patch(moe)


@pytest.mark.parametrize("family", ["qwen3", "mistral"])
def test_patch_recognises_other_families_by_structure(rlkt, family):
    """Qwen3 (per-head q/k RMS norm) and Mistral (a sliding window, here 8 tokens): the patched
    model agrees with sdpa on a left-padded batch and gives a sequence's logits bitwise alone."""
    if family == "qwen3":
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SIZES, head_dim=16))
    else:
        model = transformers.MistralForCausalLM(transformers.MistralConfig(**SIZES, sliding_window=8))
    model.eval()
    target, others = sequences(model.config.vocab_size)
    ids, mask, start = padded(target, others, 5, "left")
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: each sequence starts at 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=positions).logits
        rlkt.patch(model)
        got = model(ids, attention_mask=mask, position_ids=positions).logits
        one = model(target.unsqueeze(0)).logits[0]
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=1e-4)
    assert same_bits(got[5, start:], one)


def test_generate_left_padded_gives_the_scores_of_one_sequence(rlkt):
    """generate() on a patched model: a left-padded prompt's greedy scores, step by step against
    the cache, have the bits of the prompt generated alone."""
    model = rlkt.patch(make_model("qwen2", torch.float32))
    target, others = sequences(model.config.vocab_size)
    ids, mask, _ = padded(target[:20], others[:3], 1, "left")
    settings = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "output_scores": True, "return_dict_in_generate": True}
    batch = model.generate(ids, attention_mask=mask, **settings)
    one = model.generate(target[:20].unsqueeze(0), **settings)
    assert torch.equal(batch.sequences[1, -6:], one.sequences[0, -6:])
    assert all(same_bits(a[1], b[0]) for a, b in zip(batch.scores, one.scores))


def test_patched_model_compiles_without_graph_breaks(rlkt):
    model = rlkt.patch(make_model("llama", torch.float32))
    ids, mask, _ = padded(*sequences(model.config.vocab_size), 2, "right")
    explained = torch._dynamo.explain(model.model)(ids, attention_mask=mask)
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


def test_compiled_patched_model_keeps_eagers_bits_in_bfloat16(rlkt, monkeypatch):
    """torch.compile of a patched bfloat16 model: its logits and token_logprobs have eager's bits,
    because patch turns on inductor's emulate_precision_casts; with it off, inductor keeps fused
    intermediates in float32 and the same compile gives other bits (the control)."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "emulate_precision_casts", False)
    model = rlkt.patch(make_model("qwen2", torch.bfloat16))
    assert inductor_config.emulate_precision_casts
    ids = torch.randint(1, model.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))

    def compiled() -> tuple[torch.Tensor, torch.Tensor]:
        torch._dynamo.reset()
        return torch.compile(model)(ids).logits, torch.compile(rlkt.token_logprobs)(model, ids)

    with torch.no_grad():
        eager = model(ids).logits, rlkt.token_logprobs(model, ids)
        logits, logprobs = compiled()
        assert same_bits(logits, eager[0]) and same_bits(logprobs, eager[1])
        monkeypatch.setattr(inductor_config, "emulate_precision_casts", False)
        logits, logprobs = compiled()
    assert not same_bits(logits, eager[0]) and not same_bits(logprobs, eager[1]), "the control: inductor's own rounding differs"
    torch._dynamo.reset()


@pytest.mark.parametrize("family", FAMILIES)
def test_attn_implementation_alone_matches_sdpa(rlkt, family):
    """attn_implementation="rlkernels" without patch(): padded rows agree with sdpa within tolerance."""
    model = make_model(family, torch.float32)
    ids, mask, _ = padded(*sequences(model.config.vocab_size), 2, "left")
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        model.set_attn_implementation(rlkt.ATTN_IMPLEMENTATION)
        got = model(ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=1e-4)


def test_attention_backend_ignores_padding_and_holes(rlkt):
    """The backend's packing: a row's output is the same bits alone, right- or left-padded, and
    decoding after a right-padded prompt (padding between the prompt and the new token)."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 9, 16, generator=g)
    k, v = torch.randn(1, 2, 9, 16, generator=g), torch.randn(1, 2, 9, 16, generator=g)
    module = torch.nn.Module()
    want, _ = rlkt.attention_forward(module, q, k, v, None, scaling=0.25)
    for pad_left in (0, 3):
        pad = torch.randn(1, 4, 3, 16, generator=g)
        kpad = torch.randn(1, 2, 3, 16, generator=g)
        cat = (lambda a, p: torch.cat([p, a], 2)) if pad_left else (lambda a, p: torch.cat([a, p], 2))
        other_q, other_k = torch.randn(1, 4, 12, 16, generator=g), torch.randn(1, 2, 12, 16, generator=g)
        qb = torch.cat([other_q, cat(q, pad)])
        kb = torch.cat([other_k, cat(k, kpad)])
        vb = torch.cat([other_k.flip(-1), cat(v, kpad.flip(-1))])
        mask = torch.ones(2, 12, dtype=torch.int64)
        mask[1] = 0
        mask[1, 3:] = 1 if pad_left else 0
        if not pad_left:
            mask[1, :9] = 1
        got, _ = rlkt.attention_forward(module, qb, kb, vb, mask, scaling=0.25)
        real = mask[1].bool()
        assert same_bits(got[1, real], want[0]), f"pad_left={pad_left}"
        assert (got[1, ~real] == 0).all()
    # Decode the last token after the prompt's first 8 tokens were right-padded with 2 more slots.
    keys = torch.cat([k[:, :, :8], kpad[:, :, :2], k[:, :, 8:]], 2)
    values = torch.cat([v[:, :, :8], kpad[:, :, :2], v[:, :, 8:]], 2)
    mask = torch.tensor([[1] * 8 + [0, 0] + [1]])
    got, _ = rlkt.attention_forward(module, q[:, :, 8:], keys, values, mask, scaling=0.25)
    assert same_bits(got[0, 0], want[0, 8])


def test_import_needs_transformers_only_for_the_integration():
    root = CACHE / "inplace-cpu"
    script = (
        "import sys\n"
        "import rlkernels\n"
        "assert 'transformers' not in sys.modules, 'importing rlkernels imported transformers'\n"
        "sys.modules['transformers'] = None  # as if it were not installed\n"
        "try:\n"
        "    import rlkernels.transformers\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "pip install 'rlkernels[transformers]'" in result.stdout
