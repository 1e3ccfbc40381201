"""Input errors: an input that breaks a check -- a shape, dtype, device, layout, type or attribute
value -- is refused by the public function and the native op, naming the argument, expected
against got; attribute values at the edge of their range are accepted."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from cases import OpCase, package, parametrize

# ---------------------------------------------------------------------------- bad inputs
# Each case breaks one check; both the public function and the native op must refuse
# with a message naming the argument.


def _breaker(check: Any) -> tuple[str, Any] | None:
    """(case id, how to break the argument) for one check of the registry, or None."""
    kind, axis = check.kind, check.axis
    if kind == "layout":  # a sparse tensor: other layouts in test_a_tensor_of_another_layout_is_refused_by_name
        return "layout", lambda t: t.to_sparse()
    if kind == "rank":
        # Fewer dimensions than the spec: extra leading ones may be legal (leading_dim), missing ones never are.
        rank = check.rank
        return "rank", lambda t: t.reshape(-1) if rank >= 2 else (t.reshape(-1)[0] if rank == 1 else t.unsqueeze(0))
    if kind == "dtype":
        wrong = torch.float64 if "int32" in check.dtypes else torch.int32
        return "dtype", lambda t: t.to(wrong)
    if kind == "same_dtype":
        return "same-dtype", lambda t: t.to(torch.float16 if t.dtype != torch.float16 else torch.float32)
    if kind == "same_device":
        return "device", lambda t: t.to("meta")
    if kind in ("dim", "count_nonzero", "equals_dim"):
        return {"dim": "dim", "count_nonzero": "count", "equals_dim": "equals"}[kind], lambda t: torch.cat([t, t.narrow(axis, 0, 1)], dim=axis)
    if kind in ("multiple_of", "multiple_of_dim"):
        return "multiple", None  # a size that breaks a divisibility rule: every argument rebuilt
    if kind == "contiguous" and check.rank > 0:  # a 0-d tensor is always contiguous
        return "contiguous", lambda t: torch.stack([t, t], dim=-1)[..., 0]
    return None


def bad_cases(case: OpCase) -> Iterator[Any]:
    for check in case.op.checks:
        found = _breaker(check)
        if found is None:
            continue
        kind, breaker = found
        arg = check.arg
        ident = f"dim-{check.dim}-{arg}" if kind == "dim" else f"{kind}-{check.dim}" if kind in ("multiple", "count", "equals") else f"{kind}-{arg}"
        yield ident, (arg, {"dim": check.dim} if kind == "multiple" else breaker, check.message), ()


def entries(case: OpCase) -> Iterator[Any]:
    for entry in ("public", "native"):
        yield entry, (entry,), ()


@parametrize("case, arg, breaker, message, entry", bad_cases, entries)
def test_bad_input_is_rejected(case: OpCase, arg: str, breaker: Any, message: str, entry: str) -> None:
    if isinstance(breaker, dict):  # a size that breaks a divisibility rule: rebuild every argument
        dims = dict(case.shapes[0])
        dims[breaker["dim"]] -= 1
        inputs = case.make_inputs(dims, case.dtypes[0], "cpu", seed=6)
    else:
        inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=6)
        index = [name for name, *_ in case.args].index(arg)
        inputs[index] = breaker(inputs[index])
    call = getattr(package, case.name) if entry == "public" else case.overload("default")
    with pytest.raises((ValueError, RuntimeError)) as caught:
        call(*inputs)
    assert message in str(caught.value), f"expected {message!r} in {str(caught.value)!r}"
    assert f"'{arg}'" in str(caught.value)


# ---------------------------------------------------------------------------- tensors of another layout
# Sparse (COO, CSR), nested (of strided parts, which report torch.strided, or jagged) and mkldnn
# tensors have no strides, some not even sizes: every tensor argument is refused by its layout
# before any other check reads it, naming the argument and the layout, by the public function and
# by the native op (the bindings register its entry points for those layouts' dispatch keys too).
# A jagged nested tensor is a Python subclass that never reaches the native op's dispatch.


def _other_layouts(tensor: torch.Tensor) -> Iterator[tuple[str, Callable[[torch.Tensor], Any], str, tuple[str, ...]]]:
    """(id, how to build it from ``tensor``, the layout the message names, the entries that see it)."""
    both = ("public", "native")
    yield "sparse_coo", lambda t: t.to_sparse(), "torch.sparse_coo", both
    if tensor.dim() >= 2:
        # Of ones: a batch of CSR matrices needs as many entries in each (the values are not read).
        yield "sparse_csr", lambda t: torch.ones_like(t).to_sparse_csr(), "torch.sparse_csr", both
    yield "nested", lambda t: torch.nested.nested_tensor([t]), "a nested tensor", both
    if tensor.dim() >= 1:
        yield "jagged", lambda t: torch.nested.nested_tensor([t, t], layout=torch.jagged), "a nested tensor", ("public",)
    if tensor.dim() >= 1 and tensor.is_floating_point():
        yield "mkldnn", lambda t: t.to_mkldnn(), "torch._mkldnn", both


def other_layout_cases(case: OpCase) -> Iterator[Any]:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=22)
    for index, ((name, *_), tensor) in enumerate(zip(case.args, inputs)):
        for ident, build, got, entries in _other_layouts(tensor):
            for entry in entries:
                yield f"{name}-{ident}-{entry}", (index, build, got, entry), ()


@parametrize("case, index, build, got, entry", other_layout_cases)
def test_a_tensor_of_another_layout_is_refused_by_name(case: OpCase, index: int, build: Callable[[torch.Tensor], Any], got: str, entry: str) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=22)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes that sparse CSR and nested tensors are in beta
        inputs[index] = build(inputs[index])
    name = case.args[index][0]
    call = getattr(package, case.name) if entry == "public" else case.overload("default")
    with pytest.raises(package.InputError if entry == "public" else (ValueError, RuntimeError)) as caught:
        call(*inputs, **case.attrs)
    expected = f"{case.name}: argument '{name}' must be a dense tensor (layout torch.strided, not nested), got {got}"
    assert expected in str(caught.value), f"expected {expected!r} in {str(caught.value)!r}"


# ---------------------------------------------------------------------------- arguments of the wrong type
# A list, None (for a required argument), an int or a NumPy array where a tensor belongs: the
# public function raises InputTypeError (an InputError and a TypeError) naming the argument,
# what it expects and what it got, before reading any attribute of it; also when the other
# arguments carry extra leading dimensions, or require grad.


def _wrong_values(tensor: torch.Tensor) -> list[tuple[str, Any, str]]:
    values: list[tuple[str, Any, str]] = [("list", tensor.reshape(-1).tolist() if tensor.dim() == 0 else tensor.tolist(), "list"), ("int", 3, "int")]
    try:
        import numpy as np

        values.append(("ndarray", np.zeros(tuple(tensor.shape), dtype=np.float32), "numpy.ndarray"))
    except ImportError:
        pass
    return values


def wrong_type_cases(case: OpCase) -> Iterator[Any]:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=17)
    for index, ((name, _, _, optional, _), tensor) in enumerate(zip(case.args, inputs)):
        for ident, value, got in _wrong_values(tensor) + ([] if optional else [("None", None, "NoneType")]):
            yield f"{name}-{ident}", (index, value, got), ()


def lifted(case: OpCase) -> Iterator[Any]:
    yield "plain", (False,), ()
    if case.leading_dim is not None:  # the op takes extra leading dimensions
        yield "leading-dims", (True,), ()


@parametrize("case, index, value, got, lifted", wrong_type_cases, lifted)
def test_wrong_argument_type_is_an_input_error(case: OpCase, index: int, value: Any, got: str, lifted: bool) -> None:
    inputs = [t.requires_grad_(name in case.grad_inputs) for (name, *_), t in zip(case.args, case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=17))]
    if lifted:
        lead = (case.leading_dim,)
        inputs = [t.detach().unsqueeze(0).requires_grad_(t.requires_grad) if shape[:1] == lead else t for t, (_, _, shape, _, _) in zip(inputs, case.args)]
    inputs[index] = value
    name, optional = case.args[index][0], case.args[index][3]
    with pytest.raises(package.InputTypeError) as caught:
        getattr(package, case.name)(*inputs, **case.attrs)
    assert isinstance(caught.value, (package.InputError, TypeError))
    expected = "a torch.Tensor or None" if optional else "a torch.Tensor"
    assert str(caught.value) == f"{case.name}: argument '{name}' must be {expected}, got {got}"


def wrong_attribute_values(case: OpCase) -> Iterator[Any]:
    for a in case.op.attrs:
        wrong: list[Any] = ["1", None]
        if a.type != "bool":
            wrong.append(True)
        if a.type == "int":
            wrong.append(1.5)
        if a.type == "bool":
            wrong.append(1)
        for value in wrong:
            yield f"{a.name}-{value!r}", (a.name, value), ()


@parametrize("case, attr, value", wrong_attribute_values)
def test_wrong_attribute_type_is_an_input_error(case: OpCase, attr: str, value: Any) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=18)
    with pytest.raises(package.InputTypeError, match=f"{case.name}: attribute '{attr}' must be .*, got {type(value).__name__}"):
        getattr(package, case.name)(*inputs, **{**case.attrs, attr: value})


# ---------------------------------------------------------------------------- leading dimensions that disagree


def disagreeing_leads(case: OpCase) -> Iterator[Any]:
    """Each further argument that starts with the leading dimension, given flat or with its
    leading sizes in another order than the first such argument's."""
    lead = (case.leading_dim,)
    positions = [i for i, (_, _, shape, optional, _) in enumerate(case.args) if case.leading_dim is not None and shape[:1] == lead and not optional]
    for index in positions[1:]:
        for how in ("flat", "transposed"):
            yield f"{case.args[index][0]}-{how}", (positions[0], index, how), ()


@parametrize("case, first, index, how", disagreeing_leads)
def test_leading_dimensions_that_disagree_are_an_input_error(case: OpCase, first: int, index: int, how: str) -> None:
    """Every argument that starts with the leading dimension must give it as the same several
    sizes: flattened alone, [T, B] ids beside [B, T] rows would pair each row with another's."""
    shape = next((s for s in case.shapes if s[case.leading_dim] >= 2), None)
    if shape is None:
        pytest.skip(f"every test shape has {case.leading_dim} = 1, whose sizes cannot be put in another order")
    inputs = case.make_inputs(shape, case.dtypes[0], "cpu", seed=12)
    lead = (case.leading_dim,)
    given = [t.unsqueeze(0) if spec[:1] == lead else t for t, (_, _, spec, _, _) in zip(inputs, case.args)]  # [1, N, ...]
    given[index] = inputs[index] if how == "flat" else inputs[index].unsqueeze(1)  # [N, ...] or [N, 1, ...]
    name, first_name = case.args[index][0], case.args[first][0]
    with pytest.raises(package.InputError, match=f"^{case.name}: argument '{name}' must have shape .* \\(argument '{first_name}' gives its leading dimension"):
        getattr(package, case.name)(*given, **case.attrs)


# ---------------------------------------------------------------------------- attribute values
# A float attribute must be finite within float32's range (the kernels receive float32, and a NaN
# passes no comparison a kernel makes), and not a nonzero value that float32 holds as 0 (a scale of
# 1e-46 would arrive as the 0 that means "the default"); a spec's range bounds narrow it, met by
# the value as given and as float32.  Both the public function and the native op refuse a value
# outside, naming the attribute and the value.


def _next_float32(x: float, toward: float) -> float:
    """The float32 next to ``x`` (a float32) in the direction of ``toward``."""
    return float(torch.nextafter(torch.tensor(x, dtype=torch.float32), torch.tensor(toward, dtype=torch.float32)))


def _just_outside(relation: str, bound: float, integral: bool) -> float:
    """The value nearest ``bound`` that breaks ``value <relation> bound``: for a float, the nearest
    float32 (one nearer, a float64, could be one float32 holds as 0, which the finite check refuses
    first)."""
    if relation in (">", "<"):
        return int(bound) if integral else float(bound)
    step = -1 if relation == ">=" else 1
    return int(bound) + step if integral else _next_float32(float(bound), step * math.inf)


def attribute_values_outside(case: OpCase) -> Iterator[Any]:
    kinds = {a.name: a.type for a in case.op.attrs}
    for check in case.op.checks:
        attr = check.arg if check.kind in ("finite", "bound") else None
        if check.kind == "finite":
            for value in (math.nan, math.inf, -math.inf, 1e39, -(10**39), 1e-46, -(2.0**-150)):
                yield f"{attr}-{value!r}", (attr, value, check.message), ()
        elif check.kind == "bound":
            value = _just_outside(check.relation, check.bound, kinds[attr] == "int")
            yield f"{attr}-{check.relation}-{value!r}", (attr, value, check.message), ()
            if kinds[attr] == "float" and check.relation in (">", "<") and check.bound != 0:
                # Inside as a float64, the bound itself as float32 (a bound of 0 leaves no such
                # value that the finite check does not refuse first).
                inside = math.nextafter(float(check.bound), math.inf if check.relation == ">" else -math.inf)
                yield f"{attr}-{check.relation}-float32-{inside!r}", (attr, inside, check.message), ()


@parametrize("case, attr, value, message, entry", attribute_values_outside, entries)
def test_attribute_value_outside_its_range_is_refused(case: OpCase, attr: str, value: Any, message: str, entry: str) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=19)
    call = getattr(package, case.name) if entry == "public" else case.overload("default")
    if entry == "native" and isinstance(value, int) and abs(value) > 2**63:
        value = float(value)  # the torch schema's double: an int this large does not reach the op's checks as one
    with pytest.raises(package.InputError if entry == "public" else (ValueError, RuntimeError)) as caught:
        call(*inputs, **{**case.attrs, attr: value})
    assert message in str(caught.value), f"expected {message!r} in {str(caught.value)!r}"


def attribute_values_at_the_edge(case: OpCase) -> Iterator[Any]:
    """The edge values a range admits: an inclusive bound itself, the next float32 inside an
    exclusive one (the kernels receive float32)."""
    for check in case.op.checks:
        if check.kind == "bound":
            attr = check.arg
            value = float(check.bound) if check.relation in (">=", "<=") else _next_float32(float(check.bound), math.inf if check.relation == ">" else -math.inf)
            yield f"{attr}-{check.relation}-{value!r}", (attr, value), ()


@parametrize("case, attr, value", attribute_values_at_the_edge)
def test_attribute_value_at_the_edge_of_its_range_is_accepted(case: OpCase, attr: str, value: float) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=20)
    getattr(package, case.name)(*inputs, **{**case.attrs, attr: value})
