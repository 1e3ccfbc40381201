# Copied from runtime/tests/test_torch_integration.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""The op in torch's machinery: torch.library.opcheck on every overload, autocast following the
spec's policy, the fake kernel and the public function under torch.compile, and meta tensors."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from cases import OpCase, dtypes, kernels, only, package, parametrize, runtime, unnamed

# ---------------------------------------------------------------------------- torch.library


def _opcheck_inputs(case: OpCase, dtype: str, device: str) -> list[Any]:
    # opcheck compares outputs with NaN unequal to NaN: only the first planted value (ignore_index,
    # a mask's false entries), not the later ones that the spec may answer with NaN (an id
    # outside the vocabulary).
    inputs = case.make_inputs(case.shapes[0], dtype, device, seed=13, plant=1)
    return [t.requires_grad_(name in case.grad_inputs) for (name, *_), t in zip(case.args, inputs)]


@parametrize("case, device, kernel, dtype", kernels(extra=("default",)), dtypes(first_only=True))
def test_opcheck(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    """torch.library.opcheck: schema, fake kernel, autograd registration and AOT dispatch of each overload."""
    overload = case.overload(kernel)
    tests = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(overload, tuple(_opcheck_inputs(case, dtype, device)), case.attrs, test_utils=tests)
    if not case.op.backward:
        # No backward: the registration check needs inputs that require grad (differentiating then raises, by design).
        inputs = tuple(t.requires_grad_(t.is_floating_point()) for t in case.make_inputs(case.shapes[0], dtype, device, seed=13, plant=1))
        torch.library.opcheck(overload, inputs, case.attrs, test_utils=("test_autograd_registration",))


# ---------------------------------------------------------------------------- autocast


def _autocast_case(case: OpCase, policy: str, autocast_dtype: str) -> str:
    """The dtype case to start from: float32 inputs for a policy that lowers them (and for none),
    inputs in the autocast dtype for one that widens them to float32; the first case the op allows
    otherwise."""
    start = autocast_dtype if policy == "float32" else "float32"
    dtype_case = "/".join([start] * max(len(case.dtype_vars), 1))
    return dtype_case if dtype_case in case.dtypes else case.dtypes[0]


def _cast_by_hand(case: OpCase, inputs: list[Any], dtype: torch.dtype) -> list[Any]:
    """The inputs as the op's policy casts them: the arguments it names, to ``dtype``."""
    return [t.to(dtype) if t is not None and name in case.op.autocast_args else t for (name, *_), t in zip(case.args, inputs)]


def mixed(case: OpCase) -> Iterator[Any]:
    """With two arguments or more to cast, they also come in mixed dtypes (a float32 weight with a
    bfloat16 activation), which only the cast lets through the op's dtype checks."""
    yield "same", (False,), ()
    if len(case.op.autocast_args) > 1:
        yield "mixed", (True,), ()


def autocast_dtypes(case: OpCase) -> Iterator[Any]:
    for dtype in ("bfloat16", "float16"):
        yield dtype, (dtype,), ()


@parametrize("case, device, kernel, autocast_dtype, mixed", kernels(extra=("default", "public")), autocast_dtypes, mixed)
def test_autocast_follows_the_declared_policy(case: OpCase, device: str, kernel: str | None, autocast_dtype: str, mixed: bool) -> None:
    """Under torch.autocast the op casts as its spec declares: the public function and every
    overload give the outputs, bits and dtypes, of the op called outside autocast on the inputs
    cast by hand."""
    policy = case.op.autocast
    inputs = case.make_inputs(case.shapes[0], _autocast_case(case, policy, autocast_dtype), device, seed=6)
    cast_to = {"lower_precision": getattr(torch, autocast_dtype), "float32": torch.float32, "none": None}[policy]
    if mixed:  # every cast argument after the first in the dtype the policy casts to
        first = case.op.autocast_args[0]
        inputs = [t.to(cast_to) if t is not None and name != first and name in case.op.autocast_args else t for (name, *_), t in zip(case.args, inputs)]
    want = case.run(*(inputs if cast_to is None else _cast_by_hand(case, inputs, cast_to)))
    with torch.autocast(device, dtype=getattr(torch, autocast_dtype)):
        got = case.run(*inputs) if kernel is None else case.run_kernel(kernel, *inputs)
    case.assert_bitwise_equal(got, want, f"{kernel or 'public function'} under autocast({autocast_dtype}) vs inputs cast by hand ({policy})")


# ---------------------------------------------------------------------------- torch.compile and meta tensors


@parametrize("case", unnamed(only(lambda c: True)))
def test_fake_kernel_under_torch_compile(case: OpCase) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=5)
    torch._dynamo.reset()  # every op's test compiles afresh, within dynamo's recompile limit
    default = case.overload("default")

    def native(*args: Any) -> Any:
        return default(*args)

    compiled = torch.compile(native, backend="aot_eager", fullgraph=True)
    if case.dynamic:
        # Output sizes depend on the data: let the graph carry them as unbacked symbols.
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            got = compiled(*inputs, *case.attrs.values())
    else:
        got = compiled(*inputs, *case.attrs.values())
    got = got if isinstance(got, tuple) else (got,)
    case.assert_bitwise_equal(got, case.run(*inputs), "torch.compile vs eager")


@parametrize("case", unnamed(only(lambda c: True)))
def test_public_function_on_meta_tensors(case: OpCase) -> None:
    """Shapes and dtypes without data: the public function answers from the fake kernel."""
    if case.dynamic or case.counted:
        pytest.skip("an output size or a check depends on the data, which a meta tensor does not hold")
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=15)
    want = case.run(*inputs)
    got = case.run(*[t.to("meta") for t in inputs])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype


@parametrize("case", unnamed(only(lambda c: True)))
def test_public_function_under_torch_compile(case: OpCase) -> None:
    """Backend choice and checks trace too: the public function compiles into one graph, its
    lookups traced from empty (earlier calls would have left their answers cached)."""
    torch._dynamo.reset()
    for cache in (runtime._CHOSEN, runtime._OVERLOADS, runtime._PLATFORM_OF):
        cache.clear()
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=12)
    function = getattr(package, case.name)

    def public(*args: Any) -> Any:
        return function(*args)

    compiled = torch.compile(public, backend="aot_eager", fullgraph=not case.dynamic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case.dynamic:
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                got = compiled(*inputs)
        else:
            got = compiled(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    case.assert_bitwise_equal(got, case.run(*inputs), "compiled public function vs eager")
    # Tracing the package's own code warns about nothing (torch's deprecation notices aside).
    ours = [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert not ours, f"torch.compile warned: {ours}"
