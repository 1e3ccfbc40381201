# Copied from runtime/rlkernels/aten.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""A batch-invariant mode for plain PyTorch code: torch's own matrix products, log-softmax,
RMSNorm and SiLU routed to this package's kernels through ``torch.library`` while it is on.

    import rlkernels.aten

    with rlkernels.aten.batch_invariant():        # strict: a call it cannot route raises
        loss = -model(x).log_softmax(-1)[..., 0].sum()
        loss.backward()

Routed, for float32, float16 and bfloat16 tensors of a platform this build carries:

    aten::mm, aten::bmm       det_gemm (det_gemm_nt when the right operand is a transposed
                              contiguous matrix, as a weight's .t() is); bmm one matrix at a time
    aten::addmm, aten::linear det_gemm_nt with the bias added before the one rounding (det_linear)
    aten::_log_softmax        x - logsumexp(x) with the logsumexp of the logp kernel; its backward
                              from column_sum (the row sums of the gradient) and logp_backward
    aten::rms_norm            rms_norm (its backward rms_norm_backward)
    aten::silu                silu (its backward silu_backward)

Every overload of these ops is covered, sorted by torch's own schemas (``_forms``), so one a later
torch adds is covered too: the out= forms (``mm(out=)``, ``silu.out``, ...) compute with the route
and write into ``out`` as torch does (resized to the result's shape, with torch's warning when it
held elements; another dtype or device is torch's error); the in-place forms (``addmm_``,
``silu_``, ``F.silu(inplace=True)``) compute with the route and copy into ``self``; any other
overload (``mm.dtype``, ...) is refused.  torch's composites reach them: ``matmul(out=)`` is
``mm(out=)`` or ``bmm(out=)``, ``log_softmax(out=)`` is ``_log_softmax.out``.

Every other aten op runs as torch runs it: this mode does not make a whole model batch-invariant
by itself (softmax, attention, layer_norm, mean, mv, baddbmm and the rest are not touched).

A call it cannot route (another dtype, a device this build carries no kernels for, an overload
with no route) raises ``UnsupportedError`` in strict mode, naming the overload, the argument and
what was expected; with ``strict=False`` it warns (``BatchVariantWarning``) and runs torch's own
kernel, captured with ``torch.library.get_kernel`` before the override was registered.  Calls that
torch itself rejects (mismatched shapes or dtypes, out= under autograd) go to torch unchanged, so
they fail with torch's own error.

Where the overrides sit, and why:
- mm, addmm, bmm, _log_softmax and silu at the ``Autograd`` alias key, for every device: the
  routed call records this package's ops and their backward (det_gemm_nt/det_gemm_tn,
  logp_backward, silu_backward) rather than torch's derivative formulas; and torch.compile, which
  traces below autograd, sees this package's ops in the graph, so no compiler backend can lower
  the aten op back to its own kernel (inductor decomposes _log_softmax and silu itself).
- the same five at the dispatch keys of the platforms in the registry, for calls that never pass
  the autograd keys (``torch.inference_mode()``).
- linear and rms_norm, which torch decomposes before any backend key, at ``CompositeImplicitAutograd``
  (each overload where torch has it: linear.out is not decomposed, so it sits as mm does).

The mode is process-wide, as the dispatcher is: while it is on, every thread's calls are routed.
The state is that of the newest ``batch_invariant`` block still open in any thread, else what
``enable``/``disable`` last set outside every block (inside one, they set the newest block's).  A
block's end removes its own state wherever it stands, so nesting restores the outer state (also
when the block raises), and blocks of several threads ending in any order leave the state set
outside them.  The kernels are registered on the first ``enable`` and stay for the process:
torch's dispatcher is not safe for a call in flight while a kernel is removed, so switching only
swaps one immutable state, read once per call (a call that started in one state finishes in it).
Off, each call of a routed op passes through one Python function to torch's kernel.  The first
``enable`` changes the dispatcher's tables, which torch does not guard against calls in other
threads: make it before other threads compute.  torch.compile keeps what it traced: a function
compiled inside the mode keeps this package's ops after the mode ends, and one compiled outside
keeps torch's (inductor's fused log_softmax and silu then bypass the mode; its matrix products,
run as ``mm(out=)`` and the like, are routed while it is on); call ``torch.compiler.reset()``
after switching.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from . import _ops
from ._registry import CARRIED_PLATFORMS, PACKAGE, PLATFORMS
from ._runtime import NATIVE_ERROR, UnsupportedError, platform_of

__all__ = ["ROUTED", "BatchVariantWarning", "batch_invariant", "disable", "enable", "is_enabled", "is_strict"]


class BatchVariantWarning(UserWarning):
    """An aten call ran torch's own kernel inside the mode: its rows may depend on the batch."""


ROUTED = ("mm", "addmm", "bmm", "linear", "_log_softmax", "rms_norm", "silu")
"""The aten ops the mode routes (their default overloads)."""

_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class _Refusal:
    """Why a call cannot be routed: the argument, what the kernels need, what the call gave."""

    argument: str
    expected: str
    got: str


class _TorchDecides:
    """A call to leave to torch without a word: torch rejects it itself, or it computes no values."""


_TORCH = _TorchDecides()
_Verdict = _Refusal | _TorchDecides | None  # None: route it


def _tensor_verdict(name: str, t: torch.Tensor) -> _Verdict:
    if t.device.type == "meta":  # shapes only: no bits that could depend on the batch
        return _TORCH
    if t.layout != torch.strided:
        return _Refusal(name, "a dense (strided) tensor", str(t.layout))
    if t.dtype not in _FLOATS:
        return _Refusal(name, "dtype float32, float16 or bfloat16", str(t.dtype).removeprefix("torch."))
    try:
        platform = platform_of(t.device)
    except UnsupportedError:
        platform = t.device.type
    if platform not in CARRIED_PLATFORMS:
        return _Refusal(name, f"a tensor on a device this build carries kernels for ({', '.join(CARRIED_PLATFORMS)})", f"a {platform} tensor")
    if NATIVE_ERROR is not None:
        return _Refusal(name, f"a tensor the native library can take, but {PACKAGE}._C failed to load ({NATIVE_ERROR})", str(t.device))
    return None


def _tensors_verdict(*named: tuple[str, torch.Tensor | None]) -> _Verdict:
    """The first refusal among the tensors; torch decides when their dtypes or devices disagree."""
    given = [(name, t) for name, t in named if t is not None]
    for name, t in given:
        verdict = _tensor_verdict(name, t)
        if verdict is not None:
            return verdict
    if len({t.dtype for _, t in given}) > 1 or len({t.device for _, t in given}) > 1:
        return _TORCH
    return None


# ---------------------------------------------------------------------------------------------
# The routes.  Each takes the aten op's arguments, says first whether it can route them, and
# computes only through this package's ops, copies and exact elementwise arithmetic (one IEEE
# operation per element: the bits of an element never depend on its neighbours).


def _rhs_transposed(b: torch.Tensor) -> torch.Tensor | None:
    """``b.t()`` when ``b`` is the transposed view of a contiguous [N, K] matrix (a weight's
    ``.t()``), so det_gemm_nt reads it without a copy.  The choice depends on ``b`` only, never on
    the left operand's rows, so a row computed alone and in a batch takes the same kernel."""
    if b.dim() == 2 and not b.is_contiguous() and b.t().is_contiguous():
        return b.t()
    return None


def _mm_verdict(self: torch.Tensor, mat2: torch.Tensor) -> _Verdict:
    verdict = _tensors_verdict(("self", self), ("mat2", mat2))
    if verdict is None and (self.dim() != 2 or mat2.dim() != 2 or self.shape[1] != mat2.shape[0]):
        return _TORCH
    return verdict


def _mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    bt = _rhs_transposed(mat2)
    if bt is not None:
        return _ops.det_gemm_nt(self.contiguous(), bt)
    return _ops.det_gemm(self.contiguous(), mat2.contiguous())


def _addmm_verdict(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1, alpha: float = 1) -> _Verdict:
    verdict = _tensors_verdict(("self", self), ("mat1", mat1), ("mat2", mat2))
    if verdict is None and (mat1.dim() != 2 or mat2.dim() != 2 or mat1.shape[1] != mat2.shape[0]):
        return _TORCH
    if verdict is None and torch.broadcast_shapes(self.shape, (mat1.shape[0], mat2.shape[1])) != (mat1.shape[0], mat2.shape[1]):
        return _TORCH
    return verdict


def _addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1, alpha: float = 1) -> torch.Tensor:
    # A bias vector (linear's decomposition) is added to the float32 product before its one
    # rounding.  Only a 1-D one: which path runs must not depend on the number of rows, and a
    # [1, 1] bias of one row is the [M, 1] bias of M rows.
    if beta == 1 and alpha == 1 and self.dim() == 1 and self.shape[0] == mat2.shape[1]:
        bt = _rhs_transposed(mat2)
        bt = mat2.t().contiguous() if bt is None else bt
        return _ops.det_gemm_nt(mat1.contiguous(), bt, self.contiguous())
    # Any other bias, beta or alpha: the float32 product, then elementwise, then one rounding.
    if alpha == 0:  # alpha == 0 ignores the product, an infinite or NaN one included, as torch does
        product = torch.zeros((mat1.shape[0], mat2.shape[1]), dtype=torch.float32, device=mat1.device)
    else:
        product = _ops.det_gemm(mat1.contiguous(), mat2.contiguous(), out_fp32=True)
    if alpha not in (0, 1):
        product = product * alpha
    if beta != 0:  # beta == 0 ignores self, NaN included, as torch does
        product = product + (self.float() if beta == 1 else self.float() * beta)
    return product.to(mat1.dtype)


def _bmm_verdict(self: torch.Tensor, mat2: torch.Tensor) -> _Verdict:
    verdict = _tensors_verdict(("self", self), ("mat2", mat2))
    if verdict is None and (self.dim() != 3 or mat2.dim() != 3 or self.shape[0] != mat2.shape[0] or self.shape[2] != mat2.shape[1]):
        return _TORCH
    return verdict


def _bmm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    # One product per matrix: no matrix's bits depend on the others or on how many there are.
    if self.shape[0] == 0:
        return self.new_zeros((0, self.shape[1], mat2.shape[2]))
    return torch.stack([_mm(self[i], mat2[i]) for i in range(self.shape[0])])


def _linear_verdict(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> _Verdict:
    verdict = _tensors_verdict(("input", input), ("weight", weight), ("bias", bias))
    if verdict is None and (input.dim() == 0 or weight.dim() != 2 or input.shape[-1] != weight.shape[1]):
        return _TORCH
    return verdict


def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    x = input.unsqueeze(0) if input.dim() == 1 else input
    fused = bias is not None and bias.dim() == 1 and bias.shape[0] == weight.shape[0]
    y = _ops.det_linear(x.contiguous(), weight.contiguous(), bias.contiguous() if fused and bias is not None else None)
    if bias is not None and not fused:  # a bias of another broadcastable shape: added elementwise
        y = y + bias
    return y.squeeze(0) if input.dim() == 1 else y


class _LogSoftmaxRows(torch.autograd.Function):
    """log_softmax over the last axis of contiguous [N, V] rows, each row on its own.

    Forward: out = x - lse in float32, rounded once, with lse from the logp kernel (a lanes-tree
    sum over V whose order depends on V only).  Backward: grad - softmax * rowsum(grad), where the
    row sums come from column_sum over the transposed gradient (ascending over V, one sum per row)
    and softmax * rowsum from logp_backward, which gives grad_lp * -exp(x - lse) in every column
    other than the selected id: the id points at one extra column, dropped afterwards."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        selected = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
        _, lse = _ops.logp(x, selected)
        ctx.save_for_backward(x, lse)
        return (x.float() - lse.unsqueeze(1)).to(out_dtype)

    @staticmethod
    def jvp(ctx: Any, *tangents: Any) -> Any:
        # The catalog's ops have no forward derivative: refuse as they do, naming what was routed,
        # rather than torch's "you must implement the jvp function".
        raise RuntimeError(
            "rlkernels.aten: log_softmax routed to rlkernels.logp does not support forward-mode AD (torch.func.jvp, jacfwd, "
            "dual tensors): use reverse mode, or leave the batch_invariant mode for this computation"
        )

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, lse = ctx.saved_tensors
        rows, v = x.shape
        g = grad.float().contiguous()
        row_sums = _ops.column_sum(g.t().contiguous())
        padded = torch.cat([x.float(), x.new_zeros((rows, 1), dtype=torch.float32)], dim=1)
        extra = torch.full((rows,), v, dtype=torch.int64, device=x.device)
        scaled_softmax = _ops.logp_backward(row_sums, padded, extra, lse)  # -(rowsum * softmax) in columns < V
        return (g + scaled_softmax[:, :v]).to(x.dtype), None


def _log_softmax_verdict(self: torch.Tensor, dim: int, half_to_float: bool) -> _Verdict:
    verdict = _tensors_verdict(("self", self))
    if verdict is not None:
        return verdict
    if not -max(self.dim(), 1) <= dim < max(self.dim(), 1):
        return _TORCH
    # half_to_float is a device kernel's fused float16 upcast: torch refuses it for other dtypes and on the host.
    if half_to_float and (self.dtype != torch.float16 or self.device.type == "cpu"):
        return _TORCH
    return None


def _log_softmax(self: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    out_dtype = torch.float32 if half_to_float else self.dtype
    last = self.dim() == 0 or dim % self.dim() == self.dim() - 1
    x = self.reshape(1, 1) if self.dim() == 0 else self if last else self.movedim(dim, -1)
    rows = x.contiguous().reshape(math.prod(x.shape[:-1]), x.shape[-1])
    out = _LogSoftmaxRows.apply(rows, out_dtype).reshape(x.shape)  # type: ignore[no-untyped-call]  # torch.autograd.Function.apply carries no annotations
    if self.dim() == 0:
        return out.reshape(())
    return out if last else out.movedim(-1, dim).contiguous()


def _rms_norm_verdict(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None, eps: float | None = None) -> _Verdict:
    # The weight's dtype may differ from the input's (the kernel takes both), so not _tensors_verdict.
    for name, t in (("input", input), ("weight", weight)):
        verdict = None if t is None else _tensor_verdict(name, t)
        if verdict is not None:
            return verdict
    if weight is not None and weight.device != input.device:
        return _TORCH
    n = len(normalized_shape)
    if n == 0 or tuple(input.shape[input.dim() - n :]) != tuple(normalized_shape) or (weight is not None and tuple(weight.shape) != tuple(normalized_shape)):
        return _TORCH
    return None


def _rms_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    width = math.prod(normalized_shape)
    rows = input.contiguous().reshape(math.prod(input.shape[: input.dim() - len(normalized_shape)]), width)
    # No weight multiplies by ones: x * 1.0 is x exactly, so the bits are those of no weight.
    w = torch.ones(width, dtype=input.dtype, device=input.device) if weight is None else weight.contiguous().reshape(width)
    # torch's default eps is the epsilon of the float32 arithmetic it computes in.
    y, _ = _ops.rms_norm(rows, w, torch.finfo(torch.float32).eps if eps is None else eps)
    return y.reshape(input.shape)


def _silu_verdict(self: torch.Tensor) -> _Verdict:
    return _tensors_verdict(("self", self))


def _silu(self: torch.Tensor) -> torch.Tensor:
    x = self.contiguous()
    rows = x.reshape(1, x.numel()) if x.dim() < 2 else x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    return _ops.silu(rows).reshape(self.shape)


@dataclass(frozen=True)
class _Route:
    op: str
    verdict: Callable[..., _Verdict]
    run: Callable[..., torch.Tensor]


_ROUTES = (
    _Route("mm", _mm_verdict, _mm),
    _Route("addmm", _addmm_verdict, _addmm),
    _Route("bmm", _bmm_verdict, _bmm),
    _Route("linear", _linear_verdict, _linear),
    _Route("_log_softmax", _log_softmax_verdict, _log_softmax),
    _Route("rms_norm", _rms_norm_verdict, _rms_norm),
    _Route("silu", _silu_verdict, _silu),
)
assert tuple(r.op for r in _ROUTES) == ROUTED


def _route(op: str) -> _Route:
    # Looked up at each call, not bound at registration: the kernels stay registered for the process.
    for route in _ROUTES:
        if route.op == op:
            return route
    raise LookupError(op)


# ---------------------------------------------------------------------------------------------
# The overloads.  A routed op's family is every overload torch's schemas list for aten::<op> and
# for its in-place packet aten::<op>_, whatever this torch version has: a variant that computes
# the op's values (out=, in-place, one a later torch adds) must not run torch's kernel unseen.  The
# schemas sort each overload into one of four forms:
#   functional  aten::<op> itself, routed as above;
#   out         the functional's arguments and one keyword-only written tensor (out=): computed by
#               the route, then written into out as torch writes an out= result;
#   inplace     aten::<op>_ with the functional's arguments, self written: computed by the route,
#               then copied into self;
#   refused     anything else (mm.dtype's out_dtype, ...): no route computes it, so strict mode
#               refuses it and non-strict warns, as for any call the mode cannot route.


@dataclass(frozen=True)
class _Form:
    qualname: str
    """aten::mm.out"""
    op: str
    """The routed op of the family: mm."""
    kind: str
    """functional, out, inplace or refused."""
    schema: Any
    outs: tuple[str, ...] = ()
    """out: the written argument's name."""
    foreign: str = ""
    """refused: the first argument aten::<op> does not take (or the written one), for the refusal."""


def _signature(arguments: Sequence[Any]) -> tuple[tuple[str, str, bool], ...]:
    return tuple((a.name, str(a.type), bool(a.kwarg_only)) for a in arguments)


def _written(argument: Any) -> bool:
    return argument.alias_info is not None and bool(argument.alias_info.is_write)


def _forms(op: str) -> tuple[_Form, ...]:
    """Every overload in the family of the routed ``op``, sorted by its schema."""
    functional = next(s for s in torch._C._jit_get_schemas_for_operator(f"aten::{op}") if s.overload_name == "")
    wanted = _signature(functional.arguments)
    forms = []
    for packet in (op, f"{op}_"):
        for schema in torch._C._jit_get_schemas_for_operator(f"aten::{packet}"):
            qualname = f"aten::{packet}" + (f".{schema.overload_name}" if schema.overload_name else "")
            written = [a for a in schema.arguments if _written(a)]
            others = [a for a in schema.arguments if not _written(a)]
            if packet == op and not schema.overload_name:
                forms.append(_Form(qualname, op, "functional", schema))
            elif (
                packet == op
                and len(written) == 1 == len(functional.returns)
                and written[0].kwarg_only
                and _signature(others) == wanted
            ):
                forms.append(_Form(qualname, op, "out", schema, outs=(written[0].name,)))
            elif packet == f"{op}_" and written == [schema.arguments[0]] and _signature(schema.arguments) == wanted and len(schema.returns) == 1:
                forms.append(_Form(qualname, op, "inplace", schema))
            else:
                known = {(a.name, str(a.type)) for a in functional.arguments}
                foreign = next((a.name for a in others if (a.name, str(a.type)) not in known), (written or others)[0].name)
                forms.append(_Form(qualname, op, "refused", schema, foreign=foreign))
    return tuple(forms)


def _bound(schema: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name (torch passes keyword-only ones by name and leaves out defaults)."""
    positional = [a for a in schema.arguments if not a.kwarg_only]
    values = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    values.update((a.name, v) for a, v in zip(positional, args))
    values.update(kwargs)
    return values


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _resize_out(out: torch.Tensor, shape: torch.Size) -> None:
    """torch's rule for an out= tensor of another shape (at::native::resize_output): resized, with
    torch's deprecation warning unless it held no elements."""
    if out.shape == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does not match "
            f"the required output shape {list(shape)}. This behavior is deprecated, and in a future PyTorch release outputs "
            "will not be resized unless they have zero elements. You can explicitly reuse an out tensor t by resizing it, "
            "inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=4,
        )
    out.resize_(shape)


# ---------------------------------------------------------------------------------------------
# State and registration.


@dataclass(frozen=True)
class _State:
    enabled: bool
    strict: bool


_OFF = _State(enabled=False, strict=True)

_LOCK = threading.RLock()
# What enable()/disable() set outside every block, and the open batch_invariant blocks, oldest
# first (each a token and its state).  The mode is the newest open block's state, else the base.
_base = _OFF
_blocks: list[tuple[object, _State]] = []
# The current state, one immutable object replaced whole under _LOCK: a kernel reads it once, so a
# call runs under one state however another thread switches meanwhile.
_state = _OFF
# The kernels, registered on the first enable and kept for the life of the process: torch's
# dispatcher gives no safety to a call in flight in another thread when a kernel is removed or
# replaced (the table entry and the Python function it holds go while that call uses them), so
# switching the mode only swaps _state.
_library: torch.library.Library | None = None
# Set while torch's own kernel runs a call: its redispatch reaches this mode's kernel at the
# backend key (or its decomposition reaches the routed ops), which must pass it on unjudged.
_local = threading.local()


def _refuse(form: _Form, refusal: _Refusal, strict: bool) -> None:
    what = (
        f"{PACKAGE}.aten: {form.qualname} cannot run batch-invariant here: argument '{refusal.argument}' "
        f"must be {refusal.expected}, got {refusal.got}"
    )
    if strict:
        raise UnsupportedError(f"{what} (strict mode refuses it; batch_invariant(strict=False) runs torch's own kernel with a warning)")
    warnings.warn(f"{what}; running torch's own kernel, whose rows may depend on the batch", BatchVariantWarning, stacklevel=3)


def _out(form: _Form, route: _Route, autograd: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[_Verdict, Any]:
    functional = {k: v for k, v in kwargs.items() if k not in form.outs}
    out = kwargs.get(form.outs[0])
    verdict = route.verdict(*args, **functional)
    if verdict is not None:
        return verdict, None
    if not isinstance(out, torch.Tensor) or out.device.type == "meta":
        return _TORCH, None
    # torch refuses out= where autograd would record it (its autograd kernel raises): left to torch, so the error is its own.
    if autograd and torch.is_grad_enabled() and any(t.requires_grad for t in _tensors([*args, *kwargs.values()])):
        return _TORCH, None
    result = route.run(*args, **functional)
    # torch's out= forms of these ops take only the dtype they compute, on its device: it raises for any other.
    if out.dtype != result.dtype or out.device != result.device or out.layout != torch.strided:
        return _TORCH, None
    _resize_out(out, result.shape)
    out.copy_(result)
    return None, out


def _inplace(route: _Route, autograd: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[_Verdict, Any]:
    self = args[0]
    verdict = route.verdict(*args, **kwargs)
    if verdict is not None:
        return verdict, None
    given = args
    if autograd and torch.is_grad_enabled() and self.requires_grad:
        # The route may save its input for the backward; the copy below overwrites self.
        given = (self.clone(), *args[1:])
    result = route.run(*given, **kwargs)
    if result.shape != self.shape or result.dtype != self.dtype:
        return _TORCH, None  # torch's "Bad in-place call": the result does not fit self
    self.copy_(result)
    return None, self


def _refused(form: _Form, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Verdict:
    if any(t.device.type == "meta" for t in _tensors([*args, *kwargs.values()])):
        return _TORCH
    got = _bound(form.schema, args, kwargs).get(form.foreign)
    got_text = str(got).removeprefix("torch.") if isinstance(got, torch.dtype) else type(got).__name__ if isinstance(got, torch.Tensor) else repr(got)
    return _Refusal(form.foreign, f"absent (no overload of aten::{form.op} taking it is routed)", got_text)


def _kernel(form: _Form, original: Any, autograd: bool) -> Callable[..., Any]:
    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        state = _state  # read once: this call runs under one state whatever another thread switches
        if state.enabled and not getattr(_local, "torch_runs", False):
            route = _route(form.op)
            verdict: _Verdict
            if form.kind == "functional":
                verdict = route.verdict(*args, **kwargs)
                if verdict is None:
                    return route.run(*args, **kwargs)
            elif form.kind == "out":
                verdict, result = _out(form, route, autograd, args, kwargs)
                if verdict is None:
                    return result
            elif form.kind == "inplace":
                verdict, result = _inplace(route, autograd, args, kwargs)
                if verdict is None:
                    return result
            else:
                verdict = _refused(form, args, kwargs)
            if isinstance(verdict, _Refusal):
                _refuse(form, verdict, state.strict)
        # torch's kernel, with every routed call it makes on the way (its redispatch, its
        # decomposition) passed on too: a call that started off, or refused, finishes in torch.
        outer = getattr(_local, "torch_runs", False)
        _local.torch_runs = True
        try:
            return original.call_boxed(keyset, *args, **kwargs)
        finally:
            _local.torch_runs = outer

    kernel.__name__ = f"batch_invariant_{form.qualname.removeprefix('aten::').lstrip('_').replace('.', '_')}"
    return kernel


def _backend_keys() -> tuple[str, ...]:
    return tuple(sorted({p.dispatch_key for p in PLATFORMS}))


def _torch_kernel(qualname: str, key: str) -> Any:
    """torch's kernel of ``qualname`` for ``key``, or None where torch has none (it raises there itself)."""
    try:
        return torch.library.get_kernel(qualname, key)
    except RuntimeError:
        return None


def _register() -> torch.library.Library:
    library = torch.library.Library("aten", "IMPL")
    # torch warns, once per process, that a kernel overrides a registered one: that is the point here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        try:
            for op in ROUTED:
                for form in _forms(op):
                    name = form.qualname.removeprefix("aten::")
                    # torch's autograd kernel is one kernel for every device; AutogradCPU computes to it.
                    above = _torch_kernel(form.qualname, "AutogradCPU")
                    composite = torch._C._dispatch_has_kernel_for_dispatch_key(form.qualname, "CompositeImplicitAutograd")
                    if above is not None and composite:
                        # Decomposed by torch before any backend key: one kernel for every key.
                        library.impl(name, _kernel(form, above, True), "CompositeImplicitAutograd", with_keyset=True)
                        continue
                    if above is not None:
                        library.impl(name, _kernel(form, above, True), "Autograd", with_keyset=True)
                    for key in _backend_keys():
                        below = _torch_kernel(form.qualname, key)
                        if below is not None:
                            library.impl(name, _kernel(form, below, False), key, with_keyset=True)
        except BaseException:
            library._destroy()
            raise
    return library


def _switch() -> None:
    """Make the newest open block's state, else the base, current (the caller holds _LOCK)."""
    global _state, _library
    state = _blocks[-1][1] if _blocks else _base
    if state.enabled and _library is None:
        _library = _register()
    _state = state


def _set(state: _State) -> None:
    """What enable()/disable() set: the newest open block's state, else the base (holding _LOCK)."""
    global _base
    before = (_base, list(_blocks))
    if _blocks:
        _blocks[-1] = (_blocks[-1][0], state)
    else:
        _base = state
    try:
        _switch()
    except BaseException:  # the kernels could not be registered: nothing changes
        _base, _blocks[:] = before
        raise


def enable(strict: bool = True) -> None:
    """Route the ops in ``ROUTED`` to this package's kernels, process-wide, until ``disable`` (or
    until the newest open ``batch_invariant`` block, whose state this sets, ends)."""
    with _LOCK:
        _set(_State(enabled=True, strict=strict))


def disable() -> None:
    """Give every routed op back to torch's own kernels (as ``enable``, for the newest open block)."""
    with _LOCK:
        _set(_State(enabled=False, strict=_state.strict))


def is_enabled() -> bool:
    return _state.enabled


def is_strict() -> bool:
    """Whether a call the mode cannot route raises (True) or warns and runs torch's kernel."""
    return _state.strict


@contextlib.contextmanager
def batch_invariant(enabled: bool = True, *, strict: bool = True) -> Iterator[None]:
    """The mode inside a ``with`` block (``enabled=False``: off inside it), process-wide.  The state
    is that of the newest block still open in any thread; when a block ends, normally or by an
    exception, its state goes, wherever it stands among the open blocks, so blocks in several
    threads that end in any order leave the state that was set outside them."""
    token = object()
    with _LOCK:
        _blocks.append((token, _State(enabled=enabled, strict=strict if enabled else _state.strict)))
        try:
            _switch()
        except BaseException:
            _blocks.pop()
            raise
    try:
        yield
    finally:
        with _LOCK:
            _blocks[:] = [block for block in _blocks if block[0] is not token]
            _switch()
