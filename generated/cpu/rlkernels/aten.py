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

Every other aten op runs as torch runs it: this mode does not make a whole model batch-invariant
by itself (softmax, attention, layer_norm, mean, mv, baddbmm and the rest are not touched).

A call it cannot route (another dtype, a device this build carries no kernels for) raises
``UnsupportedError`` in strict mode, naming the op, the argument and what was expected; with
``strict=False`` it warns (``BatchVariantWarning``) and runs torch's own kernel, captured with
``torch.library.get_kernel`` before the override was registered.  Calls that torch itself rejects
(mismatched shapes or dtypes) go to torch unchanged, so they fail with torch's own error.

Where the overrides sit, and why:
- mm, addmm, bmm, _log_softmax and silu at the ``Autograd`` alias key, for every device: the
  routed call records this package's ops and their backward (det_gemm_nt/det_gemm_tn,
  logp_backward, silu_backward) rather than torch's derivative formulas; and torch.compile, which
  traces below autograd, sees this package's ops in the graph, so no compiler backend can lower
  the aten op back to its own kernel (inductor decomposes _log_softmax and silu itself).
- the same five at the dispatch keys of the platforms in the registry, for calls that never pass
  the autograd keys (``torch.inference_mode()``).
- linear and rms_norm, which torch decomposes before any backend key, at ``CompositeImplicitAutograd``.

The mode is process-wide, as the dispatcher is: while it is on, every thread's calls are routed.
``enable``/``disable`` and the context manager are serialised by a lock; nesting restores the outer
state (on and strict, on and warning, or off), also when the block raises.  torch.compile keeps
what it traced: a function compiled inside the mode keeps this package's ops after the mode ends,
and one compiled outside keeps torch's; call ``torch.compiler.reset()`` after switching.
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
    composite: bool
    """Decomposed by torch before any backend key: overridden at CompositeImplicitAutograd."""


_ROUTES = (
    _Route("mm", _mm_verdict, _mm, False),
    _Route("addmm", _addmm_verdict, _addmm, False),
    _Route("bmm", _bmm_verdict, _bmm, False),
    _Route("linear", _linear_verdict, _linear, True),
    _Route("_log_softmax", _log_softmax_verdict, _log_softmax, False),
    _Route("rms_norm", _rms_norm_verdict, _rms_norm, True),
    _Route("silu", _silu_verdict, _silu, False),
)
assert tuple(r.op for r in _ROUTES) == ROUTED


# ---------------------------------------------------------------------------------------------
# State and registration.


@dataclass(frozen=True)
class _State:
    enabled: bool
    strict: bool


_LOCK = threading.RLock()
_state = _State(enabled=False, strict=True)
_library: torch.library.Library | None = None
# Set while torch's own kernel runs a refused call: its redispatch reaches this mode's kernel at
# the backend key (or its decomposition reaches the routed ops), which must not judge it again.
_local = threading.local()


def _refuse(route: _Route, refusal: _Refusal) -> None:
    what = (
        f"{PACKAGE}.aten: aten::{route.op} cannot run batch-invariant here: argument '{refusal.argument}' "
        f"must be {refusal.expected}, got {refusal.got}"
    )
    if _state.strict:
        raise UnsupportedError(f"{what} (strict mode refuses it; batch_invariant(strict=False) runs torch's own kernel with a warning)")
    warnings.warn(f"{what}; running torch's own kernel, whose rows may depend on the batch", BatchVariantWarning, stacklevel=3)


def _kernel(route: _Route, original: Any) -> Callable[..., Any]:
    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_local, "torch_runs", False):
            verdict = route.verdict(*args, **kwargs)
            if verdict is None:
                return route.run(*args, **kwargs)
            if isinstance(verdict, _Refusal):
                _refuse(route, verdict)
        outer = getattr(_local, "torch_runs", False)
        _local.torch_runs = True
        try:
            return original.call_boxed(keyset, *args, **kwargs)
        finally:
            _local.torch_runs = outer

    kernel.__name__ = f"batch_invariant_{route.op.lstrip('_')}"
    return kernel


def _backend_keys() -> tuple[str, ...]:
    return tuple(sorted({p.dispatch_key for p in PLATFORMS}))


def _register() -> torch.library.Library:
    library = torch.library.Library("aten", "IMPL")
    # torch warns, once per process, that a kernel overrides a registered one: that is the point here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        try:
            for route in _ROUTES:
                qualname = f"aten::{route.op}"
                if route.composite:
                    # The decomposition is one kernel for every key; AutogradCPU computes to it.
                    original = torch.library.get_kernel(qualname, "AutogradCPU")
                    library.impl(route.op, _kernel(route, original), "CompositeImplicitAutograd", with_keyset=True)
                    continue
                # torch's autograd kernel is one kernel for every device; AutogradCPU computes to it.
                originals = {"Autograd": torch.library.get_kernel(qualname, "AutogradCPU")}
                originals.update((key, torch.library.get_kernel(qualname, key)) for key in _backend_keys())
                for key, original in originals.items():
                    library.impl(route.op, _kernel(route, original), key, with_keyset=True)
        except BaseException:
            library._destroy()
            raise
    return library


def enable(strict: bool = True) -> None:
    """Route the ops in ``ROUTED`` to this package's kernels, process-wide, until ``disable``."""
    global _state, _library
    with _LOCK:
        if _library is None:
            _library = _register()
        _state = _State(enabled=True, strict=strict)


def disable() -> None:
    """Give every routed op back to torch's own kernels."""
    global _state, _library
    with _LOCK:
        if _library is not None:
            # Library._destroy removes this library's registrations now; dropping the reference would
            # leave that to the garbage collector.
            _library._destroy()
            _library = None
        _state = _State(enabled=False, strict=_state.strict)


def is_enabled() -> bool:
    return _state.enabled


def is_strict() -> bool:
    """Whether a call the mode cannot route raises (True) or warns and runs torch's kernel."""
    return _state.strict


@contextlib.contextmanager
def batch_invariant(enabled: bool = True, *, strict: bool = True) -> Iterator[None]:
    """The mode inside a ``with`` block (``enabled=False``: off inside it); the state before the
    block comes back when it ends, whether it ends normally or by an exception."""
    with _LOCK:
        before = _state
        if enabled:
            enable(strict)
        else:
            disable()
    try:
        yield
    finally:
        with _LOCK:
            if before.enabled:
                enable(before.strict)
            else:
                disable()
