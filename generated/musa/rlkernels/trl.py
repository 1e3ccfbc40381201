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
rlkernels plugin reports for it.  TRL's ``temperature`` must be 1 (the log-probs are the model's,
not a tempered distribution's); multimodal inputs are refused, and so is a model wrapped for
several processes (DistributedDataParallel, FSDP): the log-probs are computed through the
unwrapped model, which would skip the wrapper's forward and with it the gradients' averaging.
"""

from __future__ import annotations

from typing import Any

import torch

from . import transformers as rlkt

try:
    import trl
except ImportError as exc:  # an optional extra: say which one, not only what failed
    raise ImportError(f"rlkernels.trl needs the optional dependency trl: pip install 'rlkernels[trl]' (importing it failed: {exc})") from exc

__all__ = ["GRPOTrainer", "per_token_logprobs"]


def per_token_logprobs(
    model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """TRL's per-token (log-probs, entropies) of the last ``logits_to_keep`` tokens of each row,
    [B, logits_to_keep] float32 each, from ``token_logprobs`` (``linear_logp``): position ``t``
    scores token ``t + 1``, as TRL's fused head does."""
    lp, entropy = rlkt.token_logprobs(model, input_ids, attention_mask, entropy=True)
    end = input_ids.shape[1] - 1
    return lp[:, end - logits_to_keep : end], entropy[:, end - logits_to_keep : end]


class GRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` whose per-token log-probs and entropies are ``token_logprobs``' (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if float(self.temperature) != 1.0:
            raise ValueError(f"rlkernels.trl: temperature must be 1.0 (the model's own log-probs), got {self.temperature}")
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
            lp, ent = per_token_logprobs(unwrapped, input_ids[start : start + step], attention_mask[start : start + step], logits_to_keep)
            lps.append(lp)
            ents.append(ent)
        return torch.cat(lps), (torch.cat(ents) if compute_entropy else None), None
