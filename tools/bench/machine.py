"""What a run used: CPU model and family, SIMD code paths, threads, torch, load average.  The
facts head docs/performance.md, and every kept table names the run (date, CPU, torch) it came from."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
from pathlib import Path

from .core import thread_counts


def cpuinfo() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (none where there is no such file)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    """The CPU's name, with its family and model numbers where /proc/cpuinfo gives them: a virtual
    machine may name only the brand ("AMD EPYC"), which covers generations of different speeds."""
    fields = cpuinfo()
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f", family {fields['cpu family']} model {fields['model']}"
    return name


def cpu_flags() -> set[str]:
    return set(cpuinfo().get("flags", "").split())


def load_average() -> str | None:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return None


def compiler() -> str:
    cxx = os.environ.get("CXX", "c++")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
        return out.splitlines()[0] if out else cxx
    return cxx


def code_paths(flags: set[str], cap: str) -> tuple[str, str]:
    """rlk_parallel.h's host_simd(): the widest instruction set this CPU runs, capped by RLK_CPU_SIMD
    (``cap``): det_gemm's register tile on it, and the row and elementwise kernels' path."""
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma"} <= flags and cap not in ("generic", "avx2"):
        path = "AVX-512, 12 × 32 tiles, an fma per product"
        if "avx512_bf16" in flags and cap == "avx512_bf16":
            # rlk_parallel.h's host_simd(): bfloat16 operands two k per vdpbf16ps where that is exact
            path += " (bfloat16: two per AVX512-BF16 dot product)"
        elif "avx512_bf16" in flags and cap != "avx512":
            # ... by default only where bf16_pairs_faster() measures them faster than two fmas
            path += " (bfloat16: two per AVX512-BF16 dot product where this CPU runs them faster)"
        return path, "AVX-512 (F, VL, BW, DQ) + FMA"
    if {"avx2", "fma"} <= flags and cap != "generic":
        return "AVX2 + FMA, 6 × 16 tiles, an fma per product", "AVX2 + FMA"
    return "portable (4 lanes, 3 × 16 tiles, the C library's fmaf)", "baseline (compiler default)"


def has_amx(flags: set[str]) -> bool:
    """Whether the CPU has AMX tiles (torch's bfloat16 matmul runs on them where it does)."""
    return any(flag.startswith("amx_") for flag in flags)


def matrix_units(flags: set[str]) -> str:
    """The bfloat16 matrix instructions the CPU has: torch's bfloat16 matmul (oneDNN) may use AMX tiles,
    whose sums are not specified step by step, so rlkernels' GEMMs cannot; the baseline can be many
    times faster there."""
    amx = sorted(flag for flag in flags if flag.startswith("amx_"))
    if amx:
        return f"AMX ({', '.join(amx)}): torch's bfloat16 matmul may use them, rlkernels' GEMMs do not"
    return "no AMX"


def where() -> str:
    """The machine in one phrase: CPU, architecture, logical CPUs."""
    return f"{cpu_model()} ({platform.machine()}), {os.cpu_count()} logical CPUs"


def machine_facts(command: str, with_torch: bool) -> dict[str, str]:
    """The machine table's rows, in order: what this run used."""
    facts = {"CPU": f"{where()}, {thread_counts()[-1]} usable"}
    load = load_average()
    if load is not None:
        facts["Load average at start"] = load
    if with_torch:
        import torch

        gemm_path, rows_path = code_paths(cpu_flags(), os.environ.get("RLK_CPU_SIMD", "native"))
        facts["torch"] = f"{torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()})"
        facts["det_gemm code path"] = gemm_path
        facts["Row and elementwise kernels' code path"] = rows_path
        facts["Matrix instructions"] = matrix_units(cpu_flags())
        facts["Compiler"] = compiler()
    facts["Python"] = platform.python_version()
    facts["Command"] = f"`{command}`"
    facts["Date (UTC)"] = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
    return facts


def run_of(facts: dict[str, str]) -> str:
    """Which run a table came from, as the report names it."""
    return f"{facts.get('Date (UTC)', 'an earlier date')} on {facts.get('CPU', 'another machine')}, torch {facts.get('torch', 'unknown')}"
