"""The tensor-core kernel `mma` of det_gemm, det_gemm_nt and det_gemm_tn: rendered for CUDA
only, listed before the portable simt fallback without claiming `portable`, refused on other
platforms, and compiling for sm_90 without register spills."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, Project, compiles, copy_project

OP = "specs/ops/det_gemm.yaml"
GENERATED = REPO / "generated"
KERNELS = GENERATED / "cuda/csrc/kernels/cuda"
MMA_SOURCE = KERNELS / "det_gemm_mma.cu"
MMA_OPS = ("det_gemm", "det_gemm_nt", "det_gemm_tn")


def test_mma_renders_for_cuda_only():
    found = sorted(p.relative_to(GENERATED).as_posix() for p in GENERATED.rglob("*_mma.*"))
    assert found == sorted(f"cuda/csrc/kernels/cuda/{op}_mma.{ext}" for op in MMA_OPS for ext in ("cu", "h"))
    # The instruction wrappers come with the kernels that include them, nowhere else.
    assert sorted(p.relative_to(GENERATED).as_posix() for p in GENERATED.rglob("rlk_tensor_core.h")) == ["cuda/csrc/kernels/cuda/rlk_tensor_core.h"]
    for platform in ("cpu", "rocm", "musa"):
        bindings = (GENERATED / platform / "csrc/bindings.cpp").read_text()
        assert "_mma(" not in bindings, f"{platform} bindings call a cuda-only mma launcher"


@pytest.mark.parametrize("op", MMA_OPS)
def test_cuda_registry_prefers_mma_with_simt_as_portable_fallback(op: str):
    entry = json.loads((GENERATED / "registry.json").read_text())["ops"][op]
    # wgmma first: its launcher runs it on an sm_90a build on a 9.0 device and hands every other to mma.
    assert entry["backends"]["cuda"] == ["wgmma", "mma", "simt"]
    assert {platform: names for platform, names in entry["backends"].items() if platform != "cuda"} == {
        "cpu": ["simt", "amx"],
        "rocm": ["simt"],
        "musa": ["simt"],
    }
    assert entry["kernels"]["mma"]["guarantees"] == ["batch_invariant", "deterministic"]
    assert "portable" in entry["kernels"]["simt"]["guarantees"]
    build = json.loads((GENERATED / "cuda/rlkernels/_build.json").read_text())
    assert build["backends"][op] == {"cuda": ["wgmma", "mma", "simt"], "cpu": ["simt", "amx"]}, f"the cuda package's registry must list wgmma, mma, then simt, for {op}"


@pytest.mark.parametrize(("op", "dims", "bias"), [("det_gemm", "M, K, N", ""), ("det_gemm_nt", "M, K, N", "bias, "), ("det_gemm_tn", "K, M, N", "")])
def test_mma_launcher_covers_every_dtype_and_never_uses_tf32(op: str, dims: str, bias: str):
    source = (KERNELS / f"{op}_mma.cu").read_text()
    launcher = source[source.index(f"cudaError_t {op}_mma(") :]
    for dtype in ("float32", "float16", "bfloat16"):
        assert f"case Dtype::{dtype}:" in launcher
    assert "return cudaErrorInvalidValue;" in launcher, "an unknown dtype must fail loudly"
    # The simt launcher takes the dims in its op's order (K first when A is [K, M]), and det_linear's bias.
    assert f"return {op}_simt(a, b, {bias}c, Dtype::float32, Dtype::float32, {dims}, false, stream);" in source, "float32 goes to the simt kernel"
    # The launcher hands on its own parameters, named by the op's ABI (arg_, out_, dtype_, dim_, attr_).
    forwarded = ", ".join(f"dim_{d}" for d in dims.split(", "))
    arg_bias = "arg_bias, " if bias else ""
    assert f"return {op}_simt(arg_a, arg_b, {arg_bias}out_c, dtype_T, dtype_out_c, {forwarded}, attr_out_fp32, stream);" in source, "so does a float32 output"
    instructions = source + (KERNELS / "rlk_tensor_core.h").read_text()
    assert ".tf32" not in instructions and "mma.sync.aligned.m16n8k8" not in instructions
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in instructions
    assert not re.search(r"\batomic[A-Z]\w*\(|\batom\.|\bred\.", instructions), "no atomics in a deterministic reduction"


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


@compiles
@pytest.mark.parametrize("op", MMA_OPS)
def test_generated_mma_kernel_compiles_for_sm90_without_spills(tmp_path: Path, op: str):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA toolkit and set CUDA_HOME=/usr/local/cuda")
    result = subprocess.run(
        [nvcc, "-std=c++17", "-O3", "-fmad=false", "-c", "-gencode", "arch=compute_90,code=sm_90", "--ptxas-options=-v",
         str(KERNELS / f"{op}_mma.cu"), "-o", str(tmp_path / f"{op}_mma.o")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    # ptxas reports each kernel as "Compiling entry function '<name>'", then its spills and registers.
    reports = re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores.*?Used (\d+) registers", result.stderr, re.DOTALL)
    kernels = [r for r in reports if f"{op}_mma_kernel" in r[0]]
    assert len(kernels) == 4, result.stderr  # bf16 and fp16, each with the cp.async and the element loader
    for name, spill, registers in kernels:
        assert int(spill) == 0, f"{name} spills {spill} bytes: the accumulators no longer fit in registers"
        assert int(registers) <= 255, name


def test_mma_for_another_layout_is_refused_naming_what_it_computes(tmp_path, capsys):
    """The template computes the layout its params name; given another, generation refuses the spec
    rather than render a kernel that computes something else.  (det_gemm alone, without its
    backward: the contracts refuse backward steps that no longer fit B's new shape, the other
    GEMMs' included.)"""
    project = copy_project(tmp_path / "proj", with_generated=False, ops=("det_gemm",))
    project.edit(OP, "  - {name: b, dtype: T, shape: [K, N]", "  - {name: b, dtype: T, shape: [N, K]")
    project.edit(OP, '  - {op: det_gemm_nt, args: ["grad(c)", b], gives: [a], attrs: []}\n  - {op: det_gemm_tn, args: [a, "grad(c)"], gives: [b], attrs: []}\n', "")
    project.edit(OP, "backward:\n", "")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "kernels.mma.template: cannot render cuda/csrc/kernels/cuda/det_gemm_mma.cu: " in err, err
    assert "implements only with these params, M,K x K,N -> M,N" in err and "det_gemm has layout M,K x N,K -> M,N" in err, err
    assert not (project.generated / "cuda").exists()


def test_mma_without_a_tile_parameter_is_refused(project: Project, capsys):
    before = project.snapshot()
    project.edit(OP, " warps_m: 2,", "")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "implements only kernels whose spec gives the tile parameter warps_m in its params" in err, err
    assert project.snapshot() == before


def _gpu_check():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "tools/gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_check", module)
    spec.loader.exec_module(module)
    return module


@compiles
def test_every_tile_configuration_gpu_check_tries_compiles_without_spills(tmp_path: Path):
    """A candidate that failed to build on the GPU machine would waste its device time; find out here."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install the CUDA toolkit and set CUDA_HOME=/usr/local/cuda")
    gpu_check = _gpu_check()
    csrc = tmp_path / "csrc"
    shutil.copytree(GENERATED / "cuda/csrc", csrc)  # the includes, beside each variant
    processes = []
    for index, tiles in enumerate(gpu_check.TILE_CANDIDATES):
        smem = tiles["stages"] * (tiles["block_m"] + tiles["block_n"]) * tiles["block_k"] * 2
        assert smem <= 227 * 1024, f"{tiles} needs {smem} bytes of shared memory, more than an sm_90 block may have"
        source = csrc / f"kernels/cuda/tiles_{index}.cu"
        # What the tiles stage builds: the kernel rendered through the generator with these params.
        source.write_text(gpu_check.tile_source(tiles))
        assert "using Tiles = MmaTiles<{block_m}, {block_n}, {block_k}, {warps_m}, {warps_n}, {stages}, {blocks_per_sm}, false, false>;".format(**tiles) in source.read_text()
        command = [nvcc, "-std=c++17", "-O3", "-fmad=false", "-c", "-gencode", "arch=compute_90,code=sm_90", "--ptxas-options=-v", str(source), "-o", str(tmp_path / f"{index}.o")]
        processes.append((tiles, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    for tiles, process in processes:
        _, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, f"{tiles}:\n{stderr}"
        reports = re.findall(r"Compiling entry function '(\w+)'.*?(\d+) bytes spill stores.*?Used (\d+) registers", stderr, re.DOTALL)
        kernels = [r for r in reports if "det_gemm_mma_kernel" in r[0]]
        assert len(kernels) == 4, stderr
        assert all(int(spill) == 0 for _, spill, _ in kernels), f"{tiles} spills:\n{stderr}"
