# Copied from runtime/rlkernels/_checks.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Input checks, read from the registry: the same rules and messages as the C++ bindings, so
errors read the same before dispatch and under torch.compile (where the fake kernels run them).

Every public call runs its op's checks, so each op's list is turned, once at import, into one
function of straight-line comparisons -- as the bindings' C++ runs them -- rather than a loop that
interprets the list on every call.  The function's source is assembled here from fixed fragments
and integers (argument positions, ranks, axes, divisors) only; every text of the registry (the
messages, the dtype names) reaches it as a value in its namespace, never as source, so nothing a
spec says can become code.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any

import torch

from ._interchange import ATTRIBUTE_CHECKS
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


def _float32(x: float) -> float:
    """``x`` as the kernels receive it: rounded to float32 (``x`` within float32's range)."""
    value: float = struct.unpack("<f", struct.pack("<f", x))[0]
    return value


def _layout_name(t: torch.Tensor) -> str:
    """What a tensor of another layout is, in the words the bindings' C++ uses too."""
    return "a nested tensor" if t.is_nested else str(t.layout)


def _wrong_type(prefix: str, value: object) -> InputTypeError:
    return InputTypeError(f"{prefix}, got {_type_name(value)}")


def _wrong_attribute(prefix: str, value: object) -> InputTypeError:
    return InputTypeError(f"{prefix}, got {_type_name(value)} {value!r:.40}")


Values = Sequence[Any]
"""An op's arguments, tensors then attributes, in its signature's order."""


class _Source:
    """The body of one check function: lines of fixed fragments and integers, with every other
    value (a message, a tuple of dtype names) held in ``constants`` and named ``K[<index>]``."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: list[object] = []

    def constant(self, value: object) -> str:
        self.constants.append(value)
        return f"K[{len(self.constants) - 1}]"

    def add(self, condition: str, error: str) -> None:
        self.lines += [f"    if {condition}:", f"        raise {error}"]

    def compile(self, what: str) -> Callable[[Values], None]:
        body = self.lines or ["    pass"]
        source = "def check(v):\n" + "\n".join(body) + "\n"
        namespace: dict[str, Any] = {
            "K": tuple(self.constants),
            "Tensor": torch.Tensor,
            "Integral": Integral,
            "Real": Real,
            "InputError": InputError,
            "dtype_name": dtype_name,
            "has_data": _has_data,
            "wrong_type": _wrong_type,
            "wrong_attribute": _wrong_attribute,
            "float32": _float32,
            "strided": torch.strided,
            "layout_name": _layout_name,
        }
        exec(compile(source, f"<{what}>", "exec"), namespace)  # noqa: S102 -- integers and fixed fragments only (see the module's docstring)
        check: Callable[[Values], None] = namespace["check"]
        return check


def _type_check(op: Op) -> Callable[[Values], None]:
    """The check of every argument's type, before anything reads an attribute of one: a tensor
    (or None where optional) for each tensor argument; for each attribute the type the torch
    schema takes -- bool for bool, an integer (not a bool) for int, a real number (not a bool)
    for float.  Then, in the registry's order, each tensor's layout (dense: the public function
    flattens leading dimensions and autocasts next, which a sparse or nested tensor would fail in
    torch's words) and the attributes' values (finite, in the spec's range): cheap, and refused
    before the call reaches a kernel, which would receive them rounded to float32."""
    code = _Source()
    for i, a in enumerate(op.args):
        expected = "a torch.Tensor or None" if a.optional else "a torch.Tensor"
        prefix = code.constant(f"{op.name}: argument '{a.name}' must be {expected}")
        allowed = f"v[{i}] is not None and " if a.optional else ""
        code.add(f"{allowed}not isinstance(v[{i}], Tensor)", f"wrong_type({prefix}, v[{i}])")
    for index, attr in enumerate(op.attrs, start=len(op.args)):
        fits = {
            "bool": f"isinstance(v[{index}], bool)",
            "int": f"isinstance(v[{index}], Integral) and not isinstance(v[{index}], bool)",
            "float": f"isinstance(v[{index}], Real) and not isinstance(v[{index}], bool)",
        }[attr.type]
        prefix = code.constant(f"{op.name}: attribute '{attr.name}' must be {'an int' if attr.type == 'int' else 'a ' + attr.type}")
        code.add(f"not ({fits})", f"wrong_attribute({prefix}, v[{index}])")
    at = op.positions
    for c in op.checks:
        if c.kind == "layout":
            _layout_rule(code, c, at)
        elif c.kind in ATTRIBUTE_CHECKS:
            _attribute_rule(code, c, at, op.attrs[at[c.arg] - len(op.args)].type == "float")
    return code.compile(f"{op.name} argument types")


# Checked with the types, before anything reads a tensor's sizes (flattening leading dimensions,
# autocast): the layout and the attributes' values.
_EARLY_KINDS = ATTRIBUTE_CHECKS | {"layout"}
_FLOAT32_MAX = 3.4028234663852886e38
_FLOAT32_ZERO_BELOW = 2.0**-150  # float32 holds a magnitude of this or less as 0
# The comparison a bound check fails on, per relation: a closed table, so the relation a registry
# holds selects a fragment and never becomes source itself.
_FAILS = {">": "<=", ">=": "<", "<": ">=", "<=": ">"}


def _attribute_rule(code: _Source, c: Check, at: dict[str, int], is_float: bool) -> None:
    """One check of a number attribute's value, once its type holds: finite within float32's range
    (NaN fails the comparison) and not a nonzero value float32 holds as 0, or the spec's bound,
    which a float must meet both as given and as float32, the value the kernels receive (its
    finite check runs first).  Raises ``InputError``."""
    v, m = f"v[{at[c.arg]}]", code.constant(c.message)
    if c.kind == "finite":
        limit, tiny = code.constant(_FLOAT32_MAX), code.constant(_FLOAT32_ZERO_BELOW)
        code.add(f"not (-{limit} <= {v} <= {limit}) or ({v} != 0 and -{tiny} <= {v} <= {tiny})", f'InputError(f"{{{m}}}, got {{{v}!r}}")')
    else:
        fails, bound = _FAILS[c.relation], code.constant(c.bound)
        rounded = f" or float32({v}) {fails} {bound}" if is_float else ""
        code.add(f"{v} {fails} {bound}{rounded}", f'InputError(f"{{{m}}}, got {{{v}!r}}")')


def _layout_rule(code: _Source, c: Check, at: dict[str, int]) -> None:
    """A tensor argument is dense: strided and not nested (a nested tensor of strided parts reports
    torch.strided too).  Its type holds already; None, where optional, is not checked."""
    t, m = f"v[{at[c.arg]}]", code.constant(c.message)
    given = f"{t} is not None and " if c.optional else ""
    code.add(f"{given}({t}.layout is not strided or {t}.is_nested)", f'InputError(f"{{{m}}}, got {{layout_name({t})}}")')


def _value_rule(code: _Source, c: Check, at: dict[str, int]) -> None:
    """One check of the op's tensors, once their types hold; an optional argument that is None is
    not checked.  It raises ``InputError`` with the check's message and what it got."""
    t, o, m = f"v[{at[c.arg]}]", f"v[{at[c.other]}]" if c.other else "", code.constant(c.message)
    given = f"{t} is not None and " if c.optional else ""
    if c.kind == "rank":
        code.add(f"{given}{t}.dim() != {c.rank}", f'InputError(f"{{{m}}}, got shape {{list({t}.shape)}}")')
    elif c.kind == "dtype":
        code.add(f"{given}dtype_name({t}) not in {code.constant(c.dtypes)}", f'InputError(f"{{{m}}}, got {{dtype_name({t})}}")')
    elif c.kind == "same_dtype":
        code.add(f"{given}{t}.dtype != {o}.dtype", f'InputError(f"{{{m}}}, got {{dtype_name({t})}} and {{dtype_name({o})}}")')
    elif c.kind == "same_device":
        code.add(f"{given}{t}.device != {o}.device", f'InputError(f"{{{m}}}, got {{{t}.device}} and {{{o}.device}}")')
    elif c.kind == "dim":
        size, other = f"{t}.shape[{c.axis}]", f"{o}.shape[{c.other_axis}]"
        code.add(f"{given}{size} != {other}", f'InputError(f"{{{m}}}, got {{{size}}} and {{{other}}}")')
    elif c.kind == "multiple_of":
        size = f"{t}.shape[{c.axis}]"
        code.add(f"{given}{size} % {c.multiple_of} != 0", f'InputError(f"{{{m}}}, got {{{size}}}")')
    elif c.kind == "multiple_of_dim":
        size, divisor = f"{t}.shape[{c.axis}]", f"{o}.shape[{c.other_axis}]"
        # A size 0 divides only 0.
        code.add(f"({divisor} == 0 and {size} != 0) or ({divisor} != 0 and {size} % {divisor} != 0)", f'InputError(f"{{{m}}}, got {{{size}}} and {{{divisor}}}")')
    elif c.kind == "equals_dim":
        size, other = f"{t}.shape[{c.axis}]", f"{o}.shape[{c.other_axis}]"
        code.add(f"{given}{size} != {other} + {int(c.plus)}", f'InputError(f"{{{m}}}, got {{{size}}} and {{{other}}}")')
    elif c.kind == "count_nonzero":
        size = f"{t}.shape[{c.axis}]"
        # Traced and meta tensors have no values to count (the native op checks again when it runs).
        code.add(f"{given}has_data({o}) and {size} != int({o}.count_nonzero())", f'InputError(f"{{{m}}}, got {{{size}}} and {{int({o}.count_nonzero())}}")')
    elif c.kind == "contiguous":
        code.add(f"{given}not {t}.is_contiguous()", f"InputError({m})")
    else:
        raise AssertionError(f"unknown check kind {c.kind!r}")  # the generator writes only the kinds above


def _value_check(op: Op) -> Callable[[Values], None]:
    """Every check of the op's tensors but their types and layouts (ranks, dtypes, devices, shared
    dimensions, constraints, contiguity), in the order the bindings run them."""
    code = _Source()
    for c in op.checks:
        if c.kind not in _EARLY_KINDS:
            _value_rule(code, c, op.positions)
    return code.compile(f"{op.name} inputs")


CHECK_TYPES: dict[str, Callable[[Values], None]] = {name: _type_check(op) for name, op in OPS.items()}
"""Op → the check of its arguments' types (tensors and attributes), then of the tensors' layouts
and the attributes' values.  Raises ``InputTypeError``, then ``InputError``."""
CHECK_VALUES: dict[str, Callable[[Values], None]] = {name: _value_check(op) for name, op in OPS.items()}
"""Op → every check of its tensors once their types hold.  Raises ``InputError``."""
