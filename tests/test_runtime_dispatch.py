"""The generated runtime detects platforms as users' machines present them and fails closed.

Vendor plugins are faked (as a user's CI without the hardware must): a stand-in
`torch_musa` that registers the "musa" device, or a `torch.version.hip` string.  Each
case runs in a fresh interpreter, since the fakes change torch's global state.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

pytest.importorskip("torch", reason="the generated runtime needs torch")

FAKE_TORCH_MUSA = """
import sys, types, torch

def install_fake_torch_musa(available=True, broken=False):
    module = types.ModuleType("torch_musa")
    if broken:
        def __getattr__(name):
            raise RuntimeError("driver mismatch")
        module.__getattr__ = __getattr__
        sys.modules["torch_musa"] = None  # `import torch_musa` raises ImportError
        return
    torch.utils.rename_privateuse1_backend("musa")
    torch.musa = types.SimpleNamespace(is_available=lambda: available)
    sys.modules["torch_musa"] = module
"""


def run_in_package(platform: str, body: str) -> str:
    script = FAKE_TORCH_MUSA + textwrap.dedent(body)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO / "generated" / platform, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_import_leaves_torch_dynamo_unloaded_and_marks_constants_as_torch_does():
    """`import rlkernels` costs no torch._dynamo import (about as long as importing torch), and
    the constant mark it sets instead is the one torch.compiler.assume_constant_result sets."""
    out = run_in_package(
        "cpu",
        """
        import rlkernels
        from rlkernels import _runtime
        print("torch._dynamo" in sys.modules)

        def ours(): pass
        def torchs(): pass
        _runtime._assume_constant_result(ours)
        torch.compiler.assume_constant_result(torchs)
        print(vars(torchs) != {}, vars(ours) == vars(torchs), vars(_runtime._native_available) == vars(torchs))
        """,
    )
    assert out.splitlines() == ["False", "True True True"]


def test_musa_is_detected_through_torch_musa_before_cuda():
    out = run_in_package(
        "musa",
        """
        install_fake_torch_musa(available=True)
        import rlkernels
        print(rlkernels.detect_platform(), rlkernels.platform_of("musa"), rlkernels.platform_of("cpu"))
        """,
    )
    assert out == "musa musa cpu"


def test_musa_without_a_device_falls_back_to_cpu_detection():
    out = run_in_package(
        "musa",
        """
        install_fake_torch_musa(available=False)
        import rlkernels
        print(rlkernels.detect_platform())
        """,
    )
    assert out == "cpu"


def test_missing_or_broken_torch_musa_never_crashes_detection():
    out = run_in_package(
        "musa",
        """
        install_fake_torch_musa(broken=True)
        import rlkernels
        print(rlkernels.detect_platform(), rlkernels.NATIVE_ERROR is not None)
        """,
    )
    assert out == "cpu True"


def test_musa_tensor_without_the_native_library_fails_closed():
    out = run_in_package(
        "musa",
        """
        install_fake_torch_musa(available=True)
        import rlkernels
        try:
            rlkernels.select_backend("det_gemm", "musa")
        except rlkernels.UnsupportedError as exc:
            print(exc)
        """,
    )
    assert "no backend can run on musa" in out and "failed to load" in out


def test_rocm_tensors_are_told_apart_from_cuda_by_torch_version_hip():
    out = run_in_package(
        "cuda",
        """
        import torch
        torch.version.hip = "6.2.41133"
        import rlkernels
        print(rlkernels.platform_of("cuda"))
        try:
            rlkernels.select_backend("det_gemm", "rocm")
        except rlkernels.UnsupportedError as exc:
            print(exc)
        """,
    )
    first, message = out.splitlines()
    assert first == "rocm"
    assert "this build carries kernels for cuda, cpu, not for rocm tensors" in message and "+rocm<version>" in message


def test_the_registry_lists_exactly_the_backends_the_admission_rule_admits():
    """One owner of the rule: every package's registry lists, per op and carried platform, the
    spec's backends that ``admission.admissible`` accepts -- the verdict the contract guard refuses
    a spec by and ``explain`` words -- in the spec's order; the runtime only picks the first that
    can run, and never re-decides what keeps a contract."""
    import json

    from generator.admission import admissible
    from generator.explain import verdict
    from generator.load import load_catalog

    catalog = load_catalog(REPO / "specs", REPO)
    for package in ("cpu", "cuda", "rocm", "musa"):
        build = json.loads((REPO / "generated" / package / "rlkernels/_build.json").read_text())
        for op in catalog.ops:
            for platform, listed in build["backends"][op.name].items():
                expected = [name for name in op.backends[platform] if admissible(op, platform, name).accepted]
                assert listed == expected == list(op.backends[platform]), (package, op.name, platform)
                assert all(verdict(op, platform, name)[0] for name in listed)
    runtime = (REPO / "runtime/rlkernels/_runtime.py").read_text()
    assert "guarantees" not in runtime.split("def _choose_backend", 1)[1], "the runtime restates the admission rule"
