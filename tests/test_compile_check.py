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
import yaml

from conftest import REPO, compiles
from generator.load import load_catalog

TOOL = REPO / "tools" / "compile_check.py"
GENERATED = REPO / "generated"
_spec = importlib.util.spec_from_file_location("compile_check", TOOL)
assert _spec is not None and _spec.loader is not None
tool_module = importlib.util.module_from_spec(_spec)
sys.modules["compile_check"] = tool_module  # dataclasses look their module up there
_spec.loader.exec_module(tool_module)

MUSA_NOTE = "checked with nvcc through a header shim (tools/musa_shim), NOT with mcc"
ROCM_ARCHS = tuple(yaml.safe_load((REPO / "specs" / "platforms" / "rocm.yaml").read_text())["build"]["archs"])
PRAGMA = "#pragma clang fp contract(off)"


def compile_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A bound against a hung compiler, not a speed goal: the full check takes about 7 minutes on
    # two free cores, and twice that where other builds share them.
    return subprocess.run(
        [sys.executable, str(TOOL), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=2400
    )


def copy_packages(dest: Path, *platforms: str, only: str | None = None) -> Path:
    """A generated/ tree holding only some platforms' packages, to keep the compiles few; with
    ``only``, just that kernel's sources (every header stays)."""
    for platform in platforms:
        shutil.copytree(GENERATED / platform, dest / "generated" / platform)
        if only is not None:
            for source in (dest / "generated" / platform / "csrc" / "kernels").rglob("*"):
                if source.is_file() and source.suffix != ".h" and source.stem != only:
                    source.unlink()
    return dest / "generated"


def require(*tools: str) -> None:
    """Skip, naming the compiler and how to get it, when the tool would not find it either."""
    missing = [tool for tool in tools if tool_module.find_compiler(tool) is None]
    if missing:
        pytest.skip("; ".join(f"{tool} not found: {tool_module.INSTALL_HINTS[tool]}" for tool in missing))


@compiles
def test_every_generated_kernel_compiles() -> None:
    """Every kernel source, for its platform's first spec arch (`make compile-check` compiles them
    all, and records the evidence): a source that does not compile fails here."""
    require("nvcc", "hipcc", "g++")
    result = compile_check("--first-arch")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    sources = sorted(p for p in GENERATED.glob("*/csrc/kernels/**/*") if p.is_file() and p.suffix != ".h")
    assert sources
    for source in sources:
        assert f"OK      {source.relative_to(REPO).as_posix()}" in out
    assert re.search(rf"^OK +\S+\.hip +hipcc {ROCM_ARCHS[0]}$", out, re.MULTILINE)
    assert not re.search(rf"hipcc {ROCM_ARCHS[1]}\b", out)
    assert re.search(r"^OK +\S+\.cu +nvcc sm_80$", out, re.MULTILINE) and re.search(r"^OK +\S+\.mu +nvcc\+MUSA-shim sm_80$", out, re.MULTILINE)
    assert " 0 FAIL, " in out
    assert re.search(r"^compile-check: contraction: (\d+) of \1 probes show mul_rn/add_rn unfused$", out, re.MULTILINE), out[-3000:]
    assert MUSA_NOTE in out


@compiles
def test_the_full_check_plans_every_spec_arch_or_says_why_not() -> None:
    """`make compile-check` (no --first-arch): every ROCm arch of the spec is compiled, compiled as
    its stand-in, or skipped with the reason; every CUDA arch is one of nvcc's -gencode targets."""
    require("hipcc")
    catalog = load_catalog(REPO / "specs")
    lacking = tool_module.hip_arch_problems(tool_module.find_compiler("hipcc"), ROCM_ARCHS)
    jobs = tool_module.plan(catalog, GENERATED, lacking)
    hip = [job for job in jobs if job.compiler == "hipcc"]
    sources = {job.source for job in hip}
    for arch in ROCM_ARCHS:
        if arch not in lacking:
            planned = {job.source for job in hip if job.label == f"hipcc {arch}" and job.skip is None}
        elif arch in tool_module.HIP_STAND_INS and tool_module.HIP_STAND_INS[arch] not in lacking:
            planned = {job.source for job in hip if job.label == f"hipcc {tool_module.HIP_STAND_INS[arch]} (for {arch})"}
        else:
            planned = {job.source for job in hip if job.skip == f"{arch}: {lacking[arch]}"}
        assert planned == sources, arch
    cuda_archs = yaml.safe_load((REPO / "specs" / "platforms" / "cuda.yaml").read_text())["build"]["archs"]
    for job in jobs:
        if job.source.suffix == ".cu":
            for arch in cuda_archs:
                assert f"sm_{arch.partition('+')[0].replace('.', '')}" in job.label, (arch, job.label)


@compiles
@pytest.mark.parametrize("platform, source", [("musa", "silu_elementwise.mu"), ("cuda", "silu_elementwise.cu")])
def test_a_broken_kernel_fails_and_is_named(tmp_path: Path, platform: str, source: str) -> None:
    require("nvcc", "g++")
    generated = copy_packages(tmp_path, platform, only="silu_elementwise")
    broken = generated / platform / "csrc" / "kernels" / platform / source
    broken.write_text(broken.read_text() + "\nint broken_on_purpose = ;\n")
    result = compile_check("--generated", str(generated))
    assert result.returncode == 1, result.stdout + result.stderr
    shown = f"generated/{platform}/csrc/kernels/{platform}/{source}"
    assert f"FAIL    {shown}" in result.stdout
    assert "expected an expression" in result.stdout  # the compiler's own message is shown
    assert f"FAILED {shown}" in result.stderr
    assert f"OK      generated/{platform}/csrc/kernels/cpu/silu_elementwise.cpp" in result.stdout


def test_a_host_kernel_every_package_carries_is_compiled_once_and_a_changed_copy_on_its_own(tmp_path: Path) -> None:
    """Every package carries the CPU kernels, byte for byte the same: one compile of a translation
    unit speaks for its copies, and a copy that differs in its source or in a header it includes
    is compiled by itself."""
    require("g++")
    generated = copy_packages(tmp_path, "cpu", "cuda", "rocm", only="silu_elementwise")
    for device in generated.glob("*/csrc/kernels/*/silu_elementwise.*"):
        if device.suffix in (".cu", ".hip"):
            device.unlink()
    header = generated / "cuda" / "csrc" / "kernels" / "cpu" / "rlk_math.h"
    header.write_text(header.read_text() + "\nstatic const int changed_on_purpose = 1;\n")
    broken = generated / "rocm" / "csrc" / "kernels" / "cpu" / "silu_elementwise.cpp"
    broken.write_text(broken.read_text() + "\nint broken_on_purpose = ;\n")
    result = compile_check("--generated", str(generated))
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    shown = {p: f"generated/{p}/csrc/kernels/cpu/silu_elementwise.cpp" for p in ("cpu", "cuda", "rocm")}
    assert f"OK      {shown['cpu']}" in out and f"OK      {shown['cuda']}" in out
    assert f"FAIL    {shown['rocm']}" in out and "expected primary-expression" in out
    assert "the same translation unit as" not in out, "each copy differs, so each was compiled"
    broken.write_text(broken.read_text().replace("int broken_on_purpose = ;", ""))
    header.write_text(header.read_text().replace("static const int changed_on_purpose = 1;", "// a comment changes no token"))
    result = compile_check("--generated", str(generated))
    assert result.returncode == 0, result.stdout + result.stderr
    for platform in ("cuda", "rocm"):
        assert re.search(rf"^OK +{re.escape(shown[platform])} +g\+\+ host\n +the same translation unit as {re.escape(shown['cpu'])}, compiled once$",
                         result.stdout, re.MULTILINE), result.stdout


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


# --------------------------------------------------------------------------- FP contraction on the assembly


def probe_headers(tmp_path: Path, platform: str, *, pragma: bool = True, plain_ops: bool = False) -> Path:
    """The package's numerics headers, as generated or deliberately weakened."""
    headers = tmp_path / "kernels" / platform
    shutil.copytree(GENERATED / platform / "csrc" / "kernels" / platform, headers)
    shutil.copy(GENERATED / platform / "csrc" / "rlk_abi.h", tmp_path / "rlk_abi.h")  # "../../rlk_abi.h" from the kernels
    numerics = headers / "rlk_numerics.h"
    text = numerics.read_text()
    assert PRAGMA in text, "the generated numerics header lost its contraction pragma"
    if not pragma:
        text = text.replace(PRAGMA, "")
    if plain_ops:
        text = text.replace("return __fmul_rn(a, b);", "return a * b;").replace("return __fadd_rn(a, b);", "return a + b;")
    numerics.write_text(text)
    return headers


def hip_probe(headers: Path, contract: str | None) -> object:
    flags = next(p for p in tool_module.load_catalog(REPO / "specs").platforms if p.name == "rocm").build.device_flags
    flags = tuple(f for f in flags if not f.startswith("-ffp-contract")) + ((f"-ffp-contract={contract}",) if contract else ())
    args = (*flags, "-I", str(headers), "-x", "hip", "--cuda-device-only", "-S", "--offload-arch=gfx90a")
    return tool_module.Probe("rocm", "hipcc", "hipcc gfx90a", args, {"HIP_PLATFORM": "amd"})


@compiles
def test_contraction_check_fails_on_a_deliberately_fused_hip_build(tmp_path: Path) -> None:
    """Without the pragma and with -ffp-contract=fast, mul_rn/add_rn fuse, and the check says so."""
    require("hipcc")
    hipcc = str(tool_module.find_compiler("hipcc"))
    fused = tool_module.check_contraction(hip_probe(probe_headers(tmp_path / "a", "rocm", pragma=False), "fast"), hipcc, tmp_path / "fused")
    assert fused.status == "FAIL", fused.output
    assert "fused multiply-add" in fused.output and "v_fmac_f32" in fused.output
    shipped = tool_module.check_contraction(hip_probe(probe_headers(tmp_path / "b", "rocm"), "off"), hipcc, tmp_path / "shipped")
    assert shipped.status == "OK", shipped.output
    assert "fma_rn: v_fmac_f32" in shipped.output  # the explicit fma is found: the scan sees fused instructions


@compiles
def test_the_pragma_alone_keeps_hip_unfused_under_the_compilers_default(tmp_path: Path) -> None:
    """No -ffp-contract flag at all: HIP's default fuses without the pragma and does not with it."""
    require("hipcc")
    hipcc = str(tool_module.find_compiler("hipcc"))
    without = tool_module.check_contraction(hip_probe(probe_headers(tmp_path / "a", "rocm", pragma=False), None), hipcc, tmp_path / "without")
    assert without.status == "FAIL", without.output
    with_pragma = tool_module.check_contraction(hip_probe(probe_headers(tmp_path / "b", "rocm"), None), hipcc, tmp_path / "with")
    assert with_pragma.status == "OK", with_pragma.output


@compiles
def test_a_hip_kernel_without_fma_rn_fails_when_its_assembly_has_a_fused_op(tmp_path: Path) -> None:
    require("hipcc")
    headers = probe_headers(tmp_path, "rocm", pragma=False)
    # A dot product through the numerics header's separate multiply and add (the catalog's GEMMs
    # take the fma step, so none of them is such a kernel any more).
    source = headers / "separate_dot.hip"
    source.write_text(
        '#include "rlk_numerics.h"\n'
        "__global__ void separate_dot(const float* a, const float* b, float* c, int n) {\n"
        "  float acc = 0.0f;\n"
        "  for (int i = 0; i < n; ++i) acc = rlk::rocm::add_rn(acc, rlk::rocm::mul_rn(a[i], b[i]));\n"
        "  c[threadIdx.x] = acc;\n"
        "}\n"
    )
    assert not tool_module.uses_explicit_fma(source)
    assert tool_module.uses_explicit_fma(headers / "det_gemm_simt.hip")
    flags = ("-O3", "-std=c++17", "-ffp-contract=fast", "-save-temps", "--offload-arch=gfx90a", "-c", str(source))
    job = tool_module.Job(source, "separate_dot.hip", "hipcc", "hipcc gfx90a", flags, {"HIP_PLATFORM": "amd"}, save_temps=True)
    out = tmp_path / "out"
    out.mkdir()
    result = tool_module.compile_one(job, str(tool_module.find_compiler("hipcc")), out, 0)
    assert result.status == "FAIL", result.output
    assert "no fma_rn" in result.output and "FP contraction is not off" in result.output


@compiles
def test_contraction_check_fails_on_a_deliberately_fused_cuda_build(tmp_path: Path) -> None:
    """CUDA's PTX: plain operators with -fmad=true fuse into fma.rn.f32, and the check says so."""
    require("nvcc")
    nvcc = str(tool_module.find_compiler("nvcc"))
    catalog = tool_module.load_catalog(REPO / "specs")
    (cuda,) = [p for p in tool_module.contraction_probes(catalog, GENERATED, []) if p.compiler == "nvcc"]
    shipped = tool_module.check_contraction(cuda, nvcc, tmp_path / "shipped")
    assert shipped.status == "OK", shipped.output
    headers = probe_headers(tmp_path / "weak", "cuda", plain_ops=True)
    args = tuple("-fmad=true" if a == "-fmad=false" else str(headers) if a.endswith("kernels/cuda") else a for a in cuda.args)
    fused = tool_module.check_contraction(tool_module.Probe("cuda", "nvcc", cuda.label, args), nvcc, tmp_path / "fused")
    assert fused.status == "FAIL", fused.output
    assert "fma.rn.f32" in fused.output


def test_archs_the_local_hipcc_lacks_are_skipped_by_name_or_compiled_as_a_stand_in() -> None:
    catalog = tool_module.load_catalog(REPO / "specs")
    lacking = {"gfx942": "unknown to this hipcc's LLVM", "gfx1100": "this hipcc has no ROCm device library for it"}
    jobs = [j for j in tool_module.plan(catalog, GENERATED, lacking) if j.shown.endswith("rocm/column_sum_columns.hip")]
    labels = {j.label: j.skip for j in jobs}
    assert labels["hipcc gfx940 (for gfx942)"] is None
    assert labels["hipcc gfx1100"] == "gfx1100: this hipcc has no ROCm device library for it"
    assert labels["hipcc gfx90a"] is None and len(jobs) == len(ROCM_ARCHS)
    if tool_module.find_compiler("hipcc"):
        asked = tool_module.hip_arch_problems(tool_module.find_compiler("hipcc"), ("gfx90a", "gfx9999"))
        assert "gfx90a" not in asked and "gfx9999" in asked


def test_a_fused_op_with_an_exact_product_is_not_contraction() -> None:
    """A power-of-two multiplicand (the back end's 64-bit integer division uses +-2^32) changes no bit."""
    lines = [
        "\tv_mac_f32_e32 v5, 0x4f800000, v6",  # exact: 2^32 * v6
        "\tv_mac_f32_e32 v5, 0xcf800000, v6",  # exact: -2^32 * v6
        "\tv_fmac_f32_e32 v3, v1, v2",  # a real contraction
        "\tv_fma_f32 v1, v2, v3, 0x4f800000",  # the power of two is the addend: the product is not exact
        "\tv_mac_f32_e32 v5, 0x3f800001, v6",  # not a power of two
        "\tv_mad_u64_u32 v[0:1], s[0:1], v2, v3, 0",  # integer
    ]
    assembly = "\n".join(lines)
    assert tool_module.amdgpu_fused(assembly) == ["v_fmac_f32_e32", "v_fma_f32", "v_mac_f32_e32"]


@compiles
def test_the_register_budgeted_kernels_compile_for_their_target_without_spills(tmp_path: Path) -> None:
    """The wgmma kernels (their spec names archs: the sm_90a target, setmaxnreg budgets) are compiled
    for every spec arch with ptxas's report: no spill on any target, and the report is shown."""
    require("nvcc")
    catalog = load_catalog(REPO / "specs")
    jobs = [job for job in tool_module.plan(catalog, GENERATED) if job.resources]
    assert sorted(job.source.name for job in jobs) == ["det_gemm_nt_wgmma.cu", "det_gemm_tn_wgmma.cu", "det_gemm_wgmma.cu"]
    nvcc = tool_module.find_compiler("nvcc")
    for index, job in enumerate(jobs):
        assert "sm_90a" in job.label and ("-Xptxas", "-v") == job.args[job.args.index("-Xptxas") :][:2]
        result = tool_module.compile_one(job, nvcc, tmp_path, index)
        assert result.status == "OK", result.output
        # 8 kernels each: bfloat16 / float16 in, T / float32 out, copied by cp.async or element by element.
        assert re.search(r"^ptxas sm_90a: 8 entries, at most \d+ registers, 0 spill bytes", result.output, re.MULTILINE), result.output


def test_a_spill_in_a_register_budgeted_kernel_is_a_failure() -> None:
    report = (
        "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z1kv\n"
        "    160 bytes stack frame, 310 bytes spill stores, 180 bytes spill loads\n"
        "ptxas info    : Used 168 registers, used 1 barriers, 160 bytes cumulative stack size\n"
    )
    summary, spills = tool_module.ptxas_resources(report)
    assert summary == ["ptxas sm_90a: 1 entries, at most 168 registers, 490 spill bytes, static shared memory at most 0 bytes"]
    assert spills == ["sm_90a _Z1kv: 310 bytes spill stores, 180 bytes spill loads"]
