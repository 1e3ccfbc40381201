# Copied from runtime/rlkernels/moe.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Mixture-of-experts layers on the catalog's ops, with one routing rule for the trainer and the engine.

    from rlkernels import moe
    weights, experts = moe.route(logits, top_k=2, renormalize=True)
    y = moe.experts_forward(x, logits, gate_up, down, top_k=2, renormalize=True)

``rlkernels.transformers.patch`` runs a Qwen2-MoE, Qwen3-MoE or Mixtral sparse block through
``experts_forward``, and the vLLM plugin runs vLLM's MoE layers of the same families through it
too (as the ``moe_experts`` custom op below, opaque to torch.compile), so a token picks the same
experts and gets the same bits in both.

The rule, for hidden states ``x`` [N, H] and the router's logits [N, E] (``det_linear`` of ``x``
and the router's weight, rounded to the model dtype as the models round them):

1. ``probs = softmax(logits)`` in float32, the catalog's ``softmax`` (a row's bits never depend on
   the other rows).
2. The ``top_k`` experts of each token: the highest probabilities, equal ones in ascending expert
   index (a stable sort, so a tie never depends on the batch).  The indices are not
   differentiable, as torch.topk's are not.
3. Their weights ``probs[chosen]``; renormalised (``renormalize``) by their sum added in slot
   order (slot 0 first) in float32, one division each; rounded to the model dtype where the family
   does (``weights_in_model_dtype``: Qwen3-MoE), kept in float32 where it does not (Mixtral).
4. Each expert's rows, ascending by token, run ``det_linear`` (gate and up), ``swiglu`` and
   ``det_linear`` (down): every row's bits are independent of how many rows its expert received.
5. Each token's output: the sum over its slots, in slot order, of expert output (in float32) x
   weight, in float32, rounded once to the model dtype.

The backward is deterministic: the catalog ops' own, the rows an expert read added back into each
token in slot order in float32 (rounded once), permutations undone by gathers (no adds).
Forward-mode AD and torch.func transforms are refused (by torch, for the functions below), as the
catalog ops refuse them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from . import _ops
from ._registry import PACKAGE

__all__ = ["experts_forward", "record_routing", "route", "router_disagreement"]

_RECORDERS: list[list[torch.Tensor]] = []  # the open record_routing() blocks, innermost last


@contextlib.contextmanager
def record_routing() -> Iterator[list[torch.Tensor]]:
    """``with record_routing() as chosen: model(...)``: ``chosen`` gets, for every sparse block the
    block runs, in the order they run, the experts each token chose ([N, top_k] int64, slot 0 the
    most probable), to compare with another engine's (``router_disagreement``)."""
    chosen: list[torch.Tensor] = []
    _RECORDERS.append(chosen)
    try:
        yield chosen
    finally:  # by identity: lists of tensors do not compare
        del _RECORDERS[next(i for i, recorder in enumerate(_RECORDERS) if recorder is chosen)]


def route(logits: torch.Tensor, top_k: int, renormalize: bool, weights_in_model_dtype: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The routing rule (steps 1 to 3 of the module's docstring): ``(weights [N, top_k], experts
    [N, top_k] int64)``, slot 0 the most probable expert.  ``weights`` is float32, or the logits'
    dtype with ``weights_in_model_dtype``."""
    if logits.dim() != 2:
        raise ValueError(f"route: logits must be [tokens, experts], got shape {list(logits.shape)}")
    experts = logits.shape[1]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ValueError(f"route: top_k must be an int in [1, {experts}] (the number of experts), got {top_k!r}")
    probs = _ops.softmax(logits)
    # A stable descending sort keeps equal probabilities in ascending expert order: the tie rule.
    chosen = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = probs.gather(1, chosen)
    if renormalize:
        total = weights[:, 0]
        for slot in range(1, top_k):
            total = total + weights[:, slot]
        weights = weights / total.unsqueeze(1)
    if weights_in_model_dtype:
        weights = weights.to(logits.dtype)
    return weights, chosen


def add_slots(grad: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Each token's rows of ``grad`` (the rows ``where[t]`` [N, top_k] names, one per slot) added in
    slot order in float32, rounded once to ``grad``'s dtype: the backward of giving each assignment
    its token's row."""
    total = grad.index_select(0, where[:, 0]).float()
    for slot in range(1, where.shape[1]):
        total = total + grad.index_select(0, where[:, slot]).float()
    return total.to(grad.dtype)


class _TokenRows(torch.autograd.Function):
    """``x[tokens]``: each assignment's row of its token; the backward adds a token's rows back in
    slot order, in float32, rounded once (``where[t, s]``: the row of token t's slot s)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tokens: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(where)
        return x.index_select(0, tokens)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (where,) = ctx.saved_tensors
        return add_slots(grad, where), None, None


class _PermutedRows(torch.autograd.Function):
    """``x[index]`` for a permutation ``index`` whose inverse is ``inverse``: the backward gathers
    the gradient back (no adds, so no zero's sign changes)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, index: torch.Tensor, inverse: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(inverse)
        return x.index_select(0, index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (inverse,) = ctx.saved_tensors
        return grad.index_select(0, inverse), None, None


class Dispatch(NamedTuple):
    """Where a step's assignments go: assignment a = t * top_k + s (token t's slot s), ordered by
    expert, then by token (a stable sort), as the experts read their rows."""

    order: torch.Tensor  # [N * top_k]: the assignment of each expert row
    place: torch.Tensor  # [N * top_k]: the expert row of each assignment (order's inverse)
    tokens: torch.Tensor  # [N * top_k]: the token of each expert row
    counts: list[int]  # rows per expert


def dispatch(chosen: torch.Tensor, experts: int) -> Dispatch:
    """The expert rows of a routing ``chosen`` [N, top_k] over ``experts`` experts."""
    flat = chosen.reshape(-1)
    order = torch.argsort(flat, stable=True)
    place = torch.empty_like(order)
    place[order] = torch.arange(order.numel(), device=order.device)
    tokens = torch.div(order, chosen.shape[1], rounding_mode="floor")
    return Dispatch(order, place, tokens, torch.bincount(flat, minlength=experts).tolist())


def expert_rows(rows: torch.Tensor, counts: list[int], gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """Each expert's rows (``counts[e]`` consecutive rows of ``rows`` for expert e of ``gate_up``
    [E, 2I, H] and ``down`` [E, H, I]) through det_linear (gate and up), swiglu and det_linear
    (down): [sum(counts), H]."""
    inner = down.shape[2]
    gate_ups, downs = gate_up.unbind(0), down.unbind(0)  # one gradient tensor each, not one per expert
    outputs = []
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        mine = rows[start : start + count]
        projected = _ops.det_linear(mine, gate_ups[expert])
        act = _ops.swiglu(projected[:, :inner].contiguous(), projected[:, inner:].contiguous())
        outputs.append(_ops.det_linear(act, downs[expert]))
        start += count
    return torch.cat(outputs) if outputs else rows.new_empty((0, down.shape[1]))


def combine(rows: torch.Tensor, routing: Dispatch, weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Each token's output from every expert row [N * top_k, H] (in dispatch order): the sum over
    its slots, in slot order, of row (in float32) x weight, in float32, rounded once to ``dtype``."""
    tokens, top_k = weights.shape
    per_slot = _PermutedRows.apply(rows, routing.place, routing.order).view(tokens, top_k, rows.shape[1])  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    total = per_slot[:, 0].float() * weights[:, 0:1].float()
    for slot in range(1, top_k):
        total = total + per_slot[:, slot].float() * weights[:, slot : slot + 1].float()
    return total.to(dtype)


def check_shapes(caller: str, x: torch.Tensor, logits: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, experts: int) -> None:
    """ValueError naming the argument when x [N, H], logits [N, E], gate_up [E', 2I, H], down
    [E', H, I] do not fit (E': the experts held here, ``experts`` of them)."""
    if x.dim() != 2 or logits.dim() != 2 or logits.shape[0] != x.shape[0] or gate_up.dim() != 3 or down.dim() != 3:
        raise ValueError(
            f"{caller}: expected x [N, H], logits [N, E], gate_up [E, 2I, H], down [E, H, I], got "
            f"{list(x.shape)}, {list(logits.shape)}, {list(gate_up.shape)}, {list(down.shape)}"
        )
    hidden, inner = x.shape[1], down.shape[2]
    if gate_up.shape != (experts, 2 * inner, hidden):
        raise ValueError(f"{caller}: gate_up must be [E, 2I, H] = {[experts, 2 * inner, hidden]} for x {list(x.shape)} and down {list(down.shape)}, got {list(gate_up.shape)}")
    if down.shape != (experts, hidden, inner):
        raise ValueError(f"{caller}: down must be [E, H, I] = {[experts, hidden, inner]}, got {list(down.shape)}")


def experts_forward(
    x: torch.Tensor,
    logits: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    top_k: int,
    renormalize: bool,
    weights_in_model_dtype: bool = False,
) -> torch.Tensor:
    """A sparse MoE block's output for ``x`` [N, H] and its router ``logits`` [N, E]: the module
    docstring's rule, with ``gate_up`` [E, 2I, H] (each expert's gate rows, then its up rows, as
    transformers and vLLM store them) and ``down`` [E, H, I].  Returns [N, H] in ``x``'s dtype."""
    check_shapes("experts_forward", x, logits, gate_up, down, logits.shape[-1] if logits.dim() == 2 else -1)
    weights, chosen = route(logits, top_k, renormalize, weights_in_model_dtype)
    recorded(chosen)
    routing = dispatch(chosen, gate_up.shape[0])
    rows = _TokenRows.apply(x, routing.tokens, routing.place.view(x.shape[0], top_k))  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    return combine(expert_rows(rows, routing.counts, gate_up, down), routing, weights, x.dtype)


def recorded(chosen: torch.Tensor) -> None:
    """Hand a routing to the open ``record_routing`` blocks (for callers that route themselves)."""
    for recorder in _RECORDERS:
        recorder.append(chosen)


def router_disagreement(experts_a: torch.Tensor, experts_b: torch.Tensor) -> float:
    """The fraction of tokens whose chosen experts differ between two routings of the same tokens
    (each [N, top_k] int64, e.g. the engine's and the trainer's), as sets: slot order aside.  0.0
    for no tokens."""
    if experts_a.shape != experts_b.shape or experts_a.dim() != 2:
        raise ValueError(f"router_disagreement: expected two [tokens, top_k] tensors of one shape, got {list(experts_a.shape)} and {list(experts_b.shape)}")
    if experts_a.shape[0] == 0:
        return 0.0
    a = torch.sort(experts_a, dim=1).values
    b = torch.sort(experts_b.to(experts_a.device), dim=1).values
    return float((a != b).any(dim=1).float().mean())


@torch.library.custom_op(f"{PACKAGE}_layers::moe_experts", mutates_args=())
def _moe_experts_op(
    x: torch.Tensor, logits: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, top_k: int, renormalize: bool, weights_in_model_dtype: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``experts_forward`` as one op, so that torch.compile (vLLM's compiled mode) calls it whole:
    its shapes inside depend on the routing.  Inference only (no autograd).  Returns the output
    and the experts each token chose."""
    with torch.no_grad(), record_routing() as chosen:
        y = experts_forward(x, logits, gate_up, down, top_k, renormalize, weights_in_model_dtype)
    return y, chosen[-1]


@_moe_experts_op.register_fake
def _(
    x: torch.Tensor, logits: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, top_k: int, renormalize: bool, weights_in_model_dtype: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x), x.new_empty((x.shape[0], top_k), dtype=torch.int64)


moe_experts_op = _moe_experts_op
"""``torch.ops.<package>_layers.moe_experts``: ``experts_forward`` for inference, opaque to
torch.compile; returns ``(output, chosen experts)``."""
