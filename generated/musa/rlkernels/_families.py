# Copied from runtime/rlkernels/_families.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""The model families the integrations know, in one table: the names transformers and vLLM give
each family's classes, whether the vLLM plugin routes it, and what ``rlkernels.transformers.patch``
reads from its config (each layer's kind: RoPE or none, full attention or a sliding window; the
config keys it implements).  ``rlkernels.transformers`` and ``rlkernels.vllm`` read it; importing
it needs neither transformers nor vLLM."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


class LayerKind(NamedTuple):
    """What one attention layer computes, as its config says."""

    rope: bool  # q and k rotated by RoPE (False: a NoPE layer)
    window: int | None  # sliding window in transformers' count (the query included); None: full attention


class Unimplemented(Exception):
    """A config value patch does not implement: the key (``key[i]`` for one entry), the value, why."""

    def __init__(self, key: str, value: Any, why: str) -> None:
        super().__init__(key, value, why)
        self.key, self.value, self.why = key, value, why


def _window(config: Any) -> int:
    value = config.sliding_window
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Unimplemented("sliding_window", value, "a sliding layer needs a window of at least one key")
    return value


def _layer_types(config: Any) -> list[str]:
    types, count = config.layer_types, config.num_hidden_layers
    if not isinstance(types, (list, tuple)) or len(types) < count:
        raise Unimplemented("layer_types", types, f"expected a type for each of the {count} layers")
    for i, kind in enumerate(types[:count]):
        if kind not in ("full_attention", "sliding_attention"):
            raise Unimplemented(f"layer_types[{i}]", kind, "only full_attention and sliding_attention layers are implemented")
    return list(types[:count])


def _rope_layers(config: Any) -> list[LayerKind]:
    """Llama, Granite: RoPE and full attention on every layer."""
    return [LayerKind(True, None)] * config.num_hidden_layers


def _mistral_layers(config: Any) -> list[LayerKind]:
    """Mistral: RoPE on every layer, and config.sliding_window on every layer (None: full attention)."""
    window = None if config.sliding_window is None else _window(config)
    return [LayerKind(True, window)] * config.num_hidden_layers


def _qwen_layers(config: Any) -> list[LayerKind]:
    """Qwen2, Qwen3: RoPE on every layer; config.layer_types (made from use_sliding_window and
    max_window_layers where not given) says which layers slide, by config.sliding_window."""
    return [LayerKind(True, _window(config) if kind == "sliding_attention" else None) for kind in _layer_types(config)]


def _smollm3_layers(config: Any) -> list[LayerKind]:
    """SmolLM3: config.no_rope_layers[i] (made from no_rope_layer_interval where not given) says
    whether layer i rotates q and k; a sliding_attention layer slides by config.sliding_window."""
    count, flags = config.num_hidden_layers, config.no_rope_layers
    if not isinstance(flags, (list, tuple)) or len(flags) < count or any(flag not in (0, 1) for flag in flags[:count]):
        raise Unimplemented("no_rope_layers", flags, f"expected 1 (RoPE) or 0 (NoPE) for each of the {count} layers")
    kinds = []
    for i, kind in enumerate(_layer_types(config)):
        window = None
        if kind == "sliding_attention":
            if not config.use_sliding_window:
                # The model's sdpa and eager masks would slide, while the layer passes no window to other backends.
                raise Unimplemented(f"layer_types[{i}]", kind, "with use_sliding_window=False the layer's own backends disagree on it")
            window = _window(config)
        kinds.append(LayerKind(bool(flags[i]), window))
    return kinds


ValueCheck = Callable[[Any], "str | None"]
"""Why a value of an implemented key is not implemented, or None."""


@dataclass(frozen=True)
class MoeRule:
    """What a family's sparse MoE blocks compute beyond ``rlkernels.moe``'s common rule."""

    renormalize: str | None
    """The config key that says whether the chosen experts' weights are renormalised to sum to 1
    (None: the family always renormalises)."""
    weights_in_model_dtype: bool
    """Whether the weights are rounded to the model dtype before they scale the experts' outputs
    (else they stay float32)."""
    vllm_block: str
    """vLLM's class of the sparse block, whose forward calls its gate and its MoERunner."""

    def renormalizes(self, config: Any) -> bool:
        return True if self.renormalize is None else bool(getattr(config, self.renormalize))


def _no_jitter(value: Any) -> str | None:
    # Mixtral multiplies the hidden states by uniform noise in training mode: random, not deterministic.
    return None if value == 0 else "router jitter multiplies the hidden states by random noise in training; only 0 is deterministic"


def _only_silu(value: Any) -> str | None:
    return None if value == "silu" else "only the SiLU-gated MLP (SwiGLU) has a batch-invariant op"


def _plain_rope(value: Any) -> str | None:
    if not isinstance(value, dict) or value.get("rope_type") != "default" or set(value) - {"rope_type", "rope_theta"}:
        return "only the default, unscaled RoPE ({'rope_type': 'default', 'rope_theta': ...}) is implemented"
    theta = value.get("rope_theta")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
        return "rope_theta must be a positive number"
    return None


def finite_nonzero(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value == 0:
        return "the logits are divided by it: a finite, non-zero number"
    return None



# Keys every supported type implements.  Sizes, eps and biases: the patched forwards read them from
# the modules (det_linear adds a bias).  tie_word_embeddings: the LM head's weight is read,
# whichever tensor it is.  attention_dropout: 0 in eval; the attention refuses dropout in training.
_LLAMA_KEYS: dict[str, ValueCheck | None] = {
    "attention_bias": None, "attention_dropout": None, "head_dim": None, "hidden_act": _only_silu, "hidden_size": None,
    "intermediate_size": None, "mlp_bias": None, "num_attention_heads": None, "num_hidden_layers": None,
    "num_key_value_heads": None, "rms_norm_eps": None, "rope_parameters": _plain_rope, "tie_word_embeddings": None,
    "vocab_size": None,
}
_QWEN_WINDOW_KEYS: dict[str, ValueCheck | None] = {
    "layer_types": None, "max_window_layers": None, "sliding_window": None, "use_sliding_window": None,
}


@dataclass(frozen=True)
class Family:
    """A model family both integrations know: its names, and what ``rlkernels.transformers.patch``
    understands of its config."""

    model_type: str
    """transformers' ``config.model_type`` (and the module of vLLM's models that builds it)."""
    prefix: str
    """The prefix of its classes, in transformers and in vLLM: ``<prefix>ForCausalLM``, ``<prefix>Model``, ``<prefix>DecoderLayer``, ..."""
    vllm: bool
    """Whether the vLLM plugin (``rlkernels.vllm``) routes it."""
    layers: Callable[[Any], list[LayerKind]]
    """Each layer's kind, or Unimplemented."""
    implemented: dict[str, ValueCheck | None]
    """Keys whose value patch reads and implements, each with the check of its value (None: any)."""
    unread: frozenset[str] = frozenset()
    """Keys that published configs of the type carry but its modeling code never reads."""
    moe: MoeRule | None = None
    """How its sparse MoE blocks route (None: a dense family)."""

    @property
    def architecture(self) -> str:
        """Its causal language model's class (``config.architectures``)."""
        return f"{self.prefix}ForCausalLM"


FAMILIES: tuple[Family, ...] = (
    Family("llama", "Llama", True, _rope_layers, _LLAMA_KEYS, unread=frozenset({"pretraining_tp"})),
    # The embedding and residual multipliers are the model's own element-wise code between the
    # patched modules; attention_multiplier is the attention's scaling, which the patched forward
    # passes on; token_logprobs divides by logits_scaling as the model's forward does.
    Family(
        "granite",
        "Granite",
        False,
        _rope_layers,
        {**_LLAMA_KEYS, "attention_multiplier": None, "embedding_multiplier": None, "residual_multiplier": None, "logits_scaling": finite_nonzero},
    ),
    Family("mistral", "Mistral", True, _mistral_layers, {**_LLAMA_KEYS, "sliding_window": None}),
    Family("qwen2", "Qwen2", True, _qwen_layers, {**_LLAMA_KEYS, **_QWEN_WINDOW_KEYS}, unread=frozenset({"use_mrope"})),
    Family("qwen3", "Qwen3", True, _qwen_layers, {**_LLAMA_KEYS, **_QWEN_WINDOW_KEYS}),
    # The sparse blocks' sizes and layout (which layers are sparse, how many experts, top-k) are
    # read from the modules; router_aux_loss_coef only weighs the auxiliary loss, which needs
    # output_router_logits (left at its default, False: the patched blocks record no router logits).
    Family(
        "qwen3_moe",
        "Qwen3Moe",
        True,
        _mistral_layers,
        {
            **_LLAMA_KEYS, "sliding_window": None, "decoder_sparse_step": None, "mlp_only_layers": None, "moe_intermediate_size": None,
            "norm_topk_prob": None, "num_experts": None, "num_experts_per_tok": None, "num_local_experts": None, "router_aux_loss_coef": None,
        },
        unread=frozenset({"use_sliding_window", "max_window_layers"}),
        moe=MoeRule("norm_topk_prob", weights_in_model_dtype=True, vllm_block="Qwen3MoeSparseMoeBlock"),
    ),
    # Qwen2-MoE: Qwen2's attention (q/k/v biases, layer_types) and Qwen3-MoE's routing, with a shared
    # expert whose output the sigmoid of its one-output gate scales (the modules say whether there is one).
    Family(
        "qwen2_moe",
        "Qwen2Moe",
        True,
        _qwen_layers,
        {
            **_LLAMA_KEYS, **_QWEN_WINDOW_KEYS, "qkv_bias": None, "decoder_sparse_step": None, "mlp_only_layers": None,
            "moe_intermediate_size": None, "norm_topk_prob": None, "num_experts": None, "num_experts_per_tok": None, "num_local_experts": None,
            "router_aux_loss_coef": None, "shared_expert_intermediate_size": None,
        },
        moe=MoeRule("norm_topk_prob", weights_in_model_dtype=True, vllm_block="Qwen2MoeSparseMoeBlock"),
    ),
    Family(
        "mixtral",
        "Mixtral",
        True,
        _mistral_layers,
        {
            **_LLAMA_KEYS, "sliding_window": None, "num_experts_per_tok": None, "num_local_experts": None, "router_aux_loss_coef": None,
            "router_jitter_noise": _no_jitter,
        },
        moe=MoeRule(None, weights_in_model_dtype=False, vllm_block="MixtralMoE"),
    ),
    Family(
        "smollm3",
        "SmolLM3",
        False,
        _smollm3_layers,
        {**_LLAMA_KEYS, "layer_types": None, "no_rope_layer_interval": None, "no_rope_layers": None, "sliding_window": None, "use_sliding_window": None},
        unread=frozenset({"max_window_layers", "pretraining_tp"}),
    ),
)
"""Every model family the integrations know, once: ``rlkernels.transformers.patch`` implements
each, the vLLM plugin routes those marked ``vllm``."""


def op_window(sliding_window: int | None) -> int:
    """The attention op's ``window`` for a sliding window as transformers and vLLM count it: they
    let a query see ``sliding_window`` keys, itself included; the op counts the keys before it
    (-1: no window)."""
    return -1 if sliding_window is None else int(sliding_window) - 1
