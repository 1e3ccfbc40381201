# Copied from runtime/rlkernels/_public.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""The public functions, their autograd and their fake (meta) kernels, made from the registry
(``_ops`` holds the functions, and nothing else, under the ops' names).

Every op of the catalog becomes one function with the op's signature: it checks its arguments'
types, flattens extra leading dimensions where the op has a ``leading_dim``, casts as the op's
autocast policy says, checks its inputs (the bindings' checks and messages), and runs the first
backend the registry lists for the inputs' platform -- or raises, never falling back to a
backend that breaks the contract.  Each native overload (``torch.ops.<package>.<op>.<kernel>``)
gets the op's fake kernel, so it traces under torch.compile and runs on the meta device, and its
autograd: the spec's backward steps, run with the catalog's own ops, or a refusal where the spec
declares none.  Forward-mode AD is refused by every op, and so is a gradient asked through a
torch.func transform (see ``_autograd_kernel``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd import forward_ad

from . import _runtime
from ._checks import CHECK_TYPES, CHECK_VALUES, InputError
from ._registry import CARRIED_PLATFORMS, OPS, PACKAGE, PLATFORMS, Op

Values = tuple[Any, ...]
"""An op's arguments, tensors then attributes, in its signature's order."""


def _can_autocast(device_type: str) -> bool:
    """Whether torch can autocast ``device_type``; a device type whose plugin is not loaded is not
    one torch knows at all, and asking about it raises."""
    try:
        return bool(torch._C._is_autocast_available(device_type))
    except RuntimeError:
        return False


# The device types whose torch.autocast the ops follow: those of the platforms this build carries
# that torch can autocast (a vendor plugin registers its device type when it loads).
_AUTOCAST_DEVICE_TYPES = tuple(p.device_type for p in PLATFORMS if p.name in CARRIED_PLATFORMS and _can_autocast(p.device_type))


def _leading(tensor: Any, rank: int) -> tuple[int, ...] | None:
    """The leading sizes that stand for one dimension, when ``tensor`` has more than ``rank`` dims."""
    if isinstance(tensor, torch.Tensor) and tensor.dim() > rank:
        return tuple(tensor.shape[: tensor.dim() - rank + 1])
    return None


def _check_leads(op: Op, values: Values, lead_arg: int, lead: tuple[int, ...], positions: frozenset[int]) -> None:
    """Every argument that starts with the leading dimension gives it as the same several sizes as
    ``values[lead_arg]`` (with its own dimensions after them): flattened alone, a [T, B] index
    beside [B, T] rows would pair each row with another row's index, or a flat one would fail in
    ``flatten``."""
    for i in sorted(positions):
        v, a = values[i], op.args[i]
        if i == lead_arg or v is None:
            continue
        if v.dim() != len(a.shape) + len(lead) - 1 or tuple(v.shape[: len(lead)]) != lead:
            want = ", ".join([*map(str, lead), *a.shape[1:]])
            raise InputError(
                f"{op.name}: argument '{a.name}' must have shape [{want}] (argument '{op.args[lead_arg].name}' gives its leading "
                f"dimension {op.leading_dim} as {list(lead)}), got shape {list(v.shape)}"
            )


def _restore(result: Any, lead: tuple[int, ...], leads: tuple[bool, ...]) -> Any:
    """Give the outputs that start with the flattened dimension their leading sizes back."""
    outputs = result if isinstance(result, tuple) else (result,)
    outputs = tuple(o.reshape(*lead, *o.shape[1:]) if flag else o for o, flag in zip(outputs, leads))
    return outputs if isinstance(result, tuple) else outputs[0]


def _not_differentiable(op: str) -> RuntimeError:
    return RuntimeError(
        f"{PACKAGE}.{op} is not differentiable: its spec declares no backward, so no gradient can flow "
        f"through it (call it on detached inputs, or under torch.no_grad())"
    )


def _no_forward_mode(op: str) -> RuntimeError:
    return RuntimeError(
        f"{PACKAGE}.{op} does not support forward-mode AD (torch.func.jvp, torch.func.jacfwd, torch.autograd.forward_ad "
        f"dual tensors): no op of {PACKAGE} has a forward derivative, and a tangent dropped on the way would read as zero; "
        f"use reverse mode (.backward() or torch.autograd.grad), or pass it tensors without tangents"
    )


def _no_transform_gradient(op: str) -> RuntimeError:
    return RuntimeError(
        f"{PACKAGE}.{op} does not support gradients under torch.func transforms (torch.func.grad, vjp, jacrev, or vmap "
        f"of inputs that require grad): its autograd runs outside them; use .backward() or torch.autograd.grad "
        f"outside the transform (torch.func.vmap of inputs that do not require grad works)"
    )


def _has_tangent(args: tuple[Any, ...]) -> bool:
    """Whether an argument carries a forward-mode tangent.  Only a dual tensor has one, and only
    while a dual level is open (torch.func.jvp and jacfwd open one too): outside, no call pays for
    the look, which goes through the dispatcher once per tensor."""
    if forward_ad._current_level < 0:
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and forward_ad.unpack_dual(a).tangent is not None:
            return True
    return False


def _no_gradient_for(op: str, needs: dict[str, bool], given: tuple[str, ...]) -> None:
    """Refuse, rather than return None, when autograd wants a gradient the spec's backward does not give."""
    missing = [name for name, wanted in needs.items() if wanted and name not in given]
    if missing:
        raise RuntimeError(
            f"{PACKAGE}.{op}: no gradient flows to {', '.join(repr(m) for m in missing)}; its backward gives "
            f"{', '.join(repr(g) for g in given)} only (detach the others)"
        )


def _autocast_dtype(policy: str, device_type: str) -> torch.dtype | None:
    """The dtype torch.autocast gives the inputs of an op with ``policy`` on ``device_type``; None when
    autocast is off there.  torch.compile reads the autocast state as a constant and guards on it."""
    if device_type not in _AUTOCAST_DEVICE_TYPES or not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type) if policy == "lower_precision" else torch.float32


def _autocast(tensor: Any, dtype: torch.dtype, device_type: str) -> Any:
    """``tensor`` cast as torch.autocast casts an input: floating tensors on the autocast's device
    only, float64 never (torch leaves it too); the cast is differentiable, so gradients reach the
    original dtype."""
    if tensor is None or not tensor.is_floating_point() or tensor.device.type != device_type or tensor.dtype == torch.float64:
        return tensor
    return tensor.to(dtype)


def _autocast_off() -> contextlib.ExitStack[bool | None]:
    """torch.autocast switched off where it is on.  A backward pass runs where ``.backward()`` is
    called, possibly inside autocast; it must compute in the dtypes the forward saved, as torch's
    own backward formulas do, not cast them again."""
    stack = contextlib.ExitStack()
    for device_type in _AUTOCAST_DEVICE_TYPES:
        if torch.is_autocast_enabled(device_type):
            stack.enter_context(torch.autocast(device_type, enabled=False))
    return stack


def _grad_or_zeros(grad: torch.Tensor | None, output: torch.Tensor) -> torch.Tensor:
    """Autograd passes None for outputs that did not reach the loss; the kernels want zeros."""
    return torch.zeros_like(output) if grad is None else grad.contiguous()


# ------------------------------------------------------------------------------ binding


_REQUIRED = object()


def _binder(op: Op) -> Callable[[tuple[Any, ...], dict[str, Any]], Values]:
    """Binds a call's positional and keyword arguments to the op's parameters, as Python binds a
    function's (the same TypeErrors); the common call, all positional, costs one comparison."""
    names = op.params
    defaults = tuple(None if a.optional else _REQUIRED for a in op.args) + tuple(a.default for a in op.attrs)
    required = sum(1 for d in defaults if d is _REQUIRED)
    tail = defaults[required:]
    count = len(names)
    position = {name: i for i, name in enumerate(names)}
    called = f"{op.name}()"

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Values:
        given = len(args)
        if not kwargs and required <= given <= count:
            return args if given == count else args + tail[given - required :]
        if given > count:
            raise TypeError(f"{called} takes from {required} to {count} positional arguments but {given} were given")
        values = list(args) + list(defaults[given:])
        for name, value in kwargs.items():
            index = position.get(name)
            if index is None:
                raise TypeError(f"{called} got an unexpected keyword argument {name!r}")
            if index < given:
                raise TypeError(f"{called} got multiple values for argument {name!r}")
            values[index] = value
        missing = [names[i] for i, v in enumerate(values) if v is _REQUIRED]
        if missing:
            listed = " and ".join(", ".join(repr(m) for m in missing).rsplit(", ", 1))
            raise TypeError(f"{called} missing {len(missing)} required positional argument{'s' if len(missing) > 1 else ''}: {listed}")
        return tuple(values)

    return bind


def _signature(op: Op) -> inspect.Signature:
    returns = torch.Tensor if len(op.outputs) == 1 else tuple[tuple(torch.Tensor for _ in op.outputs)]  # type: ignore[misc]
    params = [
        inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None if a.optional else inspect.Parameter.empty,
                          annotation=torch.Tensor | None if a.optional else torch.Tensor)
        for a in op.args
    ]
    kinds = {"float": float, "int": int, "bool": bool}
    params += [inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=a.default, annotation=kinds[a.type]) for a in op.attrs]
    return inspect.Signature(params, return_annotation=returns)


def _docstring(op: Op) -> str:
    lines = [
        f"{op.summary}.",
        "",
        f"Contract: {', '.join(op.contract) or 'none'}.  Runs the first backend in",
        "the registry's order for the inputs' platform whose guarantees cover the contract,",
        "and raises ``UnsupportedError`` rather than fall back to one that does not.",
    ]
    if op.backward:
        lines.append(f"Differentiable: the backward pass runs {', '.join(step.op for step in op.backward)}.")
    lines += ["", "Args:"]
    for a in op.args:
        lines.append(f"    {a.name}: [{', '.join(a.shape)}] {' | '.join(a.dtypes)}{', optional' if a.optional else ''}. {a.doc}".rstrip())
    for attr in op.attrs:
        lines.append(f"    {attr.name}: {attr.type}, default {attr.default!r}. {attr.doc}".rstrip())
    lines += ["", "Returns:"]
    leaders = {var: next(a.name for a in op.args if a.dtype == var) for var in op.dtype_vars}
    for o in op.outputs:
        dtype = f"same dtype as {leaders[o.dtype]}" if o.dtype in leaders else o.dtype
        widened = f" (float32 if {o.float32_if})" if o.float32_if else ""
        lines.append(f"    {o.name}: [{', '.join(o.shape)}] {dtype}{widened}. {o.doc}".rstrip())
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ the pieces of one op


def _dtype_sources(op: Op) -> tuple[tuple[int, torch.dtype | None], ...]:
    """Per output: the argument whose tensor options it copies, and its fixed dtype (None: the argument's)."""
    found = []
    for o in op.outputs:
        if o.dtype in op.dtype_vars:
            found.append((next(i for i, a in enumerate(op.args) if a.dtype == o.dtype), None))
        else:
            found.append((0, getattr(torch, o.dtype)))
    return tuple(found)


def _runner(op: Op) -> Callable[[Values], Any]:
    """The op after its arguments are bound and their types checked: autocast, the input checks,
    then the backend (or the fake kernel, for meta tensors)."""
    name = op.name
    check = CHECK_VALUES[name]
    policy = op.autocast
    cast = frozenset(i for i, a in enumerate(op.args) if a.name in op.autocast_args)
    select, platform_of, call = _runtime.select_backend, _runtime.platform_of, _runtime.call

    def run(values: Values) -> Any:
        device_type = values[0].device.type
        if cast:
            # Cast before the checks, which hold the cast dtypes.
            cast_to = _autocast_dtype(policy, device_type)
            if cast_to is not None:
                values = tuple(_autocast(v, cast_to, device_type) if i in cast else v for i, v in enumerate(values))
        check(values)
        if device_type == "meta":  # shapes only: the fake kernel answers
            return _runtime.overload(name, "default")(*values)
        return call(name, select(name, platform_of(device_type)), *values)

    return run


def _public(op: Op, run: Callable[[Values], Any]) -> Callable[..., Any]:
    bind = _binder(op)
    check_types = CHECK_TYPES[op.name]
    lead_arg = next((i for i, a in enumerate(op.args) if not a.optional and op.leading_dim is not None and a.shape[:1] == (op.leading_dim,)), None)
    lead_rank = len(op.args[lead_arg].shape) if lead_arg is not None else 0
    lead_positions = frozenset(i for i, a in enumerate(op.args) if op.leading_dim is not None and a.shape[:1] == (op.leading_dim,))
    output_leads = tuple(op.leading_dim is not None and o.shape[:1] == (op.leading_dim,) for o in op.outputs)

    def public(*args: Any, **kwargs: Any) -> Any:
        values = bind(args, kwargs)
        # Types first: nothing below may read an attribute of a list, an array or None.
        check_types(values)
        if lead_arg is not None:
            # The leading dimension may come as several: the kernels see them flattened.
            lead = _leading(values[lead_arg], lead_rank)
            if lead is not None:
                _check_leads(op, values, lead_arg, lead, lead_positions)
                flat = tuple(v.flatten(0, len(lead) - 1) if i in lead_positions and v is not None else v for i, v in enumerate(values))
                return _restore(public(*flat), lead, output_leads)
        return run(values)

    public.__name__ = public.__qualname__ = op.name
    public.__module__ = PACKAGE
    public.__doc__ = _docstring(op)
    public.__signature__ = _signature(op)  # type: ignore[attr-defined]
    return public


def _fake(op: Op) -> Callable[..., Any]:
    """The op's shape-only kernel: checks, then outputs of the right shape, dtype and device."""
    bind = _binder(op)
    check_types, check_values = CHECK_TYPES[op.name], CHECK_VALUES[op.name]
    dims = tuple((d.dim, op.positions[d.arg], d.axis) for d in op.dims)
    sources = _dtype_sources(op)
    flags = tuple(op.params.index(o.float32_if) if o.float32_if else None for o in op.outputs)
    shapes = tuple(o.shape for o in op.outputs)

    def fake(*args: Any, **kwargs: Any) -> Any:
        values = bind(args, kwargs)
        check_types(values)
        check_values(values)
        sizes: dict[str, Any] = {dim: values[arg].shape[axis] for dim, arg, axis in dims}
        for dim, _ in op.dynamic_dims:
            sizes[dim] = torch.library.get_ctx().new_dynamic_size()  # data-dependent
        for dim, base, plus in op.derived_dims:
            sizes[dim] = sizes[base] + plus
        outputs = []
        for shape, (source, fixed), flag in zip(shapes, sources, flags):
            like = values[source]
            dtype = fixed if fixed is not None else (torch.float32 if flag is not None and values[flag] else like.dtype)
            outputs.append(like.new_empty(tuple(sizes[d] for d in shape), dtype=dtype))
        return tuple(outputs) if len(outputs) > 1 else outputs[0]

    fake.__name__ = fake.__qualname__ = f"fake_{op.name}"
    return fake


def _autograd(op: Op) -> tuple[Callable[..., Any], Callable[..., None] | None]:
    """(backward, setup_context) for torch.library.register_autograd."""
    name = op.name
    if not op.backward:

        def refuse(ctx: Any, *grads: Any) -> Any:
            raise _not_differentiable(name)

        return refuse, None

    count = len(op.args)
    wanted = {(s.kind, s.index) if s.kind != "grad" else ("output", s.index) for step in op.backward for s in step.args}
    saved_keys = tuple(k for k in [("arg", i) for i in range(count)] + [("output", j) for j in range(len(op.outputs))] if k in wanted)
    non_differentiable = tuple(j for j, o in enumerate(op.outputs) if not o.differentiable)
    variable = {j: source for j, (o, (source, _)) in enumerate(zip(op.outputs, _dtype_sources(op))) if o.float32_if is not None}
    attr_index = {a.name: i for i, a in enumerate(op.attrs)}
    arg_names = tuple(a.name for a in op.args)
    given = op.grad_inputs
    steps = tuple((step, tuple(i for i in step.gives if i is not None)) for step in op.backward)

    def setup(ctx: Any, inputs: Values, output: Any) -> None:
        outputs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*(inputs[i] if kind == "arg" else outputs[i] for kind, i in saved_keys))
        # Attributes and dtypes in attributes of their own: no spec name becomes an attribute of ctx.
        ctx.rlk_attrs = tuple(inputs[count:])
        ctx.rlk_dtypes = {j: inputs[source].dtype for j, source in variable.items()}
        for j in non_differentiable:
            ctx.mark_non_differentiable(outputs[j])

    def differentiate(ctx: Any, grads: tuple[torch.Tensor | None, ...]) -> tuple[Any, ...]:
        saved = dict(zip(saved_keys, ctx.saved_tensors))
        needs = dict(zip(arg_names, ctx.needs_input_grad))
        _no_gradient_for(name, needs, given)
        results: list[Any] = [None] * count
        for step, gives in steps:
            if not any(needs[arg_names[i]] for i in gives):
                continue
            call_args = []
            for source in step.args:
                if source.kind == "grad":
                    grad = _grad_or_zeros(grads[source.index], saved["output", source.index])
                    if source.index in ctx.rlk_dtypes:  # a float32 output on request: its gradient goes back in the inputs' dtype
                        grad = grad.to(ctx.rlk_dtypes[source.index])
                    call_args.append(grad)
                else:
                    call_args.append(saved[source.kind, source.index])
            attrs = {attr: ctx.rlk_attrs[attr_index[attr]] for attr in step.attrs}
            result = PUBLIC[step.op](*call_args, **attrs)
            result = result if isinstance(result, tuple) else (result,)
            for index, grad in zip(step.gives, result):
                if index is not None:
                    results[index] = grad
        return (*results, *(None for _ in op.attrs))

    def backward(ctx: Any, *grads: Any) -> Any:
        """Differentiates the op with the catalog's own kernels, in the forward's dtypes."""
        with _autocast_off():
            return differentiate(ctx, grads)

    return backward, setup


# ------------------------------------------------------------------------------ every op

PUBLIC: dict[str, Callable[..., Any]] = {}
"""Op name or alias → its public function."""
_FAKES: dict[str, Callable[..., Any]] = {}
for _op in OPS.values():
    PUBLIC[_op.name] = _public(_op, _runner(_op))
    for _alias in _op.aliases:
        PUBLIC[_alias] = PUBLIC[_op.name]
    _FAKES[_op.name] = _fake(_op)


def _overloads(op: Op) -> tuple[str, ...]:
    """The op's default overload and one per native kernel, as torch.library names them."""
    return ("", *(f".{k}" for k in op.native_kernels))


# Kept for the life of the process: the autograd kernels live as long as this library object.
_AUTOGRAD_LIBRARY = torch.library.Library(PACKAGE, "IMPL")


def _autograd_kernel(op: Op, overload: str, backward: Callable[..., Any], setup: Callable[..., None] | None) -> Callable[..., Any]:
    """The overload's kernel at the Autograd key: torch.library.register_autograd's, behind one rule
    for the autograd modes it does not serve, applied to every op alike.

    A tensor with a tangent is refused: torch.library's autograd kernel records a graph only for
    inputs that require grad and runs a dual tensor's call below autograd, where its tangent is
    dropped, so torch.func.jvp, jacfwd and dual tensors would read zeros.  A gradient asked inside
    a torch.func transform is refused with the op's name where torch's autograd.Function would
    raise about its setup_context.  Every entry point reaches this kernel: the public function
    (``_runtime.call`` does not bypass autograd while a dual level is open), each overload of
    ``torch.ops``, and torch.compile's tracing, which dispatches through it.  register_autograd
    registers torch's kernel itself, leaving no place for a check before it; make_autograd_impl
    is the kernel it registers, so reverse mode runs exactly as it would."""
    name = op.name
    qualname = f"{PACKAGE}::{name}{overload}"
    differentiate = torch._library.autograd.make_autograd_impl(torch._library.utils.lookup_op(qualname), torch._library.autograd.Info(backward, setup))
    refuse_gradient = _not_differentiable if not op.backward else _no_transform_gradient

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if _has_tangent(args):
            raise _no_forward_mode(name)
        if torch.is_grad_enabled() and torch._C._any_requires_grad(*args) and torch._C._are_functorch_transforms_active():
            raise refuse_gradient(name)
        return differentiate(keyset, *args, **kwargs)

    return kernel


def _register_autograd(op: Op, overload: str, backward: Callable[..., Any], setup: Callable[..., None] | None) -> None:
    _AUTOGRAD_LIBRARY.impl(f"{op.name}{overload}", _autograd_kernel(op, overload, backward, setup), "Autograd", with_keyset=True)


def _register_fakes() -> None:
    """Shape-only kernels so the ops trace under torch.compile and on the meta device, and
    every overload's autograd: the spec's backward, or a refusal where it declares none."""
    for op in OPS.values():
        backward, setup = _autograd(op)
        for overload in _overloads(op):
            torch.library.register_fake(f"{PACKAGE}::{op.name}{overload}")(_FAKES[op.name])
            _register_autograd(op, overload, backward, setup)


# Kept for the life of the process: the autocast kernels live as long as this library object.
_AUTOCAST_LIBRARY = torch.library.Library(PACKAGE, "IMPL")


def _autocast_kernel(overload: Any, device_type: str, policy: str, positions: frozenset[int]) -> tuple[Any, Callable[..., Any]]:
    """The op's autocast kernel: cast the floating inputs at ``positions`` as the policy says, then
    run the op with this autocast key excluded, as torch's own autocast kernels do."""
    key = torch._C.DispatchKey.__members__["Autocast" + torch._C._dispatch_key_for_device(device_type)]

    def kernel(*args: Any, **kwargs: Any) -> Any:
        cast_to = torch.get_autocast_dtype(device_type) if policy == "lower_precision" else torch.float32
        cast = tuple(_autocast(a, cast_to, device_type) if i in positions else a for i, a in enumerate(args))
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
            return overload(*cast, **kwargs)

    return key, kernel


def _register_autocast() -> None:
    """Autocast kernels at each carried platform's autocast dispatch key (AutocastCPU, AutocastCUDA,
    AutocastPrivateUse1), for every overload of every op whose spec declares a policy, so that
    torch.ops.<package>.<op> called directly casts as the public functions do."""
    for op in OPS.values():
        if not op.autocast_args:
            continue
        positions = frozenset(i for i, a in enumerate(op.args) if a.name in op.autocast_args)
        for overload_name in ("default", *op.native_kernels):
            overload = _runtime.overload(op.name, overload_name)
            qualified = op.name if overload_name == "default" else f"{op.name}.{overload_name}"
            for device_type in _AUTOCAST_DEVICE_TYPES:
                key, kernel = _autocast_kernel(overload, device_type, op.autocast, positions)
                # The Python dispatcher (torch.compile's tracing) reads py_kernels; eager calls the library's.
                overload.py_kernels.pop(key, None)
                overload.py_impl(key)(kernel)
                _AUTOCAST_LIBRARY.impl(qualified, lambda _keys, *args, _kernel=kernel, **kwargs: _kernel(*args, **kwargs), key.name, with_keyset=True)


if _runtime.NATIVE_ERROR is None:
    _register_fakes()
    _register_autocast()
