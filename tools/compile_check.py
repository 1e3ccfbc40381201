"""Compile every generated kernel source with its platform's compiler.

    python tools/compile_check.py [--root DIR] [--generated DIR] [--skip-missing] [--no-evidence] [--first-arch] [--op NAME ...]

Kernel sources are torch-free, so each compiles in seconds with the vendor compiler alone:
`.cu` with nvcc, `.hip` with hipcc (once per arch), `.cpp` with g++, and `.mu` with nvcc
through the header shim in tools/musa_shim, because mcc is not obtainable here. Flags and
arch lists come from specs/platforms/*.yaml, so the check compiles what the build compiles.
Every package carries the CPU kernels; a host source whose preprocessed translation unit and
flags equal an earlier one's is reported with that compile instead of compiled again.
A spec arch the local hipcc cannot compile for (Debian's hipcc 5.2.3 predates gfx942, gfx950
and RDNA 3.5/4, and ships no device library for RDNA 3) is reported as SKIPPED with the reason,
after a one-line probe asks hipcc; gfx942 is then compiled as gfx940, its ISA family's first
target, which that hipcc knows.

FP contraction is checked on the compilers' output, not taken from the flags: a probe kernel
that multiplies and adds with the package's mul_rn/add_rn (rlk_numerics.h, with the spec's
device flags) must show no fused multiply-add in its assembly (AMDGPU v_fma/v_fmac/v_mad/v_mac,
PTX fma/mad), while its fma_rn twin must show one, so a scan that matches nothing cannot pass.
Each HIP kernel that calls no fma_rn (nor includes rlk_math.h) must have no fused instruction
in its assembly either (-save-temps), but for those with an exact product (a power-of-two
multiplicand, as in the back end's 64-bit integer division).  mcc is not available: MUSA's contraction is not checked.
Exit status: 0 all compiled, 1 a compile or contraction check failed, 2 a compiler or the specs are missing.

Checking the project's own generated/ writes `compiled` evidence records (evidence/<platform>/
compiled.json) for each kernel whose every compile succeeded, for every dtype of its op (one
compile instantiates them all), with the compiler's version and targets; a kernel that failed or
was skipped gets none.  `--no-evidence` writes nothing, and neither does `--first-arch`, which
compiles each device source for its platform's first spec arch only: the quick check `make test`
runs, which catches a source that does not compile at all in a third of the time.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the generator of this checkout, even outside its .venv

from generator import record
from generator.errors import GeneratorError
from generator.evidence import How, Record
from generator.load import Catalog, load_catalog
from generator.model import NativeKernel, PlatformSpec

MUSA_SHIM = Path(__file__).resolve().parent / "musa_shim"
WORKERS = 2  # the work machines have two cores
TIMEOUT_S = 600  # per compile; a torch-free kernel takes seconds
HEADER_SUFFIXES = {".h"}

# Where to get each compiler when it is missing; `--skip-missing` turns the error into SKIPPED lines.
INSTALL_HINTS = {
    "nvcc": "install the CUDA toolkit and set CUDA_HOME=/usr/local/cuda (nvcc is looked up on PATH, then in $CUDA_HOME/bin)",
    "hipcc": "install Debian's ROCm 5.2 HIP compiler: "
    "apt-get install -y --no-install-recommends hipcc libamdhip64-dev rocm-device-libs",
    "g++": "install a C++17 compiler: apt-get install -y g++",
}

# The flag that turns FP contraction off, per compiler: the portable contract depends on it,
# so a platform spec that drops it is an error here rather than a silently different build.
FP_CONTRACT_OFF = {"nvcc": "-fmad=false", "hipcc": "-ffp-contract=off", "g++": "-ffp-contract=off"}

# A spec arch the local hipcc does not know, compiled as an older target of the same ISA family
# instead (reported as such): gfx940 is the first MI300 target; the shipping MI300 parts are gfx942.
HIP_STAND_INS = {"gfx942": "gfx940"}

# Fused multiply-adds in AMDGPU assembly: v_fma_f32, v_fmac_f32_e32, v_pk_fma_f32, v_fmaak_f32,
# v_mad_f32, v_mac_f32, v_mad_legacy_f32, v_fma_mix_f32, ... (v_mad_f32 rounds in between but
# flushes subnormals: not a separate multiply and add either).  Integer mads (v_mad_u64_u32) are not.
AMDGPU_FUSED = re.compile(r"\bv_(?:pk_)?(?:fma|fmac|mad|mac)\w*?_f(?:16|32|64)\w*")
# A fused multiply-add one of whose multiplicands (the instruction's first two sources, in every
# form above) is a power of two has an exact product, so fusing it changes no bit: the back end's
# own expansion of 64-bit integer division does this with +-2^32 (v_mac_f32 v, 0x4f800000, v).
AMDGPU_INSTRUCTION = re.compile(r"^\s*(v_\w+)\s+([^;\n]*)", re.MULTILINE)
INLINE_POWERS_OF_TWO = {"0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0"}


def is_power_of_two_literal(operand: str) -> bool:
    operand = operand.strip()
    if operand in INLINE_POWERS_OF_TWO:
        return True
    if not re.fullmatch(r"0x[0-9a-fA-F]{1,8}", operand):
        return False
    bits = int(operand, 16)
    exponent = (bits >> 23) & 0xFF
    return bits & 0x7FFFFF == 0 and 0 < exponent < 0xFF


def amdgpu_fused(assembly: str) -> list[str]:
    """The fused multiply-adds of AMDGPU assembly whose product is not exact (see above)."""
    found = []
    for match in AMDGPU_INSTRUCTION.finditer(assembly):
        mnemonic, operands = match.group(1), match.group(2).split(",")
        if AMDGPU_FUSED.fullmatch(mnemonic) and not any(is_power_of_two_literal(op) for op in operands[1:3]):
            found.append(mnemonic)
    return found


# In PTX: fma.rn.f32, mad.f32; and a mul/add/sub without .rn, which ptxas may still contract.
PTX_FUSED = re.compile(r"\b(?:fma|mad)(?:\.[a-z]+)*\.f(?:16|32|64)\b")
PTX_CONTRACTIBLE = re.compile(r"\b(?:mul|add|sub)(?:\.ftz)?\.f32\b")

# The probe: mul_rn/add_rn as the kernels use them, in the patterns a compiler fuses (a*b + acc in
# a loop, a*b - c, then a square added), and one explicit fma_rn as the positive control.
CONTRACTION_PROBE = """\
#include "rlk_math.h"
using namespace rlk::{namespace};
extern "C" __global__ void rlk_probe_separate(const float* a, const float* b, float* c, int n) {{
  const int i = threadIdx.x;
  float acc = c[i];
  for (int j = 0; j < n; ++j) acc = add_rn(acc, mul_rn(a[i * n + j], b[j]));
  const float d = add_rn(mul_rn(a[i], b[i]), -c[i]);
  c[i] = add_rn(acc, mul_rn(d, d));
}}
extern "C" __global__ void rlk_probe_explicit(const float* a, const float* b, float* c) {{
  const int i = threadIdx.x;
  c[i] = fma_rn(a[i], b[i], c[i]);
}}
"""


@dataclass(frozen=True)
class Job:
    source: Path
    shown: str  # the path as printed
    compiler: str  # nvcc, hipcc or g++
    label: str  # toolchain and arch, as printed
    args: tuple[str, ...]  # everything between the compiler and `-o`
    env: dict[str, str] = field(default_factory=dict, hash=False)
    shim: bool = False  # compiled through tools/musa_shim instead of its own compiler
    save_temps: bool = False  # keep the device assembly, to check it for fused multiply-adds
    skip: str | None = None  # why this compile cannot run here (an arch the compiler lacks)
    resources: bool = False  # a register-budgeted kernel (its spec names archs): ptxas reports, no spills allowed


@dataclass(frozen=True)
class Result:
    job: Job
    status: str  # OK, FAIL or SKIPPED
    output: str


def find_compiler(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and name == "nvcc":
        # make runs with a minimal PATH on some machines; nvcc's usual home still works.
        candidate = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
        found = str(candidate) if os.access(candidate, os.X_OK) else None
    return found


def checked_flags(platform: PlatformSpec, flags: tuple[str, ...], compiler: str, where: str) -> tuple[str, ...]:
    if FP_CONTRACT_OFF[compiler] not in flags:
        raise GeneratorError(
            f"specs/platforms/{platform.name}.yaml: build.{where} lacks {FP_CONTRACT_OFF[compiler]} "
            f"(FP contraction must be off for the portable contract)"
        )
    return flags


def nvcc_gencodes(platform: PlatformSpec, first_arch: bool = False) -> tuple[list[str], str]:
    """`-gencode` flags for archs written as torch writes them ("8.0", "9.0a", "12.0+PTX") and a label."""
    flags: list[str] = []
    shown: list[str] = []
    for arch in platform.build.archs[:1] if first_arch else platform.build.archs:
        code, _, extra = arch.partition("+")
        code = code.replace(".", "")
        ptx = extra == "PTX"  # also the PTX, for the driver to JIT on newer GPUs (as torch does)
        flags += ["-gencode", f"arch=compute_{code},code=[sm_{code},compute_{code}]" if ptx else f"arch=compute_{code},code=sm_{code}"]
        shown.append(f"sm_{code}+PTX" if ptx else f"sm_{code}")
    return flags, ",".join(shown)


def hip_arch_problems(hipcc: str | None, archs: tuple[str, ...]) -> dict[str, str]:
    """Why the local hipcc cannot compile for each of ``archs`` that it cannot (a one-line probe each)."""
    if hipcc is None:
        return {}
    problems: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="rlk-hip-archs-") as tmp:
        probe = Path(tmp) / "probe.hip"
        probe.write_text("__global__ void rlk_probe(float* p) { p[0] = 1.0f; }\n")

        def ask(arch: str) -> tuple[str, str | None]:
            command = [hipcc, "-x", "hip", "--cuda-device-only", "-S", f"--offload-arch={arch}", "-o", os.devnull, str(probe)]
            proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env={**os.environ, "HIP_PLATFORM": "amd"})
            if proc.returncode == 0:
                return arch, None
            text = proc.stdout + proc.stderr
            if "invalid target ID" in text or "unsupported" in text.lower() or "unknown target" in text.lower():
                return arch, "unknown to this hipcc's LLVM"
            if "cannot find ROCm device library" in text:
                return arch, "this hipcc has no ROCm device library for it"
            errors = [line for line in text.splitlines() if "error" in line]
            return arch, (errors[0] if errors else f"exit status {proc.returncode}").strip()

        with ThreadPoolExecutor(WORKERS) as pool:
            for arch, problem in pool.map(ask, archs):
                if problem is not None:
                    problems[arch] = problem
    return problems


def uses_explicit_fma(source: Path) -> bool:
    """Whether a kernel may hold fused multiply-adds on purpose: it calls fma_rn or the portable math."""
    text = source.read_text()
    return "fma_rn(" in text or '"rlk_math.h"' in text


def plan(catalog: Catalog, generated: Path, hip_problems: dict[str, str] | None = None, first_arch: bool = False) -> list[Job]:
    """One job per compile: every source under generated/*/csrc/kernels, for every arch the specs list
    (``first_arch``: each platform's first only).  ``hip_problems`` (arch -> why) turns an arch the
    local hipcc lacks into a SKIPPED job, or into its stand-in."""
    hip_problems = hip_problems or {}
    by_suffix = {p.source_suffix: p for p in catalog.platforms}
    nvcc_platform = next((p for p in catalog.platforms if p.compiler == "nvcc"), None)
    # Kernels that need an arch-specific target budget their registers per warpgroup (setmaxnreg):
    # a spill there is a failure, and ptxas's report of registers and shared memory is shown.
    budgeted = {f"{op.name}_{name}" for op in catalog.ops for name, kernel in op.kernels.items() if isinstance(kernel, NativeKernel) and kernel.archs}
    jobs: list[Job] = []
    for source in sorted(generated.glob("*/csrc/kernels/**/*")):
        if not source.is_file() or source.suffix in HEADER_SUFFIXES:
            continue
        shown = source.relative_to(generated.parent).as_posix()
        platform = by_suffix.get(source.suffix)
        if platform is None:
            # Fail closed: a source the check does not know how to compile must not pass unseen.
            raise GeneratorError(f"{shown}: no platform spec has source_suffix {source.suffix!r}; cannot compile-check it")
        if platform.compiler == "nvcc":
            gencodes, archs = nvcc_gencodes(platform, first_arch)
            flags = checked_flags(platform, platform.build.device_flags, "nvcc", "device_flags")
            resources = source.stem in budgeted
            args = (*flags, *gencodes, *(("-Xptxas", "-v") if resources else ()), "-c", str(source))
            jobs.append(Job(source, shown, "nvcc", f"nvcc {archs}", args, resources=resources))
        elif platform.compiler == "mcc":
            # No mcc here: nvcc with the CUDA platform's flags and archs, the MUSA names mapped by the shim.
            if nvcc_platform is None:
                raise GeneratorError(f"{shown}: MUSA sources are checked with nvcc, but no platform spec uses nvcc")
            gencodes, archs = nvcc_gencodes(nvcc_platform, first_arch)
            flags = checked_flags(nvcc_platform, nvcc_platform.build.device_flags, "nvcc", "device_flags")
            shim = ("-I", str(MUSA_SHIM), "-include", "musa_shim.h")
            args = ("-x", "cu", *flags, *shim, *gencodes, "-c", str(source))
            jobs.append(Job(source, shown, "nvcc", f"nvcc+MUSA-shim {archs}", args, shim=True))
        elif platform.compiler == "hipcc":
            flags = checked_flags(platform, platform.build.device_flags, "hipcc", "device_flags")
            # Without HIP_PLATFORM=amd, hipcc drives nvcc when it finds one; these are AMD sources.
            env = {"HIP_PLATFORM": "amd"}
            for arch in platform.build.archs[:1] if first_arch else platform.build.archs:
                target, label, skip = arch, f"hipcc {arch}", hip_problems.get(arch)
                stand_in = HIP_STAND_INS.get(arch)
                if skip is not None and stand_in is not None and stand_in not in hip_problems:
                    target, label, skip = stand_in, f"hipcc {stand_in} (for {arch})", None
                args = (*flags, "-save-temps", f"--offload-arch={target}", "-c", str(source))
                jobs.append(Job(source, shown, "hipcc", label, args, env, save_temps=True, skip=f"{arch}: {skip}" if skip else None))
        elif platform.kind == "host":
            flags = checked_flags(platform, platform.build.host_flags, "g++", "host_flags")
            jobs.append(Job(source, shown, "g++", "g++ host", (*flags, "-c", str(source))))
        else:
            raise GeneratorError(f"{shown}: no compile check knows compiler {platform.compiler!r} (platform {platform.name})")
    return jobs


def ptxas_resources(output: str) -> tuple[list[str], list[str]]:
    """From `ptxas -v`: one line per target (entries, registers, shared memory, spill bytes) and
    a line per kernel entry that spills."""
    targets: dict[str, list[tuple[int, int, int]]] = {}
    spills: list[str] = []
    pattern = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'.*?(\d+) bytes spill stores, (\d+) bytes spill loads.*?Used (\d+) registers[^\n]*?(?:(\d+) bytes smem)?", re.DOTALL)
    for entry, target, stores, loads, registers, smem in pattern.findall(output):
        targets.setdefault(target, []).append((int(registers), int(stores) + int(loads), int(smem or 0)))
        if int(stores) or int(loads):
            spills.append(f"{target} {entry}: {stores} bytes spill stores, {loads} bytes spill loads")
    summary = [
        f"ptxas {target}: {len(found)} entries, at most {max(r for r, _, _ in found)} registers, "
        f"{sum(s for _, s, _ in found)} spill bytes, static shared memory at most {max(m for _, _, m in found)} bytes"
        for target, found in sorted(targets.items())
    ]
    return summary, spills


def compile_one(job: Job, compiler: str, out_dir: Path, index: int) -> Result:
    work = out_dir / str(index)  # -save-temps writes next to the working directory: one per job
    work.mkdir()
    command = [compiler, *job.args, "-o", str(work / "out.o")]
    env = {**os.environ, **job.env}
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=work)
    except subprocess.TimeoutExpired:
        return Result(job, "FAIL", f"$ {' '.join(command)}\ntimed out after {TIMEOUT_S} s")
    # hipcc's link-time words are noise for a -c compile
    output = "\n".join(line for line in (proc.stdout + proc.stderr).strip().splitlines() if "linker' input unused" not in line)
    if proc.returncode != 0:
        return Result(job, "FAIL", f"$ {' '.join(command)}\n{output or f'exit status {proc.returncode}'}")
    if job.resources:
        summary, spills = ptxas_resources(output)
        if spills:
            return Result(job, "FAIL", "register spills in a register-budgeted kernel:\n" + "\n".join(spills))
        output = "\n".join(line for line in output.splitlines() if not line.startswith("ptxas info") and "bytes stack frame" not in line)
        output = "\n".join(filter(None, [output, *summary]))
    if job.save_temps and not uses_explicit_fma(job.source):
        assembly = sorted(work.glob("*-hip-amdgcn-*.s"))
        if not assembly:
            return Result(job, "FAIL", f"$ {' '.join(command)}\nno device assembly was kept (-save-temps); cannot check FP contraction")
        fused = [mnemonic for path in assembly for mnemonic in amdgpu_fused(path.read_text())]
        if fused:
            return Result(job, "FAIL", f"{len(fused)} fused multiply-add(s) ({', '.join(sorted(set(fused)))}) in the assembly of a kernel "
                          "whose source multiplies and adds separately (no fma_rn): FP contraction is not off")
    shutil.rmtree(work, ignore_errors=True)  # the assembly and preprocessed files are large
    return Result(job, "OK", output)  # warnings, if any, are shown too


def translation_unit(job: Job, compiler: str) -> str | None:
    """A digest of what the compiler compiles for a host job: its flags and the source as the
    preprocessor hands it on (every include expanded, no line markers).  Every package carries the
    host kernels, byte for byte the same with the same headers: two jobs with one digest compile
    alike, so the check compiles the first and reports the others with it.  None where the
    preprocessor fails (the compile then runs, and reports the failure)."""
    flags = [arg for arg in job.args if arg not in ("-c", str(job.source))]
    try:
        proc = subprocess.run([compiler, *flags, "-E", "-P", str(job.source)], capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        return None
    return hashlib.sha256("\0".join(flags).encode() + b"\0\0" + proc.stdout).hexdigest()


def shared_compiles(jobs: list[Job], compilers: dict[str, str | None], pool: ThreadPoolExecutor) -> dict[int, int]:
    """For each host job whose translation unit an earlier job already compiles: that job's index."""
    host = [i for i, job in enumerate(jobs) if job.compiler == "g++" and job.skip is None and compilers.get("g++")]
    digests = pool.map(lambda i: translation_unit(jobs[i], str(compilers["g++"])), host)
    first: dict[str, int] = {}
    same: dict[int, int] = {}
    for index, digest in zip(host, digests, strict=True):
        if digest is not None and first.setdefault(digest, index) != index:
            same[index] = first[digest]
    return same


@dataclass(frozen=True)
class Probe:
    """The contraction probe compiled to assembly for one platform and target."""

    platform: str
    compiler: str  # nvcc or hipcc
    label: str
    args: tuple[str, ...]  # everything but the source and output
    env: dict[str, str] = field(default_factory=dict, hash=False)


def contraction_probes(catalog: Catalog, generated: Path, jobs: list[Job]) -> list[Probe]:
    """A probe per HIP target the compile jobs build, and one for CUDA's first arch (PTX)."""
    probes: list[Probe] = []
    for platform in catalog.platforms:
        headers = generated / platform.name / "csrc" / "kernels" / platform.name
        if not (headers / "rlk_math.h").exists():
            continue
        if platform.compiler == "hipcc":
            targets = sorted({arg.split("=", 1)[1] for job in jobs if job.compiler == "hipcc" and job.skip is None and job.shown.startswith(f"generated/{platform.name}/")
                              for arg in job.args if arg.startswith("--offload-arch=")})
            for target in targets:
                args = (*platform.build.device_flags, "-I", str(headers), "-x", "hip", "--cuda-device-only", "-S", f"--offload-arch={target}")
                probes.append(Probe(platform.name, "hipcc", f"hipcc {target}", args, {"HIP_PLATFORM": "amd"}))
        elif platform.compiler == "nvcc" and platform.build.archs:
            code = platform.build.archs[0].partition("+")[0].replace(".", "")
            args = (*platform.build.device_flags, "-I", str(headers), "-x", "cu", "-ptx", f"-arch=compute_{code}")
            probes.append(Probe(platform.name, "nvcc", f"nvcc compute_{code} PTX", args))
    return probes


def function_bodies(assembly: str, names: tuple[str, ...]) -> dict[str, str]:
    """Each named kernel's part of an AMDGPU assembly or PTX file."""
    starts = sorted((m.start(), name) for name in names for m in re.finditer(rf"^(?:{re.escape(name)}:|.*\.entry {re.escape(name)}\b)", assembly, re.MULTILINE))
    bodies: dict[str, str] = {}
    for i, (start, name) in enumerate(starts):
        end = starts[i + 1][0] if i + 1 < len(starts) else len(assembly)
        bodies[name] = assembly[start:end]
    return bodies


def check_contraction(probe: Probe, compiler: str, work: Path, numerics_namespace: str | None = None) -> Result:
    """Compile the probe to assembly; FAIL when mul_rn/add_rn came out fused, or fma_rn did not."""
    work.mkdir(parents=True, exist_ok=True)
    source = work / ("probe.hip" if probe.compiler == "hipcc" else "probe.cu")
    source.write_text(CONTRACTION_PROBE.format(namespace=numerics_namespace or probe.platform))
    out = work / ("probe.s" if probe.compiler == "hipcc" else "probe.ptx")
    command = [compiler, *probe.args, str(source), "-o", str(out)]
    shown = f"contraction probe ({probe.platform})"
    job = Job(source, shown, probe.compiler, probe.label, probe.args, probe.env)
    try:
        proc = subprocess.run(command, env={**os.environ, **probe.env}, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=work)
    except subprocess.TimeoutExpired:
        return Result(job, "FAIL", f"$ {' '.join(command)}\ntimed out after {TIMEOUT_S} s")
    if proc.returncode != 0 or not out.exists():
        return Result(job, "FAIL", f"$ {' '.join(command)}\n{(proc.stdout + proc.stderr).strip()}")
    bodies = function_bodies(out.read_text(), ("rlk_probe_separate", "rlk_probe_explicit"))
    if set(bodies) != {"rlk_probe_separate", "rlk_probe_explicit"}:
        return Result(job, "FAIL", f"the probe's kernels were not found in {out.name}: cannot check FP contraction")
    if probe.compiler == "hipcc":
        fused = amdgpu_fused(bodies["rlk_probe_separate"])
        control = amdgpu_fused(bodies["rlk_probe_explicit"])
        loose: list[str] = []
    else:
        fused = PTX_FUSED.findall(bodies["rlk_probe_separate"])
        control = PTX_FUSED.findall(bodies["rlk_probe_explicit"])
        loose = PTX_CONTRACTIBLE.findall(bodies["rlk_probe_separate"])
    if fused:
        return Result(job, "FAIL", f"mul_rn/add_rn compiled to {len(fused)} fused multiply-add(s) ({', '.join(sorted(set(fused)))}): "
                      f"FP contraction is not off\n$ {' '.join(command)}")
    if loose:
        return Result(job, "FAIL", f"mul_rn/add_rn compiled to {', '.join(sorted(set(loose)))} without .rn, which ptxas may contract")
    if not control:
        return Result(job, "FAIL", "fma_rn compiled to no fused multiply-add: the scan does not recognise this compiler's fused instructions")
    return Result(job, "OK", f"mul_rn/add_rn: no fused multiply-add; fma_rn: {', '.join(sorted(set(control)))}")


def compiler_version(name: str, path: str) -> str:
    """The compiler's version as one short phrase, e.g. ``nvcc 13.0 (V13.0.88)``."""
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120, env={**os.environ, "HIP_PLATFORM": "amd"})
    except (OSError, subprocess.TimeoutExpired):
        return name
    text = proc.stdout + proc.stderr
    if name == "nvcc" and (m := re.search(r"release ([\d.]+), (V[\d.]+)", text)):
        return f"nvcc {m.group(1)} ({m.group(2)})"
    if name == "hipcc" and (m := re.search(r"HIP version: (\S+)", text)):
        clang = re.search(r"clang version (\S+)", text)
        return f"hipcc (HIP {m.group(1)}{f', clang {clang.group(1)}' if clang else ''})"
    if name == "g++" and (m := re.search(r"\) (\d+(?:\.\d+)+)", text)):
        return f"g++ {m.group(1)}"
    first = text.strip().splitlines()
    return first[0] if first else name


def evidence_records(catalog: Catalog, generated: Path, results: list[Result], versions: dict[str, str], commit: str) -> list[Record]:
    """`compiled` records: a kernel (generated/<p>/csrc/kernels/<p>/<op>_<kernel><suffix>) whose every
    compile is OK gets one per dtype of its op; one that failed, or was skipped, gets none."""
    by_source: dict[str, list[Result]] = {}
    for result in results:
        by_source.setdefault(result.job.source.relative_to(generated).as_posix(), []).append(result)
    suffix = {p.name: p.source_suffix for p in catalog.platforms}

    def compiled(op: str, kernel: str, platform: str, dtypes: tuple[str, ...]) -> tuple[str, ...]:
        # An arch the local compiler lacks (job.skip) neither counts nor blocks; a missing compiler does.
        found = [r for r in by_source.get(f"{platform}/csrc/kernels/{platform}/{op}_{kernel}{suffix[platform]}", []) if r.job.skip is None]
        return dtypes if found and all(r.status == "OK" for r in found) else ()

    def how(op: str, kernel: str, platform: str) -> How:
        all_jobs = [job for rs in by_source.values() for job in (r.job for r in rs) if job.source.relative_to(generated).parts[:4] == (platform, "csrc", "kernels", platform)]
        jobs = [job for job in all_jobs if job.skip is None]
        skipped = sorted({job.skip.split(":", 1)[0] for job in all_jobs if job.skip is not None})
        targets = ", ".join(sorted({job.label.split(" ", 1)[1] for job in jobs if " " in job.label} - {"host"}))
        if skipped:
            targets += f"; not compiled here: {', '.join(skipped)} (the local compiler lacks them)"
        compiler = versions.get(jobs[0].compiler, jobs[0].compiler) if jobs else "?"
        check = "make compile-check (tools/compile_check.py)"
        if any(job.shim for job in jobs):
            return How(
                check=check,
                toolchain=f"{compiler} through the MUSA header shim (tools/musa_shim), not mcc; {targets}",
                note="well-formed code only: that mcc accepts it is not shown",
            )
        return How(check=check, toolchain=f"{compiler}; {targets}" if targets else compiler)

    files = record.tree_files(generated)
    return record.records_for_kernels(catalog, files, compiled, "compiled", how, commit)


def indent(text: str) -> str:
    return "\n".join(f"      {line}".rstrip() for line in text.splitlines())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=REPO, help="project root holding specs/ and generated/")
    parser.add_argument("--generated", type=Path, help="generated tree to check (default: ROOT/generated)")
    parser.add_argument(
        "--skip-missing", action="store_true", help="report sources whose compiler is missing as SKIPPED instead of failing"
    )
    parser.add_argument(
        "--no-evidence", action="store_true", help="write no compiled records to evidence/ (only ROOT/generated is ever recorded)"
    )
    parser.add_argument(
        "--first-arch",
        action="store_true",
        help="compile each device source for its platform's first spec arch only (the quick check make test runs); records no evidence",
    )
    parser.add_argument(
        "--op", action="append", default=[], metavar="NAME",
        help="compile only this op's kernels (repeatable); their compiled records are merged into evidence/, the others kept",
    )
    args = parser.parse_args(argv)
    generated = (args.generated or args.root / "generated").resolve()

    try:
        catalog = load_catalog(args.root / "specs")
        # Asked only when there are HIP sources to compile: a probe per arch takes a second or two.
        hip_archs = tuple(sorted({arch for p in catalog.platforms if p.compiler == "hipcc" and any(generated.glob(f"*/csrc/kernels/**/*{p.source_suffix}"))
                                  for arch in p.build.archs}))
        hip_problems = hip_arch_problems(find_compiler("hipcc"), hip_archs) if hip_archs else {}
        jobs = plan(catalog, generated, hip_problems, args.first_arch)
        args.no_evidence = args.no_evidence or args.first_arch
        if args.op:
            unknown = sorted(set(args.op) - {op.name for op in catalog.ops})
            if unknown:
                raise GeneratorError(f"--op {', '.join(unknown)}: no such op in {args.root / 'specs'}")
            kernels = {f"{op.name}_{kernel}" for op in catalog.ops if op.name in args.op for kernel in op.kernels}
            jobs = [job for job in jobs if job.source.stem in kernels]
    except GeneratorError as exc:
        print(f"compile-check: error: {exc}", file=sys.stderr)
        return 2
    if not jobs:
        print(f"compile-check: error: no kernel sources under {generated}/*/csrc/kernels", file=sys.stderr)
        return 2

    compilers = {name: find_compiler(name) for name in sorted({job.compiler for job in jobs})}
    missing = [name for name, path in compilers.items() if path is None]
    if missing and not args.skip_missing:
        for name in missing:
            count = sum(job.compiler == name for job in jobs)
            print(f"compile-check: error: {name} not found, needed for {count} compile(s); {INSTALL_HINTS[name]}", file=sys.stderr)
        print("compile-check: (or pass --skip-missing to report those sources as SKIPPED, unchecked)", file=sys.stderr)
        return 2

    start = time.perf_counter()
    results: list[Result] = []
    width = max(len(job.shown) for job in jobs)
    with tempfile.TemporaryDirectory(prefix="rlk-compile-check-") as tmp, ThreadPoolExecutor(WORKERS) as pool:

        def run(indexed: tuple[int, Job]) -> Result:
            index, job = indexed
            compiler = compilers[job.compiler]
            if compiler is None:
                return Result(job, "SKIPPED", f"{job.compiler} not found; {INSTALL_HINTS[job.compiler]}")
            if job.skip is not None:
                return Result(job, "SKIPPED", job.skip)
            return compile_one(job, compiler, Path(tmp), index)

        same = shared_compiles(jobs, compilers, pool)
        compiled = iter(pool.map(run, [(i, job) for i, job in enumerate(jobs) if i not in same]))
        for index, job in enumerate(jobs):  # in plan order, printed as they finish
            if index in same:
                original = results[same[index]]
                note = f"the same translation unit as {original.job.shown}, compiled once"
                result = Result(job, original.status, "\n".join(filter(None, [note, original.output])))
            else:
                result = next(compiled)
            results.append(result)
            print(f"{result.status:<7} {result.job.shown:<{width}}  {result.job.label}", flush=True)
            if result.output and (result.status != "SKIPPED" or result.job.skip is not None):
                print(indent(result.output), flush=True)

        probes = [p for p in contraction_probes(catalog, generated, jobs) if compilers.get(p.compiler) or find_compiler(p.compiler)]
        probe_results = list(pool.map(
            lambda indexed: check_contraction(indexed[1], str(compilers.get(indexed[1].compiler) or find_compiler(indexed[1].compiler)), Path(tmp) / f"probe-{indexed[0]}"),
            enumerate(probes)))
        for result in probe_results:
            print(f"{result.status:<7} {result.job.shown:<{width}}  {result.job.label}", flush=True)
            print(indent(result.output), flush=True)
    elapsed = time.perf_counter() - start

    counts = {status: sum(r.status == status for r in results) for status in ("OK", "FAIL", "SKIPPED")}
    probe_failures = [r for r in probe_results if r.status == "FAIL"]
    sources = len({job.source for job in jobs})
    print(
        f"compile-check: {len(results)} compiles of {sources} kernel sources: "
        f"{counts['OK']} OK, {counts['FAIL']} FAIL, {counts['SKIPPED']} SKIPPED ({elapsed:.1f} s, {WORKERS} workers)"
    )
    for name in missing:
        print(f"compile-check: SKIPPED {name} compiles were NOT checked ({name} not found; {INSTALL_HINTS[name]})")
    for arch, problem in sorted(hip_problems.items()):
        if any(job.skip is not None and job.skip.startswith(f"{arch}:") for job in jobs):
            print(f"compile-check: SKIPPED hipcc {arch} was NOT compiled ({problem})")
        elif any(job.label.endswith(f"(for {arch})") for job in jobs):
            print(f"compile-check: NOTE: hipcc {arch} is {problem}; compiled {HIP_STAND_INS[arch]} in its place")
    print(f"compile-check: contraction: {len(probe_results) - len(probe_failures)} of {len(probe_results)} probes show mul_rn/add_rn unfused"
          + ("" if any(p.compiler == "hipcc" for p in probes) else " (no HIP probe: hipcc not found)"))
    if any(job.shim for job in jobs):
        print(
            "compile-check: NOTE: MUSA sources (.mu) are checked with nvcc through a header shim (tools/musa_shim), "
            "NOT with mcc: this shows only that they are well-formed C++/kernel code, not that mcc accepts them."
        )
    for result in [*results, *probe_failures]:
        if result.status == "FAIL":
            print(f"compile-check: FAILED {result.job.shown} ({result.job.label})", file=sys.stderr)
    if not args.no_evidence and generated == (args.root / "generated").resolve():
        write_evidence(args.root.resolve(), catalog, generated, results, compilers)
    return 1 if counts["FAIL"] or probe_failures else 0


def write_evidence(root: Path, catalog: Catalog, generated: Path, results: list[Result], compilers: dict[str, str | None]) -> None:
    versions = {name: compiler_version(name, path) for name, path in compilers.items() if path is not None}
    try:
        records = evidence_records(catalog, generated, results, versions, record.commit_of(root))
        outcome = record.record(root, records)
    except GeneratorError as exc:
        print(f"compile-check: evidence: not recorded: {exc}", file=sys.stderr)
        return
    print(f"compile-check: evidence: {len(records)} compiled records, {len(outcome.changed)} new or changed; {outcome.note}")


if __name__ == "__main__":
    sys.exit(main())
