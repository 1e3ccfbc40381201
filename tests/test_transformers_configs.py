"""rlkernels.transformers reads what each layer computes from the model's config, refuses every
config key it does not implement, and computes the ones it does as the unpatched model does.

Tiny random-weight models built in-process from configs (no downloads), float32: the supported
model types with the settings that make layers differ (Mistral's sliding window, Qwen2 and Qwen3
windows on some layers, SmolLM3's NoPE layers, Granite's multipliers and logits scaling) agree with
the unpatched sdpa model, in the forward's logits and in token_logprobs, and give a sequence's
logits the same bits alone and in a left-padded batch.  Every other key, set away from its default,
is refused by name (a property test over the keys of real configs and new ones); so are models on
the meta device, and a packed row's sequences stay apart with an all-ones mask as without one.
"""

from __future__ import annotations

import copy
import inspect
import io
import pickle
import re

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the transformers integration tests need transformers (make test installs it)")
hypothesis = pytest.importorskip("hypothesis", reason="the property tests need hypothesis (make test installs it)")
from hypothesis import given, settings
from hypothesis import strategies as st

from bitwise import bits
from package_build import import_built

pytestmark = pytest.mark.slow  # the CPU package is built first

SIZES = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "intermediate_size": 96, "max_position_embeddings": 64, "initializer_range": 0.1, "attn_implementation": "sdpa",
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,  # SmolLM3's defaults lie outside a vocabulary of 128
}
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "granite": ("GraniteConfig", "GraniteForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
}
LENGTHS = (11, 5, 9)  # a left-padded batch; every sequence but one is longer than the windows below


@pytest.fixture(scope="module")
def rlkt(request):
    import_built("cpu", request)
    import rlkernels.transformers as module

    return module


def build(model_type: str, **overrides):
    config_class, model_class = (getattr(transformers, name) for name in CLASSES[model_type])
    torch.manual_seed(0)
    return model_class(config_class(**{**SIZES, **overrides})).eval()


def left_padded(vocab: int):
    g = torch.Generator().manual_seed(1)
    width = max(LENGTHS)
    ids = torch.zeros(len(LENGTHS), width, dtype=torch.int64)
    mask = torch.zeros(len(LENGTHS), width, dtype=torch.int64)
    for row, n in enumerate(LENGTHS):
        ids[row, width - n :] = torch.randint(3, vocab, (n,), generator=g)
        mask[row, width - n :] = 1
    return ids, mask


def unpatched_logprobs(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each real position's log-prob of the next real token, from the unpatched logits, in float64."""
    lp = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.where(mask[:, :-1].bool() & mask[:, 1:].bool(), lp, 0.0)


CASES = {
    # Keys published configs carry that the model type's code never reads (pretraining_tp, use_mrope,
    # max_window_layers) and keys that change no math (use_cache, output_hidden_states) ride along.
    "llama": ("llama", {"pretraining_tp": 2, "use_cache": False, "output_hidden_states": True}),
    "granite-multipliers": (
        "granite",
        {"embedding_multiplier": 6.0, "residual_multiplier": 0.4, "attention_multiplier": 0.2, "logits_scaling": 3.0},
    ),
    "mistral-window-3": ("mistral", {"sliding_window": 3}),
    "qwen2-window-on-layer-1": ("qwen2", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1, "use_mrope": False}),
    "qwen3-window-on-layer-1": ("qwen3", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1, "head_dim": 16}),
    "smollm3-nope-layer-3": ("smollm3", {"num_hidden_layers": 4, "pretraining_tp": 2, "max_window_layers": 28}),
    "smollm3-nope-layers-slide": ("smollm3", {"no_rope_layers": [1, 0], "use_sliding_window": True, "sliding_window": 3}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_patched_model_computes_what_the_unpatched_one_does(rlkt, case):
    """The patched model's logits and token_logprobs agree with the unpatched sdpa model on a
    left-padded batch (within 1e-4), and a sequence's logits keep their bits alone."""
    model_type, overrides = CASES[case]
    model = build(model_type, **overrides)
    ids, mask = left_padded(model.config.vocab_size)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    real = mask.bool()
    with torch.no_grad():
        want = model(ids, attention_mask=mask, position_ids=positions).logits
        rlkt.patch(model)
        got = model(ids, attention_mask=mask, position_ids=positions).logits
        lp = rlkt.token_logprobs(model, ids, mask)
        alone = model(ids[:1, -LENGTHS[0] :]).logits[0]
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lp[:, :-1].double(), unpatched_logprobs(want, ids, mask), atol=1e-4, rtol=0)
    assert torch.equal(bits(got[0, -LENGTHS[0] :]), bits(alone)), "a sequence's logits alone and in the batch differ in bits"


def test_the_probe_exercises_the_window_and_every_layer_is_checked(rlkt, monkeypatch):
    """A window applied one key too wide is caught by the patch-time probe (its window is shorter
    than the probe), and a layer whose own window is not its config's is refused by name."""
    original = rlkt._make_attention_forward
    monkeypatch.setattr(rlkt, "_make_attention_forward", lambda theta, window: original(theta, None if window is None else window + 1))
    model = build("mistral", sliding_window=4096)  # a window far longer than any probe
    with pytest.raises(rlkt.PatchError, match=r"model\.layers\.0\.self_attn \(MistralAttention\): its batch-invariant replacement differs"):
        rlkt.patch(model)
    monkeypatch.undo()

    model = build("qwen2", use_sliding_window=True, sliding_window=3, max_window_layers=1)
    model.model.layers[1].self_attn.sliding_window = 5
    with pytest.raises(rlkt.PatchError, match=r"model\.layers\.1\.self_attn \(Qwen2Attention\): its attention window 5 is not the one its config gives layer 1 \(3\)"):
        rlkt.patch(model)
    assert not rlkt.is_patched(model)


def test_granite_logits_scaling_in_token_logprobs_without_patch(rlkt):
    """token_logprobs divides by logits_scaling on the unpatched model too, as its forward does."""
    model = build("granite", logits_scaling=4.0)
    ids, mask = left_padded(model.config.vocab_size)
    with torch.no_grad():
        want = unpatched_logprobs(model(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0)).logits, ids, mask)
        got = rlkt.token_logprobs(model, ids, mask)[:, :-1]
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=0)


def test_meta_device_model_is_refused_clearly(rlkt):
    with torch.device("meta"):
        model = build("llama")
    with pytest.raises(rlkt.PatchError, match=r"model\.embed_tokens\.weight and \d+ more on the meta device: it holds no values .* load the weights first"):
        rlkt.patch(model)
    assert not rlkt.is_patched(model)


def test_packed_row_with_all_ones_mask_keeps_its_sequences_apart(rlkt):
    """Restarting position_ids define the sequences of a packed row with an all-ones mask, as
    without a mask: the attention and token_logprobs' labels both follow them, and each sequence
    gets the bits it has alone."""
    model = rlkt.patch(build("llama"))
    g = torch.Generator().manual_seed(2)
    first, second = torch.randint(3, 128, (9,), generator=g), torch.randint(3, 128, (12,), generator=g)
    ids = torch.cat([first, second])[None]
    positions = torch.cat([torch.arange(9), torch.arange(12)])[None]
    with torch.no_grad():
        ones = rlkt.token_logprobs(model, ids, torch.ones_like(ids), position_ids=positions)[0]
        bare = rlkt.token_logprobs(model, ids, position_ids=positions)[0]
        alone = [rlkt.token_logprobs(model, s[None])[0] for s in (first, second)]
        logits = model(ids, attention_mask=torch.ones_like(ids), position_ids=positions).logits[0]
        logits_alone = model(second[None]).logits[0]
    assert torch.equal(bits(ones), bits(bare))
    assert ones[8] == 0, "no label across the end of the first sequence"
    assert torch.equal(bits(ones[:8]), bits(alone[0][:8])) and torch.equal(bits(ones[9:]), bits(alone[1]))
    assert torch.equal(bits(logits[9:]), bits(logits_alone)), "the second sequence's logits saw the first"


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_a_kv_cache_reaches_the_body_under_either_name(rlkt, name):
    """token_logprobs hands a KV cache to the model's body under the name its forward takes
    (transformers renamed it): a prefill in two chunks has the bits of the prefill in one."""
    model = rlkt.patch(build("llama"))
    ids = torch.randint(3, 128, (1, 21), generator=torch.Generator().manual_seed(3))
    labels = torch.full_like(ids, -100)
    labels[0, :-1] = ids[0, 1:]
    with torch.no_grad():
        whole = rlkt.token_logprobs(model, ids, labels=labels)
        cache = transformers.DynamicCache(config=model.config)
        chunks = [rlkt.token_logprobs(model, ids[:, a:b], labels=labels[:, a:b], use_cache=True, **{name: cache}) for a, b in ((0, 8), (8, 21))]
    assert torch.equal(bits(torch.cat(chunks, dim=1)), bits(whole))


def test_a_kv_cache_the_body_cannot_take_is_refused(rlkt, monkeypatch):
    """A body whose forward names no cache argument would swallow one in **kwargs and restart every
    position at 0: token_logprobs refuses it, and a cache given under both names."""
    model = rlkt.patch(build("llama"))
    body, ids = model.model, torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(4))
    cache = transformers.DynamicCache(config=model.config)
    with pytest.raises(ValueError, match="given twice, as cache and past_key_values"):
        rlkt.token_logprobs(model, ids, cache=cache, past_key_values=cache)
    own = body.forward
    monkeypatch.setattr(body, "forward", lambda input_ids=None, attention_mask=None, **kwargs: own(input_ids=input_ids, attention_mask=attention_mask))
    with pytest.raises(ValueError, match=r"cache= was given but LlamaModel\.forward takes no KV cache argument"):
        rlkt.token_logprobs(model, ids, cache=cache)
    assert rlkt.token_logprobs(model, ids).shape == ids.shape  # without a cache it runs


@pytest.mark.parametrize(
    ("model_type", "overrides", "refusal"),
    [
        ("llama", {"hidden_act": "relu"}, "hidden_act='relu' of llama; only the SiLU-gated MLP"),
        ("qwen2", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}, "rope_parameters={'rope_type': 'dynamic'"),
        ("qwen3", {"layer_types": ["full_attention", "chunked_attention"], "head_dim": 16}, "layer_types[1]='chunked_attention' of qwen3; only full_attention"),
        ("smollm3", {"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 3}, "layer_types[1]='sliding_attention' of smollm3; with use_sliding_window=False"),
        ("smollm3", {"no_rope_layers": [1, 2]}, "no_rope_layers=[1, 2] of smollm3; expected 1 (RoPE) or 0 (NoPE)"),
        ("mistral", {"sliding_window": 0}, "sliding_window=0 of mistral; a sliding layer needs a window of at least one key"),
        ("granite", {"logits_scaling": 0.0}, "logits_scaling=0.0 of granite; the logits are divided by it"),
        ("llama", {"is_causal": False}, "is_causal=False of llama; only its default, True"),
    ],
)
def test_values_patch_does_not_implement_are_refused_by_name(rlkt, model_type, overrides, refusal):
    model = build(model_type, **overrides)
    with pytest.raises(rlkt.PatchError, match=re.escape(f"rlkernels.transformers does not implement {refusal}")):
        rlkt.patch(model)
    assert not rlkt.is_patched(model) and not [n for n, m in model.named_modules() if "forward" in m.__dict__]


@pytest.fixture(scope="module")
def models():
    return {model_type: build(model_type, **({"head_dim": 16} if model_type == "qwen3" else {})) for model_type in CLASSES}


def _other_than(default):
    if isinstance(default, bool):
        return st.just(not default)
    if isinstance(default, int):
        return st.integers(-1000, 1000).filter(lambda v: v != default)
    if isinstance(default, float):
        return st.floats(-1e3, 1e3, allow_nan=False).filter(lambda v: v != default)
    return st.one_of(st.booleans(), st.integers(-1000, 1000), st.text(min_size=1, max_size=6))


@st.composite
def unimplemented_settings(draw, models, allowed):
    """A supported model type, a key outside its allow-list (one of its real config's keys, or a new
    one) and a value other than the key's default."""
    model_type = draw(st.sampled_from(sorted(models)))
    config = models[model_type].config
    real = sorted(set(config.to_dict()) - allowed[model_type])
    assert real, f"every key of a {model_type} config is allowed: nothing to pick"
    new = st.from_regex(r"[a-z]{1,10}", fullmatch=True).map(lambda s: f"extra_{s}")
    key = draw(st.one_of(st.sampled_from(real), new))
    default = getattr(type(config)(), key, None) if key in real else None
    return model_type, key, draw(_other_than(default))


def test_every_key_outside_the_allow_list_is_refused_by_name(rlkt, models):
    @settings(max_examples=40, deadline=None, database=None)
    @given(unimplemented_settings(models, rlkt.SUPPORTED_CONFIG))
    def check(setting):
        model_type, key, value = setting
        model = models[model_type]
        had, before = hasattr(model.config, key), getattr(model.config, key, None)
        try:
            setattr(model.config, key, value)
        except (TypeError, ValueError):  # transformers refuses the value itself (output_attentions=True beside sdpa)
            hypothesis.reject()
        try:
            with pytest.raises(rlkt.PatchError) as refused:
                rlkt.patch(model)
        finally:
            if had:
                setattr(model.config, key, before)
            else:
                delattr(model.config, key)
        assert f"rlkernels.transformers does not implement {key}={value!r} of {model_type}; " in str(refused.value)
        assert not rlkt.is_patched(model)

    check()
    for model in models.values():  # and each, back at its defaults, is accepted
        rlkt.unpatch(rlkt.patch(model))


def test_keys_taken_as_unread_are_never_read_by_the_model_code(rlkt):
    """The keys the allow-list takes as carried by published configs but never read: the model
    type's modeling module does not name them."""
    for model_type, support in rlkt._SUPPORT.items():
        source = inspect.getsource(inspect.getmodule(getattr(transformers, CLASSES[model_type][1])))
        named = sorted(key for key in support.unread if key in source)
        assert not named, f"{model_type}'s modeling code names {named}"


def _resize(model):
    model.resize_token_embeddings(136, mean_resizing=False)


def _add_layer(model):
    model.model.layers.append(transformers.models.llama.modeling_llama.LlamaDecoderLayer(model.config, 1))


def _drop_forward(model):
    del model.model.norm.forward


# Ways a model changes under the patch, each with the line that names it: every one would leave a
# module on its own forward (torch's kernels), or the masks on another backend, under is_patched.
CHANGES = {
    "resize_token_embeddings": (_resize, r"lm_head: the Linear patch routed was replaced by a new Linear"),
    "set_output_embeddings": (
        lambda m: m.set_output_embeddings(torch.nn.Linear(64, 128, bias=False)),
        r"lm_head: the Linear patch routed was replaced by a new Linear",
    ),
    "set_input_embeddings": (
        lambda m: m.set_input_embeddings(torch.nn.Embedding(128, 64)),
        r"model\.embed_tokens: the Embedding patch routed was replaced by a new Embedding",
    ),
    "assigned-lm_head": (lambda m: setattr(m, "lm_head", torch.nn.Linear(64, 128, bias=False)), r"lm_head: the Linear patch routed"),
    "assigned-mlp": (
        lambda m: setattr(m.model.layers[0], "mlp", transformers.models.llama.modeling_llama.LlamaMLP(m.config)),
        r"model\.layers\.0\.mlp: the LlamaMLP patch routed was replaced by a new LlamaMLP",
    ),
    "added-layer": (_add_layer, r"model\.layers\.2: LlamaDecoderLayer added since patch"),
    "forward-deleted": (_drop_forward, r"model\.norm \(LlamaRMSNorm\): its forward is no longer the one patch installed"),
    "attn_implementation": (lambda m: m.set_attn_implementation("sdpa"), r"config\._attn_implementation is 'sdpa', no longer 'rlkernels'"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_model_changed_under_the_patch_is_refused_until_patched_again(rlkt, change):
    """A module replaced, added or left on its own forward after patch would run torch's kernels
    while the model says it is patched: is_patched, the forward, token_logprobs and patch name
    it; unpatch then patch routes the model as it now is."""
    edit, line = CHANGES[change]
    model = rlkt.patch(build("llama"))
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(5))
    edit(model)
    refusal = rf"LlamaForCausalLM was patched, but has changed since, and what changed is not routed to rlkernels:\n  {line}.*\ncall unpatch\(model\), then patch\(model\) again"
    for call in (lambda: rlkt.is_patched(model), lambda: model(ids), lambda: rlkt.token_logprobs(model, ids), lambda: rlkt.patch(model)):
        with pytest.raises(rlkt.PatchError, match=refusal):
            call()
    rlkt.unpatch(model)
    assert not [name for name, m in model.named_modules() if "forward" in m.__dict__], "unpatch gave every module its own forward"
    rlkt.patch(model)
    assert rlkt.is_patched(model)
    assert all("forward" in m.__dict__ for m in model.modules() if isinstance(m, torch.nn.Linear | torch.nn.Embedding))
    with torch.no_grad():
        assert torch.isfinite(model(ids).logits).all() and torch.isfinite(rlkt.token_logprobs(model, ids)).all()


def test_changes_that_keep_what_patch_routed_are_not_refused(rlkt):
    """Tying the weights, gradient checkpointing, train/eval and dtype moves keep every module and
    its forward: the patched model runs on."""
    model = rlkt.patch(build("llama", tie_word_embeddings=True))
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(6))
    model.tie_weights()
    model.gradient_checkpointing_enable()
    model.train()
    rlkt.token_logprobs(model, ids).sum().backward()
    model.eval().to(torch.bfloat16).to(torch.float32)
    assert rlkt.is_patched(model)


def test_a_non_finite_weight_is_refused_by_name(rlkt):
    """NaN or infinity in a weight is named with its count, not taken for a module whose
    replacement computes something else (its probe would give NaN either way)."""
    model = build("llama")
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, :3] = float("nan")
        model.lm_head.weight[1, 1] = float("-inf")
    with pytest.raises(rlkt.PatchError) as refused:
        rlkt.patch(model)
    message = str(refused.value)
    assert "model.layers.0.mlp.up_proj.weight holds 3 non-finite values (NaN or infinity) of 6144" in message
    assert "lm_head.weight holds 1 non-finite value (NaN or infinity) of 8192" in message
    assert "replacement differs" not in message
    assert not rlkt.is_patched(model) and not [n for n, m in model.named_modules() if "forward" in m.__dict__]


def _pickled(model):
    return pickle.loads(pickle.dumps(model))


def _saved(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.parametrize("copier", [_pickled, copy.deepcopy, _saved], ids=["pickle", "deepcopy", "torch.save"])
def test_a_patched_model_copies_and_loads_patched(rlkt, copier):
    """pickle, deepcopy and torch.save of a patched model give a patched copy: its own modules
    routed, the same logits' bits, and unpatching it leaves the original patched."""
    model = rlkt.patch(build("llama"))
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(7))
    clone = copier(model)
    assert rlkt.is_patched(clone)
    with torch.no_grad():
        assert torch.equal(bits(clone(ids).logits), bits(model(ids).logits))
        assert torch.equal(bits(rlkt.token_logprobs(clone, ids)), bits(rlkt.token_logprobs(model, ids)))
    rlkt.unpatch(clone)
    assert not [name for name, m in clone.named_modules() if "forward" in m.__dict__]
    assert not clone.model._forward_pre_hooks and clone.config._attn_implementation == "sdpa"
    assert rlkt.is_patched(model) and all("forward" in m.__dict__ for m in model.modules() if isinstance(m, torch.nn.Linear))


def test_save_pretrained_of_a_patched_model_saves_the_plain_model(rlkt, tmp_path):
    """save_pretrained of a patched model writes the files of the unpatched one, byte for byte
    (weights, config, no attention implementation of the patch), and they load unpatched."""
    model = rlkt.patch(build("llama"))
    model.save_pretrained(tmp_path / "patched")
    rlkt.unpatch(model)
    model.save_pretrained(tmp_path / "plain")
    files = sorted(p.name for p in (tmp_path / "plain").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "patched").iterdir()) and "model.safetensors" in files
    for name in files:
        assert (tmp_path / "patched" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name
    loaded = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "patched", attn_implementation="sdpa")
    assert not rlkt.is_patched(loaded) and not [n for n, m in loaded.named_modules() if "forward" in m.__dict__]
    assert all(torch.equal(bits(loaded.state_dict()[k]), bits(v)) for k, v in model.state_dict().items())
