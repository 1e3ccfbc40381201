"""tools/compile_check.py: every generated kernel compiles, and a broken one fails the check by name."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

TOOL = REPO / "tools" / "compile_check.py"
GENERATED = REPO / "generated"
_spec = importlib.util.spec_from_file_location("compile_check", TOOL)
assert _spec is not None and _spec.loader is not None
tool_module = importlib.util.module_from_spec(_spec)
sys.modules["compile_check"] = tool_module  # dataclasses look their module up there
_spec.loader.exec_module(tool_module)

MUSA_NOTE = "checked with nvcc through a header shim (tools/musa_shim), NOT with mcc"


def compile_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=900
    )


def copy_packages(dest: Path, *platforms: str) -> Path:
    """A generated/ tree holding only some platforms' packages, to keep the compiles few."""
    for platform in platforms:
        shutil.copytree(GENERATED / platform, dest / "generated" / platform)
    return dest / "generated"


def require(*tools: str) -> None:
    """Skip, naming the compiler and how to get it, when the tool would not find it either."""
    missing = [tool for tool in tools if tool_module.find_compiler(tool) is None]
    if missing:
        pytest.skip("; ".join(f"{tool} not found: {tool_module.INSTALL_HINTS[tool]}" for tool in missing))


def test_every_generated_kernel_compiles() -> None:
    require("nvcc", "hipcc", "g++")
    result = compile_check()
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    sources = sorted(p for p in GENERATED.glob("*/csrc/kernels/**/*") if p.is_file() and p.suffix != ".h")
    assert sources
    for source in sources:
        assert f"OK      {source.relative_to(REPO).as_posix()}" in out
    for arch in ("gfx90a", "gfx940", "gfx1030"):
        assert f"hipcc {arch}" in out
    assert "nvcc sm_80,sm_90" in out and "nvcc+MUSA-shim sm_80,sm_90" in out
    assert " 0 FAIL, 0 SKIPPED" in out
    assert MUSA_NOTE in out


@pytest.mark.parametrize("platform, source", [("musa", "silu_elementwise.mu"), ("cuda", "silu_elementwise.cu")])
def test_a_broken_kernel_fails_and_is_named(tmp_path: Path, platform: str, source: str) -> None:
    require("nvcc", "g++")
    generated = copy_packages(tmp_path, platform)
    broken = generated / platform / "csrc" / "kernels" / platform / source
    broken.write_text(broken.read_text() + "\nint broken_on_purpose = ;\n")
    # One op's kernels (its device kernel and the CPU one beside it): the full check runs above.
    result = compile_check("--generated", str(generated), "--op", "silu")
    assert result.returncode == 1, result.stdout + result.stderr
    shown = f"generated/{platform}/csrc/kernels/{platform}/{source}"
    assert f"FAIL    {shown}" in result.stdout
    assert "expected an expression" in result.stdout  # the compiler's own message is shown
    assert f"FAILED {shown}" in result.stderr
    assert f"OK      generated/{platform}/csrc/kernels/cpu/silu_elementwise.cpp" in result.stdout


def test_missing_hipcc_fails_with_install_hint_unless_skipped(tmp_path: Path) -> None:
    generated = tmp_path / "generated"
    shutil.copytree(GENERATED / "rocm" / "csrc" / "kernels" / "rocm", generated / "rocm" / "csrc" / "kernels" / "rocm")
    no_tools = {"PATH": str(tmp_path / "empty-bin"), "CUDA_HOME": str(tmp_path / "no-cuda")}

    result = compile_check("--generated", str(generated), env=no_tools)
    assert result.returncode == 2
    assert "hipcc not found" in result.stderr
    assert "apt-get install -y --no-install-recommends hipcc libamdhip64-dev rocm-device-libs" in result.stderr

    result = compile_check("--generated", str(generated), "--skip-missing", env=no_tools)
    assert result.returncode == 0
    assert re.search(r"^SKIPPED +generated/rocm/csrc/kernels/rocm/det_gemm_simt\.hip +hipcc gfx90a$", result.stdout, re.MULTILINE)
    assert "SKIPPED hipcc compiles were NOT checked" in result.stdout


def test_a_source_of_unknown_kind_is_not_passed_over(tmp_path: Path) -> None:
    stray = tmp_path / "generated" / "cuda" / "csrc" / "kernels" / "cuda" / "extra.cuh2"
    stray.parent.mkdir(parents=True)
    stray.write_text("// no toolchain compiles this\n")
    result = compile_check("--generated", str(stray.parents[4]))
    assert result.returncode == 2
    assert "generated/cuda/csrc/kernels/cuda/extra.cuh2: no platform spec has source_suffix '.cuh2'" in result.stderr
