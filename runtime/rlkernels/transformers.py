"""Batch-invariant Hugging Face transformers decoders: an attention backend, a model patcher, token log-probs.

    import rlkernels.transformers as rlkt
    rlkt.patch(model)                            # every op of the model now runs on rlkernels
    lp = rlkt.token_logprobs(model, input_ids, attention_mask)

``patch`` reads from the model's config what each layer computes (RoPE or none, full attention
or a sliding window), swaps the forward of each module it recognises by structure (linear
layers, embeddings, RMS norms, the SiLU-gated MLP, rotary embedding, Llama-style attention, and
the sparse MoE blocks of Qwen2-MoE, Qwen3-MoE and Mixtral, by ``rlkernels.moe``'s rule) and
sets the attention implementation to ``"rlkernels"``; parameters and state dict stay as they
are, and ``unpatch`` restores the model exactly.  It refuses the whole model, naming what it
cannot follow, rather than compute something else: a model type outside ``SUPPORTED_CONFIG``,
a config key outside that allow-list away from its default, a value of a key it implements only
in part, tensors on a device the kernels cannot run on (the meta device among them), a weight
holding NaN or infinity, or a module it cannot convert.  A patched model refuses to run once a
module has been replaced under the patch (``resize_token_embeddings``, an assignment), until
``unpatch`` and ``patch`` again; it pickles, copies and saves (``save_pretrained``: the plain files).

Importing this module registers the attention backend, so ``attn_implementation="rlkernels"``
also works on its own (``from_pretrained(..., attn_implementation="rlkernels")``); it needs the
optional dependency ``pip install 'rlkernels[transformers]'``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import math
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from . import _ops, moe
from ._families import FAMILIES, Family, MoeRule, op_window
from ._families import LayerKind as _LayerKind
from ._families import Unimplemented as _Unimplemented
from ._families import finite_nonzero as _finite_nonzero
from ._registry import OPS, PACKAGE, TOLERANCES
from ._runtime import UnsupportedError, platform_of, select_backend

try:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, create_causal_mask, create_sliding_window_causal_mask
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface
except ImportError as exc:  # an optional extra: say which one, not only what failed
    raise ImportError(
        f"{PACKAGE}.transformers needs the optional dependency transformers: "
        f"pip install '{PACKAGE}[transformers]' (importing it failed: {exc})"
    ) from exc

ATTN_IMPLEMENTATION = PACKAGE
"""The name the attention backend is registered under with transformers' AttentionInterface."""

__all__ = [
    "ATTN_IMPLEMENTATION",
    "SUPPORTED_CONFIG",
    "PatchError",
    "RotaryPositions",
    "attention_forward",
    "batch_invariant",
    "is_patched",
    "patch",
    "token_logprobs",
    "unpatch",
]


class PatchError(ValueError):
    """The model holds something ``patch`` cannot make batch-invariant, and nothing was changed; or
    a patched model has changed since in a way that leaves part of it off the patch."""


# --------------------------------------------------------------------------------------------
# Attention backend
# --------------------------------------------------------------------------------------------


class _VarlenLayout(NamedTuple):
    """Where a padded [B, T] batch's tokens go in the packed, variable-length layout of the attention op."""

    key_order: torch.Tensor  # [B*TK] int64: packed key i is flattened key key_order[i]
    query_order: torch.Tensor  # [B*TQ] int64: packed query i is flattened query query_order[i]
    query_place: torch.Tensor  # [B*TQ] int64: flattened query j is packed query query_place[j]
    cu_seqlens_q: torch.Tensor  # [B*TK + 1] int32
    cu_seqlens_k: torch.Tensor  # [B*TK + 1] int32
    query_valid: torch.Tensor  # [B, TQ] bool: false for padding, whose output is zero


def _varlen_layout(
    batch: int, tq: int, tk: int, mask: torch.Tensor | None, position_ids: torch.Tensor | None, device: torch.device
) -> _VarlenLayout:
    """The packed layout of a padded or packed batch, with shapes fixed by (batch, tq, tk) alone.

    A sequence is the valid keys of a row (padding: the 2-D mask's zeros); with ``position_ids``
    and no past keys, a new one also starts at each valid key whose position is not the previous
    key's + 1 (packing: position_ids restart, with or without an all-ones mask), as
    ``token_logprobs`` cuts its labels.  Its keys are packed back to back in ascending position;
    every padding key is a sequence of its own, so it is never seen by a real token.  Queries are the last ``tq`` keys of each row (of the
    first ``mask.shape[1]`` ones, for a static cache), so the op's causal masking, aligned to the
    end of each sequence's keys, is the model's.  There is one sequence slot per key (most of them
    empty), which keeps every shape independent of the data: no host synchronisation, no
    data-dependent shape under torch.compile.
    """
    positions = torch.arange(tk, device=device)
    if mask is None:
        key_valid = torch.ones(batch, tk, dtype=torch.bool, device=device)
        mask_len = tk
    else:
        mask = mask.to(device=device, dtype=torch.bool)
        if mask.shape[1] >= tk:  # longer than the keys: a sliding-window layer keeps the last tk
            key_valid, mask_len = mask[:, mask.shape[1] - tk :], tk
        else:  # a static cache: slots past the mask are unused
            key_valid = torch.cat([mask, mask.new_zeros(batch, tk - mask.shape[1])], dim=1)
            mask_len = mask.shape[1]
    if tq == tk and position_ids is not None:
        # Packing: a sequence starts at a row's first valid key and at every valid key whose position
        # is not the previous key's + 1.  The previous key may be padding: generate numbers a hole
        # in the mask on (cumsum of the mask), so a hole alone does not split a sequence.
        pos = position_ids.to(device).expand(batch, tq)
        restart = torch.ones(batch, tk, dtype=torch.bool, device=device)
        restart[:, 1:] = pos[:, 1:] != pos[:, :-1] + 1
        valid_before = key_valid.to(torch.int32).cumsum(1) - key_valid.to(torch.int32)
        starts = key_valid & (restart | (valid_before == 0))
        first = torch.cummax(torch.where(starts, positions, 0), dim=1).values
    else:
        first = key_valid.to(torch.int32).argmax(dim=1, keepdim=True).expand(batch, tk)
    # A sequence's label is the position of its first key; a padding key is labelled by its own.
    label = torch.where(key_valid, first, positions)
    rows = torch.arange(batch, device=device).unsqueeze(1)
    flat_label = (rows * tk + label).reshape(-1)
    key_order = torch.argsort((flat_label * tk + positions.repeat(batch)), stable=True)
    sorted_label = flat_label[key_order]
    total = batch * tk
    index = torch.arange(total, device=device)
    is_start = torch.ones(total, dtype=torch.bool, device=device)
    is_start[1:] = sorted_label[1:] != sorted_label[:-1]
    # Slot i holds the sequence starting at packed key i, or nothing: its bounds are the next starts.
    next_start = torch.where(is_start, index, total).flip(0).cummin(0).values.flip(0)
    cu_k = torch.cat([next_start, next_start.new_full((1,), total)])
    key_is_query = ((positions >= mask_len - tq) & (positions < mask_len)).repeat(batch)[key_order]
    queries_before = torch.cat([key_is_query.new_zeros(1, dtype=torch.int64), key_is_query.to(torch.int64).cumsum(0)])
    cu_q = queries_before[cu_k]
    key_place = torch.empty_like(key_order)
    key_place[key_order] = index
    query_keys = (rows * tk + (mask_len - tq) + torch.arange(tq, device=device)).reshape(-1)
    query_order = torch.argsort(key_place[query_keys])
    query_place = torch.empty_like(query_order)
    query_place[query_order] = torch.arange(batch * tq, device=device)
    query_valid = key_valid[:, mask_len - tq : mask_len]
    return _VarlenLayout(key_order, query_order, query_place, cu_q.to(torch.int32), cu_k.to(torch.int32), query_valid)


def attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    position_ids: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface, on the batch-invariant ``attention`` op.

    ``query`` [B, HQ, TQ, D], ``key``/``value`` [B, HK, TK, D] (GQA when HK < HQ), the 2-D padding
    mask [B, TK] (or None), ``position_ids`` [B or 1, TQ] for packed rows.  Returns [B, TQ, HQ, D]
    and no attention weights; padding positions get zeros.  A real token's output does not depend
    on the padding, on the other rows or on the sequences packed with it.
    """
    if dropout != 0.0:
        raise ValueError(f"{ATTN_IMPLEMENTATION} attention: dropout must be 0 (random dropout is not deterministic), got {dropout}")
    for name in ("softcap", "s_aux", "sinks"):
        if kwargs.get(name) is not None:
            raise ValueError(f"{ATTN_IMPLEMENTATION} attention: '{name}' is not supported (the attention op has no such term), got a value")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            f"{ATTN_IMPLEMENTATION} attention: expected the 2-D padding mask [batch, keys] that transformers builds for "
            f"attn_implementation='{ATTN_IMPLEMENTATION}', got a {attention_mask.dim()}-D mask of shape {list(attention_mask.shape)} "
            "(a custom 4-D mask cannot be turned into variable-length sequences)"
        )
    if query.dim() != 4 or key.dim() != 4 or key.shape != value.shape or query.shape[0] != key.shape[0]:
        raise ValueError(
            f"{ATTN_IMPLEMENTATION} attention: expected query [B, HQ, TQ, D] and key, value [B, HK, TK, D], "
            f"got {list(query.shape)}, {list(key.shape)} and {list(value.shape)}"
        )
    causal = bool(getattr(module, "is_causal", True) if is_causal is None else is_causal)
    scale = 0.0 if scaling is None else float(scaling)  # 0: the op's 1/sqrt(D)
    window = op_window(sliding_window)
    batch, heads, tq, dim = query.shape
    kv_heads, tk = key.shape[1], key.shape[2]

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None:  # already packed, one row (e.g. DataCollatorWithFlattening)
        if batch != 1:
            raise ValueError(f"{ATTN_IMPLEMENTATION} attention: cu_seq_lens_q/k describe one packed row, got a batch of {batch}")
        q = query[0].transpose(0, 1).contiguous()
        k = key[0].transpose(0, 1).contiguous()
        v = value[0].transpose(0, 1).contiguous()
        o, _ = _ops.attention(q, k, v, cu_q.to(torch.int32).contiguous(), cu_k.to(torch.int32).contiguous(), scale, causal, window)
        return o.unsqueeze(0), None

    layout = _varlen_layout(batch, tq, tk, attention_mask, position_ids, query.device)
    q = query.transpose(1, 2).reshape(batch * tq, heads, dim).index_select(0, layout.query_order)
    k = key.transpose(1, 2).reshape(batch * tk, kv_heads, dim).index_select(0, layout.key_order)
    v = value.transpose(1, 2).reshape(batch * tk, kv_heads, dim).index_select(0, layout.key_order)
    o, _ = _ops.attention(q, k, v, layout.cu_seqlens_q, layout.cu_seqlens_k, scale, causal, window)
    o = o.index_select(0, layout.query_place).view(batch, tq, heads, dim)
    return torch.where(layout.query_valid[:, :, None, None], o, o.new_zeros(())), None


def _padding_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor | None:
    """transformers' mask interface for the backend: the 2-D padding mask over the layer's keys, as
    flash attention takes it; causality, window and packing are the attention op's own arguments."""
    if attention_mask is not None and attention_mask.shape[-1] > kv_length:
        return attention_mask[:, -kv_length:]
    return attention_mask


AttentionInterface.register(ATTN_IMPLEMENTATION, attention_forward)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, _padding_mask)


# --------------------------------------------------------------------------------------------
# Forwards that patch() installs
# --------------------------------------------------------------------------------------------


class RotaryPositions(NamedTuple):
    """What a patched rotary embedding hands each attention layer in place of (cos, sin): the
    positions, which the patched attention rotates with the ``rope`` op."""

    position_ids: torch.Tensor


# The ops take contiguous tensors; models hand some layers views (generate's last-token slice
# before the LM head, a cache's position slice): .contiguous() copies only those.


def _linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return _ops.det_linear(x.contiguous(), self.weight, self.bias)


def _embedding_forward(self: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    y = _ops.embedding(self.weight, ids.contiguous())
    if self.padding_idx is not None:
        # nn.Embedding gives its padding row no gradient: stop the gradient where ids select it.
        y = torch.where((ids == self.padding_idx).unsqueeze(-1), y.detach(), y)
    return y


def _norm_eps(module: nn.Module) -> float:
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return float(eps)  # type: ignore[arg-type]


def _rms_norm_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    return _ops.rms_norm(x.contiguous(), self.weight, _norm_eps(self))[0]


def _rotary_forward(self: nn.Module, x: torch.Tensor, position_ids: torch.Tensor) -> RotaryPositions:
    # No cos/sin: the patched attention rotates q and k with the rope op from the positions.
    return RotaryPositions(position_ids)


def _mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    return self.down_proj(_ops.swiglu(self.gate_proj(x), self.up_proj(x)))


def _moe_forward(self: Any, hidden_states: torch.Tensor, *, rlkernels_renormalize: bool, rlkernels_weights_in_model_dtype: bool) -> torch.Tensor:
    """A sparse MoE block (router ``gate``, fused ``experts``) by ``rlkernels.moe``'s rule: the
    router's logits by det_linear, then ``moe.experts_forward``, as the vLLM plugin runs it."""
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1]).contiguous()
    logits = _ops.det_linear(x, self.gate.weight)
    y = moe.experts_forward(
        x, logits, self.experts.gate_up_proj, self.experts.down_proj, int(self.gate.top_k), rlkernels_renormalize, rlkernels_weights_in_model_dtype
    )
    shared = getattr(self, "shared_expert", None)
    if shared is not None:
        # Qwen2-MoE's shared expert, scaled by the sigmoid of its gate, then added: each step
        # rounded to the model dtype, in the model's order (the patched MLP and linear layers run).
        y = y + _ops.sigmoid(self.shared_expert_gate(x)) * shared(x)
    return y.view(shape)


def _make_moe_forward(renormalize: bool, weights_in_model_dtype: bool) -> Callable[..., torch.Tensor]:
    """The forward of a sparse block that renormalises or not and rounds its weights or not (a partial: it pickles)."""
    return functools.partial(_moe_forward, rlkernels_renormalize=renormalize, rlkernels_weights_in_model_dtype=weights_in_model_dtype)


def _attention_forward(
    self: Any,  # a transformers attention module: its projections are found by name
    hidden_states: torch.Tensor,
    position_embeddings: Any = None,
    attention_mask: torch.Tensor | None = None,
    cache: Any = None,
    past_key_values: Any = None,
    *,
    rlkernels_theta: float | None,
    rlkernels_window: int | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """A Llama-style attention forward (q/k/v projections, optional per-head q/k RMS norm, RoPE,
    KV cache, attention, output projection) on the batch-invariant ops; ``rlkernels_theta``: the
    layer's RoPE base, None for a layer without positional rotation (NoPE); ``rlkernels_window``: the
    layer's sliding window (transformers' count, the query included), None for full attention."""
    if not isinstance(position_embeddings, RotaryPositions):
        raise RuntimeError(  # noqa: TRY004 -- not a caller's wrong type: a model the patch left half-converted
            f"{ATTN_IMPLEMENTATION}: {type(self).__name__} was patched but received {type(position_embeddings).__name__} "
            "as position_embeddings, not the positions of a patched rotary embedding: patch the whole model with patch(model)"
        )
    cache = cache if cache is not None else past_key_values
    batch, length = hidden_states.shape[:2]
    dim = self.head_dim
    q = self.q_proj(hidden_states).view(batch, length, -1, dim)
    k = self.k_proj(hidden_states).view(batch, length, -1, dim)
    v = self.v_proj(hidden_states).view(batch, length, -1, dim)
    if getattr(self, "q_norm", None) is not None:
        q, k = self.q_norm(q), self.k_norm(k)
    positions = position_embeddings.position_ids.expand(batch, length)
    if rlkernels_theta is not None:
        flat = positions.reshape(-1).contiguous()
        q = _ops.rope(q.reshape(batch * length, -1, dim), flat, rlkernels_theta).view(batch, length, -1, dim)
        k = _ops.rope(k.reshape(batch * length, -1, dim), flat, rlkernels_theta).view(batch, length, -1, dim)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
    kwargs.pop("position_ids", None)
    out, _ = attention_forward(
        self,
        q,
        k,
        v,
        attention_mask,
        dropout=self.attention_dropout if self.training else 0.0,
        scaling=self.scaling,
        sliding_window=rlkernels_window,
        position_ids=positions,
        **kwargs,
    )
    return self.o_proj(out.reshape(batch, length, -1)), None


def _make_attention_forward(theta: float | None, window: int | None) -> Callable[..., tuple[torch.Tensor, None]]:
    """The attention forward of a layer with RoPE base ``theta`` (None: NoPE) and sliding window
    ``window`` (None: full attention): a partial of a module-level function, so that a patched
    model pickles (a closure does not)."""
    return functools.partial(_attention_forward, rlkernels_theta=theta, rlkernels_window=window)


# --------------------------------------------------------------------------------------------
# What a model's config asks for
# --------------------------------------------------------------------------------------------


# Keys that do not change what the model computes: names, token ids (the embedding's padding_idx
# is the module's own, handled there), output and cache switches, dtype, initialisation, the
# position limit (the rope op has no table).
_INERT_KEYS = frozenset({
    "_name_or_path", "architectures", "bos_token_id", "dtype", "eos_token_id", "id2label", "initializer_range",
    "label2id", "max_position_embeddings", "model_type", "output_hidden_states", "pad_token_id", "problem_type",
    "return_dict", "transformers_version", "use_cache",
})

_SUPPORT: dict[str, Family] = {family.model_type: family for family in FAMILIES}
"""What patch understands of each model type's config (``_families``)."""

SUPPORTED_CONFIG: dict[str, frozenset[str]] = {
    model_type: frozenset(_INERT_KEYS | support.implemented.keys() | support.unread) for model_type, support in _SUPPORT.items()
}
"""Per supported model type, the config keys that may take values other than their default: those
``patch`` implements (some only for some values) and those that do not change the math."""

# The defaults of keys that are no field of the config class but that transformers reads where it
# finds them; any other key outside the class's fields is at its default only when None.
_EXTRA_DEFAULTS: dict[str, Any] = {"output_attentions": False, "is_causal": True}


def _default(config: Any, key: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else {}
    field = fields.get(key)
    if field is None:
        return _EXTRA_DEFAULTS.get(key)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 -- values that cannot be compared are not the same
        return False


def _read_config(config: Any) -> tuple[list[_LayerKind], list[str]]:
    """Each layer's kind, as the config says, and every key of the config that patch does not
    implement with its value (each a line of the refusal)."""
    model_type = getattr(config, "model_type", None)
    support = _SUPPORT.get(model_type)  # type: ignore[arg-type]
    if support is None:
        return [], [f"{PACKAGE}.transformers does not implement model_type={model_type!r}; it implements {', '.join(sorted(_SUPPORT))}"]
    problems: list[str] = []

    def refuse(key: str, value: Any, why: str) -> None:
        problems.append(f"{PACKAGE}.transformers does not implement {key}={value!r} of {model_type}; {why}")

    for key, value in config.to_dict().items():
        if key in _INERT_KEYS or key in support.unread:
            continue
        if key in support.implemented:
            check = support.implemented[key]
            why = None if check is None else check(value)
            if why is not None:
                refuse(key, value, why)
        elif not _same(value, default := _default(config, key)):
            refuse(key, value, f"only its default, {default!r}, is known to leave the math as patch computes it (SUPPORTED_CONFIG[{model_type!r}] lists the keys that may differ)")
    try:
        kinds = support.layers(config)
    except _Unimplemented as exc:
        refuse(exc.key, exc.value, exc.why)
        kinds = []
    return kinds, problems


# The catalog ops (or aliases) this module calls (specs/package.yaml's integrations.transformers).
_OPS_CALLED = ("attention", "det_linear", "embedding", "linear_logp", "rms_norm", "rope", "sigmoid", "silu", "softmax", "swiglu")


def _device_refusals(model: nn.Module) -> list[str]:
    """Where the model's tensors lie on a device the kernels cannot run on (the meta device, or a
    device this build carries no kernels for), one line per device."""
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    problems = []
    for device in sorted({t.device for _, t in tensors}, key=str):
        names = [name for name, t in tensors if t.device == device]
        where = names[0] + (f" and {len(names) - 1} more" if len(names) > 1 else "")
        if device.type == "meta":
            problems.append(
                f"{where} on the meta device: it holds no values (a model made under torch.device('meta') or "
                "init_empty_weights); load the weights first, e.g. from_pretrained, or to_empty(device=...) then load_state_dict"
            )
            continue
        try:
            platform = platform_of(device)
            for called in _OPS_CALLED:
                select_backend(next(op for op, entry in OPS.items() if called in (op, *entry.aliases)), platform)
        except UnsupportedError as exc:
            problems.append(f"{where} on {device}, where the kernels cannot run: {exc}")
    return problems


_SUMMED = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _nonfinite_refusals(model: nn.Module) -> list[str]:
    """Each floating-point parameter or buffer holding NaN or infinity, with how many: the probes
    run the model's own weights, and a non-finite result would be taken for a module the
    replacement computes differently."""
    problems = []
    with torch.no_grad():
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            # A sum is NaN or infinite when a term is (no copy of the tensor); only those are counted.
            # Other dtypes (integers, float8, which torch.sum does not take) are the ops' to refuse.
            if t.dtype not in _SUMMED or math.isfinite(float(torch.sum(t, dtype=torch.float32))):
                continue
            count = int((~torch.isfinite(t)).sum())
            if count:  # else finite values whose float32 sum overflowed
                problems.append(f"{name} holds {count} non-finite value{'s' if count > 1 else ''} (NaN or infinity) of {t.numel()}: load or initialise finite weights")
    return problems


# --------------------------------------------------------------------------------------------
# Recognising modules by structure, and checking them by behaviour
# --------------------------------------------------------------------------------------------

_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP_PARTS = ("gate_proj", "up_proj", "down_proj", "act_fn")


def _probe(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)


def _disagreement(ours: torch.Tensor, theirs: torch.Tensor) -> str | None:
    """None when two float32 probe results agree to the reduction tolerance (relative to the
    result's size); else how far apart they are.  The probes tell one computation from another,
    not rounding from rounding."""
    atol, rtol = TOLERANCES["reduction"]["float32"]
    scale = max(1.0, float(theirs.abs().max()))
    worst = float((ours.double() - theirs.double()).abs().max())
    if math.isfinite(worst) and worst <= (atol + rtol) * scale * 10:
        return None
    return f"its batch-invariant replacement differs from its own forward by {worst:.3g} (float32 probe, largest value {scale:.3g})"


def _cpu_float_copy(module: nn.Module) -> Any:
    """A float32 copy on the CPU, where every package carries kernels: probes need no device memory."""
    return copy.deepcopy(module).to(device="cpu", dtype=torch.float32)


def _is_rms_norm(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return (
        isinstance(weight, nn.Parameter)
        and weight.dim() == 1
        and isinstance(eps, float)
        and getattr(module, "bias", None) is None
        and not list(module.children())
        and [name for name, _ in module.named_parameters()] == ["weight"]
    )


def _check_rms_norm(module: nn.Module) -> str | None:
    """Whether the module's forward is x * rsqrt(mean(x^2) + eps) * weight (not, e.g., (1 + weight))."""
    probe = _cpu_float_copy(module)
    with torch.no_grad():
        probe.weight.copy_(_probe(tuple(probe.weight.shape), 1))
        x = _probe((3, probe.weight.shape[0]), 2)
        theirs = probe(x)
        ours = _ops.rms_norm(x, probe.weight, _norm_eps(module))[0]
    return _disagreement(ours, theirs)


def _is_silu(module: Any) -> bool:
    if list(module.parameters()) or list(module.children()):
        return False
    x = _probe((4, 16), 3) * 4
    try:
        with torch.no_grad():
            y = module(x)
    except Exception:  # noqa: BLE001 -- anything that cannot run on a probe is not a SiLU we know
        return False
    return isinstance(y, torch.Tensor) and y.shape == x.shape and _disagreement(_ops.silu(x), y) is None


def _is_rotary(module: nn.Module) -> bool:
    return isinstance(getattr(module, "inv_freq", None), torch.Tensor) and hasattr(module, "rope_type")


def _rotary_theta(module: nn.Module) -> tuple[float | None, str | None]:
    """(theta, None) for a plain RoPE (inv_freq[i] = theta^(-2i/D), unscaled); (None, why) otherwise."""
    if module.rope_type != "default" or float(getattr(module, "attention_scaling", 1.0)) != 1.0:
        scaling = getattr(module, "attention_scaling", 1.0)
        return None, f"RoPE type {module.rope_type!r} with attention scaling {scaling} (only the default, unscaled RoPE is supported)"
    config = getattr(module, "config", None)
    params = getattr(config, "rope_parameters", None) or {}
    theta = params.get("rope_theta", getattr(config, "rope_theta", None)) if isinstance(params, dict) else None
    if not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
        return None, f"no positive rope_theta found in its config (got {theta!r})"
    return float(theta), None


def _is_attention(module: nn.Module) -> bool:
    return all(isinstance(getattr(module, part, None), nn.Linear) for part in _ATTENTION_PARTS)


def _attention_refusal(module: nn.Module, kind: _LayerKind, theta: float | None, rotary: nn.Module | None) -> str | None:
    extra = sorted({name for name, _ in module.named_children()} - {*_ATTENTION_PARTS, "q_norm", "k_norm"})
    if extra:
        return f"attention with parts the patcher does not know: {', '.join(extra)}"
    if list(module.parameters(recurse=False)):
        return "attention with parameters of its own (e.g. attention sinks)"
    for attr in ("head_dim", "scaling", "layer_idx", "attention_dropout"):
        if not hasattr(module, attr):
            return f"attention without a '{attr}' attribute"
    for name in ("q_norm", "k_norm"):
        norm = getattr(module, name, None)
        if norm is not None and (not _is_rms_norm(norm) or norm.weight.shape[0] != module.head_dim):
            return f"{name} is not an RMS norm over the head dimension ({module.head_dim})"
    if (getattr(module, "q_norm", None) is None) != (getattr(module, "k_norm", None) is None):
        return "only one of q_norm and k_norm"
    if theta is None or rotary is None:
        return "attention but no plain rotary embedding beside it in the model"
    return _check_attention(module, kind, theta, rotary)


def _attention_window(module: Any) -> int | None:
    """The sliding window a layer passes to its attention: its own attribute where it has one
    (Qwen2, Qwen3, SmolLM3: None on full-attention layers); else none where its config names each
    layer's type (Qwen2-MoE sets the attribute on sliding layers only), else its config's (Mistral)."""
    if "sliding_window" in vars(module):
        return module.sliding_window
    config = getattr(module, "config", None)
    if getattr(config, "layer_types", None) is not None:
        return None
    return getattr(config, "sliding_window", None)


def _layer_disagreement(module: Any, kind: _LayerKind) -> str | None:
    """Whether the module itself does what its config says its layer does (every layer is asked;
    the probe below runs one module per kind)."""
    if _attention_window(module) != kind.window:
        return f"its attention window {_attention_window(module)!r} is not the one its config gives layer {module.layer_idx} ({kind.window!r})"
    uses_rope = getattr(module, "use_rope", None)  # SmolLM3's per-layer flag
    if uses_rope is not None and bool(uses_rope) != kind.rope:
        return f"its use_rope={uses_rope!r} is not what its config gives layer {module.layer_idx} (RoPE {'on' if kind.rope else 'off'})"
    return None


_PROBE_IMPLEMENTATION = f"{ATTN_IMPLEMENTATION}_probe"
_PROBE_LENGTH = 7
# A sliding window shorter than the probe, so that it hides keys: a layer's own window may be far
# longer than any probe worth running, and what is probed is how the layer applies a window.
_PROBE_WINDOW = 3


def _probe_mask(config: Any, x: torch.Tensor, positions: torch.Tensor, window: int | None) -> Any:
    """The mask the model's own code builds for sdpa on the probe: transformers' causal or sliding-
    window causal mask for ``config``, so the window is applied as transformers applies it."""
    mask_config = copy.deepcopy(config)
    mask_config._attn_implementation_internal = "sdpa"
    build = create_causal_mask if window is None else create_sliding_window_causal_mask
    # Passed by name: transformers 5.x renamed the cache argument (past_key_values, then cache).
    names = inspect.signature(build).parameters
    kwargs: dict[str, Any] = {"config": mask_config, "attention_mask": None, "position_ids": positions}
    kwargs["inputs_embeds" if "inputs_embeds" in names else "input_embeds"] = x
    for name in ("cache", "past_key_values"):
        if name in names:
            kwargs[name] = None
    if "cache_position" in names:
        kwargs["cache_position"] = torch.arange(x.shape[1])
    return build(**kwargs)


def _check_attention(module: Any, kind: _LayerKind, theta: float, rotary: nn.Module) -> str | None:
    """Run the module's own forward (sdpa, cos/sin from its rotary embedding, the model's mask for
    its layer kind) and the patched one for that kind on a probe; they must agree, and the module
    must pass its attention no argument the op lacks, or it computes something the patched
    forward does not.  A sliding window is probed at ``_PROBE_WINDOW`` keys (or the layer's own
    window where shorter), set where the module reads it."""
    probe = _cpu_float_copy(module)
    rot = _cpu_float_copy(rotary)
    window = None if kind.window is None else min(kind.window, _PROBE_WINDOW)
    if window is not None:
        if "sliding_window" in vars(probe):
            probe.sliding_window = window
        probe.config.sliding_window = window  # the copy's config (Mistral's layers read it there)
    x = _probe((2, _PROBE_LENGTH, probe.q_proj.in_features), 4)
    positions = torch.arange(_PROBE_LENGTH).unsqueeze(0)
    passed: dict[str, Any] = {}

    def spy(mod: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any, **kwargs: Any) -> Any:
        passed.update(kwargs)
        return sdpa_attention_forward(mod, query, key, value, mask, **kwargs)

    ALL_ATTENTION_FUNCTIONS[_PROBE_IMPLEMENTATION] = spy  # this instance only, removed below
    probe.config._attn_implementation_internal = _PROBE_IMPLEMENTATION  # the copy's config, not the model's
    try:
        with torch.no_grad():
            mask = _probe_mask(probe.config, x, positions, window)
            cos_sin = type(rotary).forward(rot, x, positions)
            theirs = type(probe).forward(
                probe, hidden_states=x, position_embeddings=cos_sin, attention_mask=mask, position_ids=positions
            )[0]
            forward = _make_attention_forward(theta if kind.rope else None, window)
            ours = forward(probe, x, RotaryPositions(positions), None, position_ids=positions)[0]
    except Exception as exc:  # noqa: BLE001 -- a forward with another signature is another attention
        return f"its forward could not be compared with the patched one ({type(exc).__name__}: {exc})"
    finally:
        del ALL_ATTENTION_FUNCTIONS[_PROBE_IMPLEMENTATION]
    for name in ("softcap", "s_aux", "sinks", "position_bias"):
        if passed.get(name) is not None:
            return f"its attention takes '{name}', which the attention op does not apply"
    if passed.get("sliding_window") != window:
        return f"its attention window {passed.get('sliding_window')!r} on the probe is not the one set there ({window!r})"
    if passed.get("scaling") != module.scaling:
        return f"its attention scale {passed.get('scaling')!r} is not the module's scaling ({module.scaling!r})"
    return _disagreement(ours, theirs)


def _is_gated_mlp(module: nn.Module) -> bool:
    return {name for name, _ in module.named_children()} == set(_MLP_PARTS) and all(
        isinstance(getattr(module, part), nn.Linear) for part in _MLP_PARTS[:3]
    )


def _check_mlp(module: Any) -> str | None:
    if not _is_silu(module.act_fn):
        return f"gated MLP whose activation {type(module.act_fn).__name__} is not SiLU (only SwiGLU has a batch-invariant op)"
    probe = _cpu_float_copy(module)
    x = _probe((3, probe.gate_proj.in_features), 5)
    with torch.no_grad():
        theirs = probe(x)
        ours = _mlp_forward(probe, x)
    return _disagreement(ours, theirs)


_MOE_PARTS = ("gate", "experts")
_SHARED_EXPERT_PARTS = ("shared_expert", "shared_expert_gate")


def _is_moe_block(module: nn.Module) -> bool:
    """A sparse MoE block by its structure: a router ``gate`` (weight [E, H], ``top_k``) and fused
    ``experts`` (gate_up_proj [E, 2I, H], down_proj [E, H, I], ``act_fn``), and either nothing else
    or a gated-MLP ``shared_expert`` with a one-output ``shared_expert_gate`` (Qwen2-MoE)."""
    children = {name for name, _ in module.named_children()}
    if children not in (set(_MOE_PARTS), {*_MOE_PARTS, *_SHARED_EXPERT_PARTS}) or list(module.parameters(recurse=False)):
        return False
    if "shared_expert" in children:
        shared, shared_gate = module.get_submodule("shared_expert"), module.get_submodule("shared_expert_gate")
        if not (_is_gated_mlp(shared) and isinstance(shared_gate, nn.Linear) and shared_gate.out_features == 1):
            return False
    gate, experts = module.gate, module.experts
    weight = getattr(gate, "weight", None)
    gate_up, down = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
    return (
        isinstance(weight, nn.Parameter) and weight.dim() == 2 and isinstance(getattr(gate, "top_k", None), int)
        and isinstance(gate_up, nn.Parameter) and isinstance(down, nn.Parameter) and gate_up.dim() == 3 and down.dim() == 3
        and gate_up.shape[0] == down.shape[0] == weight.shape[0] and gate_up.shape[2] == down.shape[1] == weight.shape[1]
        and gate_up.shape[1] == 2 * down.shape[2] and isinstance(getattr(experts, "act_fn", None), nn.Module)
    )


def _moe_refusal(module: Any, rule: MoeRule | None, config: Any) -> str | None:
    """Why the sparse block cannot run ``rlkernels.moe``'s rule as its family's, or None: the
    parts beside the router's and experts' weights, the activation, then a float32 probe of the
    block's own forward (a router with random weights, so that no two experts tie)."""
    if rule is None:
        return f"a sparse MoE block in a {getattr(config, 'model_type', None)!r} model, a family whose routing patch does not know"
    extra = [name for name, _ in [*module.gate.named_parameters(), *module.experts.named_parameters()] if name not in ("weight", "gate_up_proj", "down_proj")]
    if extra or list(module.gate.children()) or [n for n, _ in module.experts.named_children()] != ["act_fn"]:
        return f"a sparse MoE block with parts the patcher does not know ({', '.join(extra) or 'submodules'})"
    if getattr(module, "jitter_noise", 0) not in (0, 0.0):
        return f"router jitter {module.jitter_noise} multiplies the hidden states by random noise in training"
    if not _is_silu(module.experts.act_fn):
        return f"experts whose activation {type(module.experts.act_fn).__name__} is not SiLU (only SwiGLU has a batch-invariant op)"
    probe = _cpu_float_copy(module)
    with torch.no_grad():
        probe.gate.weight.copy_(_probe(tuple(probe.gate.weight.shape), 6))
        x = _probe((2, 5, probe.gate.weight.shape[1]), 7)
        try:
            theirs = probe(x)
            if hasattr(probe, "shared_expert"):  # the copy's shared expert and gate on the patched forwards
                probe.shared_expert.forward = functools.partial(_mlp_forward, probe.shared_expert)
                probe.shared_expert_gate.forward = functools.partial(_linear_forward, probe.shared_expert_gate)
            ours = _make_moe_forward(rule.renormalizes(config), rule.weights_in_model_dtype)(probe, x)
        except Exception as exc:  # noqa: BLE001 -- a block with another forward is another block
            return f"its forward could not be compared with the patched one ({type(exc).__name__}: {exc})"
    if isinstance(theirs, tuple):
        return "its forward returns a tuple (router logits beside the output), which the patched block does not"
    return _disagreement(ours, theirs)


# --------------------------------------------------------------------------------------------
# patch / unpatch
# --------------------------------------------------------------------------------------------


@dataclass
class _Swap:
    module: nn.Module
    forward: Callable[..., Any]


@dataclass
class _PatchState:
    attn_implementation: Any
    routed: list[nn.Module]  # the modules whose forward patch set
    # What it set each to: the forward bound to the module by a partial (a bound method pickles as
    # a lookup by name, which on load would find the class's forward).
    installed: list[Any]
    # Every module of the model and its children when patched: a module replaced, added or removed
    # since (resize_token_embeddings, set_output_embeddings, an assignment, an adapter) would run
    # its own forward, on torch's kernels, while the model says it is patched.
    modules: list[nn.Module]
    children: list[dict[str, Any]]
    hooks: list[tuple[nn.Module, Any]]  # the forward pre-hooks that check all this before each run


_CHILDREN = operator.attrgetter("_modules")
_FORWARD = operator.attrgetter("forward")


_STATE = "_rlkernels_patch_state"


def _changes(model: nn.Module, state: _PatchState) -> list[str]:
    """What no longer routes as ``patch`` routed it, one line each (empty: nothing).  The first pass
    compares identities only, so that it can run before every forward."""
    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    # Lists of dicts of modules and of forwards compare by identity (neither defines __eq__).
    if (
        list(map(_CHILDREN, state.modules)) == state.children
        and list(map(_FORWARD, state.routed)) == state.installed
        and implementation == ATTN_IMPLEMENTATION
    ):
        return []
    paths = {id(module): path for path, module in model.named_modules(remove_duplicate=False)}
    found = []
    for module, children in zip(state.modules, state.children):
        path = paths.get(id(module))
        if path is None:
            continue  # no longer in the model: its parent's line names it
        for name in sorted(set(children) | set(module._modules)):
            was, now = children.get(name), module._modules.get(name)
            if was is now:
                continue
            where = f"{path}.{name}" if path else name
            if now is None:
                found.append(f"{where}: the {type(was).__name__} patch routed was removed")
            elif was is None:
                found.append(f"{where}: {type(now).__name__} added since patch, which runs its own forward")
            else:
                found.append(f"{where}: the {type(was).__name__} patch routed was replaced by a new {type(now).__name__}, which runs its own forward")
    for module, installed in zip(state.routed, state.installed):
        path = paths.get(id(module))
        if path is not None and module.__dict__.get("forward") is not installed:
            found.append(f"{path or '<model>'} ({type(module).__name__}): its forward is no longer the one patch installed")
    if implementation != ATTN_IMPLEMENTATION:
        found.append(f"config._attn_implementation is {implementation!r}, no longer {ATTN_IMPLEMENTATION!r}")
    return found


def _check_routing(model: nn.Module) -> None:
    """PatchError when ``model`` is patched but part of it no longer runs what patch installed."""
    state = model.__dict__.get(_STATE)
    if state is None:
        return
    found = _changes(model, state)
    if found:
        raise PatchError(
            f"{type(model).__name__} was patched, but has changed since, and what changed is not routed to {PACKAGE}:\n  "
            + "\n  ".join(found)
            + "\ncall unpatch(model), then patch(model) again"
        )


def _check_before_forward(model: nn.Module, module: nn.Module, args: Any) -> None:
    """The forward pre-hook patch registers on the model and its body (a partial: hooks pickle with the model)."""
    _check_routing(model)


def is_patched(model: nn.Module) -> bool:
    """Whether ``patch`` has been applied to ``model`` (and not undone).  Raises PatchError when it
    was, but a module patch routed has been replaced, added or removed since (for example by
    ``resize_token_embeddings``), or its forward or the attention implementation changed: the
    model is then neither, and ``unpatch`` followed by ``patch`` makes it patched again."""
    _check_routing(model)
    return _STATE in model.__dict__


def _refusal(model: nn.Module, problems: list[str]) -> PatchError:
    return PatchError(f"patch: cannot make {type(model).__name__} batch-invariant; nothing was changed:\n  " + "\n  ".join(problems))


def _plan(model: nn.Module) -> list[_Swap]:
    """Every forward to swap, or PatchError listing every problem: the devices, then (on devices
    the kernels run on, where the probes can run) the config, then (for a config patch implements)
    every module that cannot be converted."""
    problems = _device_refusals(model)
    if problems:
        raise _refusal(model, problems)
    problems = _nonfinite_refusals(model)
    if problems:
        raise _refusal(model, problems)
    kinds, problems = _read_config(model.config)
    if problems:
        raise _refusal(model, problems)

    modules = dict(model.named_modules())
    rotaries = [(path, m) for path, m in modules.items() if _is_rotary(m)]
    theta: float | None = None
    rotary: nn.Module | None = None
    swaps: list[_Swap] = []
    handled: set[str] = set()  # modules whose forward is swapped, or that a swapped parent no longer calls
    if len(rotaries) > 1:
        problems.append(f"{', '.join(p for p, _ in rotaries)}: several rotary embeddings (only one, shared by every layer, is supported)")
    elif rotaries:
        path, rotary = rotaries[0]
        theta, why = _rotary_theta(rotary)
        if why is not None:
            problems.append(f"{path or '<model>'} ({type(rotary).__name__}): {why}")
        else:
            swaps.append(_Swap(rotary, _rotary_forward))
        handled.add(path)

    checked: dict[tuple[Any, type], str | None] = {}  # one behaviour probe per (what, class): modules alike

    def once(what: Any, module: nn.Module, check: Callable[[], str | None]) -> str | None:
        if (what, type(module)) not in checked:
            checked[(what, type(module))] = check()
        return checked[(what, type(module))]

    for path, module in modules.items():
        where = f"{path or '<model>'} ({type(module).__name__})"
        if path in handled:
            continue
        if "forward" in module.__dict__:
            problems.append(f"{where}: already has a forward of its own on the instance (a hook, e.g. from device_map, or another patch)")
            continue
        if type(module) is nn.Linear:
            swaps.append(_Swap(module, _linear_forward))
        elif type(module) is nn.Embedding:
            if module.max_norm is not None or module.scale_grad_by_freq or module.sparse:
                problems.append(f"{where}: max_norm, scale_grad_by_freq and sparse embeddings have no batch-invariant op")
            else:
                swaps.append(_Swap(module, _embedding_forward))
        elif _is_rms_norm(module):
            why = once("norm", module, functools.partial(_check_rms_norm, module))
            if why is None:
                swaps.append(_Swap(module, _rms_norm_forward))
            else:
                problems.append(f"{where}: an RMS norm by its structure, but {why}")
        elif _is_attention(module):
            # Each layer gets the forward of its kind, as the config says; one module per kind and class is probed.
            layer = getattr(module, "layer_idx", None)
            if not isinstance(layer, int) or not 0 <= layer < len(kinds):
                problems.append(f"{where}: attention whose layer_idx {layer!r} is not one of the config's {len(kinds)} layers")
                continue
            kind = kinds[layer]
            why = _layer_disagreement(module, kind) or once(
                ("attention", kind), module, functools.partial(_attention_refusal, module, kind, theta, rotary)
            )
            if why is None:
                swaps.append(_Swap(module, _make_attention_forward(theta if kind.rope else None, kind.window)))
            else:
                problems.append(f"{where}: {why}")
        elif _is_moe_block(module):
            config: Any = model.config
            rule = _SUPPORT[str(config.model_type)].moe
            why = once("moe", module, functools.partial(_moe_refusal, module, rule, config))
            handled.update(f"{path}.{part}" if path else part for part in ("gate", "experts", "experts.act_fn"))
            if why is None and rule is not None:
                swaps.append(_Swap(module, _make_moe_forward(rule.renormalizes(config), rule.weights_in_model_dtype)))
            else:
                problems.append(f"{where}: {why}")
        elif _is_gated_mlp(module):
            why = once(("mlp", type(module.act_fn)), module, functools.partial(_check_mlp, module))  # act_fn is per instance
            handled.add(f"{path}.act_fn" if path else "act_fn")  # swiglu replaces it, or the MLP is refused whole
            if why is None:
                swaps.append(_Swap(module, _mlp_forward))
            else:
                problems.append(f"{where}: {why}")
        elif list(module.parameters(recurse=False)) or list(module.buffers(recurse=False)):
            problems.append(f"{where}: a module with parameters or buffers of its own that the patcher does not know")
        elif not list(module.children()) and not isinstance(module, nn.Identity):
            if isinstance(module, nn.Dropout) and module.p == 0.0:
                continue  # the identity
            problems.append(f"{where}: no batch-invariant replacement for this module")
        # Anything else is a container (decoder layer, model, ModuleList): its own forward only
        # routes tensors between the modules above and adds residuals, element by element.
    if problems:
        raise _refusal(model, problems)
    if not any(s.forward is _rotary_forward for s in swaps) and any(_is_attention(m) for m in modules.values()):
        raise PatchError(f"patch: {type(model).__name__} has attention layers but no rotary embedding the patcher recognises")
    return swaps


def _compile_with_eagers_rounding() -> None:
    """Make inductor round every intermediate to its dtype where eager does (a process-wide
    setting, read when a graph is compiled: a graph compiled before it keeps its code)."""
    import torch._inductor.config as inductor_config

    inductor_config.emulate_precision_casts = True


def patch(model: nn.Module) -> nn.Module:
    """Make a transformers decoder batch-invariant in place; returns the model.

    Swaps the forward of each linear layer (det_linear, bias included), embedding (embedding),
    RMS norm (rms_norm), SiLU-gated MLP (swiglu), rotary embedding and attention (rope, then the
    ``attention`` op on variable-length sequences), and sets ``attn_implementation`` to
    ``"rlkernels"``.  Each attention layer gets the forward of its kind as the config says
    (with or without RoPE, its sliding window), and one module of each kind and class is first
    run against its replacement on a float32 CPU probe.  Parameters, buffers and ``state_dict``
    keys do not change.  Raises PatchError when anything cannot be converted, naming each device,
    non-finite weight (with its count), config key (with its value and the model type) or module
    (path and class) at fault; the model is then left as it was.

    Records every module and the forward set on each: a forward pre-hook on the model's body, and
    ``is_patched``, raise PatchError naming each module replaced, added or removed since, each
    forward changed over patch's and another attention implementation, rather than run them on
    torch's kernels.  A patched model pickles, deep-copies and ``torch.save``-s as a patched model.

    Turns on inductor's ``emulate_precision_casts`` for the process (``unpatch`` leaves it on), so
    that ``torch.compile`` of the patched model gives eager's bits: without it inductor keeps a
    fused chain's intermediates in float32 where eager rounds each op's result to bfloat16 or
    float16 (the residual adds, the casts around the ops).
    """
    if is_patched(model):
        raise PatchError(f"patch: {type(model).__name__} is already patched (call unpatch first)")
    set_impl = getattr(model, "set_attn_implementation", None)
    config = getattr(model, "config", None)
    if set_impl is None or config is None:
        raise PatchError(f"patch: expected a transformers PreTrainedModel (config, set_attn_implementation), got {type(model).__name__}")
    swaps = _plan(model)
    _compile_with_eagers_rounding()
    previous = config._attn_implementation
    set_impl(ATTN_IMPLEMENTATION)
    installed = []
    for swap in swaps:
        # An instance attribute shadows the class's forward; deleting it restores the class's.
        swap.module.forward = functools.partial(swap.forward, swap.module)
        installed.append(swap.module.forward)
    modules = list(model.modules())
    # On the body, which the model's forward calls and token_logprobs calls alone: one check a run.
    body = getattr(model, "base_model", model)
    hook = functools.partial(_check_before_forward, model)
    body.register_forward_pre_hook(hook)
    model.__dict__[_STATE] = _PatchState(
        previous, [swap.module for swap in swaps], installed, modules, [dict(m._modules) for m in modules], [(body, hook)]
    )
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo ``patch``: every module gets its own forward back and the attention implementation is
    the one the model had before.  Returns the model.  Works on a model changed since ``patch``
    (the way back from the PatchError that ``is_patched`` and the patched forwards then raise)."""
    state = model.__dict__.pop(_STATE, None)
    if state is None:
        raise PatchError(f"unpatch: {type(model).__name__} is not patched")
    for module, installed in zip(state.routed, state.installed):
        # Modules replaced since are given back theirs too; a forward set over patch's stays.
        if module.__dict__.get("forward") is installed:
            del module.forward
    for module, hook in state.hooks:
        for key in [key for key, value in module._forward_pre_hooks.items() if value is hook]:
            del module._forward_pre_hooks[key]
    model.set_attn_implementation(state.attn_implementation)  # type: ignore[operator]
    return model


@contextlib.contextmanager
def batch_invariant(model: nn.Module) -> Iterator[nn.Module]:
    """``with batch_invariant(model): ...``: patch for the block, unpatch after, even on error."""
    patch(model)
    try:
        yield model
    finally:
        unpatch(model)


# --------------------------------------------------------------------------------------------
# Log-probabilities without logits
# --------------------------------------------------------------------------------------------


# Config settings by which a model changes its logits beyond the LM head, each with the value that
# changes nothing (None: absent).  token_logprobs applies logits_scaling where the model type is
# one patch implements it for (Granite: the logits divided by it) and refuses the others.
_LOGIT_SETTINGS: dict[str, float | None] = {
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "logit_scale": 1.0, "logits_scaling": 1.0,
}


def _logits_divisor(config: Any) -> float:
    """What ``config``'s model divides its logits by; ValueError for a setting linear_logp cannot follow."""
    model_type = getattr(config, "model_type", None)
    divisor = 1.0
    for name, neutral in _LOGIT_SETTINGS.items():
        value = getattr(config, name, None)
        if value is None or _same(value, neutral):
            continue
        support = _SUPPORT.get(model_type)  # type: ignore[arg-type]
        if name == "logits_scaling" and support is not None and name in support.implemented:
            if _finite_nonzero(value) is not None:
                raise ValueError(f"token_logprobs: config.logits_scaling = {value!r} of {model_type}: {_finite_nonzero(value)}")
            divisor = float(value)
            continue
        raise ValueError(f"token_logprobs: config.{name} = {value!r} of {model_type} changes the logits, and linear_logp does not apply it")
    return divisor


# What transformers 5.x has called the model body's KV cache argument (past_key_values until 5.19,
# cache after it).  A body whose forward takes **kwargs swallows a name it does not know, and a
# cache it never reads makes every position restart at 0: the name it takes is looked up.
_CACHE_ARGUMENTS = ("cache", "past_key_values")


def _named_parameters(function: Callable[..., Any]) -> set[str]:
    """The arguments ``function`` takes by name (not those a ``**kwargs`` would swallow)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read: nothing is known to be taken
        return set()
    return {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _pass_cache(body: nn.Module, model_kwargs: dict[str, Any]) -> None:
    """Give a KV cache in ``model_kwargs`` (as ``cache`` or ``past_key_values``) to ``body`` under
    the name its forward takes; ValueError when it takes neither or both names are given."""
    given = [name for name in _CACHE_ARGUMENTS if model_kwargs.get(name) is not None]
    if not given:
        return
    if len(given) > 1:
        raise ValueError(f"token_logprobs: a KV cache was given twice, as {' and '.join(given)}; give it once")
    taken = [name for name in _CACHE_ARGUMENTS if name in _named_parameters(body.forward)]
    if not taken:
        raise ValueError(
            f"token_logprobs: {given[0]}= was given but {type(body).__name__}.forward takes no KV cache argument "
            f"(none of {', '.join(_CACHE_ARGUMENTS)}); it would be dropped and every position would restart at 0"
        )
    if taken[0] != given[0]:
        model_kwargs[taken[0]] = model_kwargs.pop(given[0])


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    entropy: bool = False,
    ignore_index: int = -100,
    temperature: float = 1.0,
    **model_kwargs: Any,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities of a causal LM, with ``linear_logp`` on the LM head's weight:
    the [tokens, vocabulary] logits are never materialised.

    ``temperature``: the log-probs (and entropies) of the softmax of the logits divided by it, as a
    sampler at that temperature draws from: ``linear_logp``'s ``temperature``, one float32 division
    of each float32 logit (none at 1), which is the division vLLM's sampler makes
    (``logits.div_(temperature)``), so vLLM's processed log-probs under the rlkernels plugin are
    these, bit for bit.

    ``input_ids`` [B, T]; ``attention_mask`` [B, T] (or [B, past + T] with a cache), 1 for real
    tokens, padding left or right; ``labels`` [B, T]: the token scored at each position, by default
    the next input id, with ``ignore_index`` at the last position, wherever the label or the
    position is padding, and where ``position_ids`` restart (the end of a packed sequence, which
    the patched attention keeps apart too, with or without an all-ones mask).  The logits are
    divided by Granite's ``logits_scaling`` as its forward divides them; a config that changes the
    logits otherwise (softcapping, ``logit_scale``) is refused with ValueError.
    Returns ``lp`` [B, T] float32 (0 where ignored), and ``(lp, entropy)`` with ``entropy=True``.
    With a mask and no ``position_ids``, positions count real tokens (left padding then starts
    each sequence at 0).  The ids of padding positions are not read.  Further keyword arguments
    (``position_ids``, ``cache``, ``use_cache``) go to the model's body; a KV cache, given as
    ``cache`` or ``past_key_values``, under the name the body's forward takes (transformers
    renamed it), and ValueError if it takes neither.  Batch-invariant when the
    model is patched.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        got = list(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ValueError(f"token_logprobs: input_ids must be a 2-D tensor [batch, tokens], got {got}")
    head = getattr(model, "get_output_embeddings", lambda: None)()
    body = getattr(model, "base_model", None)
    if not isinstance(head, nn.Linear) or body is None or body is model:
        raise ValueError(f"token_logprobs: expected a causal LM with a linear LM head over a base model, got {type(model).__name__}")
    if head.bias is not None:
        raise ValueError(f"token_logprobs: {type(model).__name__}'s LM head has a bias, which linear_logp does not add")
    divisor = _logits_divisor(getattr(model, "config", None))
    batch, length = input_ids.shape
    real = torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask is not None:
        if attention_mask.dim() != 2 or attention_mask.shape[0] != batch or attention_mask.shape[1] < length:
            raise ValueError(
                f"token_logprobs: attention_mask must be [batch, tokens] (or [batch, past + tokens]), "
                f"got {list(attention_mask.shape)} for input_ids {list(input_ids.shape)}"
            )
        mask = attention_mask.to(torch.bool)
        real = mask[:, -length:]
        if "position_ids" not in model_kwargs:
            model_kwargs["position_ids"] = (mask.to(torch.int64).cumsum(-1) - 1).clamp(min=0)[:, -length:]
        # Padding ids never reach a real token; a valid id keeps padding rows finite, so their zero
        # gradients add nothing (a NaN row would make 0 x NaN in the weight gradients).
        input_ids = torch.where(real, input_ids, torch.zeros_like(input_ids))
    if labels is None:
        labels = torch.full_like(input_ids, ignore_index)
        follows = real[:, 1:]
        positions = model_kwargs.get("position_ids")
        if isinstance(positions, torch.Tensor) and positions.shape[-1] == length:
            # Packed rows: the next token belongs to the same sequence only if its position follows.
            follows = follows & (positions[..., 1:] == positions[..., :-1] + 1)
        labels[:, :-1] = torch.where(follows, input_ids[:, 1:], ignore_index)
    elif labels.shape != input_ids.shape:
        raise ValueError(f"token_logprobs: labels must have input_ids' shape {list(input_ids.shape)}, got {list(labels.shape)}")
    labels = torch.where(real, labels, ignore_index)
    _pass_cache(body, model_kwargs)
    out = body(input_ids=input_ids, attention_mask=attention_mask, **model_kwargs)
    hidden = out[0] if isinstance(out, tuple) else out.last_hidden_state
    rows = hidden.reshape(batch * length, -1).contiguous()
    if divisor != 1.0:
        # (h / s) W^T is the model's (h W^T) / s, rounded at another point: exact where s is a
        # power of two (as in Granite's published configs), within the logprob tolerance elsewhere.
        rows = rows / divisor
    lp, ent, _ = _ops.linear_logp(rows, head.weight, labels.reshape(-1).contiguous(), ignore_index, float(temperature))
    if entropy:
        return lp.view(batch, length), ent.view(batch, length)
    return lp.view(batch, length)
