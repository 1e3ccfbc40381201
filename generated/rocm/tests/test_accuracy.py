# Copied from runtime/tests/test_accuracy.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Accuracy: every kernel against the op's reference within its tolerance class, at the spec's
shapes and attribute settings, with and without optional arguments, on empty inputs (every
output element written), and the same bits through other forms of the same call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from cases import (
    CASES,
    UNREGISTERED,
    OpCase,
    dtypes,
    empty_cases,
    flags,
    kernels,
    make_empty_inputs,
    named,
    on_devices,
    only,
    parametrize,
    registry,
    shapes,
    unnamed,
)


def test_every_op_of_the_registry_has_its_cases() -> None:
    """The registry and the test data come from one generate: each op of one is an op of the other."""
    assert UNREGISTERED == [] and set(CASES) == set(registry.OPS)


# ---------------------------------------------------------------------------- accuracy


@parametrize("case, device, kernel, dtype, shape", kernels(), dtypes(), shapes)
def test_accuracy(case: OpCase, device: str, kernel: str, dtype: str, shape: dict[str, int]) -> None:
    check_accuracy(case, device, kernel, dtype, shape, {})


@parametrize("case, device, kernel, dtype, shape, attrs", kernels(), dtypes(), shapes, flags)
def test_accuracy_at_other_settings(case: OpCase, device: str, kernel: str, dtype: str, shape: dict[str, int], attrs: dict[str, Any]) -> None:
    check_accuracy(case, device, kernel, dtype, shape, attrs)


def check_accuracy(case: OpCase, device: str, kernel: str, dtype: str, shape: dict[str, int], attrs: dict[str, Any]) -> None:
    inputs = case.make_inputs(shape, dtype, device)
    got = case.run_kernel(kernel, *inputs, **attrs)
    want = case.reference(*inputs, **attrs)
    assert len(got) == len(want) == len(case.outputs), f"{len(got)} outputs, the reference gives {len(want)}, the spec declares {len(case.outputs)}"
    atol, rtol = case.tolerance(dtype)
    for (name, shape_dims, _), g, w in zip(case.outputs, got, want):
        assert list(g.shape) == [shape[d] if d in shape else w.shape[i] for i, d in enumerate(shape_dims)], name
        if g.is_floating_point():
            # A NaN the spec defines (e.g. an id outside the vocabulary) must be NaN in both.
            torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol, rtol=rtol, equal_nan=True, msg=named(name))
        else:
            assert torch.equal(g.cpu(), w.to(g.dtype)), f"{name}: integer output differs from the reference"


@parametrize("case, device, kernel, dtype", unnamed(only(lambda c: c.has_optional)), kernels(), dtypes())
def test_accuracy_without_optional_arguments(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    """Every optional argument left out (None): the kernel's own path without them, against the reference, every run alike."""
    inputs = case.without_optional(case.make_inputs(case.shapes[0], dtype, device))
    got = case.run_kernel(kernel, *inputs)
    want = case.reference(*inputs)
    atol, rtol = case.tolerance(dtype)
    for (name, _, _), g, w in zip(case.outputs, got, want):
        torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol, rtol=rtol, equal_nan=True, msg=named(name))
    case.assert_bitwise_equal(case.run_kernel(kernel, *inputs), got, f"{kernel}: repeated run without optional arguments")


# ---------------------------------------------------------------------------- empty inputs
# Every dimension the arguments have, set to 0 in turn (a counted one follows its mask), and,
# where the op takes a mask, a mask with no true entry: every output element must still be
# written, so new memory starts as NaN (and integers as their largest value) to show any
# element a kernel leaves alone.


@pytest.fixture
def new_memory_is_garbage() -> Iterator[None]:
    """torch.empty (at::empty in the bindings too) fills NaN, and integers with their largest value."""
    settings: Any = torch.utils.deterministic  # its flag is set through the module's own property
    was = torch.are_deterministic_algorithms_enabled(), settings.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    settings.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was[0])
    settings.fill_uninitialized_memory = was[1]


@parametrize("case, device, kernel, dtype, dims, none_kept", kernels(), dtypes(), empty_cases)
def test_empty_inputs_give_fully_written_outputs(
    case: OpCase, device: str, kernel: str, dtype: str, dims: dict[str, int], none_kept: bool, new_memory_is_garbage: None
) -> None:
    """Zero rows, zero sequences, zero-size dimensions: every output element is the reference's."""
    inputs = make_empty_inputs(case, dims, dtype, device, none_kept)
    got = case.run_kernel(kernel, *inputs)
    torch.use_deterministic_algorithms(False)  # the reference may use ops without a deterministic variant
    want = case.reference(*inputs)
    assert len(got) == len(want) == len(case.outputs)
    atol, rtol = case.tolerance(dtype)
    for (name, _, _), g, w in zip(case.outputs, got, want):
        assert g.shape == w.shape, f"{name}: shape {tuple(g.shape)}, the reference's {tuple(w.shape)}"
        if g.is_floating_point():
            torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol, rtol=rtol, equal_nan=True, msg=named(name))
        else:
            assert torch.equal(g.cpu(), w.to(g.dtype)), f"{name}: {g.cpu().tolist()} against the reference's {w.tolist()}"


# ---------------------------------------------------------------------------- the same call in another form
# The public function and the native op, leading dimensions given as several, a bool argument's
# true entries stored as other bytes: the same bits.


@parametrize("case, device", on_devices)
def test_native_op_matches_public_function(case: OpCase, device: str) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=4)
    native = case.overload("default")(*inputs, **case.attrs)
    native = native if isinstance(native, tuple) else (native,)
    case.assert_bitwise_equal(native, case.run(*inputs), "torch.ops vs public function")


@parametrize("case, device", unnamed(only(lambda c: c.leading_dim is not None)), on_devices)
def test_leading_dimensions_are_flattened_and_restored(case: OpCase, device: str) -> None:
    """The leading dimension given as two dimensions gives the same bits, shaped back."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=11)
    flat = case.run(*inputs)
    lead = (case.leading_dim,)
    lifted = [t.unsqueeze(0) if shape[:1] == lead else t for t, (_, _, shape, _, _) in zip(inputs, case.args)]
    expected = tuple(o.unsqueeze(0) if shape[:1] == lead else o for o, (_, shape, _) in zip(flat, case.outputs))
    case.assert_bitwise_equal(case.run(*lifted), expected, "leading dimensions")


def bool_bytes(case: OpCase) -> Iterator[Any]:
    """Each bool argument, its true entries stored as another nonzero byte."""
    for index, (name, dtype, _, _, _) in enumerate(case.args):
        if dtype == "bool":
            for byte in (2, 255):
                yield f"{name}-{byte}", (index, byte), ()


@parametrize("case, index, byte, device", bool_bytes, on_devices)
def test_a_bool_argument_reads_each_byte_as_its_truth(case: OpCase, index: int, byte: int, device: str) -> None:
    """Torch lets any bytes be viewed as bool (a uint8 mask's .view(torch.bool)), and indexes by
    such a mask as by its truth: every nonzero byte true.  The op gives the bits it gives for the
    same mask stored as 0s and 1s."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=21)
    want = case.run(*inputs)
    spoiled = list(inputs)
    spoiled[index] = (inputs[index].view(torch.uint8) * byte).view(torch.bool)
    assert spoiled[index].view(torch.uint8).max() == byte  # the test's own premise: such bytes reach the op
    case.assert_bitwise_equal(case.run(*spoiled), want, f"{case.args[index][0]} stored as bytes 0 and {byte}")
