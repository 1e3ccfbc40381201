"""An op at some sizes, from its spec: the inputs drawn from its signature, the calls of the op and of
its baseline, and the rows of a batch taken alone.  Shared by the benchmark sections and by
tools/gpu_check.py, so both measure what the spec says and nothing written per op.

Inputs: a floating argument is standard normals in the row's dtype (its own dtype where the spec
fixes one); with ``layer_scale``, a 2-D floating argument without the batch dimension is a linear
layer's weight [out, in], standard normals over sqrt(in), as nn.Linear keeps a model's activations;
an integer argument is uniform in the spec's test range of values (``values.low`` to ``values.high``,
a dimension's size where it names one), never the out-of-range values the tests plant; an
offsets argument of packed sequences splits its dimension into equal sequences.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .baselines import BASELINES
from .specs import OpData

HEAD_DIM = 64
"""Heads of the decoder layer: hidden / 64 query heads, half as many key/value heads."""


@dataclass(frozen=True)
class ModelSize:
    """The sizes of one layer of a small decoder: tokens T, hidden H, MLP width I, vocabulary V."""

    tokens: int
    hidden: int
    vocab: int = 32000

    @property
    def intermediate(self) -> int:
        # 2.75 H rounded up to a multiple of 64: 704 for H = 256, 2816 for H = 1024.
        return (self.hidden * 11 // 4 + 63) // 64 * 64

    @property
    def heads(self) -> int:
        return self.hidden // HEAD_DIM

    @property
    def kv_heads(self) -> int:
        return self.heads // 2

    @property
    def head_dim(self) -> int:
        return HEAD_DIM


LAYER_DIMS = ("tokens", "hidden", "intermediate", "vocab", "heads", "kv_heads", "head_dim")
"""The sizes a spec's bench.layer may name (generator/model.py's LayerDim)."""


def layer_sizes(sizes: dict[str, int | str], m: ModelSize) -> dict[str, int]:
    return {dim: getattr(m, size) if isinstance(size, str) else size for dim, size in sizes.items()}


def resolve(dotted: str) -> Callable[..., Any]:
    """The callable a reference kernel names (e.g. torch.matmul, rlkernels._references.det_gemm)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(f"cannot import {dotted}")


def _dtype(name: str):
    import torch

    return getattr(torch, name)


@dataclass
class Inputs:
    """An op's arguments in the spec's order (None for an absent optional one), and the incoming
    gradient of its first output when asked for."""

    op: OpData
    sizes: dict[str, int]
    dtype: str
    args: list[Any]
    grad: Any = None

    def shown(self) -> str:
        """The drawn tensors and their shapes, e.g. "x 512×256, w 256"."""
        parts = [(a.name, t) for a, t in zip(self.op.args, self.args) if t is not None and a.name not in self.op.offsets.values()]
        if self.grad is not None:
            parts.append((f"d{self.op.outputs[0][0]}", self.grad))
        return ", ".join(f"{name} {'×'.join(map(str, t.shape))}" for name, t in parts)

    def to(self, device: str) -> Inputs:
        moved = [None if t is None else t.to(device) for t in self.args]
        return Inputs(self.op, self.sizes, self.dtype, moved, None if self.grad is None else self.grad.to(device))


def _offsets(count: int, total: int):
    """count entries: 0, then the ends of count - 1 sequences of equal length (the last takes the rest)."""
    import torch

    sequences = max(count - 1, 1)
    ends = [min(total, (i + 1) * (total // sequences)) for i in range(sequences)]
    ends[-1] = total
    return torch.tensor([0, *ends][:count], dtype=torch.int32)


def draw(op: OpData, sizes: dict[str, int], dtype: str, *, seed: int = 0, layer_scale: bool = False, grad: bool = False) -> Inputs:
    """Every argument of ``op`` at ``sizes``, its dtype variables set to ``dtype``, on the CPU; one
    generator seeded ``seed`` draws them in the spec's order (then the gradient, when asked)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    offsets = {arg: dim for dim, arg in op.offsets.items()}
    args: list[Any] = []
    for arg in op.args:
        shape = tuple(sizes[d] for d in arg.shape)
        if arg.optional:
            args.append(None)
        elif arg.name in offsets:
            args.append(_offsets(shape[0], sizes[offsets[arg.name]]).to(_dtype(arg.dtype)))
        elif not arg.floating:
            high = sizes[arg.high] if isinstance(arg.high, str) else arg.high
            args.append(torch.randint(arg.low, high, shape, generator=g).to(_dtype(arg.dtype)))
        else:
            x = torch.randn(*shape, generator=g)
            if layer_scale and len(shape) == 2 and op.batch_dim not in arg.shape:
                x = x * shape[1] ** -0.5  # a linear layer's weight [out, in], at nn.Linear's scale
            args.append(x.to(_dtype(dtype if len(arg.dtype) == 1 else arg.dtype)))
    gradient = torch.randn(*(sizes[d] for d in op.outputs[0][1]), generator=g).to(_dtype(dtype)) if grad else None
    return Inputs(op, dict(sizes), dtype, args, gradient)


# ---------------------------------------------------------------- rows of a batch


def row_axis(op: OpData, dims: Sequence[str]) -> int | None:
    """Where a tensor of these dims has the rows of the batch: the op's batch dimension, or a
    dimension of packed sequences (its rows, from the first, are a prefix of one sequence)."""
    for dim in (op.batch_dim, *op.offsets):
        if dim is not None and dim in dims:
            return list(dims).index(dim)
    return None


def take_rows(inputs: Inputs, start: int, stop: int) -> Inputs:
    """The inputs of rows start..stop-1 alone: every tensor with the batch's rows cut to them
    (contiguous), the offsets of packed sequences made again for the rows kept.  Only where
    ``batch_rows`` gives a number (a packed sequence: only from its first row)."""
    op = inputs.op
    offsets = {arg: dim for dim, arg in op.offsets.items()}
    cut: list[Any] = []
    for arg, t in zip(op.args, inputs.args):
        axis = row_axis(op, arg.shape)
        if t is None or (axis is None and arg.name not in offsets):
            cut.append(t)
        elif arg.name in offsets:
            cut.append(_offsets(t.shape[0], min(stop, inputs.sizes[offsets[arg.name]]) - start).to(t.dtype).to(t.device))
        else:
            cut.append(t.narrow(axis, start, min(stop, t.shape[axis]) - start).contiguous())
    sizes = {d: (min(stop, n) - start if d == op.batch_dim or d in op.offsets else n) for d, n in inputs.sizes.items()}
    grad = inputs.grad
    axis = row_axis(op, op.outputs[0][1])
    if grad is not None and axis is not None:
        grad = grad.narrow(axis, start, min(stop, grad.shape[axis]) - start).contiguous()
    return Inputs(op, sizes, inputs.dtype, cut, grad)


def output_rows(op: OpData, out: Any, start: int, stop: int, dims: Sequence[str] | None = None) -> Any:
    """Rows start..stop-1 of a result whose dims are ``dims`` (default: the op's first output)."""
    axis = row_axis(op, op.outputs[0][1] if dims is None else dims)
    return out if axis is None else out.narrow(axis, start, min(stop, out.shape[axis]) - start)


def batch_rows(inputs: Inputs) -> int | None:
    """The number of rows of the batch: of its batch dimension, or of its one packed sequence where
    that sequence's first rows are a sequence of their own (causal attention over as many keys as
    queries); None where no rows can be taken alone (``take_rows`` holds only then)."""
    op = inputs.op
    if op.batch_dim is not None:
        return inputs.sizes[op.batch_dim]
    if not op.offsets or not op.prefix:
        return None
    lengths = {inputs.sizes[dim] for dim in op.offsets}
    one_sequence = all(inputs.sizes[op.dims_of(arg)[0]] == 2 for arg in op.offsets.values())
    return lengths.pop() if one_sequence and len(lengths) == 1 else None


# ---------------------------------------------------------------- calls


def first(result: Any) -> Any:
    return result[0] if isinstance(result, tuple | list) else result


def op_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (an rlkernels function or overload) returning its first output only."""
    return lambda *args: first(fn(*args))


def _bench_of(op: OpData):
    if op.bench is None:
        raise KeyError(f"{op.name}'s spec has no bench section: nothing names its baseline")
    return op.bench


def baseline_call(op: OpData) -> Callable[..., Any]:
    """The op's bench baseline as a call on its arguments (in the spec's order), giving one tensor."""
    bench = _bench_of(op)
    if bench.baseline_kernel is not None:
        fn = resolve(op.references[bench.baseline_kernel])
        return lambda *args: first(fn(*args))
    baseline = BASELINES[bench.baseline_torch or ""]
    attrs = dict(op.attrs)
    return lambda *args: baseline.fn(*args, **attrs)


def baseline_code(op: OpData) -> str:
    """The baseline's code as the report shows it, with the spec's argument names."""
    bench = _bench_of(op)
    if bench.baseline_kernel is not None:
        return f"{op.references[bench.baseline_kernel]}({', '.join(a.name for a in op.args if not a.optional)})"
    return BASELINES[bench.baseline_torch or ""].shown(tuple(a.name for a in op.args))


def with_backward(call: Callable[..., Any], inputs: Inputs) -> Callable[[], Any]:
    """Forward and backward through autograd: the gradient of the first floating argument, from
    ``inputs.grad``; the other floating arguments are leaves too (their gradients are computed)."""
    import torch

    floating = [i for i, (a, t) in enumerate(zip(inputs.op.args, inputs.args)) if t is not None and a.floating and t.is_floating_point()]

    def run():
        leaves = {i: inputs.args[i].detach().requires_grad_() for i in floating}
        out = call(*[leaves.get(i, t) for i, t in enumerate(inputs.args)])
        return torch.autograd.grad(out, [leaves[i] for i in floating], inputs.grad.to(out.dtype))[0]

    return run


def backward_note(op: OpData, code: str) -> str:
    """What a fwd+bwd row's baseline does, for the report."""
    floating = [a.name for a in op.args if a.floating and not a.optional]
    names = floating[0] if len(floating) == 1 else ", ".join(floating[:-1]) + f" and {floating[-1]}"
    return f"{code}, then torch.autograd.grad for {names}; d{floating[0]} compared"
