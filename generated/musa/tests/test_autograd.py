# Copied from runtime/tests/test_autograd.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Autograd: gradients against the reference's, deterministic, refused where the spec declares no
backward or for an argument it gives none; forward-mode AD and gradients under torch.func refused
naming the op; vmap giving each sample's bits."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from cases import OpCase, Outputs, dtypes, kernels, named, on_devices, only, parametrize, registry, unnamed
from torch.autograd import forward_ad

# ---------------------------------------------------------------------------- gradients


def _loss_and_grads(case: OpCase, inputs: list[Any], outputs_of: Callable[..., Outputs], cotangent_seed: int, output_dtypes: dict[str, torch.dtype] | None = None) -> Any:
    output_dtypes = output_dtypes or {}
    leaves = [None if t is None else t.detach().requires_grad_(name in case.grad_inputs) for (name, *_), t in zip(case.args, inputs)]
    outputs = outputs_of(*leaves)
    generator = torch.Generator().manual_seed(cotangent_seed)
    # Cotangents are rounded to each output's dtype first, so the float32 reference
    # receives exactly the gradients the kernels receive.
    loss: Any = sum(
        (o.float() * torch.randn(o.shape, generator=generator).to(output_dtypes.get(name, o.dtype)).float().to(o.device)).sum()
        for o, (name, _, differentiable) in zip(outputs, case.outputs)
        if differentiable and o.is_floating_point()
    )
    return torch.autograd.grad(loss, [leaf for leaf in leaves if leaf is not None and leaf.requires_grad])


differentiable = unnamed(only(lambda c: bool(c.op.backward)))


@parametrize("case, device, dtype", differentiable, on_devices, dtypes())
def test_backward_matches_reference(case: OpCase, device: str, dtype: str) -> None:
    inputs = case.make_inputs(case.shapes[0], dtype, device, seed=7)
    got = _loss_and_grads(case, inputs, case.run, cotangent_seed=8)
    output_dtypes = {name: o.dtype for (name, *_), o in zip(case.outputs, case.run(*inputs))}
    ref_inputs = [t.cpu().float() if t.is_floating_point() else t.cpu() for t in inputs]
    want = _loss_and_grads(case, ref_inputs, case.reference, cotangent_seed=8, output_dtypes=output_dtypes)
    atol, rtol = case.tolerance(dtype)
    for name, g, w in zip(case.grad_inputs, got, want):
        torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol * 4, rtol=rtol * 4, equal_nan=True, msg=named(f"grad of {name}"))


@parametrize("case, device, dtype", unnamed(only(lambda c: bool(c.op.backward) and c.has_optional)), on_devices, dtypes())
def test_backward_without_optional_arguments(case: OpCase, device: str, dtype: str) -> None:
    """Every optional argument left out (None): the gradients of the others, against the reference's."""
    inputs = case.without_optional(case.make_inputs(case.shapes[0], dtype, device, seed=7))
    got = _loss_and_grads(case, inputs, case.run, cotangent_seed=8)
    output_dtypes = {name: o.dtype for (name, *_), o in zip(case.outputs, case.run(*inputs))}
    ref_inputs = [None if t is None else t.cpu().float() if t.is_floating_point() else t.cpu() for t in inputs]
    want = _loss_and_grads(case, ref_inputs, case.reference, cotangent_seed=8, output_dtypes=output_dtypes)
    names = [name for (name, *_), t in zip(case.args, inputs) if t is not None and name in case.grad_inputs]
    assert len(got) == len(want) == len(names)
    atol, rtol = case.tolerance(dtype)
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol * 4, rtol=rtol * 4, equal_nan=True, msg=named(f"grad of {name}"))


@parametrize("case, device, dtype", differentiable, on_devices, dtypes())
def test_backward_is_deterministic(case: OpCase, device: str, dtype: str) -> None:
    inputs = case.make_inputs(case.shapes[0], dtype, device, seed=9)
    first = _loss_and_grads(case, inputs, case.run, cotangent_seed=10)
    case.assert_bitwise_equal(_loss_and_grads(case, inputs, case.run, cotangent_seed=10), first, "repeated backward")


def undifferentiated(case: OpCase) -> Iterator[Any]:
    """The floating arguments the backward gives no gradient for."""
    if case.op.backward:
        for a in case.op.args:
            if a.dtypes[0] in ("float32", "float16", "bfloat16") and a.name not in case.grad_inputs:
                yield a.name, (a.name,), ()


@parametrize("case, device, arg", on_devices, undifferentiated)
def test_no_silent_gradient_for_undifferentiated_arguments(case: OpCase, device: str, arg: str) -> None:
    """The backward gives no gradient for these arguments: asking for one is refused, never answered with None."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=14)
    leaves = [t.requires_grad_(name == arg) for (name, *_), t in zip(case.args, inputs)]
    outputs = case.run(*leaves)
    loss = sum(o.float().sum() for o, (_, _, differentiable) in zip(outputs, case.outputs) if differentiable and o.requires_grad)
    with pytest.raises(RuntimeError, match="no gradient flows to"):
        loss.backward()  # type: ignore[union-attr]


@parametrize("case, device, kernel", unnamed(only(lambda c: not c.op.backward)), kernels(extra=("public",)))
def test_not_differentiable_is_refused(case: OpCase, device: str, kernel: str | None) -> None:
    """The spec declares no backward: differentiating through the op raises instead of giving no or zero gradients."""
    inputs = [t.requires_grad_(t.is_floating_point()) for t in case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=14)]
    outputs = case.run(*inputs) if kernel is None else case.run_kernel(kernel, *inputs)
    loss = sum(o.float().sum() for o in outputs if o.is_floating_point())
    with pytest.raises(RuntimeError, match="is not differentiable"):
        loss.backward()  # type: ignore[union-attr]
    with torch.no_grad():
        assert not any(o.requires_grad for o in (case.run(*inputs) if kernel is None else case.run_kernel(kernel, *inputs)))


# ---------------------------------------------------------------------------- forward mode, torch.func and vmap
# One rule for every op, at its autograd kernel, which the public function and every overload
# reach: a tangent is refused (no op has a forward derivative, and below autograd a tangent would
# be dropped, reading as zeros), and so is a gradient asked inside a torch.func transform.
# torch.func.vmap runs the op once per sample, through torch's per-sample fallback.


def forward_modes(case: OpCase) -> Iterator[Any]:
    for mode in ("jvp", "jacfwd", "dual", "dual_under_no_grad"):
        yield mode, (mode,), ()


def _refusal(case: OpCase, what: str) -> str:
    return re.escape(f"{registry.PACKAGE}.{case.name} {what}")


@parametrize("case, device, kernel, mode", kernels(extra=("default", "public")), forward_modes)
def test_forward_mode_ad_is_refused(case: OpCase, device: str, kernel: str | None, mode: str) -> None:
    """A tangent through the op, by torch.func.jvp, jacfwd or dual tensors (with grad mode on or
    off), raises naming the op, instead of giving a zero tangent or none."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=23)
    function, primals = case.of_floating(kernel, inputs)
    generator = torch.Generator().manual_seed(24)
    tangents = tuple(torch.randn(p.shape, generator=generator).to(p.dtype).to(p.device) for p in primals)
    with pytest.raises(RuntimeError, match=_refusal(case, "does not support forward-mode AD")):
        if mode == "jvp":
            torch.func.jvp(function, primals, tangents)
        elif mode == "jacfwd":
            # With respect to one scale of every floating input: jacfwd's own path (vmap over jvp), at a basis of one.
            torch.func.jacfwd(lambda scale: function(*(p * scale for p in primals)))(torch.ones((), device=device))
        else:
            with torch.no_grad() if mode == "dual_under_no_grad" else contextlib.nullcontext(), forward_ad.dual_level():
                function(*(forward_ad.make_dual(p, t) for p, t in zip(primals, tangents)))


def reverse_transforms(case: OpCase) -> Iterator[Any]:
    for transform in ("grad", "vjp"):
        yield transform, (transform,), ()


@parametrize("case, device, kernel, transform", kernels(extra=("default", "public")), reverse_transforms)
def test_gradient_under_a_torch_func_transform_is_refused(case: OpCase, device: str, kernel: str | None, transform: str) -> None:
    """torch.func.grad and vjp raise naming the op (the op's autograd runs outside torch.func's
    transforms), where torch would name none; an op without a backward says it is not differentiable."""
    function, primals = case.of_floating(kernel, case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=25))
    what = "does not support gradients under torch.func transforms" if case.op.backward else "is not differentiable"
    with pytest.raises(RuntimeError, match=_refusal(case, what)):
        if transform == "grad":
            torch.func.grad(lambda *floating: sum(o.float().sum() for o in function(*floating) if o.is_floating_point()))(*primals)
        else:
            torch.func.vjp(function, *primals)


@parametrize("case, device, kernel", kernels(extra=("default", "public")))
def test_vmap_gives_each_samples_bits(case: OpCase, device: str, kernel: str | None) -> None:
    """torch.func.vmap over two samples gives each sample's own bits, or raises: never another result.
    An op whose output size follows its data (pack) cannot stack its samples, and a check that
    reads a value (.item()) cannot run under vmap; torch refuses both."""
    samples = [case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=seed) for seed in (26, 27)]
    def call(*values: Any) -> Outputs:
        return case.run(*values) if kernel is None else case.run_kernel(kernel, *values)

    stacked = [None if first is None else torch.stack([first, second]) for first, second in zip(*samples)]
    try:
        got = torch.func.vmap(call)(*stacked)
    except RuntimeError as refused:
        assert case.dynamic or "vmap" in str(refused), f"vmap raised where it has no reason to: {refused}"
        return
    want = tuple(torch.stack(outputs) for outputs in zip(call(*samples[0]), call(*samples[1])))
    case.assert_bitwise_equal(got, want, "vmap over two samples vs each sample alone")
