# Copied from runtime/rlkernels/trl.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""TRL's GRPO with the trainer's per-token log-probs from ``rlkernels.transformers.token_logprobs``.

TRL 1.16's ``GRPOTrainer`` replaces the model's forward with its own fused LM head, so a patched
model's GRPO loss would not use ``linear_logp``, and ``patch`` after building the trainer is refused
(the model "already has a forward of its own").  ``GRPOTrainer`` here is TRL's, with its per-token
log-probs and entropies taken from ``token_logprobs`` of the patched model::

    from rlkernels.trl import GRPOTrainer     # pip install 'rlkernels[trl]'
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(...), ...)

The model is patched when the trainer is built (unless it already is).  A sequence's log-probs then
do not depend on the generation batch, the per-device batch or padding, and equal what vLLM with the
rlkernels plugin reports for it.  At TRL's ``temperature`` t they are those of the logits divided
by t, as TRL scores them: ``token_logprobs(..., temperature=t)``, one float32 division of each
logit inside ``linear_logp`` (none at t = 1).

With ``use_vllm=True, vllm_mode="colocate"`` the trainer starts TRL's in-process vLLM engine with
the rlkernels plugin on (``RLKERNELS_VLLM=1`` is set in this process, and the plugin registered
before the engine is built) and with the trainer model's dtype: TRL gives vLLM no dtype, and vLLM's
``"auto"`` runs a float32 checkpoint in bfloat16.  TRL asks that engine for processed log-probs,
which the plugin computes at each request's temperature in ``linear_logp``'s arithmetic, so the
rollout log-probs TRL receives are the trainer's old and current log-probs bit for bit, and the
importance ratio of an unchanged policy is exactly 1.  The trainer must not run under autocast
(``bf16=False``, ``fp16=False``; GRPOConfig's ``bf16`` is True by default): its log-probs would be
computed in another dtype than the engine's, and the engine is refused.  Sampling processors other than the
temperature (``top_k``, ``top_p < 1``, ``min_p > 0``, ``repetition_penalty != 1``) make the
engine refuse the batch: processed log-probs would follow them, the trainer's do not.

Multimodal inputs are refused, and so is a model wrapped for several processes
(DistributedDataParallel, FSDP): the log-probs are computed through the unwrapped model, which
would skip the wrapper's forward and with it the gradients' averaging.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import transformers as rlkt

try:
    import trl
except ImportError as exc:  # an optional extra: say which one, not only what failed
    raise ImportError(f"rlkernels.trl needs the optional dependency trl: pip install 'rlkernels[trl]' (importing it failed: {exc})") from exc

__all__ = ["GRPOTrainer", "per_token_logprobs"]


def per_token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's per-token (log-probs, entropies) of the last ``logits_to_keep`` tokens of each row,
    [B, logits_to_keep] float32 each, from ``token_logprobs`` (``linear_logp``) at ``temperature``:
    position ``t`` scores token ``t + 1``, as TRL's fused head does."""
    lp, entropy = rlkt.token_logprobs(model, input_ids, attention_mask, entropy=True, temperature=temperature)
    end = input_ids.shape[1] - 1
    return lp[:, end - logits_to_keep : end], entropy[:, end - logits_to_keep : end]


class GRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` whose per-token log-probs and entropies are ``token_logprobs``' (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        colocated = bool(getattr(config, "use_vllm", False)) and getattr(config, "vllm_mode", None) == "colocate"
        with _colocated_engine(self) if colocated else contextlib.nullcontext():
            super().__init__(*args, **kwargs)
        for model in (self.model, self.ref_model):
            if model is None or rlkt.is_patched(model):
                continue
            # TRL's fused head sits on the instance's forward: set it aside while the modules are patched.
            fused = model.__dict__.pop("forward", None)
            try:
                rlkt.patch(model)
            finally:
                if fused is not None:
                    model.forward = fused

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        given = sorted(name for name, value in multimodal.items() if value is not None)
        if given or compute_aux_loss:
            raise ValueError(f"rlkernels.trl: multimodal inputs and MoE auxiliary losses are not supported (got {given or 'aux loss'})")
        unwrapped = self.accelerator.unwrap_model(model)
        if model is not unwrapped and not isinstance(model, torch._dynamo.eval_frame.OptimizedModule):
            # The log-probs are computed through the unwrapped model: what a wrapper does in its
            # forward (DistributedDataParallel's gradient averaging, FSDP's gathering of the
            # parameters) would not happen, and each process's replica would drift on its own.
            raise ValueError(
                f"rlkernels.trl: the model TRL scores with is wrapped in {type(model).__name__}, whose forward the log-probs would bypass "
                "(a DistributedDataParallel replica's gradients would never be averaged); run one process"
            )
        if not rlkt.is_patched(unwrapped):
            raise ValueError("rlkernels.trl: the model TRL scores with is not patched by rlkernels.transformers")
        step = batch_size or input_ids.shape[0]
        lps, ents = [], []
        for start in range(0, input_ids.shape[0], step):  # a row's bits do not depend on the chunking
            lp, ent = per_token_logprobs(
                unwrapped, input_ids[start : start + step], attention_mask[start : start + step], logits_to_keep, float(self.temperature)
            )
            lps.append(lp)
            ents.append(ent)
        return torch.cat(lps), (torch.cat(ents) if compute_entropy else None), None


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    """The one dtype of ``model``'s floating-point parameters; ValueError naming them if there are several."""
    found = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()})
    if len(found) != 1:
        raise ValueError(f"rlkernels.trl: the trainer model's parameters are in {', '.join(found) or 'no floating dtype'}; vLLM runs one dtype")
    dtype: torch.dtype = getattr(torch, found[0])
    return dtype


@contextlib.contextmanager
def _colocated_engine(trainer: Any) -> Iterator[None]:
    """While TRL builds its colocated engine: the plugin switched on and registered in this process,
    and ``vllm.LLM`` given the trainer model's dtype (refused where TRL's arguments name another)."""
    from trl.generation import vllm_generation

    from . import vllm as plugin

    os.environ[plugin.ENV] = "1"
    plugin.register()
    make: Callable[..., Any] = vllm_generation.LLM

    def build(*args: Any, **kwargs: Any) -> Any:
        dtype = model_dtype(trainer.accelerator.unwrap_model(trainer.model))
        given = kwargs.get("dtype", "auto")
        name = str(dtype).removeprefix("torch.")
        mixed = str(getattr(trainer.accelerator, "mixed_precision", "no"))
        if mixed != "no":
            # Under autocast the trainer's log-probs are computed in another dtype than the engine's.
            raise ValueError(
                f"rlkernels.trl: the trainer runs under {mixed} autocast and vLLM would run the model in {name}: "
                "the log-probs would differ; set bf16=False and fp16=False (GRPOConfig's bf16 is True by default)"
            )
        if given not in (None, "auto") and str(given).removeprefix("torch.") != name:
            raise ValueError(f"rlkernels.trl: vLLM was asked for dtype {given}, and the trainer model is in {name}: the log-probs would differ")
        return make(*args, **{**kwargs, "dtype": name})

    vllm_generation.LLM = build
    try:
        yield
    finally:
        vllm_generation.LLM = make
