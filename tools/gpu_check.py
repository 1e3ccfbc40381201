"""The GPU check: on a machine with an NVIDIA GPU, in one run,

  env         what the machine has (GPU, driver, torch, nvcc)
  build       generated/cuda built in place (a synced copy in .build/gpu-check-cuda/)
  tests       the package's generated tests, now with the device present
  chain       tests/test_transformers_chain.py's chain test (a patched tiny Qwen2 and Llama:
              log-probs and GRPO gradients bitwise alone vs in padded and packed batches) on the
              device, with this build (transformers needed)
  compare     CUDA results vs CPU results, bit for bit, for det_gemm: several shapes, every dtype
  invariance  batch invariance (1 row vs 512 rows at K=N=4096) and determinism on the device
  bench       every native kernel of det_gemm, det_gemm_nt and det_gemm_tn vs torch.matmul
              (cuBLAS) on the same layout, same process, CUDA events, at the large shapes and
              the decode-like M of 1, 16 and 128; at each, every kernel's bits checked for
              batch invariance (one row alone, a chunk of rows alone) and determinism (a rerun)
  tiles       det_gemm's mma kernel rebuilt with other tile configurations: speed vs cuBLAS,
              and whether the bits equal those of the spec's configuration

and a short report: $OUT/gpu_report.md (else ./gpu_report.md) with the full log beside it.
The tests stage also writes $OUT/gpu_evidence.json: what the generated tests exercised on the
device (their $RLK_EVIDENCE_OUT file, with the hash of each kernel source as built and the commit)
and records it as `executed` evidence in evidence/<platform>/executed.json, only for kernels whose
tests passed; where the generator cannot run, it says how to record the file elsewhere.  A checkout
without .git takes the commit from $RLK_EVIDENCE_COMMIT.
Each stage runs in its own process with its own time limit, so a crash, a CUDA fault or a
hang in one is reported and the later stages still run.  Needs torch, pytest, setuptools
and ninja; not the generator (generated/ is committed).

    bash tools/gpu_check.sh                   # what `make gpu-check` runs
    python tools/gpu_check.py --dry-run       # every stage on the CPU package, tiny shapes
"""

from __future__ import annotations

import argparse
import math
import os
import platform as host
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OP = "det_gemm"
EXIT_PASS, EXIT_FAIL = 0, 1  # any other exit status of a stage is an error

# (M, K, N).  The CPU kernel is a plain loop, so the bitwise comparison stays at sizes it
# finishes in seconds; odd sizes exercise the tile edges.
COMPARE_SHAPES = [(1, 7, 5), (33, 64, 40), (127, 300, 129), (256, 1024, 384), (4, 4096, 4096), (128, 2048, 2048)]
INVARIANCE = {"rows": 512, "K": 4096, "N": 4096}
# 4096^3 and target shapes from the operator catalog (a Qwen3-8B-like MLP), then decode-like
# batches of 1, 16 and 128 rows at K = N = 4096.
BENCH_SHAPES = [(4096, 4096, 4096), (4096, 4096, 12288), (4096, 14336, 4096), (1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096)]
BENCH_DTYPES = ["bfloat16", "float32"]
ALL_DTYPES = ["float32", "float16", "bfloat16"]

DRY_TEST_FILES = ("tests/test_det_gemm.py", "tests/test_linear_logp.py")
DRY_COMPARE_SHAPES = [(1, 7, 5), (33, 64, 40), (17, 96, 24)]
DRY_INVARIANCE = {"rows": 32, "K": 64, "N": 48}
DRY_BENCH_SHAPES = [(64, 128, 96), (1, 128, 96)]


@dataclass
class Stage:
    name: str
    title: str
    timeout_s: int


STAGES = [
    Stage("env", "Environment", 60),
    Stage("build", "Build (setup.py build_ext --inplace)", 360),
    Stage("tests", "Generated tests (pytest)", 180),
    Stage("chain", "Chain test of a patched transformers model on the device", 240),
    Stage("compare", "Device vs CPU, bit for bit", 120),
    Stage("invariance", "Batch invariance and determinism on the device", 90),
    Stage("bench", "Benchmark vs torch.matmul (cuBLAS), with bitwise invariance at each shape", 240),
    Stage("tiles", "Tile configurations of det_gemm's mma kernel", 300),
]


# --------------------------------------------------------------------------- stage bodies
# Each runs in a child process, prints progress to stdout (the log) and returns
# (passed, markdown).


def run_logged(command: list[str], cwd: Path, env: dict[str, str]) -> int:
    print("$ " + " ".join(command), flush=True)
    return subprocess.run(command, cwd=cwd, env=env, stdout=sys.stdout, stderr=subprocess.STDOUT).returncode


def stage_env(args) -> tuple[bool, str]:
    import torch

    lines = [
        f"- host: {host.node()}, {os.cpu_count()} CPUs, Python {host.python_version()}",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip})",
    ]
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            lines.append(f"- GPU {i}: {props.name}, sm_{props.major}{props.minor}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs")
    else:
        lines.append("- no CUDA device visible to torch")
    for tool in (["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"], ["nvcc", "--version"], ["ninja", "--version"]):
        path = shutil.which(tool[0], path=tool_path())
        if path is None:
            lines.append(f"- {tool[0]}: not found")
            continue
        out = subprocess.run([path, *tool[1:]], capture_output=True, text=True).stdout.strip().splitlines()
        lines.append(f"- {tool[0]}: {out[-1] if out else '?'}")
    passed = args.platform == "cpu" or torch.cuda.is_available()
    return passed, "\n".join(lines)


def tool_path() -> str:
    # The interpreter's bin/ first: a venv's ninja is found by torch only through PATH.
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def build_env(args) -> tuple[dict[str, str], list[str]]:
    """Environment for the extension build, and notes on what was chosen."""
    env = dict(os.environ, PATH=tool_path())
    notes = []
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    notes.append(f"MAX_JOBS={env['MAX_JOBS']}")
    if args.platform == "cuda":
        if "CUDA_HOME" not in env and Path("/usr/local/cuda").is_dir():
            env["CUDA_HOME"] = "/usr/local/cuda"
        if "TORCH_CUDA_ARCH_LIST" not in env:
            env["TORCH_CUDA_ARCH_LIST"] = device_arch() or "9.0a"  # only this GPU's arch: half the compile time
        notes.append(f"TORCH_CUDA_ARCH_LIST={env['TORCH_CUDA_ARCH_LIST']}")
        notes.append(f"CUDA_HOME={env.get('CUDA_HOME')}")
        # torch's headers include cusparse.h & co., which CUDA wheels of torch keep in
        # site-packages/nvidia/cu*/include rather than in CUDA_HOME.
        includes = nvidia_includes()
        if includes:
            env["CPATH"] = os.pathsep.join([*includes, *filter(None, [env.get("CPATH")])])
            notes.append(f"CPATH += {', '.join(includes)}")
    return env, notes


def device_arch() -> str | None:
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            # A 9.0 device is built for the arch-specific target, which has the wgmma kernels'
            # instructions (a plain 9.0 build compiles them out, and they hand over to mma).
            return f"{major}.{minor}" + ("a" if (major, minor) == (9, 0) else "")
    except (ImportError, RuntimeError, AssertionError) as exc:  # no usable device: the caller's default
        print(f"no device arch: {exc}", flush=True)
    return None


def nvidia_includes() -> list[str]:
    try:
        import nvidia
    except ImportError:
        return []
    return sorted(
        str(p / "include") for base in nvidia.__path__ for p in Path(base).glob("cu*")
        if re.fullmatch(r"cu\d+", p.name) and (p / "include").is_dir()
    )


def build_in_place(args, env: dict[str, str]) -> int:
    """`setup.py build_ext --inplace` in the package copy: ninja recompiles what changed."""
    return run_logged([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=args.pkg, env=env)


def stage_build(args) -> tuple[bool, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build_wheel import sync_tree

    source = ROOT / "generated" / args.platform
    sync_tree(source, args.pkg)  # a copy, so generated/ stays as committed; objects are reused
    env, notes = build_env(args)
    start = time.perf_counter()
    rc = build_in_place(args, env)
    elapsed = time.perf_counter() - start
    libs = sorted(args.pkg.glob("rlkernels/_C*.so"))
    body = [f"- generated/{args.platform} → `{args.pkg.relative_to(ROOT)}`, {elapsed:.0f} s, {'; '.join(notes)}"]
    if rc != 0:
        body.append(f"- **build failed** (exit {rc}); the compiler output is in the log")
    for lib in libs:
        body.append(f"- `{lib.name}`: {lib.stat().st_size / 1e6:.1f} MB")
    return rc == 0 and bool(libs), "\n".join(body)


def evidence_results(args, results_file: Path) -> Path | None:
    """The generated tests' results with what the ledger needs added (each device kernel's source hash as
    built, the commit, the toolkit), saved as $OUT/gpu_evidence.json; None when the tests wrote none."""
    import json

    sys.path.insert(0, str(ROOT))
    from generator.source_hash import commit_of, package_files, source_sha256

    if not results_file.is_file():
        return None
    results = json.loads(results_file.read_text())
    files = package_files(args.pkg, args.platform)
    for outcome in results.get("outcomes", []):
        if outcome.get("platform") == args.platform and "source_sha256" not in outcome:
            sha = source_sha256(files, args.platform, outcome.get("op", ""), outcome.get("kernel", ""))
            if sha is not None:
                outcome["source_sha256"] = sha
    results.setdefault("commit", commit_of(ROOT))
    results.setdefault("check", f"make gpu-check: the {args.platform} package's generated contract tests (tools/gpu_check.py)")
    if not results.get("toolkit") and args.platform == "cuda":
        nvcc = shutil.which("nvcc", path=tool_path()) or str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin/nvcc")
        try:
            version = re.search(r"release ([\d.]+), (V[\d.]+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout)
        except OSError:
            version = None
        if version:
            results["toolkit"] = f"CUDA {version.group(1)} (nvcc {version.group(2)})"
    saved = args.out / "gpu_evidence.json"
    saved.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return saved


def record_evidence(args, saved: Path) -> str:
    """Records the saved results in the ledger with the generator; says what happened."""
    command = [sys.executable, "-m", "generator", "--root", str(ROOT), "evidence", "record-executed", str(saved), "--package-dir", str(args.pkg)]
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return (f"- evidence: not recorded here ({last[:200]}); results saved in `{saved.name}`: record them where the generator "
                f"runs with `python -m generator evidence record-executed {saved.name}`, then `make generate`")
    summary = [line for line in done.stdout.splitlines() if line.startswith("evidence: ")]
    return f"- {summary[-1] if summary else 'evidence: recorded'} (results in `{saved.name}`)"


def stage_tests(args) -> tuple[bool, str]:
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        return False, f"- pytest is not installed for {sys.executable}"
    junit = args.work / "tests.xml"
    junit.unlink(missing_ok=True)
    results_file = args.work / "evidence-results.json"
    results_file.unlink(missing_ok=True)
    # The dry run keeps to two ops' tests: make test runs every generated test on the CPU already.
    selected = DRY_TEST_FILES if args.dry_run else ("tests",)
    command = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", f"--junitxml={junit}", *selected]
    # Run from the package copy: `python -m pytest` puts it first on sys.path, so the
    # in-place build is what the tests import.  The tests write what they exercised to RLK_EVIDENCE_OUT.
    rc = run_logged(command, cwd=args.pkg, env=dict(os.environ, PATH=tool_path(), RLK_EVIDENCE_OUT=str(results_file)))
    if not junit.exists():
        return False, f"- pytest exited {rc} without a report; see the log"
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    failed, device_skips, device_ran = [], [], 0
    on_device = re.compile(rf"[\[-]{args.device}[\]-]")  # the device fixture's id inside a test id
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        counts[{"failure": "failed"}.get(outcome, outcome)] += 1
        if outcome in ("failure", "error"):
            failed.append(f"{outcome.upper()} `{name}`")
        if on_device.search(name):
            if outcome == "skipped":
                device_skips.append(f"{name}: {next(iter(case)).get('message', '')}")
            else:
                device_ran += 1
    body = ["- " + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + f"; {device_ran} of them on {args.device}"]
    body += [f"- {n}" for n in failed[:25]]
    if len(failed) > 25:
        body.append(f"- … and {len(failed) - 25} more (see the log)")
    if device_skips and args.device != "cpu":
        # Usually a declared guarantee the kernel lacks; listed so a missing device is noticed.
        body.append(f"- {len(device_skips)} {args.device} tests skipped, e.g. `{device_skips[0]}`")
    if not device_ran:
        body.append(f"- **no test ran on {args.device}**")
    saved = evidence_results(args, results_file)
    if saved is None:
        body.append("- evidence: the generated tests wrote no results file ($RLK_EVIDENCE_OUT); nothing recorded")
    elif args.dry_run:
        body.append(f"- evidence: dry run, nothing recorded (results in `{saved.name}`)")
    else:
        # Per kernel and dtype: only outcomes with tests passed and none failed become records.
        body.append(record_evidence(args, saved))
    return rc == 0 and not failed and device_ran > 0, "\n".join(body)


def stage_chain(args) -> tuple[bool, str]:
    """The chain gate on the device: test_chain_is_bitwise_batch_invariant with RLK_CHAIN_DEVICES set
    to this run's device and RLK_CHAIN_PACKAGE to this build; it must run there, not skip."""
    import importlib.util

    missing = [m for m in ("pytest", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        return False, f"- not installed for {sys.executable}: {', '.join(missing)} (the chain test needs both)"
    junit = args.work / "chain.xml"
    junit.unlink(missing_ok=True)
    test = "tests/test_transformers_chain.py::test_chain_is_bitwise_batch_invariant"
    # The dry run keeps to one model and dtype: the CPU runs the full chain in make test already.
    select = ["-k", "qwen2 and float32"] if args.dry_run else []
    # --noconftest: tests/conftest.py imports the generator, which this machine need not have.
    command = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "--noconftest", f"--junitxml={junit}", test, *select]
    env = dict(os.environ, PATH=tool_path(), RLK_CHAIN_DEVICES=args.device, RLK_CHAIN_PACKAGE=str(args.pkg))
    rc = run_logged(command, cwd=ROOT, env=env)
    if not junit.exists():
        return False, f"- pytest exited {rc} without a report; see the log"
    ran, skipped, failed = [], [], []
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name", "")
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            ran.append(name)
        elif outcome.tag == "skipped":
            skipped.append(f"`{name}`: {outcome.get('message', '')}")
        else:
            failed.append(f"{outcome.tag.upper()} `{name}`: {(outcome.get('message') or '').splitlines()[0][:300] if outcome.get('message') else ''}")
    body = [f"- `{test}` on {args.device}: {len(ran)} passed, {len(failed)} failed, {len(skipped)} skipped"]
    body += [f"- {line}" for line in failed + skipped]
    if not ran:
        body.append(f"- **the chain test did not run on {args.device}**")
    return rc == 0 and not failed and not skipped and bool(ran), "\n".join(body)


def load_package(args):
    """The in-place build, imported; raises when its native library did not load."""
    sys.path.insert(0, str(args.pkg))
    import rlkernels
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible to torch (see the env stage)")
    if rlkernels.NATIVE_ERROR is not None:
        raise RuntimeError(f"rlkernels' native library did not load: {rlkernels.NATIVE_ERROR}")
    if not Path(rlkernels.__file__).is_relative_to(args.pkg):
        raise RuntimeError(f"imported rlkernels from {rlkernels.__file__}, not from the build in {args.pkg}")
    return rlkernels


def native_kernels(rlkernels, platform: str, op: str = OP) -> list:
    """Every native kernel of ``op`` this build can run on ``platform``, in registry order."""
    import torch
    from rlkernels._registry import OPS, PLATFORMS

    key = next(p.dispatch_key for p in PLATFORMS if p.name == platform)
    entry = OPS[op]
    names = [*entry.backends.get(platform, ()), *sorted(entry.kernels)]
    kernels = []
    for name in dict.fromkeys(names):
        kernel = entry.kernels[name]
        if kernel.kind == "native" and torch._C._dispatch_has_kernel_for_dispatch_key(f"rlkernels::{op}.{name}", key):
            kernels.append(kernel)
    if not kernels:
        raise RuntimeError(f"this build has no native {op} kernel for {platform}")
    return kernels


def overload(kernel, op: str = OP):
    import torch

    return getattr(getattr(torch.ops.rlkernels, op), kernel.name)


def inputs(m: int, k: int, n: int, dtype: str, device: str, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(getattr(torch, dtype))
    b = torch.randn(k, n, generator=g).to(getattr(torch, dtype))
    return a.to(device), b.to(device)


def bits(t):
    import torch

    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def describe_difference(got, want) -> str:
    """How two results differ, for the report (they are known to differ in their bits)."""
    got, want = got.cpu(), want.cpu()
    mismatched = int((bits(got) != bits(want)).sum())
    diff = (got.float() - want.float()).abs()
    return f"{mismatched}/{got.numel()} elements differ, max abs diff {float(diff.nan_to_num(float('inf')).max()):.3g}"


def shape_name(shape) -> str:
    return "×".join(map(str, shape))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


def stage_compare(args) -> tuple[bool, str]:
    import torch

    rlkernels = load_package(args)
    shapes = DRY_COMPARE_SHAPES if args.dry_run else COMPARE_SHAPES
    rows, passed, cpu_results = [], True, {}
    for kernel in native_kernels(rlkernels, args.platform):
        portable = "portable" in kernel.guarantees
        for dtype in ALL_DTYPES:
            for seed, (m, k, n) in enumerate(shapes):
                a, b = inputs(m, k, n, dtype, args.device, seed)
                try:
                    got = overload(kernel)(a, b)
                    if (dtype, seed) not in cpu_results:  # the CPU backend the registry picks, once per case
                        cpu_results[dtype, seed] = rlkernels.det_gemm(a.cpu(), b.cpu())
                    want = cpu_results[dtype, seed]
                    same = torch.equal(bits(got.cpu()), bits(want))
                    verdict = "identical" if same else describe_difference(got, want)
                    # Only a portable kernel promises the CPU's bits; the others are listed.
                    passed = passed and (same or not portable)
                except Exception as exc:  # noqa: BLE001  one case failing must not hide the others
                    same, verdict, passed = False, f"error: {first_line(exc)}", False
                print(f"compare {kernel.name} {dtype} {shape_name((m, k, n))}: {verdict}", flush=True)
                if not same:
                    rows.append(f"| {kernel.name} | {dtype} | {shape_name((m, k, n))} | {verdict} | {'yes' if portable else 'no'} |")
    checked = len(shapes) * len(ALL_DTYPES)
    body = [
        (f"Shapes (M×K×N): {', '.join(map(shape_name, shapes))}; dtypes: {', '.join(ALL_DTYPES)}; "
         f"{checked} comparisons per kernel, against the CPU kernel the registry selects.")
    ]
    if rows:
        body += ["", "| kernel | dtype | shape | result | portable (must match) |", "| --- | --- | --- | --- | --- |", *rows]
    else:
        body.append("Every result is bit-identical to the CPU's.")
    return passed, "\n".join(body)


# An ascending float32 sum's error grows with K, and the spec's tolerances are set at the
# reference shape (K = 2048); at larger K an error within this factor of cuBLAS's own error
# (both against a float64 product) also counts as accurate.
CUBLAS_ERROR_FACTOR = 4.0


def accurate(result, reference, atol: float, rtol: float, cublas_error: float) -> bool:
    import torch

    if torch.allclose(result.double(), reference, atol=atol, rtol=rtol):
        return True
    return (result.double() - reference).abs().max().item() <= CUBLAS_ERROR_FACTOR * cublas_error


def stage_invariance(args) -> tuple[bool, str]:
    import torch

    rlkernels = load_package(args)
    from rlkernels._registry import OPS, TOLERANCES

    size = DRY_INVARIANCE if args.dry_run else INVARIANCE
    rows_n, k, n = size["rows"], size["K"], size["N"]
    start = min(100, rows_n // 2)  # a chunk that starts mid-batch, as when a batch is split
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be a true fp32 product
    candidates = [(kern.name, overload(kern), True) for kern in native_kernels(rlkernels, args.platform)]
    candidates.append(("torch.matmul (reference)", torch.matmul, False))  # cuBLAS: informative only
    columns = ["1 row", f"rows {start}+", "rerun", "accuracy"]
    table, passed = [], True
    for dtype in ALL_DTYPES:
        a, b = inputs(rows_n, k, n, dtype, args.device, seed=7)
        reference = torch.matmul(a.double(), b.double())
        cublas_error = (torch.matmul(a, b).double() - reference).abs().max().item()
        atol, rtol = TOLERANCES[OPS[OP].tolerance][dtype]
        for name, fn, required in candidates:
            try:
                full = fn(a, b)
                checks = [
                    torch.equal(bits(fn(a[:1].contiguous(), b)), bits(full[:1])),
                    torch.equal(bits(fn(a[start:].contiguous(), b)), bits(full[start:])),
                    torch.equal(bits(fn(a, b)), bits(full)),
                    accurate(full, reference, atol, rtol, cublas_error),
                ]
                cells = " | ".join("yes" if ok else "**no**" if required else "no" for ok in checks)
                ok = all(checks)
            except Exception as exc:  # noqa: BLE001  as in compare: report it, go on
                cells, ok = f"error: {first_line(exc)} |" + " |" * (len(columns) - 1), False
            if required:
                passed = passed and ok
            print(f"invariance {name} {dtype}: {cells}", flush=True)
            table.append(f"| {name} | {dtype} | {cells} |")
        del a, b, reference
    body = [
        (f"A[{rows_n}×{k}]·B[{k}×{n}] on {args.device}: the first row computed alone, and the rows from "
         f"{start} computed alone, must equal the same rows of the full result bit for bit; a rerun must "
         f"repeat every bit; accuracy against the float64 product within the spec's '{OPS[OP].tolerance}' tolerances, "
         f"or a largest error at most {CUBLAS_ERROR_FACTOR:g}x cuBLAS's (K beyond the spec's reference shape)."),
        "",
        f"| kernel | dtype | {' | '.join(columns)} |",
        "| --- | --- |" + " --- |" * len(columns),
        *table,
    ]
    return passed, "\n".join(body)


def timer(device: str):
    """Seconds per call of fn: batches of calls between two CUDA events, median of three."""
    import torch

    def measure(fn, budget_s: float = 0.3) -> float:
        def batch(count: int) -> float:
            if device == "cpu":
                start = time.perf_counter()
                for _ in range(count):
                    fn()
                return (time.perf_counter() - start) / count
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(count):
                fn()
            end.record()
            end.synchronize()
            return begin.elapsed_time(end) / 1e3 / count

        batch(1)  # warm-up: first launch, cuBLAS heuristics, caches
        once = batch(1)
        count = max(1, min(100, int(budget_s / max(once, 1e-6))))
        return statistics.median(batch(count) for _ in range(3))

    return measure


# The three operand layouts of the det_gemm family, each with the cuBLAS call it replaces:
# C = A·B, C = A·Bᵀ (det_linear, and det_gemm's input gradient), C = Aᵀ·B (the weight gradient).
# Operands are made for C = A·B and stored as the op takes them.
BENCH_OPS = {
    "det_gemm": (lambda a, b: (a, b), lambda a, b: a @ b),
    "det_gemm_nt": (lambda a, b: (a, b.t().contiguous(), None), lambda a, bt, _bias: a @ bt.t()),  # no bias: the plain product
    "det_gemm_tn": (lambda a, b: (a.t().contiguous(), b), lambda at, b: at.t() @ b),
}
# Rows i..j-1 of C alone: the operands as the op takes them, cut to those rows of A.
BENCH_ROWS = {
    "det_gemm": lambda ops, i, j: (ops[0][i:j].contiguous(), ops[1]),
    "det_gemm_nt": lambda ops, i, j: (ops[0][i:j].contiguous(), ops[1], None),
    "det_gemm_tn": lambda ops, i, j: (ops[0][:, i:j].contiguous(), ops[1]),
}


def bitwise_invariance(fn, operands, rows, m: int) -> str:
    """Three bitwise checks of one kernel at one shape: the first row alone, the rows from the middle
    of the batch on alone (a chunk), and a rerun, against the full result; "-" where M has no such split."""
    import torch

    full = fn(*operands)
    start = min(100, m // 2)
    checks = [
        torch.equal(bits(fn(*rows(operands, 0, 1))), bits(full[:1])) if m > 1 else None,
        torch.equal(bits(fn(*rows(operands, start, m))), bits(full[start:])) if start > 0 else None,
        torch.equal(bits(fn(*operands)), bits(full)),
    ]
    return "/".join("-" if ok is None else "yes" if ok else "**no**" for ok in checks)
# float32 runs the simt kernel in every layout; it is measured for det_gemm only.
BENCH_LAYOUT_DTYPES = ["bfloat16"]


def stage_bench(args) -> tuple[bool, str]:
    import torch

    rlkernels = load_package(args)
    # cuBLAS in full fp32, as det_gemm is: TF32 would be a different (less accurate) product.
    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = DRY_BENCH_SHAPES if args.dry_run else BENCH_SHAPES
    measure = timer(args.device)
    deadline = time.monotonic() + args.bench_budget_s
    sections, skipped, errors = [], [], 0
    for op, (arrange, baseline) in BENCH_OPS.items():
        kernels = native_kernels(rlkernels, args.platform, op)
        table = []
        for dtype in BENCH_DTYPES if op == OP else BENCH_LAYOUT_DTYPES:
            for m, k, n in shapes:
                if time.monotonic() > deadline:
                    skipped.append(f"{op} {dtype} {shape_name((m, k, n))}")
                    continue
                operands = arrange(*inputs(m, k, n, dtype, args.device, seed=11))
                flop = 2.0 * m * k * n
                base = measure(lambda operands=operands, baseline=baseline: baseline(*operands))
                row = [f"{flop / base / 1e12:.3g}"]
                for kernel in kernels:
                    fn = overload(kernel, op)
                    try:
                        t = measure(lambda fn=fn, operands=operands: fn(*operands))
                        checks = bitwise_invariance(fn, operands, BENCH_ROWS[op], m)
                    except Exception as exc:  # noqa: BLE001  as in compare: report it, go on
                        errors += 1
                        row.append(f"error: {first_line(exc)}")
                        continue
                    # Every native kernel of these ops guarantees deterministic and batch_invariant.
                    errors += "no" in checks
                    row.append(f"{flop / t / 1e12:.3g} ({base / t:.2f}×) {checks}")
                    print(f"bench {op} {dtype} {shape_name((m, k, n))} {kernel.name}: {t * 1e3:.3f} ms vs cuBLAS {base * 1e3:.3f} ms ({base / t:.2f}×)", flush=True)
                table.append(f"| {dtype} | {shape_name((m, k, n))} | " + " | ".join(row) + " |")
                operands = None  # free this shape's operands before the next is allocated
                if args.device != "cpu":
                    torch.cuda.empty_cache()
        if table:
            names = " | ".join(f"{k.name} TFLOP/s (× cuBLAS)" for k in kernels)
            sections += ["", f"### {op}", "", f"| dtype | shape | torch.matmul TFLOP/s | {names} |", "| --- | --- | --- |" + " --- |" * len(kernels), *table]
    device = torch.cuda.get_device_name() if args.device != "cpu" else "CPU"
    body = [
        (f"{device}, M×K×N, TFLOP/s = 2·M·K·N / time; median of 3 batches of calls after a warm-up, timed with "
         f"{'CUDA events' if args.device != 'cpu' else 'perf_counter'}; torch.matmul (on the same layout) with TF32 off. "
         "After each kernel's speed, its bits: the first row alone / the rows from min(100, M/2) on alone / a rerun, "
         "each equal to the full result bit for bit (yes), or not (no), or no such split at this M (-). "
         "On a 9.0 device built for 9.0a, wgmma runs its own kernel; elsewhere it hands the call to mma."),
        *sections,
    ]
    if skipped:
        body.append(f"\nOut of benchmark time ({args.bench_budget_s} s); not measured: {', '.join(skipped)}")
    return errors == 0, "\n".join(body)


# Tile configurations to try for det_gemm's mma kernel, as its spec's params
# (block_m, block_n, block_k, warps_m, warps_n, stages, blocks_per_sm); the spec's own comes first.
# Shared memory per block: stages * (block_m + block_n) * block_k * 2 bytes, at most 227 KiB.
TILE_CANDIDATES = [(128, 256, 32, 2, 4, 4, 1), (128, 256, 64, 2, 4, 3, 1), (256, 128, 32, 4, 2, 4, 1)]
TILE_SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096)]
TILE_BITS_SHAPE = (777, 4096, 4096)  # partial row tiles; equal bits across configurations expected
TILES_LINE = re.compile(r"using Tiles = MmaTiles<(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (true|false), (true|false)>;")


def with_tiles(source: str, tiles: tuple[int, ...]) -> str:
    """det_gemm_mma.cu with another tile configuration (the operand layouts kept)."""
    match = TILES_LINE.search(source)
    if match is None:
        raise RuntimeError("no `using Tiles = MmaTiles<...>` line in det_gemm_mma.cu")
    line = f"using Tiles = MmaTiles<{', '.join(map(str, tiles))}, {match.group(8)}, {match.group(9)}>;"
    return source[: match.start()] + line + source[match.end() :]


def tile_probe(args) -> int:
    """Child of the tiles stage: one build's mma speed vs cuBLAS, and a digest of its bits."""
    import hashlib
    import json

    import torch

    rlkernels = load_package(args)
    del rlkernels
    mma = torch.ops.rlkernels.det_gemm.mma
    measure = timer(args.device)
    result: dict[str, object] = {}
    for m, k, n in DRY_BENCH_SHAPES if args.dry_run else TILE_SHAPES:
        a, b = inputs(m, k, n, "bfloat16", args.device, seed=11)
        result[shape_name((m, k, n))] = {"cublas": measure(lambda a=a, b=b: torch.matmul(a, b)), "mma": measure(lambda a=a, b=b: mma(a, b))}
    a, b = inputs(*TILE_BITS_SHAPE, "bfloat16", args.device, seed=13)
    result["digest"] = hashlib.sha256(bits(mma(a, b)).cpu().numpy().tobytes()).hexdigest()[:16]
    print("TILE-PROBE " + json.dumps(result), flush=True)
    return 0


def stage_tiles(args) -> tuple[bool, str]:
    import json

    if args.platform != "cuda":
        return True, "The CPU package has no tensor-core kernel: nothing to measure."
    source = args.pkg / "csrc/kernels/cuda/det_gemm_mma.cu"
    original = source.read_text()
    match = TILES_LINE.search(original)
    if match is None:
        return False, "no `using Tiles = MmaTiles<...>` line in the built det_gemm_mma.cu"
    spec_tiles = tuple(int(g) for g in match.groups()[:7])
    env, _ = build_env(args)
    deadline = time.monotonic() + args.bench_budget_s
    rows, digests, skipped = [], {}, []
    try:
        for tiles in [spec_tiles, *[t for t in TILE_CANDIDATES if t != spec_tiles]]:
            name = "{}x{}x{}, {}x{} warps, {} stages, {}/SM".format(*tiles) + (" (spec)" if tiles == spec_tiles else "")
            if time.monotonic() > deadline:
                skipped.append(name)
                continue
            if tiles != spec_tiles:
                source.write_text(with_tiles(original, tiles))
                # ninja recompiles det_gemm_mma.cu alone, then relinks.
                if build_in_place(args, env) != 0:
                    rows.append(f"| {name} | build failed (see the log) |")
                    continue
            probe = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--tile-probe", "--platform", args.platform, "--out", str(args.out)],
                capture_output=True, text=True, timeout=240,
            )
            print(probe.stdout + probe.stderr, flush=True)
            found = [line for line in probe.stdout.splitlines() if line.startswith("TILE-PROBE ")]
            if probe.returncode != 0 or not found:
                rows.append(f"| {name} | probe failed (exit {probe.returncode}; see the log) |")
                continue
            result = json.loads(found[0].removeprefix("TILE-PROBE "))
            digests[name] = result.pop("digest")
            cells = [f"{2.0 * math.prod(int(x) for x in shape.split('×')) / t['mma'] / 1e12:.0f} ({t['cublas'] / t['mma']:.2f}×)" for shape, t in result.items()]
            rows.append(f"| {name} | " + " | ".join(cells) + f" | {'same' if digests[name] == next(iter(digests.values())) else '**differ**'} |")
    finally:
        if source.read_text() != original:
            # Back to the spec's configuration, rebuilt, so that a later `--only compare` (which
            # skips the build stage) tests what the spec says.  Killed before this, the source
            # is still restored by the next build stage's sync.
            source.write_text(original)
            if build_in_place(args, env) != 0:
                rows.append("| (restoring the spec's configuration) | build failed (see the log) |")
    shapes = DRY_BENCH_SHAPES if args.dry_run else TILE_SHAPES
    body = [
        (f"det_gemm.mma, bfloat16, rebuilt per configuration (det_gemm_nt/tn keep theirs). TFLOP/s and × cuBLAS as in the "
         f"benchmark; bits: the result at {shape_name(TILE_BITS_SHAPE)} compared with the spec's configuration's."),
        "",
        "| configuration | " + " | ".join(f"{shape_name(s)} TFLOP/s (× cuBLAS)" for s in shapes) + " | bits |",
        "| --- |" + " --- |" * (len(shapes) + 1),
        *rows,
    ]
    if skipped:
        body.append(f"\nOut of time; not measured: {'; '.join(skipped)}")
    passed = len(rows) == len(digests) and len(set(digests.values())) <= 1
    return passed, "\n".join(body)


BODIES = {
    "env": stage_env,
    "build": stage_build,
    "tests": stage_tests,
    "chain": stage_chain,
    "compare": stage_compare,
    "invariance": stage_invariance,
    "bench": stage_bench,
    "tiles": stage_tiles,
}


def run_stage_here(args) -> int:
    """Child process: run one stage, write its markdown, exit with its verdict."""
    try:
        passed, body = BODIES[args.stage](args)
    except Exception:  # noqa: BLE001  whatever it is goes into the report
        traceback.print_exc()
        (args.work / f"{args.stage}.md").write_text(f"```\n{traceback.format_exc(limit=3).strip()}\n```")
        return 2
    (args.work / f"{args.stage}.md").write_text(body)
    return EXIT_PASS if passed else EXIT_FAIL


# --------------------------------------------------------------------------- orchestration


def child_command(args, stage: str) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--stage", stage, "--platform", args.platform, "--out", str(args.out)]
    if args.dry_run:
        command.append("--dry-run")
    return command


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def run_with_timeout(command: list[str], out, timeout: float) -> int | None:
    """Exit status, or None when it ran out of time and was killed with everything it started."""
    child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        return child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Everything it started: ninja puts each compiler in a process group of its own,
        # so killing the child's group alone would leave those running.
        for pid in [*descendants(child.pid), child.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        child.wait()
        return None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            found.append(kid)
            todo.append(kid)
    return found


def orchestrate(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    report, log = args.out / "gpu_report.md", args.out / "gpu_check.log"
    log.write_text("")
    wanted = [s for s in STAGES if not args.only or s.name in args.only]
    deadline = time.monotonic() + args.budget_s
    results: list[tuple[Stage, str, float, str]] = []

    def write_report() -> None:
        # Rewritten after every stage, so a run cut short still leaves what it found.
        lines = [
            f"# GPU check: rlkernels {args.platform} package{' (dry run, tiny shapes)' if args.dry_run else ''}",
            "",
            "| stage | result | time |",
            "| --- | --- | --- |",
            *[f"| {s.name} | {verdict} | {t:.0f} s |" for s, verdict, t, _ in results],
        ]
        for stage, verdict, _, body in results:
            lines += ["", f"## {stage.title}: {verdict}", "", body]
        lines += ["", f"Full output: `{log.name}`.", ""]
        report.write_text("\n".join(lines))

    for stage in wanted:
        remaining = deadline - time.monotonic()
        if remaining < 10:
            results.append((stage, "SKIPPED", 0.0, f"Out of time (the run's budget is {args.budget_s} s)."))
            write_report()
            continue
        section = args.work / f"{stage.name}.md"
        section.unlink(missing_ok=True)
        print(f"gpu-check: {stage.name} ...", flush=True)
        with log.open("a") as out:
            out.write(f"\n===== {stage.name} =====\n")
            out.flush()
            start = time.perf_counter()
            rc = run_with_timeout(child_command(args, stage.name), out, min(stage.timeout_s, remaining))
            elapsed = time.perf_counter() - start
        body = section.read_text() if section.exists() else ""
        if rc is None:
            verdict = "TIMEOUT"
            body += f"\n\nStopped after {elapsed:.0f} s. Last lines of its output:\n\n```\n{tail(log)}\n```"
        elif rc == EXIT_PASS:
            verdict = "PASS"
        elif rc == EXIT_FAIL:
            verdict = "FAIL"
        else:
            verdict = "ERROR"
            if not body:  # died before writing anything, e.g. a CUDA fault or a segfault
                body = f"Exit status {rc}. Last lines of its output:\n\n```\n{tail(log)}\n```"
        print(f"gpu-check: {stage.name} {verdict} ({elapsed:.0f} s)", flush=True)
        results.append((stage, verdict, elapsed, body.strip()))
        write_report()

    print(f"gpu-check: report {report}, log {log}")
    return 0 if all(verdict == "PASS" for _, verdict, _, _ in results) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build, test, compare and benchmark the CUDA package on a GPU machine.")
    parser.add_argument("--dry-run", action="store_true", help="every stage on the CPU package with tiny shapes (no GPU needed)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "."), help="report directory (default: $OUT, else .)")
    parser.add_argument("--only", type=lambda s: s.split(","), help=f"comma-separated stages ({','.join(s.name for s in STAGES)})")
    parser.add_argument("--budget-s", type=int, default=570, help="stop starting stages after this many seconds")
    parser.add_argument("--bench-budget-s", type=int, default=200, help="measure no new shapes after this many seconds")
    parser.add_argument("--stage", choices=list(BODIES), help=argparse.SUPPRESS)  # internal: run one stage
    parser.add_argument("--platform", help=argparse.SUPPRESS)
    parser.add_argument("--tile-probe", action="store_true", help=argparse.SUPPRESS)  # internal: child of `tiles`
    args = parser.parse_args(argv)
    args.platform = args.platform or ("cpu" if args.dry_run else "cuda")
    args.device = "cpu" if args.platform == "cpu" else "cuda"
    args.out = args.out.resolve()
    args.work = ROOT / ".build" / f"gpu-check-{args.platform}-reports"
    args.pkg = ROOT / ".build" / f"gpu-check-{args.platform}"
    if args.only and not set(args.only) <= set(BODIES):
        parser.error(f"unknown stage in --only: {', '.join(sorted(set(args.only) - set(BODIES)))}")
    if args.tile_probe:
        return tile_probe(args)
    if args.stage:
        return run_stage_here(args)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
