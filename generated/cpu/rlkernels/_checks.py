# Copied from runtime/rlkernels/_checks.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Input checks, read from the registry: the same rules and messages as the C++ bindings, so
errors read the same before dispatch and under torch.compile (where the fake kernels run them).

Each op's checks are turned into plain functions once, at import, so that a call runs a short
list of comparisons and builds no message unless one fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Integral, Real

import torch

from ._registry import OPS, Check, Op

_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.bool: "bool",
}


class InputError(ValueError):
    """An argument does not fit the op's signature."""


class InputTypeError(InputError, TypeError):
    """An argument is not of the type the op's signature gives it (a list or a NumPy array
    where a tensor belongs, a string for a number): an InputError and a TypeError alike."""


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _has_data(t: torch.Tensor) -> bool:
    """False while torch.compile traces and for meta tensors: there are no values to count
    (the native op checks again when it runs)."""
    if torch.compiler.is_compiling():
        return False
    from torch._subclasses.fake_tensor import is_fake

    return t.device.type != "meta" and not is_fake(t)


def dtype_name(t: torch.Tensor) -> str:
    name = _NAMES.get(t.dtype)  # on every call of every op: no string is built for the usual dtypes
    return name if name is not None else str(t.dtype).removeprefix("torch.")


Values = Sequence[object]
"""An op's arguments, tensors then attributes, in its signature's order."""
TensorCheck = Callable[[Sequence[torch.Tensor]], None]


def _type_check(op: Op) -> Callable[[Values], None]:
    """The check of every argument's type, before anything reads an attribute of one: a tensor
    (or None where optional) for each tensor argument; for each attribute the type the torch
    schema takes -- bool for bool, an integer (not a bool) for int, a real number (not a bool)
    for float."""
    tensors = tuple((a.name, a.optional) for a in op.args)
    scalars = tuple((len(op.args) + i, a.name, a.type) for i, a in enumerate(op.attrs))
    name = op.name

    def check(values: Values) -> None:
        for index, (arg, optional) in enumerate(tensors):
            value = values[index]
            if not isinstance(value, torch.Tensor) and not (optional and value is None):
                expected = "a torch.Tensor or None" if optional else "a torch.Tensor"
                raise InputTypeError(f"{name}: argument '{arg}' must be {expected}, got {_type_name(value)}")
        for index, attr, kind in scalars:
            value = values[index]
            if kind == "bool":
                fits = isinstance(value, bool)
            elif kind == "int":
                fits = isinstance(value, Integral) and not isinstance(value, bool)
            else:
                fits = isinstance(value, Real) and not isinstance(value, bool)
            if not fits:
                raise InputTypeError(f"{name}: attribute '{attr}' must be {'an int' if kind == 'int' else 'a ' + kind}, got {_type_name(value)} {value!r:.40}")

    return check


def _rule(c: Check) -> TensorCheck:
    """One check as a function of the op's tensors; it raises ``InputError`` with the check's
    message and what it got."""
    i, j, axis, other_axis, message = c.arg, c.other, c.axis, c.other_axis, c.message

    if c.kind == "rank":
        rank = c.rank

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if ts[i].dim() != rank:
                raise InputError(f"{message}, got shape {list(ts[i].shape)}")

    elif c.kind == "dtype":
        allowed = c.dtypes

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if dtype_name(ts[i]) not in allowed:
                raise InputError(f"{message}, got {dtype_name(ts[i])}")

    elif c.kind == "same_dtype":

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if ts[i].dtype != ts[j].dtype:
                raise InputError(f"{message}, got {dtype_name(ts[i])} and {dtype_name(ts[j])}")

    elif c.kind == "same_device":

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if ts[i].device != ts[j].device:
                raise InputError(f"{message}, got {ts[i].device} and {ts[j].device}")

    elif c.kind == "dim":

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if ts[i].shape[axis] != ts[j].shape[other_axis]:
                raise InputError(f"{message}, got {ts[i].shape[axis]} and {ts[j].shape[other_axis]}")

    elif c.kind == "multiple_of":
        divisor = c.multiple_of

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if ts[i].shape[axis] % divisor != 0:
                raise InputError(f"{message}, got {ts[i].shape[axis]}")

    elif c.kind == "multiple_of_dim":

        def rule(ts: Sequence[torch.Tensor]) -> None:
            size, divisor = ts[i].shape[axis], ts[j].shape[other_axis]
            if (divisor == 0 and size != 0) or (divisor != 0 and size % divisor != 0):  # a size 0 divides only 0
                raise InputError(f"{message}, got {size} and {divisor}")

    elif c.kind == "count_nonzero":

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if _has_data(ts[j]):  # traced and meta tensors have no values to count
                count = int(ts[j].count_nonzero())
                if ts[i].shape[axis] != count:
                    raise InputError(f"{message}, got {ts[i].shape[axis]} and {count}")

    elif c.kind == "contiguous":

        def rule(ts: Sequence[torch.Tensor]) -> None:
            if not ts[i].is_contiguous():
                raise InputError(message)

    else:
        raise AssertionError(f"unknown check kind {c.kind!r}")  # the generator writes only the kinds above

    if not c.optional:
        return rule

    def when_given(ts: Sequence[torch.Tensor]) -> None:
        if ts[i] is not None:
            rule(ts)

    return when_given


def _value_check(op: Op, types: Callable[[Values], None]) -> Callable[[Values], None]:
    """Every check of the op's tensors (their types first), as one function of its arguments."""
    rules = tuple(_rule(c) for c in op.checks)
    count = len(op.args)

    def check(values: Values) -> None:
        types(values)
        tensors: Sequence[torch.Tensor] = values[:count]  # type: ignore[assignment]
        for rule in rules:
            rule(tensors)

    return check


CHECK_TYPES: dict[str, Callable[[Values], None]] = {name: _type_check(op) for name, op in OPS.items()}
"""Op → the check of its arguments' types (tensors and attributes)."""
CHECK: dict[str, Callable[[Values], None]] = {name: _value_check(op, CHECK_TYPES[name]) for name, op in OPS.items()}
"""Op → every check of its arguments (types, ranks, dtypes, devices, shared dimensions,
constraints, contiguity).  Raises ``InputError``."""
