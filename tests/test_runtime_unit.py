"""The package's hand-written Python, tested without building its C++: each case imports
generated/cpu's rlkernels (whose native library is absent) in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

pytest.importorskip("torch", reason="the package's Python needs torch")


def in_package(body: str) -> str:
    """Run ``body`` with generated/cpu on the path (no native library built there); its stdout."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], cwd=REPO / "generated" / "cpu", capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_the_package_imports_without_its_native_library_and_says_why_an_op_cannot_run():
    out = in_package(
        """
        import inspect, torch, rlkernels
        assert rlkernels.NATIVE_ERROR is not None
        print(inspect.signature(rlkernels.attention))
        print(rlkernels.det_linear is rlkernels.det_gemm_nt, rlkernels.det_linear.__name__)
        try:
            rlkernels.silu(torch.ones(2, 3))
        except rlkernels.UnsupportedError as exc:
            print(exc)
        """
    )
    signature, alias, refusal = out.splitlines()
    assert signature == (
        "(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, "
        "scale: float = 0.0, causal: bool = True, window: int = -1) -> tuple[torch.Tensor, torch.Tensor]"
    )
    assert alias == "True det_gemm_nt"
    assert refusal.startswith("rlkernels.silu: no backend can run on cpu: elementwise: the native library rlkernels._C failed to load")


def test_arguments_bind_as_a_python_function_binds_them():
    """Positional, keyword, defaults, and the TypeErrors Python gives a def with the same parameters."""
    out = in_package(
        """
        import rlkernels
        from rlkernels import _public
        from rlkernels._registry import OPS

        def det_gemm_nt(a, b, bias=None, out_fp32=False): ...

        bind = _public._binder(OPS["det_gemm_nt"])
        print(bind((1, 2), {}), bind((1,), {"b": 2, "out_fp32": True}), bind((1, 2, 3, True), {}))
        for args, kwargs in [((1, 2, 3, 4, 5), {}), ((1,), {}), ((), {}), ((1, 2), {"a": 1}), ((1, 2), {"c": 1})]:
            for fn in (det_gemm_nt, lambda *a, **k: bind(a, k)):
                try:
                    fn(*args, **kwargs)
                except TypeError as exc:
                    print(str(exc).removeprefix("det_gemm_nt() ").removeprefix("test_arguments_bind_as_a_python_function_binds_them.<locals>."))
        """
    )
    lines = out.splitlines()
    assert lines[0] == "(1, 2, None, False) (1, 2, None, True) (1, 2, 3, True)"
    mine, python = lines[2::2], lines[1::2]
    assert mine[1:] == python[1:], list(zip(mine, python))
    assert mine[0] == "takes from 2 to 4 positional arguments but 5 were given" and "5 were given" in python[0]


def test_every_check_message_is_the_bindings_message():
    """The runtime's checks and the C++ bindings' read the same registry messages."""
    catalog = json.loads((REPO / "generated/cpu/rlkernels/_catalog.json").read_text())
    bindings = (REPO / "generated/cpu/csrc/bindings.cpp").read_text()
    messages = [check["message"] for op in catalog["ops"] for check in op["checks"]]
    assert messages and all(f'"{m}' in bindings for m in messages)


def test_registry_text_never_becomes_code_in_a_compiled_check():
    """A message holding quotes, braces and code reaches the error verbatim, and runs nothing."""
    out = in_package(
        """
        import dataclasses, torch
        from rlkernels import _checks
        from rlkernels._registry import OPS

        hostile = 'x"); import os; os.system("echo pwned") #{__import__("os")}' + "'''"
        op = OPS["silu"]
        checks = tuple(dataclasses.replace(c, message=hostile) if c.kind == "rank" else c for c in op.checks)
        check = _checks._value_check(dataclasses.replace(op, checks=checks))
        try:
            check((torch.ones(3),))
        except _checks.InputError as exc:
            print(repr(str(exc)))
        """
    )
    assert out.strip() == repr('x"); import os; os.system("echo pwned") #{__import__("os")}' + "''', got shape [3]")
    assert "pwned" not in out.replace("echo pwned", "")


def test_fake_kernels_give_shapes_and_dtypes_from_the_registry():
    out = in_package(
        """
        import torch
        from rlkernels import _public
        meta = lambda *shape, dtype=torch.bfloat16: torch.empty(*shape, dtype=dtype, device="meta")
        c = _public._FAKES["det_gemm"](meta(5, 7), meta(7, 3), out_fp32=True)
        lp, ent, lse = _public._FAKES["linear_logp"](meta(4, 8), meta(16, 8), meta(4, dtype=torch.int64))
        print(tuple(c.shape), c.dtype, tuple(lp.shape), lp.dtype, lse.dtype)
        try:
            _public._FAKES["det_gemm"](meta(5, 7), meta(6, 3))
        except Exception as exc:
            print(type(exc).__name__, exc)
        """
    )
    shapes, refusal = out.splitlines()
    assert shapes == "(5, 3) torch.float32 (4,) torch.float32 torch.float32"
    assert refusal == "InputError det_gemm: dimension K of argument 'b' (axis 0) must equal dimension K of argument 'a' (axis 1), got 6 and 7"


def test_type_errors_name_the_argument_before_anything_else_runs():
    out = in_package(
        """
        import torch, rlkernels
        for call in (lambda: rlkernels.logp(torch.ones(2, 3), [0, 1]), lambda: rlkernels.rms_norm(torch.ones(2, 3), torch.ones(3), eps="1")):
            try:
                call()
            except rlkernels.InputTypeError as exc:
                print(exc)
        """
    )
    assert out.splitlines() == ["logp: argument 'ids' must be a torch.Tensor, got list", "rms_norm: attribute 'eps' must be a float, got str '1'"]


def test_the_vocabulary_parallel_sums_are_the_orders_they_name():
    """rlkernels.distributed's vectorised steps against their definitions, bitwise: _midsplit_sum is
    _pairwise over its rows (every count up to 70; magnitudes 60 decades apart, signed zeros,
    infinities and NaNs with payloads), and _exp_leaves is exp(z - shift) of each leaf alone, in
    pieces of BLOCK elements (a leaf of 600 rows takes two)."""
    out = in_package(
        """
        import torch
        import rlkernels.distributed as d

        def same(a, b):
            return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))

        g = torch.Generator().manual_seed(0)
        wrong = []
        for count in range(1, 71):
            values = torch.randn(count, 6, generator=g) * torch.logspace(-30, 30, 6)
            values[count // 2, 0] = -0.0
            values[count // 3, 1] = float("inf")
            values[(2 * count) // 3, 2] = -float("inf")
            values[count - 1, 3] = torch.tensor(0x7FC01234, dtype=torch.int32).view(torch.float32)
            values[0, 4] = torch.tensor(-0x12345, dtype=torch.int32).view(torch.float32)  # a NaN, sign set
            if not same(d._midsplit_sum(values), d._pairwise(list(values))):
                wrong.append(f"midsplit {count}")
        for rows in (3, 600):
            z = torch.randn(rows, 5 * d.VOCAB_LEAF, generator=g) * 40
            shift = z.amax(dim=1)
            leaves = [d._blocked(torch.exp, z[:, i : i + d.VOCAB_LEAF] - shift.unsqueeze(1)) for i in range(0, z.shape[1], d.VOCAB_LEAF)]
            if not same(d._exp_leaves(z, shift).reshape(z.shape), torch.cat(leaves, dim=1)):
                wrong.append(f"exp {rows}")
        print(wrong)
        """
    )
    assert out.strip() == "[]"
