"""Tensor-parallel layers whose bits do not depend on the parallel layout, over torch.distributed.

    import torch.distributed as dist
    import rlkernels.distributed as rlkd
    dist.init_process_group("gloo", ...)           # any backend: only all_gather is used
    up = rlkd.ColumnParallelLinear(hidden, ffn)    # each rank holds ffn / world rows of the weight
    down = rlkd.RowParallelLinear(ffn, hidden)     # each rank holds ffn / world columns
    y = down(up(x))                                # replicated y: the same bits for any world size
    lp, entropy = rlkd.linear_logp(h, head_shard, ids)
    y = rlkd.expert_parallel_experts(x, logits, gate_up_shard, down_shard, top_k, renormalize)  # experts sharded

A row-parallel linear sums partial products across ranks.  ``all_reduce`` sums them in the
backend's order (a ring, a tree, chunks per link), so the bits change with the number of ranks.
Here the combine is the op's: every rank all-gathers the partial results and adds them in the
K-tree's fixed pairwise order, ((p0 + p1) + (p2 + p3)) ...  Each partial is ``det_gemm_ktree``
over the rank's contiguous part of K, which is a whole subtree of the K-tree over all of K (the
spec's ``layout_invariant``), so for a power-of-two number of ranks and K a multiple of
LEAF (32) x world size, every layout gives the bits of one device -- forward and
backward.  The vocabulary-parallel ``linear_logp`` combines maxima and sums of exponentials the
same way, over fixed leaves of the vocabulary.  A product whose K no rank splits (a column-parallel
forward, a row-parallel input gradient, every weight gradient, whose K is the tokens) is
``det_gemm``: each output one float32 sum over all of K, rounded once, whichever rank computes it.

The price: a K-tree product is bf16 at every node, and the gather moves world-size times the
bytes of a reduce-scatter (each rank receives every partial).
Only bfloat16 is accepted: float32 has no layout-invariant product here, and silently falling
back to one that is not would break the promise.

Experts sharded over the ranks (expert parallelism) run ``rlkernels.moe``'s rule: the tokens and
their router logits are replicated, every rank routes them alike, computes the rows of its own
experts and all-gathers every rank's rows, which it combines in each token's slot order as one
device does.  A row's bits never depend on where it was computed (det_linear's contract), so every
expert-parallel size gives one device's output and gradients; no sum ever crosses ranks except a
token's input gradient, whose rows are gathered and added in slot order too.

What no rank can see alone is compared across the group on the first call of each layer (one
small all_gather; ``_rank_agreement``): every rank's part of a split dimension the same whole
number of leaves, the same settings, the same bits of each replicated input, and each rank's part
of the weight cut from the same full weight at its own place.  Every rank raises a ``LayoutError``
naming the argument and what each rank holds, or none does.  ``CHECK`` (or ``check=``) says when.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal

import torch
import torch.distributed as dist
from torch import nn

from . import _ops, moe
from ._rank_agreement import (
    CHECKS,
    Check,
    LayoutError,
    Part,
    Replicated,
    Same,
    Source,
    Terms,
    agree,
    check_mode,
    digest,
    forget_checks,
    record_source,
    source_of,
)
from ._registry import OPS, PACKAGE

LEAF: int = OPS["det_gemm_ktree"].reduction.leaf  # type: ignore[union-attr,assignment]
"""Width of a K-tree leaf (det_gemm_ktree's ``reduction.leaf``): every rank's part of a split
dimension is a whole number of leaves, so it is a whole subtree."""
VOCAB_LEAF = 32
"""Vocabulary entries per leaf of linear_logp's sums and per call of exp: a rank's part of the
vocabulary is a whole number of them."""

CHECK: Check = "first"
"""When the ranks compare what they must agree on; a call's ``check=`` (or a layer's) overrides it.
``"first"``: on the first call of each layer (each weight; for gather_last_dim and
scatter_last_dim, each last dimension), the parts' sizes (and dtypes, where parts are gathered),
the settings (``reduce``, ``ignore_index``, whether an input's gradient is computed), the bits of
the replicated inputs (their checksums) and where each rank's part of the weight was cut from
(``shard``, ``load_full``).  ``"every"``: all of that on every call (a small all_gather and a host
synchronisation each).  ``"layout"``: sizes and settings only, on the first call of each layer.
Under ``"first"`` and ``"layout"`` a later call is not compared: the ranks must keep what was
compared, the check mode included (a rank that alone asks for an input's gradient, or alone checks
again, meets the others in another collective); ``"every"`` is the mode that compares each call."""

Reduce = Literal["tree", "all_reduce"]
"""``tree``: the fixed-order combine (layout-invariant).  ``all_reduce``: torch.distributed's
all_reduce in the backend's order, which is not; kept as the baseline it replaces, for the
bench and for tests that show the difference."""

__all__ = [
    "CHECK",
    "CHECKS",
    "LEAF",
    "VOCAB_LEAF",
    "ColumnParallelLinear",
    "LayoutError",
    "RowParallelLinear",
    "column_parallel_linear",
    "expert_parallel_experts",
    "gather_last_dim",
    "linear_logp",
    "row_parallel_linear",
    "scatter_last_dim",
    "shard",
]


# --------------------------------------------------------------------------------------------
# Process group, checks, and the fixed-order combine
# --------------------------------------------------------------------------------------------


def _world(group: Any) -> tuple[int, int]:
    """(rank, world size) in ``group``; a power of two, or a clear error."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{PACKAGE}.distributed needs torch.distributed initialised: call torch.distributed.init_process_group first")
    world = dist.get_world_size(group)
    if world & (world - 1):
        raise LayoutError(f"group: expected a power-of-two number of ranks (1, 2, 4, 8, ...: the K-tree's pairwise combine), got {world}")
    return dist.get_rank(group), world


def _check_reduce(reduce: str) -> None:
    if reduce not in ("tree", "all_reduce"):
        raise ValueError(f"reduce: expected 'tree' or 'all_reduce', got {reduce!r}")


def _check_bf16(name: str, tensor: torch.Tensor) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype != torch.bfloat16:
        raise LayoutError(
            f"{name}: expected dtype torch.bfloat16 (the K-tree product is bf16 in and out; no float32 product here is "
            f"layout-invariant), got {tensor.dtype}"
        )


def _check_split(name: str, size: int, what: str, leaf: int) -> None:
    if size == 0 or size % leaf:
        raise LayoutError(f"{name}: {what} must be a positive multiple of {leaf} (whole leaves of the tree), got {size}")


def _mode(check: Check | None) -> object:
    """The call's check mode: its own, or the module's ``CHECK`` (validated where it is used)."""
    return CHECK if check is None else check


def _reduce_term(reduce: str) -> Same:
    return Same("reduce", "the combine", ("tree", "all_reduce").index(reduce), names=("tree", "all_reduce"))


def _check_term(check: object) -> Same:
    return Same("check", "the check mode", CHECKS.index(check), names=CHECKS)  # agree refused other values first


def _pairwise(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """((p0 + p1) + (p2 + p3)) ...: the mid-split tree over the ranks' parts, each add in their dtype."""
    if len(parts) == 1:
        return parts[0]
    mid = len(parts) // 2
    return _pairwise(parts[:mid]) + _pairwise(parts[mid:])


def _all_gather(tensor: torch.Tensor, group: Any) -> list[torch.Tensor]:
    tensor = tensor.contiguous()
    if dist.get_world_size(group) == 1:
        return [tensor]
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor, group=group)
    return parts


def _combine(partial: torch.Tensor, group: Any, reduce: str) -> torch.Tensor:
    """The sum of every rank's ``partial``, in the fixed pairwise order (``tree``) or the backend's."""
    if reduce == "all_reduce":
        total = partial.contiguous().clone()
        if dist.get_world_size(group) > 1:
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        return total
    return _pairwise(_all_gather(partial, group))


def _ktree(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with the K-tree order; a reduction dimension that is not split across ranks is
    padded with zeros to whole leaves (the same padding at every world size)."""
    k = a.shape[1]
    pad = -k % LEAF
    if pad:
        a = torch.cat([a, a.new_zeros(a.shape[0], pad)], dim=1)
        b = torch.cat([b, b.new_zeros(pad, b.shape[1])], dim=0)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if not b.is_contiguous() and b.t().is_contiguous() and m * (k + n) < k * n:
        # b is a transpose (a weight's, weight.t()): (a b)^T = b^T a^T, whose output (n, m) is the
        # same leaves of the same fma chains over k (a product's two factors commute exactly), so
        # a^T and the output are copied rather than the larger b.
        return _ops.det_gemm_ktree(b.t(), a.t().contiguous()).t().contiguous()
    return _ops.det_gemm_ktree(a.contiguous(), b.contiguous())


def _whole(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for a product whose K every rank holds whole (a layer's input features, or the tokens of
    a weight's gradient): det_gemm, one float32 fma chain per output over all of K in ascending
    order, rounded once.  An output's bits do not depend on the rows and columns computed with it
    (det_gemm's contract, which vLLM's merged projections rely on too), so a rank's part of the
    output has the bits of the same part of one device's.  No K-tree is needed where no rank holds
    a part of K, and this is the more accurate product (one rounding, not one per leaf and node)
    and the faster one.  Operands that are transposes of contiguous tensors (a weight's ``.t()``, a
    gradient's) are read as stored, by det_gemm_nt and det_gemm_tn: the same bits, no copies."""
    if not a.is_contiguous() and a.t().is_contiguous():
        return _ops.det_gemm_tn(a.t(), b.contiguous())
    if not b.is_contiguous() and b.t().is_contiguous():
        return _ops.det_gemm_nt(a.contiguous(), b.t())
    return _ops.det_gemm(a.contiguous(), b.contiguous())


def _device(tensor: object) -> torch.device:
    """Where a call's agreement vector lives: with its tensors (a device backend gathers device tensors)."""
    return tensor.device if isinstance(tensor, torch.Tensor) else torch.device("cpu")


def _rows(x: torch.Tensor, name: str, features: int) -> torch.Tensor:
    """[..., features] as [rows, features]."""
    if x.dim() < 1 or x.shape[-1] != features:
        raise LayoutError(f"{name}: expected a last dimension of {features}, got shape {tuple(x.shape)}")
    return x.reshape(-1, features)


# --------------------------------------------------------------------------------------------
# Column- and row-parallel linear layers
# --------------------------------------------------------------------------------------------


class _ColumnParallel(torch.autograd.Function):
    """y[:, part] = x @ weight_part.T; the input's gradient sums over the output parts."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, group: Any, reduce: str) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.group, ctx.reduce = group, reduce
        return _whole(x, weight.t())

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = _combine(_ktree(grad, weight), ctx.group, ctx.reduce) if ctx.needs_input_grad[0] else None
        grad_w = _whole(grad.t(), x) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None, None


class _RowParallel(torch.autograd.Function):
    """y = sum over ranks of x_part @ weight_part.T, combined in the fixed order."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, group: Any, reduce: str) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return _combine(_ktree(x, weight.t()), group, reduce)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()  # replicated: every rank holds the same gradient of y
        grad_x = _whole(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = _whole(grad.t(), x) if ctx.needs_input_grad[1] else None
        return grad_x, grad_w, None, None


def column_parallel_linear(
    x: torch.Tensor, weight: torch.Tensor, *, group: Any = None, reduce: Reduce = "tree", check: Check | None = None
) -> torch.Tensor:
    """``x @ weight.T`` for this rank's rows of the weight ([out / world, in]): the output's part
    [..., out / world].  ``x`` is replicated; its gradient sums every rank's in the fixed order,
    so ``out / world`` must be the same multiple of LEAF on every rank (``check``: see CHECK)."""
    _world(group)
    mode = _mode(check)

    def terms() -> Terms:
        _check_reduce(reduce)
        _check_bf16("x", x)
        _check_bf16("weight", weight)
        if weight.dim() != 2:
            raise LayoutError(f"weight: expected 2 dimensions [out / world, in], got shape {tuple(weight.shape)}")
        rows = _rows(x, "x", weight.shape[1])
        return Terms(
            (Same("weight", "the rows of each rank's part (out / world)", weight.shape[0], LEAF), Same("weight", "its columns (in)", weight.shape[1]),
             Same("x", "its rows", rows.shape[0]), _grad_term("x", x), _reduce_term(reduce), _check_term(mode)),
            (Replicated("x", "a column-parallel layer's input is replicated", x),),
            Part("weight", weight, 0),
        )

    agree("column_parallel_linear", group, mode, weight, _device(weight), terms)
    rows = _rows(x, "x", weight.shape[1])
    y = _ColumnParallel.apply(rows.contiguous(), weight, group, reduce)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    return y.reshape(*x.shape[:-1], weight.shape[0])


def row_parallel_linear(
    x: torch.Tensor, weight: torch.Tensor, *, group: Any = None, reduce: Reduce = "tree", check: Check | None = None
) -> torch.Tensor:
    """``x @ weight.T`` summed over ranks, for this rank's part of the inputs ``x`` [..., in / world]
    and columns of the weight ([out, in / world]): the replicated output [..., out].  ``in / world``
    must be the same multiple of LEAF on every rank (``check``: see CHECK).  Nothing here is
    replicated: each rank's ``x`` is its own part, so only its rows are compared."""
    _world(group)
    mode = _mode(check)

    def terms() -> Terms:
        _check_reduce(reduce)
        _check_bf16("x", x)
        _check_bf16("weight", weight)
        if weight.dim() != 2:
            raise LayoutError(f"weight: expected 2 dimensions [out, in / world], got shape {tuple(weight.shape)}")
        rows = _rows(x, "x", weight.shape[1])
        return Terms(
            (Same("weight", "the columns of each rank's part (in / world)", weight.shape[1], LEAF), Same("weight", "its rows (out)", weight.shape[0]),
             Same("x", "its rows", rows.shape[0]), _reduce_term(reduce), _check_term(mode)),
            (),
            Part("weight", weight, 1),
        )

    agree("row_parallel_linear", group, mode, weight, _device(weight), terms)
    rows = _rows(x, "x", weight.shape[1])
    y = _RowParallel.apply(rows.contiguous(), weight, group, reduce)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    return y.reshape(*x.shape[:-1], weight.shape[0])


# --------------------------------------------------------------------------------------------
# Expert parallelism
# --------------------------------------------------------------------------------------------


def _gather_rows(rows: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
    """Every rank's ``rows`` (rank r holds ``sizes[r]`` of them), concatenated in rank order: an
    all_gather of parts padded to the largest, each then cut to its size (no arithmetic)."""
    if len(sizes) == 1:
        return rows
    largest = max(sizes)
    padded = torch.cat([rows, rows.new_zeros(largest - rows.shape[0], rows.shape[1])]) if rows.shape[0] < largest else rows
    return torch.cat([part[:size] for part, size in zip(_all_gather(padded, group), sizes)])


class _ExpertRows(torch.autograd.Function):
    """This rank's expert rows -> every rank's, in rank (= expert) order.  The output's gradient is
    replicated, so a rank's part of it is its slice: no communication."""

    @staticmethod
    def forward(ctx: Any, rows: torch.Tensor, sizes: list[int], rank: int, group: Any) -> torch.Tensor:
        ctx.span = (sum(sizes[:rank]), sum(sizes[: rank + 1]))
        return _gather_rows(rows, sizes, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        start, end = ctx.span
        return grad[start:end], None, None, None


class _LocalTokenRows(torch.autograd.Function):
    """``x[tokens]`` for this rank's expert rows; the backward gathers every rank's row gradients and
    adds each token's in slot order (``moe.add_slots``), as one device does: the replicated x gets
    the same gradient on every rank."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tokens: torch.Tensor, where: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
        ctx.save_for_backward(where)
        ctx.sizes, ctx.group = sizes, group
        return x.index_select(0, tokens)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (where,) = ctx.saved_tensors
        return moe.add_slots(_gather_rows(grad.contiguous(), ctx.sizes, ctx.group), where), None, None, None, None


Combine = Literal["gather", "all_reduce"]
"""``gather``: every rank's expert rows gathered and combined in slot order (one device's bits).
``all_reduce``: each rank combines its own experts' rows into a partial output in the model dtype,
summed by torch.distributed's all_reduce in the backend's order, as expert-parallel engines do: not
layout-invariant; kept as the baseline it replaces (forward only)."""


def expert_parallel_experts(
    x: torch.Tensor,
    logits: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    top_k: int,
    renormalize: bool,
    weights_in_model_dtype: bool = False,
    *,
    group: Any = None,
    combine: Combine = "gather",
    check: Check | None = None,
) -> torch.Tensor:
    """``rlkernels.moe.experts_forward`` with the experts sharded over the group: this rank holds
    experts [rank * E / world, (rank + 1) * E / world) of E, ``gate_up`` [E / world, 2I, H] and
    ``down`` [E / world, H, I] (``shard(full, 0)``); ``x`` [N, H] and ``logits`` [N, E] are
    replicated.  Returns the replicated [N, H] output, with the bits of one device's
    ``experts_forward`` on the full weights at every world size, and so its gradients: x's and the
    logits' replicated, each rank's experts' weights' the slice of one device's.  Every rank must
    hold the same number of experts (``check``: see CHECK)."""
    rank, world = _world(group)
    mode = _mode(check)
    if combine not in ("gather", "all_reduce"):
        raise ValueError(f"combine: expected 'gather' or 'all_reduce', got {combine!r}")
    experts = logits.shape[-1] if isinstance(logits, torch.Tensor) and logits.dim() == 2 else -1

    def terms() -> Terms:
        for name, tensor in (("x", x), ("logits", logits), ("gate_up", gate_up), ("down", down)):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
        moe.check_shapes("expert_parallel_experts", x, logits, gate_up, down, gate_up.shape[0] if gate_up.dim() == 3 else -1)
        return Terms(
            (Same("gate_up", "the experts each rank holds (E / world)", gate_up.shape[0]), Same("down", "its experts' width (I)", down.shape[2]),
             Same("x", "its rows", x.shape[0]), Same("top_k", "the experts per token", int(top_k)),
             Same("renormalize", "whether the weights are renormalised", int(bool(renormalize)), names=("False", "True")),
             Same("weights_in_model_dtype", "where the weights are rounded", int(bool(weights_in_model_dtype)), names=("False", "True")),
             Same("combine", "the combine", ("gather", "all_reduce").index(combine), names=("gather", "all_reduce")),
             _grad_term("x", x), _check_term(mode)),
            (Replicated("x", "the tokens are replicated", x), Replicated("logits", "the router's logits are replicated", logits)),
            Part("gate_up", gate_up, 0),
        )

    agree("expert_parallel_experts", group, mode, gate_up, _device(gate_up), terms)
    held = gate_up.shape[0]  # the same on every rank (agreed)
    if held * world != experts:
        raise LayoutError(f"gate_up: expected E / world = {experts} / {world} experts on each rank (the logits' E over the ranks), got {held}")
    weights, chosen = moe.route(logits, top_k, renormalize, weights_in_model_dtype)
    moe.recorded(chosen)
    routing = moe.dispatch(chosen, experts)
    counts = routing.counts[rank * held : (rank + 1) * held]
    sizes = [sum(routing.counts[r * held : (r + 1) * held]) for r in range(world)]
    start = sum(sizes[:rank])
    tokens, top = x.shape[0], int(top_k)
    rows = _LocalTokenRows.apply(x, routing.tokens[start : start + sizes[rank]], routing.place.view(tokens, top), sizes, group)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    mine = moe.expert_rows(rows, counts, gate_up, down)
    if combine == "all_reduce":
        # Each rank's experts' share of every token, summed by all_reduce: the baseline.
        held_rows = torch.zeros(routing.order.numel(), x.shape[1], dtype=mine.dtype, device=mine.device)
        held_rows[start : start + sizes[rank]] = mine.detach()
        mask = torch.zeros(routing.order.numel(), 1, dtype=torch.bool, device=mine.device)
        mask[start : start + sizes[rank]] = True
        # Rounded to the model dtype first, as engines all-reduce a layer's output in it.
        partial = moe.combine(held_rows, routing, torch.where(mask[routing.place].view(tokens, top), weights.detach(), 0), x.dtype)
        if world > 1:
            dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=group)
        return partial
    every = _ExpertRows.apply(mine, sizes, rank, group)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    return moe.combine(every, routing, weights, x.dtype)


def shard(full: torch.Tensor, dim: int, *, group: Any = None) -> torch.Tensor:
    """This rank's contiguous part of ``full`` along ``dim`` (a copy), as the layers hold it.  The
    returned tensor remembers where it was cut from (a checksum of ``full``, ``dim``, its place), so
    that a layer's first call can compare that across ranks (see CHECK); a tensor made from it
    (``nn.Parameter(part)``, ``part.to(...)``) does not, and is compared by size only."""
    rank, world = _world(group)
    if not isinstance(full, torch.Tensor):
        raise TypeError(f"full: expected a torch.Tensor, got {type(full).__name__}")
    if not -full.dim() <= dim < full.dim():
        raise LayoutError(f"dim: expected a dimension of full (shape {tuple(full.shape)}), got {dim}")
    dim %= full.dim()
    if full.shape[dim] % world:
        raise LayoutError(f"full: dimension {dim} ({full.shape[dim]}) must divide evenly among {world} ranks")
    size = full.shape[dim] // world
    part = full.narrow(dim, rank * size, size).contiguous().clone()
    record_source(part, Source(digest(full), dim, rank, world))
    return part


class _GatherLastDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group, ctx.size = group, x.shape[-1]
        return torch.cat(_all_gather(x, group), dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        rank = dist.get_rank(ctx.group)
        return grad.narrow(-1, rank * ctx.size, ctx.size).contiguous(), None


class _ScatterLastDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        ctx.group = group
        size = x.shape[-1] // world
        return x.narrow(-1, rank * size, size).contiguous()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        return torch.cat(_all_gather(grad, ctx.group), dim=-1), None


_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


def _shape_terms(x: torch.Tensor) -> tuple[Same, ...]:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x: expected a torch.Tensor, got {type(x).__name__}")
    if x.dim() < 1:
        raise LayoutError(f"x: expected at least 1 dimension, got shape {tuple(x.shape)}")
    if x.dtype not in _DTYPES:
        raise LayoutError(f"x: expected one of the dtypes {', '.join(str(d).removeprefix('torch.') for d in _DTYPES)}, got {x.dtype}")
    return (
        Same("x", "its number of dimensions", x.dim()),
        Same("x", "its last dimension", x.shape[-1]),
        Same("x", "its rows (the leading dimensions' product)", x.shape[:-1].numel()),
        # Gathered as bytes: parts of different dtypes would be read as one another's.
        Same("x", "its dtype", _DTYPES.index(x.dtype), names=tuple(str(d).removeprefix("torch.") for d in _DTYPES)),
    )


def _grad_term(argument: str, x: torch.Tensor) -> Same:
    """Whether this call's backward combines ``argument``'s gradient across the ranks: a rank that
    asks for it would wait in a collective that another rank, not asking, never joins."""
    return Same(argument, "whether its gradient is computed (requires_grad, under grad mode)", int(torch.is_grad_enabled() and x.requires_grad), names=("no", "yes"))


def gather_last_dim(x: torch.Tensor, *, group: Any = None, check: Check | None = None) -> torch.Tensor:
    """Every rank's ``x`` side by side along the last dimension (rank order); the gradient of
    each rank's part goes back to it.  No arithmetic: the bits are the parts'.  Every rank's part
    must have the same shape (``check``: see CHECK)."""
    _world(group)
    mode = _mode(check)

    def terms() -> Terms:
        return Terms((*_shape_terms(x), _check_term(mode)))

    agree("gather_last_dim", group, mode, ("last dimension", _last(x)), _device(x), terms)
    return _GatherLastDim.apply(x, group)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations


def scatter_last_dim(x: torch.Tensor, *, group: Any = None, check: Check | None = None) -> torch.Tensor:
    """This rank's contiguous part of a replicated ``x`` along the last dimension; the gradient
    is every rank's part's, gathered (``check``: see CHECK)."""
    _, world = _world(group)
    mode = _mode(check)

    def terms() -> Terms:
        sizes = _shape_terms(x)
        if x.shape[-1] % world:
            raise LayoutError(f"x: last dimension ({x.shape[-1]}) must divide evenly among {world} ranks")
        return Terms((*sizes, _grad_term("x", x), _check_term(mode)), (Replicated("x", "scatter_last_dim cuts a replicated tensor", x),))

    agree("scatter_last_dim", group, mode, ("last dimension", _last(x)), _device(x), terms)
    return _ScatterLastDim.apply(x, group)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations


def _last(x: object) -> int | None:
    """The key of a weightless call's first-call check: its last dimension."""
    return x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() else None


def _check_full(weight: torch.Tensor, shape: tuple[int, int]) -> None:
    """A full weight for ``load_full``: bfloat16 (the layers hold bf16: another dtype would be
    rounded silently) of the layer's whole [out_features, in_features]."""
    _check_bf16("weight", weight)
    if tuple(weight.shape) != shape:
        raise LayoutError(f"weight: expected the full weight's shape {shape} [out_features, in_features], got {tuple(weight.shape)}")


def _load(layer: ColumnParallelLinear | RowParallelLinear, weight: torch.Tensor, dim: int) -> None:
    _check_full(weight, (layer.out_features, layer.in_features))
    part = shard(weight, dim, group=layer.group)
    with torch.no_grad():
        layer.weight.copy_(part)
    source = source_of(part)
    assert source is not None
    record_source(layer.weight, source)
    forget_checks(layer.weight)  # new values: the ranks compare their sources again on the next call


class ColumnParallelLinear(nn.Module):
    """``nn.Linear(in_features, out_features, bias=False)`` whose weight rows are split across
    the group; the output is this rank's part [..., out_features / world]."""

    def __init__(
        self, in_features: int, out_features: int, *, group: Any = None, reduce: Reduce = "tree", check: Check | None = None, device: Any = None
    ) -> None:
        super().__init__()
        _, world = _world(group)
        _check_reduce(reduce)
        if check is not None:
            check_mode(check)
        _check_split("out_features", out_features, f"out_features / world size ({world})", LEAF * world)
        self.in_features, self.out_features, self.group, self.reduce, self.check = in_features, out_features, group, reduce, check
        self.weight = nn.Parameter(torch.empty(out_features // world, in_features, dtype=torch.bfloat16, device=device))

    def load_full(self, weight: torch.Tensor) -> None:
        """Take this rank's rows of the full [out_features, in_features] bfloat16 weight (another
        dtype is refused, not rounded)."""
        _load(self, weight, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return column_parallel_linear(x, self.weight, group=self.group, reduce=self.reduce, check=self.check)


class RowParallelLinear(nn.Module):
    """``nn.Linear(in_features, out_features, bias=False)`` whose weight columns are split
    across the group; it takes this rank's part of the inputs [..., in_features / world] (a
    column-parallel layer's output) and returns the replicated [..., out_features]."""

    def __init__(
        self, in_features: int, out_features: int, *, group: Any = None, reduce: Reduce = "tree", check: Check | None = None, device: Any = None
    ) -> None:
        super().__init__()
        _, world = _world(group)
        _check_reduce(reduce)
        if check is not None:
            check_mode(check)
        _check_split("in_features", in_features, f"in_features / world size ({world})", LEAF * world)
        self.in_features, self.out_features, self.group, self.reduce, self.check = in_features, out_features, group, reduce, check
        self.weight = nn.Parameter(torch.empty(out_features, in_features // world, dtype=torch.bfloat16, device=device))

    def load_full(self, weight: torch.Tensor) -> None:
        """Take this rank's columns of the full [out_features, in_features] bfloat16 weight
        (another dtype is refused, not rounded)."""
        _load(self, weight, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return row_parallel_linear(x, self.weight, group=self.group, reduce=self.reduce, check=self.check)


# --------------------------------------------------------------------------------------------
# Vocabulary-parallel log-probabilities
# --------------------------------------------------------------------------------------------


# torch does not promise that its elementwise exp and log give an element the same bits in the
# vectorised loop and in a scalar tail (they are different code), and threads split a long call
# into ranges with tails of their own.  So every call here has a shape that does not depend on the
# number of ranks, and at most BLOCK elements, below torch's grain: no thread count splits it.
# (torch 2.13 on x86 was seen to agree in both cases; this does not rely on it.)
BLOCK = 16384


def _blocked(fn: Any, x: torch.Tensor) -> torch.Tensor:
    """``fn`` over ``x`` in fixed blocks of BLOCK elements (row-major), each its own call."""
    flat = x.contiguous().reshape(-1)
    return torch.cat([fn(part) for part in flat.split(BLOCK)]).reshape(x.shape) if flat.numel() else fn(x)


def _exp_leaves(z: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """exp(z - shift) of [N, L * VOCAB_LEAF] as a [N, L, VOCAB_LEAF] view: one call of exp per leaf's
    [N, VOCAB_LEAF] (row-major, in blocks of BLOCK elements), the same calls on the same values
    whatever the number of ranks.  The subtraction is one IEEE operation per element, the same bits
    in any layout: it runs once over the part, into the leaf-major layout in which each leaf is one
    contiguous block, and exp then runs on each block in place."""
    rows, width = z.shape
    leaves = width // VOCAB_LEAF
    e = torch.empty(leaves, rows, VOCAB_LEAF, dtype=z.dtype, device=z.device)
    torch.sub(z.view(rows, leaves, VOCAB_LEAF).transpose(0, 1), shift.view(1, rows, 1), out=e)
    for leaf in e:
        if leaf.numel() <= BLOCK:
            leaf.exp_()
        else:
            for block in leaf.view(-1).split(BLOCK):
                block.exp_()
    return e.transpose(0, 1)


@functools.lru_cache(maxsize=64)
def _midsplit_levels(count: int) -> tuple[tuple[int, slice | list[int], list[int] | None], ...]:
    """The mid-split tree over ``count`` values ([lo, hi) splits at lo + (hi - lo) // 2), level by
    level from the root: per level, how many of its nodes are inner (their children, in order, make
    the next level), which values its single-value nodes hold (a slice where they are consecutive),
    and the order that puts [inner nodes' sums, single values] back left to right (None when the
    level has only one kind)."""
    levels: list[tuple[int, slice | list[int], list[int] | None]] = []
    nodes = [(0, count)]
    while nodes:
        inner = [(lo, hi) for lo, hi in nodes if hi - lo > 1]
        singles = [lo for lo, hi in nodes if hi - lo == 1]
        order = None
        if singles and inner:
            inner_at, single_at = iter(range(len(inner))), iter(range(len(inner), len(nodes)))
            order = [next(inner_at) if hi - lo > 1 else next(single_at) for lo, hi in nodes]
        consecutive = bool(singles) and singles == list(range(singles[0], singles[-1] + 1))
        levels.append((len(inner), slice(singles[0], singles[-1] + 1) if consecutive else singles, order))
        nodes = [half for lo, hi in inner for half in ((lo, lo + (hi - lo) // 2), (lo + (hi - lo) // 2, hi))]
    return tuple(levels)


def _midsplit_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum over dim 0 of ``values`` [count, ...] by the mid-split tree, every add elementwise in
    ``values``' dtype: _pairwise over its rows, with one add per level of the tree, not per node."""
    below: torch.Tensor | None = None
    for _inner, singles, order in reversed(_midsplit_levels(values.shape[0])):
        parts = [] if below is None else [below[0::2] + below[1::2]]  # the inner nodes: their children's sums
        if singles:
            parts.append(values[singles])
        level = parts[0] if len(parts) == 1 else torch.cat(parts)
        below = level if order is None else level[order]
    assert below is not None and below.shape[0] == 1  # the root
    return below[0]


def _leaf_tree(values: torch.Tensor) -> torch.Tensor:
    """Per row, the sum of [N, L * VOCAB_LEAF] (or [N, L, VOCAB_LEAF]): each leaf by a balanced
    pairwise tree of its entries, then the L leaves by mid-split, all float32 adds."""
    leaves = values.reshape(values.shape[0], -1, VOCAB_LEAF)
    while leaves.shape[2] > 1:
        leaves = leaves[:, :, 0::2] + leaves[:, :, 1::2]
    return _midsplit_sum(leaves[:, :, 0].t())


KEEP_LOGITS_BYTES = 64 << 20
"""The largest float32 logits of a rank ([tokens, its part of the vocabulary]) that linear_logp keeps
from its forward for its backward; larger ones are computed again there."""


class _VocabParallelLogp(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor, group: Any, ignore_index: int, reduce: str) -> tuple[torch.Tensor, torch.Tensor]:
        # An output the loss does not use (the entropy, as a metric) reaches backward as None, not
        # as zeros that would cost its whole term and carry 0 * inf = NaN into the other's.
        ctx.set_materialize_grads(False)
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        part = weight.shape[0]
        start = rank * part
        z = _ops.det_linear(h, weight, None, out_fp32=True)  # [N, part] float32, each logit alone
        local_max = z.amax(dim=1) if part else z.new_full((z.shape[0],), -float("inf"))
        maxima = torch.stack(_all_gather(local_max, group))  # the max is exact in any order
        m = maxima.amax(dim=0)
        m = torch.where(maxima.isnan().any(dim=0), torch.full_like(m, float("nan")), m)
        shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = _exp_leaves(z, shift)  # [N, L, VOCAB_LEAF]
        # A logit whose e is 0 adds 0 to the sum of e z, as linear_logp's weighted_term: e z goes to 0
        # with e, also for a logit of -inf, where it is NaN.
        weighted = torch.where(e == 0, 0.0, e * z.view(e.shape))
        sums = torch.stack([_leaf_tree(e), _leaf_tree(weighted)], dim=0)  # [2, N]
        if reduce == "all_reduce":
            total = _combine(sums, group, "all_reduce")
        else:
            total = _pairwise(_all_gather(sums, group))
        s, zs = total[0], total[1]
        lse = shift + _blocked(torch.log, s)
        # The selected logit: its owner's, by rank, never a sum of zeros from the others.
        local = (ids >= start) & (ids < start + part)
        picked = torch.where(local, z.gather(1, (ids - start).clamp(0, max(part - 1, 0)).unsqueeze(1)).squeeze(1), torch.zeros_like(lse))
        picks = torch.stack(_all_gather(picked, group))
        owner = torch.div(ids, part, rounding_mode="floor").clamp(0, world - 1)
        target = picks.gather(0, owner.unsqueeze(0)).squeeze(0)
        vocab = part * world
        valid = (ids >= 0) & (ids < vocab)
        ignored = ids == ignore_index
        lp = torch.where(valid, target - lse, torch.full_like(lse, float("nan")))
        entropy = lse - torch.where(s > 0, zs / s, torch.zeros_like(s))
        zero = torch.zeros_like(lse)
        lp, entropy, lse = (torch.where(ignored, zero, t) for t in (lp, entropy, lse))
        # The backward needs the logits again: kept where they are small, else computed again
        # there (the same bits) rather than held from the forward to the backward.
        ctx.save_for_backward(h, weight, ids, lse, entropy, z if z.numel() * z.element_size() <= KEEP_LOGITS_BYTES else None)
        ctx.group, ctx.ignore_index, ctx.reduce, ctx.start = group, ignore_index, reduce, start
        return lp, entropy

    @staticmethod
    def backward(ctx: Any, grad_lp: torch.Tensor | None, grad_entropy: torch.Tensor | None) -> tuple[Any, ...]:
        h, weight, ids, lse, entropy, kept = ctx.saved_tensors
        part = weight.shape[0]
        z = kept if kept is not None else _ops.det_linear(h, weight, None, out_fp32=True)
        p = _exp_leaves(z, lse).reshape(z.shape)
        grad_z = torch.zeros_like(z)
        if grad_lp is not None:
            local = (ids >= ctx.start) & (ids < ctx.start + part)
            onehot = torch.zeros_like(z)
            onehot.scatter_(1, (ids - ctx.start).clamp(0, max(part - 1, 0)).unsqueeze(1), local.to(z.dtype).unsqueeze(1))
            vocab = part * dist.get_world_size(ctx.group)
            g = torch.where((ids >= 0) & (ids < vocab), grad_lp, torch.full_like(grad_lp, float("nan")))
            grad_z = grad_z + g.unsqueeze(1) * (onehot - p)
        if grad_entropy is not None:  # no term in rows whose entropy gradient is 0, nor where p is 0, as linear_logp_backward's
            from_entropy = grad_entropy.unsqueeze(1) * (p * ((lse - entropy).unsqueeze(1) - z))
            grad_z = grad_z + torch.where((grad_entropy == 0).unsqueeze(1) | (p == 0), 0.0, from_entropy)
        grad_z = torch.where((ids == ctx.ignore_index).unsqueeze(1), torch.zeros_like(grad_z), grad_z).to(torch.bfloat16)
        grad_h = _combine(_ktree(grad_z, weight), ctx.group, ctx.reduce) if ctx.needs_input_grad[0] else None
        grad_w = _whole(grad_z.t(), h) if ctx.needs_input_grad[1] else None
        return grad_h, grad_w, None, None, None, None


def linear_logp(
    h: torch.Tensor,
    weight: torch.Tensor,
    ids: torch.Tensor,
    *,
    group: Any = None,
    ignore_index: int = -100,
    reduce: Reduce = "tree",
    check: Check | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of ``ids`` and the softmax's entropy from hidden states ``h`` [..., H] and
    this rank's rows of the LM head's weight ([V / world, H], rank r holding rows r V / world
    onwards); both replicated, float32, shaped like ``ids``.

    Logits are ``det_linear``'s (float32, each alone); the maximum is gathered (exact in any
    order); exp(z - max) and exp(z - max) z are summed over leaves of {VOCAB_LEAF} entries by
    a pairwise tree, the leaves by mid-split, and the ranks' sums pairwise in rank order -- one
    tree over the whole vocabulary for every power-of-two world size.  ``V / world`` must be the
    same multiple of VOCAB_LEAF and of LEAF (the backward's K-tree over the vocabulary) on every
    rank, and ``h``, ``ids`` and ``ignore_index`` the same on every rank (``check``: see CHECK).  The
    gradient of ``h`` sums the ranks' parts in the same fixed order; rows whose id is
    ``ignore_index`` give 0 and no gradient; other ids outside [0, V) give NaN.
    """
    _world(group)
    mode = _mode(check)

    def terms() -> Terms:
        _check_reduce(reduce)
        _check_bf16("h", h)
        _check_bf16("weight", weight)
        if weight.dim() != 2:
            raise LayoutError(f"weight: expected 2 dimensions [V / world, H], got shape {tuple(weight.shape)}")
        if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64:
            raise LayoutError(f"ids: expected an int64 tensor, got {getattr(ids, 'dtype', type(ids).__name__)}")
        rows = _rows(h, "h", weight.shape[1])
        if ids.shape != h.shape[:-1]:
            raise LayoutError(f"ids: expected shape {tuple(h.shape[:-1])} (h's leading dimensions), got {tuple(ids.shape)}")
        if not isinstance(ignore_index, int) or not -(2**63) <= ignore_index < 2**63:
            raise TypeError(f"ignore_index: expected an int64 integer, got {ignore_index!r}")
        return Terms(
            (Same("weight", "the rows of each rank's part (V / world)", weight.shape[0], max(LEAF, VOCAB_LEAF)), Same("weight", "its columns (H)", weight.shape[1]),
             Same("h", "its rows", rows.shape[0]), _grad_term("h", h), Same("ignore_index", "its value", ignore_index), _reduce_term(reduce), _check_term(mode)),
            (Replicated("h", "the hidden states of a vocabulary-parallel head are replicated", h),
             Replicated("ids", "every rank scores the same tokens", ids)),
            Part("weight", weight, 0),
        )

    agree("linear_logp", group, mode, weight, _device(weight), terms)
    rows = h.reshape(-1, weight.shape[1])
    lp, entropy = _VocabParallelLogp.apply(rows.contiguous(), weight, ids.reshape(-1).contiguous(), group, ignore_index, reduce)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    return lp.reshape(ids.shape), entropy.reshape(ids.shape)
