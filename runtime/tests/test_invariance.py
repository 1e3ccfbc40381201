"""Invariance: the bits each native kernel's declared guarantees promise, checked bitwise at the
sizes its tiles call for -- deterministic, batch_invariant, layout_invariant and portable -- and
bits that do not depend on the caller's floating-point mode."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from cases import (
    OpCase,
    Outputs,
    defaults_and_flags,
    device_type,
    dtypes,
    kernels,
    needs_guarantee,
    only,
    parametrize,
    targets,
    unnamed,
    variants,
)

# ---------------------------------------------------------------------------- determinism and batch invariance


@parametrize("case, device, kernel, dtype, attrs", kernels("deterministic"), dtypes(), variants)
def test_deterministic(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    needs_guarantee(case, device, kernel, "deterministic")
    inputs = case.make_inputs(case.contract_dims(device, kernel), dtype, device, seed=1)
    first = case.run_kernel(kernel, *inputs, **attrs)
    for _ in range(3):
        case.assert_bitwise_equal(case.run_kernel(kernel, *inputs, **attrs), first, f"{kernel}: repeated run")


@parametrize("case, device, kernel, dtype, attrs", unnamed(only(lambda c: c.batch_dim is not None)), kernels("batch_invariant"), dtypes(), variants)
def test_batch_invariant(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    needs_guarantee(case, device, kernel, "batch_invariant")
    own = case.facts(device, kernel)
    dims = case.contract_dims(device, kernel)
    assert case.batch_dim is not None
    total = dims[case.batch_dim]
    inputs = case.make_inputs(dims, dtype, device, seed=2)
    outputs = case.run_kernel(kernel, *inputs, **attrs)
    full = case.batched(outputs)
    assert full, "batch_invariant needs an output with the batch dimension"

    for size in own.batch_sizes:
        # Every row, as part of a batch of `size`: the whole batch cut into consecutive pieces.
        for start in range(0, total, size):
            stop = min(start + size, total)
            got = case.batched(case.run_kernel(kernel, *case.take(inputs, start, stop), **attrs))
            case.assert_bitwise_equal(got, case.out_take(outputs, start, stop), f"{kernel}: rows {start}..{stop} as a batch of {stop - start} vs {total}")

    axes = [case.outputs[i][1].index(case.batch_dim) for i in case.batched_outputs]
    for at in own.chunks:
        head = case.batched(case.run_kernel(kernel, *case.take(inputs, 0, at), **attrs))
        tail = case.batched(case.run_kernel(kernel, *case.take(inputs, at, total), **attrs))
        chunked = tuple(torch.cat([h, t], dim=axis) for h, t, axis in zip(head, tail, axes))
        case.assert_bitwise_equal(chunked, full, f"{kernel}: chunked at {at} of {total}")

    pad = own.pad_by
    padded_inputs = [
        t if axis is None else torch.cat([t, torch.zeros_like(t.narrow(axis, 0, 1)).expand(*[pad if i == axis else s for i, s in enumerate(t.shape)])], dim=axis)
        for t, axis in zip(inputs, case.batch_axes())
    ]
    case.assert_bitwise_equal(case.out_take(case.run_kernel(kernel, *padded_inputs, **attrs), 0, total), full, f"{kernel}: {total} rows padded by {pad}")


# ---------------------------------------------------------------------------- layout invariance
# The reduction dimension cut into 2, 4 and 8 equal parts (tensor-parallel shards), each part
# reduced on its own and the parts combined pairwise by mid-split with adds in the output dtype,
# must give the whole reduction's bits.  The parts hold 12, 6 and 3 leaves: subtrees that are
# not powers of two are covered too.
PARTS = (2, 4, 8)


def _part(case: OpCase, tensors: list[Any], index: int, size: int) -> list[Any]:
    """Part ``index`` (``size`` elements of the reduction dimension) of every argument that has it."""
    assert case.reduction is not None
    dim = case.reduction.dim
    return [t if dim not in shape else t.narrow(shape.index(dim), index * size, size).contiguous() for t, (_, _, shape, _, _) in zip(tensors, case.args)]


def _pairwise(results: list[Outputs]) -> Outputs:
    """((p0 + p1) + (p2 + p3)) ...: the mid-split tree over the parts, each add in the outputs' dtype."""
    if len(results) == 1:
        return results[0]
    mid = len(results) // 2
    return tuple(left + right for left, right in zip(_pairwise(results[:mid]), _pairwise(results[mid:])))


@parametrize("case, device, kernel, dtype", unnamed(only(lambda c: c.reduction is not None and c.reduction.order == "k_tree")), kernels("layout_invariant"), dtypes())
def test_layout_invariant(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    needs_guarantee(case, device, kernel, "layout_invariant")
    assert case.reduction is not None and case.reduction.leaf is not None
    extent = case.reduction.leaf * max(PARTS) * 3
    inputs = case.make_inputs({**case.shapes[0], case.reduction.dim: extent}, dtype, device, seed=4)
    whole = case.run_kernel(kernel, *inputs)
    for parts in PARTS:
        size = extent // parts
        combined = _pairwise([case.run_kernel(kernel, *_part(case, inputs, index, size)) for index in range(parts)])
        case.assert_bitwise_equal(combined, whole, f"{kernel}: {case.reduction.dim} = {extent} in {parts} parts of {size}, combined pairwise")


# ---------------------------------------------------------------------------- portability


def _portable_kernels(case: OpCase) -> Iterator[Any]:
    if all(device_type(platform) == "cpu" for platform in case.kernels):
        reason = "this package carries no device kernels: portability compares a device kernel with the CPU's"
        yield "no-device", (None, None), (pytest.mark.skip(reason=reason),)
        return
    yield from kernels("portable", device_only=True)(case)


@parametrize("case, device, kernel, dtype, attrs", _portable_kernels, dtypes(), defaults_and_flags)
def test_portable(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """Each device kernel that declares portable gives the bits of the CPU's kernel."""
    needs_guarantee(case, device, kernel, "portable")
    cpu_kernel = case.backend_for("cpu")
    if "portable" not in cpu_kernel.guarantees:
        pytest.skip(f"the CPU's {cpu_kernel.name} does not declare portable")
    for seed, shape in enumerate((case.shapes[1 % len(case.shapes)], case.contract_dims(device, kernel))):
        inputs = case.make_inputs(shape, dtype, device, seed=3 + seed)
        got = case.run_kernel(kernel, *inputs, **attrs)
        case.assert_bitwise_equal(got, case.run_kernel(cpu_kernel.name, *[t.cpu() for t in inputs], **attrs), f"{kernel} on {device} vs {cpu_kernel.name} on cpu")


# ---------------------------------------------------------------------------- the caller's floating-point mode
# A process may flush subnormals to zero (torch.set_flush_denormal(True): x86's FTZ and DAZ, Arm's
# FZ) or change the rounding mode; a host kernel computes in IEEE's default mode whatever the
# caller set, so its bits never depend on it, and gives the caller's mode back.


def _host_kernels(case: OpCase) -> Iterator[Any]:
    for platform, device, kernel, marks in targets(case):
        if device_type(platform) == "cpu":
            yield f"{platform}-{kernel}", (device, kernel), marks


def _with_subnormals(t: torch.Tensor) -> torch.Tensor:
    """Every third element of a float tensor replaced by a subnormal of its dtype (of either sign)."""
    if not t.is_floating_point() or t.numel() == 0:
        return t
    tiny = torch.finfo(t.dtype).tiny
    flat = t.detach().clone().reshape(-1)
    steps = torch.arange(flat.numel(), dtype=torch.float64)
    subnormal = (tiny * ((steps % 7) + 1) / 8 * torch.where(steps % 2 == 0, 1.0, -1.0)).to(t.dtype)
    flat[::3] = subnormal[::3]
    return flat.reshape(t.shape)


@parametrize("case, device, kernel, dtype", _host_kernels, dtypes())
def test_the_callers_flush_to_zero_mode_changes_no_bit(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    inputs = [_with_subnormals(t) for t in case.make_inputs(case.shapes[0], dtype, device, seed=21)]
    want = case.run_kernel(kernel, *inputs, **case.attrs)
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode torch can set (no SSE3 on x86)")
    try:
        got = case.run_kernel(kernel, *inputs, **case.attrs)
        still_flushing = torch.tensor([torch.finfo(torch.float32).tiny]) / 2 == 0
    finally:
        torch.set_flush_denormal(False)
    case.assert_bitwise_equal(got, want, f"{kernel} with the caller flushing subnormals vs without")
    assert bool(still_flushing), "the kernel did not give the caller its flush-to-zero mode back"
