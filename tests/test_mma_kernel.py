"""det_gemm's tensor-core kernel `mma`: rendered for CUDA only, listed before the portable
simt fallback without claiming `portable`, refused on other platforms, and compiling for
sm_90 without register spills in its cp.async path."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, Project

OP = "specs/ops/det_gemm.yaml"
GENERATED = REPO / "generated"
MMA_SOURCE = GENERATED / "cuda/csrc/kernels/cuda/det_gemm_mma.cu"


def test_mma_renders_for_cuda_only():
    found = sorted(p.relative_to(GENERATED).as_posix() for p in GENERATED.rglob("det_gemm_mma*"))
    assert found == ["cuda/csrc/kernels/cuda/det_gemm_mma.cu", "cuda/csrc/kernels/cuda/det_gemm_mma.h"]
    for platform in ("cpu", "rocm", "musa"):
        bindings = (GENERATED / platform / "csrc/bindings.cpp").read_text()
        assert "det_gemm_mma(" not in bindings, f"{platform} bindings call the cuda-only mma launcher"


def test_cuda_registry_prefers_mma_with_simt_as_portable_fallback():
    entry = json.loads((GENERATED / "registry.json").read_text())["ops"]["det_gemm"]
    assert entry["backends"]["cuda"] == ["mma", "simt"]
    assert {platform: names for platform, names in entry["backends"].items() if platform != "cuda"} == {
        "cpu": ["simt"],
        "rocm": ["simt"],
        "musa": ["simt"],
    }
    assert entry["kernels"]["mma"]["guarantees"] == ["batch_invariant", "deterministic"]
    assert "portable" in entry["kernels"]["simt"]["guarantees"]
    registry = (GENERATED / "cuda/rlkernels/_registry.py").read_text()
    assert re.search(r"""["']cuda["']: \(["']mma["'], ["']simt["'],?\)""", registry), "the cuda package's registry must list mma, then simt"


def test_mma_launcher_covers_every_dtype_and_never_uses_tf32():
    source = MMA_SOURCE.read_text()
    launcher = source[source.index("cudaError_t det_gemm_mma(") :]
    for dtype in ("float32", "float16", "bfloat16"):
        assert f"case Dtype::{dtype}:" in launcher
    assert "return cudaErrorInvalidValue;" in launcher, "an unknown dtype must fail loudly"
    assert "return det_gemm_simt(a, b, c, Dtype::float32, Dtype::float32, M, K, N, false, stream);" in source, "float32 goes to the simt kernel"
    assert "return det_gemm_simt(a, b, c, dtype_T, dtype_c, M, K, N, out_fp32, stream);" in source, "so does a float32 output"
    assert ".tf32" not in source and "mma.sync.aligned.m16n8k8" not in source
    assert not re.search(r"\batomic[A-Z]\w*\(|\batom\.|\bred\.", source), "no atomics in a deterministic reduction"


def test_mma_listed_for_rocm_is_refused_and_nothing_is_written(project: Project, capsys):
    before = project.snapshot()
    line = project.edit(OP, "  rocm: [simt]", "  rocm: [mma, simt]")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{OP}:{line}: backends.rocm.0: kernel mma cannot run on rocm; it is written for cuda only" in err, err
    assert project.snapshot() == before, "a refused generate must not create, change or delete any file"


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    candidate = Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def test_generated_mma_kernel_compiles_for_sm90_without_spills(tmp_path: Path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA toolkit and set CUDA_HOME=/usr/local/cuda")
    result = subprocess.run(
        [nvcc, "-std=c++17", "-O3", "-fmad=false", "-c", "-gencode", "arch=compute_90,code=sm_90", "--ptxas-options=-v",
         str(MMA_SOURCE), "-o", str(tmp_path / "det_gemm_mma.o")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    # ptxas reports each kernel as "Compiling entry function '<name>'", then its spills and registers.
    reports = re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores.*?Used (\d+) registers", result.stderr, re.DOTALL)
    kernels = [r for r in reports if "det_gemm_mma_kernel" in r[0]]
    assert len(kernels) == 4, result.stderr  # bf16 and fp16, each with the cp.async and the element loader
    for name, spill, registers in kernels:
        assert int(spill) == 0, f"{name} spills {spill} bytes: the accumulators no longer fit in registers"
        assert int(registers) <= 255, name


def test_mma_for_another_layout_renders_a_named_compile_error(project: Project):
    """The template is written for c[M,N] = a[M,K] b[K,N]; given another layout it must not compile quietly."""
    project.edit(OP, "  - {name: b, dtype: T, shape: [K, N]", "  - {name: b, dtype: T, shape: [N, K]")
    assert project.run("generate") == 0
    source = (project.generated / "cuda/csrc/kernels/cuda/det_gemm_mma.cu").read_text()
    assert '#error "the mma kernel computes c[M,N] = a[M,K] b[K,N]' in source
    assert "layout M,K x N,K -> M,N" in source
    assert "#error" not in MMA_SOURCE.read_text()
