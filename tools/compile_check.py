"""Compile every generated kernel source with its platform's compiler.

    python tools/compile_check.py [--root DIR] [--generated DIR] [--skip-missing] [--no-evidence] [--op NAME ...]

Kernel sources are torch-free, so each compiles in seconds with the vendor compiler alone:
`.cu` with nvcc, `.hip` with hipcc (once per arch), `.cpp` with g++, and `.mu` with nvcc
through the header shim in tools/musa_shim, because mcc is not obtainable here. Flags and
arch lists come from specs/platforms/*.yaml, so the check compiles what the build compiles.
Exit status: 0 all compiled, 1 a compile failed, 2 a compiler or the specs are missing.

Checking the project's own generated/ writes `compiled` evidence records (evidence/<platform>/
compiled.json) for each kernel whose every compile succeeded, for every dtype of its op (one
compile instantiates them all), with the compiler's version and targets; a kernel that failed or
was skipped gets none.  `--no-evidence` writes nothing.
"""

from __future__ import annotations

import argparse
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
from generator.model import PlatformSpec

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


@dataclass(frozen=True)
class Job:
    source: Path
    shown: str  # the path as printed
    compiler: str  # nvcc, hipcc or g++
    label: str  # toolchain and arch, as printed
    args: tuple[str, ...]  # everything between the compiler and `-o`
    env: dict[str, str] = field(default_factory=dict, hash=False)
    shim: bool = False  # compiled through tools/musa_shim instead of its own compiler


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


def nvcc_gencodes(platform: PlatformSpec) -> tuple[list[str], str]:
    """`-gencode` flags for archs written as torch writes them ("8.0", "9.0a") and a label."""
    codes = [arch.replace(".", "") for arch in platform.build.archs]
    flags = [flag for code in codes for flag in ("-gencode", f"arch=compute_{code},code=sm_{code}")]
    return flags, ",".join(f"sm_{code}" for code in codes)


def plan(catalog: Catalog, generated: Path) -> list[Job]:
    """One job per compile: every source under generated/*/csrc/kernels, for every arch the specs list."""
    by_suffix = {p.source_suffix: p for p in catalog.platforms}
    nvcc_platform = next((p for p in catalog.platforms if p.compiler == "nvcc"), None)
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
            gencodes, archs = nvcc_gencodes(platform)
            flags = checked_flags(platform, platform.build.device_flags, "nvcc", "device_flags")
            jobs.append(Job(source, shown, "nvcc", f"nvcc {archs}", (*flags, *gencodes, "-c", str(source))))
        elif platform.compiler == "mcc":
            # No mcc here: nvcc with the CUDA platform's flags and archs, the MUSA names mapped by the shim.
            if nvcc_platform is None:
                raise GeneratorError(f"{shown}: MUSA sources are checked with nvcc, but no platform spec uses nvcc")
            gencodes, archs = nvcc_gencodes(nvcc_platform)
            flags = checked_flags(nvcc_platform, nvcc_platform.build.device_flags, "nvcc", "device_flags")
            shim = ("-I", str(MUSA_SHIM), "-include", "musa_shim.h")
            args = ("-x", "cu", *flags, *shim, *gencodes, "-c", str(source))
            jobs.append(Job(source, shown, "nvcc", f"nvcc+MUSA-shim {archs}", args, shim=True))
        elif platform.compiler == "hipcc":
            flags = checked_flags(platform, platform.build.device_flags, "hipcc", "device_flags")
            # Without HIP_PLATFORM=amd, hipcc drives nvcc when it finds one; these are AMD sources.
            env = {"HIP_PLATFORM": "amd"}
            for arch in platform.build.archs:
                jobs.append(Job(source, shown, "hipcc", f"hipcc {arch}", (*flags, f"--offload-arch={arch}", "-c", str(source)), env))
        elif platform.kind == "host":
            flags = checked_flags(platform, platform.build.host_flags, "g++", "host_flags")
            jobs.append(Job(source, shown, "g++", "g++ host", (*flags, "-c", str(source))))
        else:
            raise GeneratorError(f"{shown}: no compile check knows compiler {platform.compiler!r} (platform {platform.name})")
    return jobs


def compile_one(job: Job, compiler: str, out_dir: Path, index: int) -> Result:
    command = [compiler, *job.args, "-o", str(out_dir / f"{index}.o")]
    env = {**os.environ, **job.env}
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=out_dir)
    except subprocess.TimeoutExpired:
        return Result(job, "FAIL", f"$ {' '.join(command)}\ntimed out after {TIMEOUT_S} s")
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        return Result(job, "FAIL", f"$ {' '.join(command)}\n{output or f'exit status {proc.returncode}'}")
    return Result(job, "OK", output)  # warnings, if any, are shown too


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
        found = by_source.get(f"{platform}/csrc/kernels/{platform}/{op}_{kernel}{suffix[platform]}", [])
        return dtypes if found and all(r.status == "OK" for r in found) else ()

    def how(op: str, kernel: str, platform: str) -> How:
        jobs = [job for rs in by_source.values() for job in (r.job for r in rs) if job.source.relative_to(generated).parts[:4] == (platform, "csrc", "kernels", platform)]
        targets = ", ".join(sorted({job.label.split(" ", 1)[1] for job in jobs if " " in job.label} - {"host"}))
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
        "--op", action="append", default=[], metavar="NAME", help="compile only this op's kernels (repeatable); records no evidence"
    )
    args = parser.parse_args(argv)
    generated = (args.generated or args.root / "generated").resolve()

    try:
        catalog = load_catalog(args.root / "specs")
        jobs = plan(catalog, generated)
        if args.op:
            unknown = sorted(set(args.op) - {op.name for op in catalog.ops})
            if unknown:
                raise GeneratorError(f"--op {', '.join(unknown)}: no such op in {args.root / 'specs'}")
            kernels = {f"{op.name}_{kernel}" for op in catalog.ops if op.name in args.op for kernel in op.kernels}
            jobs = [job for job in jobs if job.source.stem in kernels]
            args.no_evidence = True
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
            return compile_one(job, compiler, Path(tmp), index)

        for result in pool.map(run, enumerate(jobs)):  # in plan order, printed as they finish
            results.append(result)
            print(f"{result.status:<7} {result.job.shown:<{width}}  {result.job.label}", flush=True)
            if result.output and result.status != "SKIPPED":
                print(indent(result.output), flush=True)
    elapsed = time.perf_counter() - start

    counts = {status: sum(r.status == status for r in results) for status in ("OK", "FAIL", "SKIPPED")}
    sources = len({job.source for job in jobs})
    print(
        f"compile-check: {len(results)} compiles of {sources} kernel sources: "
        f"{counts['OK']} OK, {counts['FAIL']} FAIL, {counts['SKIPPED']} SKIPPED ({elapsed:.1f} s, {WORKERS} workers)"
    )
    for name in missing:
        print(f"compile-check: SKIPPED {name} compiles were NOT checked ({name} not found; {INSTALL_HINTS[name]})")
    if any(job.shim for job in jobs):
        print(
            "compile-check: NOTE: MUSA sources (.mu) are checked with nvcc through a header shim (tools/musa_shim), "
            "NOT with mcc: this shows only that they are well-formed C++/kernel code, not that mcc accepts them."
        )
    for result in results:
        if result.status == "FAIL":
            print(f"compile-check: FAILED {result.job.shown} ({result.job.label})", file=sys.stderr)
    if not args.no_evidence and generated == (args.root / "generated").resolve():
        write_evidence(args.root.resolve(), catalog, generated, results, compilers)
    return 1 if counts["FAIL"] else 0


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
