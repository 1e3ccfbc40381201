"""The GPU check: on a machine with an NVIDIA GPU, in one run,

  env         what the machine has (GPU, driver, torch, nvcc)
  build       generated/cuda built in place (a synced copy in .build/gpu-check-cuda/)
  tests       the package's generated tests, now with the device present
  chain       tests/test_transformers_chain.py's chain test (a patched tiny Qwen2 and Llama:
              log-probs and GRPO gradients bitwise alone vs in padded and packed batches) on the
              device, with this build (transformers needed)
  compare     CUDA results vs CPU results, bit for bit, every output: several shapes, every dtype
  invariance  batch invariance (1 row, and a chunk from the middle, vs the whole batch: for
              det_gemm 512 rows at K=N=4096), determinism and accuracy on the device
  bench       every native kernel vs the baseline its op's spec names (det_gemm, det_gemm_nt and
              det_gemm_tn: torch.matmul / F.linear, cuBLAS, on the same layout), same process,
              CUDA events, at the large shapes and the decode-like M of 1, 16 and 128; at each,
              every kernel's bits checked for batch invariance (one row alone, a chunk of rows
              alone) and determinism (a rerun)
  tiles       det_gemm's mma kernel rendered through the generator with other tile configurations
              (generator/variant.py) and rebuilt: speed vs cuBLAS, and whether the bits equal
              those of the spec's configuration

The compare, invariance and bench stages run for any op of the catalog: `--op NAME` (repeatable)
picks them; by default compare and invariance run det_gemm and bench the det_gemm family, at a
GPU's sizes (below).  Another op takes its sizes, dtypes and baseline from its spec (its test
shapes, its bench section) and its kernels per platform from the package's registry.

and a short report: $OUT/gpu_report.md (else ./gpu_report.md) with the full log beside it.
The tests stage also writes $OUT/gpu_evidence.json: what the generated tests exercised on the
device (their $RLK_EVIDENCE_OUT file, with the hash of each kernel source as built and the commit)
and records it as `executed` evidence in evidence/<platform>/executed.json, only for kernels whose
tests passed; where the generator cannot run, it says how to record the file elsewhere.  A checkout
without .git takes the commit from $RLK_EVIDENCE_COMMIT.
Each stage runs in its own process with its own time limit, so a crash, a CUDA fault or a
hang in one is reported and the later stages still run.  Needs torch, PyYAML, pytest, setuptools
and ninja; the generator's own dependencies (pydantic, Jinja2) only for the tiles stage, which
renders the kernel's variants (generated/ is committed).

    bash tools/gpu_check.sh                   # what `make gpu-check` runs
    python tools/gpu_check.py --dry-run       # every stage on the CPU package, tiny shapes
    python tools/gpu_check.py --op rms_norm --op logp --only build,compare,invariance,bench
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
sys.path.insert(0, str(ROOT))
from tools.bench import cases, specs
from tools.bench.sections.model import MODEL_SIZES

EXIT_PASS, EXIT_FAIL = 0, 1  # any other exit status of a stage is an error

FAMILY = ("det_gemm", "det_gemm_nt", "det_gemm_tn")
DEFAULT_OPS = {"compare": FAMILY[:1], "invariance": FAMILY[:1], "bench": FAMILY}
"""What each stage runs without --op."""

# The det_gemm family's sizes on a device, (M, K, N).  The CPU kernel is a plain loop, so the
# bitwise comparison stays at sizes it finishes in seconds; odd sizes exercise the tile edges.
COMPARE_SHAPES = [(1, 7, 5), (33, 64, 40), (127, 300, 129), (256, 1024, 384), (4, 4096, 4096), (128, 2048, 2048)]
INVARIANCE = {"rows": 512, "K": 4096, "N": 4096}
# 4096^3 and target shapes from the operator catalog (a Qwen3-8B-like MLP), then decode-like
# batches of 1, 16 and 128 rows at K = N = 4096.
BENCH_SHAPES = [(4096, 4096, 4096), (4096, 4096, 12288), (4096, 14336, 4096), (1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096)]
BENCH_DTYPES = ["bfloat16", "float32"]
# float32 runs the simt kernel in every layout; it is measured for det_gemm only.
BENCH_LAYOUT_DTYPES = ["bfloat16"]
ALL_DTYPES = ["float32", "float16", "bfloat16"]

DRY_TEST_OPS = ("det_gemm", "linear_logp")
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
    Stage("bench", "Benchmark vs the baselines the specs name (cuBLAS for the det_gemm family), with bitwise invariance at each shape", 240),
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
    from generator.files import read_json
    from generator.source_hash import commit_of, package_files, source_sha256

    if not results_file.is_file():
        return None
    # The generator's reader: a repeated key is refused here too, not collapsed into the copy
    # that record-executed reads.
    results = read_json(results_file)
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
    # The dry run keeps to two ops' tests (or those of --op): make test runs every generated test on the CPU already.
    selected = op_tests(args.op or DRY_TEST_OPS) if args.dry_run else ["tests"]
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


def native_kernels(rlkernels, platform: str, op: str) -> list:
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


def overload(kernel, op: str):
    import torch

    return getattr(getattr(torch.ops.rlkernels, op), kernel.name)


def op_dtypes(op: str) -> list[str]:
    """The floating dtypes the op takes (its registry's), every dtype variable set to each in turn."""
    from rlkernels._registry import OPS

    return list(OPS[op].dtypes)


def bits(t):
    """The integer view of a tensor's bits, on the CPU: the project's one definition (tests/bitwise.py),
    imported when first needed, as torch is."""
    from tests.bitwise import bits as integer_view

    return integer_view(t)


def same_bits(got, want) -> bool:
    """Every output the same, bit for bit (integer views: -0.0 is not +0.0, a NaN equals only the same NaN)."""
    import torch

    got, want = outputs(got), outputs(want)
    return len(got) == len(want) and all(g.shape == w.shape and g.dtype == w.dtype and torch.equal(bits(g.cpu()), bits(w.cpu())) for g, w in zip(got, want))


def outputs(result) -> tuple:
    return tuple(result) if isinstance(result, tuple | list) else (result,)


def describe_difference(got, want) -> str:
    """How two results differ, for the report (they are known to differ in their bits)."""
    parts = []
    for index, (g, w) in enumerate(zip(outputs(got), outputs(want))):
        g, w = g.cpu(), w.cpu()
        if g.shape != w.shape or g.dtype != w.dtype:
            parts.append(f"output {index}: {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}")
            continue
        mismatched = int((bits(g) != bits(w)).sum())
        if mismatched:
            diff = (g.double() - w.double()).abs()
            parts.append(f"{mismatched}/{g.numel()} elements differ, max abs diff {float(diff.nan_to_num(float('inf')).max()):.3g}")
    return "; ".join(parts) or "a different number of outputs"


def shape_name(sizes: dict[str, int]) -> str:
    return "×".join(map(str, sizes.values()))


def dims_name(sizes: dict[str, int]) -> str:
    return "×".join(sizes)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:160]


# --------------------------------------------------------------------------- what each op runs at


@dataclass
class Plan:
    """The sizes and dtypes of one op in the compare, invariance and bench stages."""

    compare: list[dict[str, int]]
    compare_dtypes: list[str]
    invariance: dict[str, int]
    bench: list[dict[str, int]]
    bench_dtypes: list[str]


def mkn(shapes) -> list[dict[str, int]]:
    return [{"M": m, "K": k, "N": n} for m, k, n in shapes]


def gemm_plan(op: str, dry_run: bool) -> Plan:
    """The det_gemm family at a GPU's sizes (tiny ones in a dry run)."""
    rows, k, n = (DRY_INVARIANCE if dry_run else INVARIANCE).values()
    return Plan(
        compare=mkn(DRY_COMPARE_SHAPES if dry_run else COMPARE_SHAPES),
        compare_dtypes=ALL_DTYPES,
        invariance={"M": rows, "K": k, "N": n},
        bench=mkn(DRY_BENCH_SHAPES if dry_run else BENCH_SHAPES),
        bench_dtypes=BENCH_DTYPES if op == FAMILY[0] else BENCH_LAYOUT_DTYPES,
    )


def spec_plan(op: specs.OpData, dry_run: bool) -> Plan:
    """Any other op, from its spec: compare at its test shapes (and its bench shapes), invariance and
    bench at its bench section's sizes (its own shapes, and the model table's largest layer); a dry
    run keeps to the test shapes."""
    dtypes = op_dtypes(op.name)
    benched: list[dict[str, int]] = []
    if op.bench is not None and not dry_run:
        benched = [*op.bench.shapes, *(cases.layer_sizes(case.sizes, MODEL_SIZES[-1]) for case in op.bench.layer)]
    tests = list(op.test_shapes)
    return Plan(
        compare=tests + ([] if dry_run else list(op.bench.shapes if op.bench else ())),
        compare_dtypes=dtypes,
        invariance=benched[0] if benched else tests[0],
        bench=benched or tests[:2],
        bench_dtypes=list(op.bench.dtypes) if op.bench is not None else dtypes[:1],
    )


def plan_for(op: specs.OpData, dry_run: bool) -> Plan:
    return gemm_plan(op.name, dry_run) if op.name in FAMILY else spec_plan(op, dry_run)


def selected_ops(args, stage: str) -> list[specs.OpData]:
    """The ops a stage runs: those named with --op, else what it ran for the det_gemm family before --op."""
    return [specs.read_op(name, ROOT) for name in args.op or DEFAULT_OPS[stage]]


def op_tests(ops) -> list[str]:
    """pytest arguments selecting the contract tests of ``ops`` in the package (its one generic suite)."""
    return ["tests", *(f"--op={op}" for op in ops)]


# --------------------------------------------------------------------------- compare, invariance, bench


def stage_compare(args) -> tuple[bool, str]:
    rlkernels = load_package(args)
    body, passed = [], True
    for op in selected_ops(args, "compare"):
        plan = plan_for(op, args.dry_run)
        rows, cpu_results = [], {}
        for kernel in native_kernels(rlkernels, args.platform, op.name):
            portable = "portable" in kernel.guarantees
            for dtype in plan.compare_dtypes:
                for seed, sizes in enumerate(plan.compare):
                    inputs = cases.draw(op, sizes, dtype, seed=seed)
                    try:
                        got = overload(kernel, op.name)(*inputs.to(args.device).args)
                        if (dtype, seed) not in cpu_results:  # the CPU backend the registry picks, once per case
                            cpu_results[dtype, seed] = getattr(rlkernels, op.name)(*inputs.args)
                        want = cpu_results[dtype, seed]
                        same = same_bits(got, want)
                        verdict = "identical" if same else describe_difference(got, want)
                        # Only a portable kernel promises the CPU's bits; the others are listed.
                        passed = passed and (same or not portable)
                    except Exception as exc:  # noqa: BLE001  one case failing must not hide the others
                        same, verdict, passed = False, f"error: {first_line(exc)}", False
                    print(f"compare {op.name}.{kernel.name} {dtype} {shape_name(sizes)}: {verdict}", flush=True)
                    if not same:
                        rows.append(f"| {kernel.name} | {dtype} | {shape_name(sizes)} | {verdict} | {'yes' if portable else 'no'} |")
        checked = len(plan.compare) * len(plan.compare_dtypes)
        body += [
            "" if body else None,
            (f"{op.name}: shapes ({dims_name(plan.compare[0])}): {', '.join(map(shape_name, plan.compare))}; dtypes: {', '.join(plan.compare_dtypes)}; "
             f"{checked} comparisons per kernel, every output, against the CPU kernel the registry selects."),
        ]
        if rows:
            body += ["", "| kernel | dtype | shape | result | portable (must match) |", "| --- | --- | --- | --- | --- |", *rows]
        else:
            body.append("Every result is bit-identical to the CPU's.")
    return passed, "\n".join(line for line in body if line is not None)


# An ascending float32 sum's error grows with the reduction, and the spec's tolerances are set at
# the reference shape (K = 2048 for det_gemm); at larger sizes an error within this factor of the
# baseline's own error (cuBLAS's, both against a float64 reference) also counts as accurate.
BASELINE_ERROR_FACTOR = 4.0


def accurate(result, reference, atol: float, rtol: float, baseline_error: float | None) -> bool:
    import torch

    if torch.allclose(result.double(), reference, atol=atol, rtol=rtol, equal_nan=True):
        return True
    return baseline_error is not None and (result.double() - reference).abs().max().item() <= BASELINE_ERROR_FACTOR * baseline_error


def reference_result(op: specs.OpData, inputs: cases.Inputs):
    """The op's first output by its spec's reference, on float64 copies of the floating inputs (on
    their device); a reference that does not take float64 gets float32 ones on the CPU, as the
    generated tests give it."""
    fn = cases.resolve(op.references[op.reference])
    try:
        out = cases.first(fn(*[t.double() if t is not None and t.is_floating_point() else t for t in inputs.args]))
    except (RuntimeError, TypeError):
        out = cases.first(fn(*[None if t is None else t.cpu().float() if t.is_floating_point() else t.cpu() for t in inputs.args]))
    return out.double().to(inputs.args[0].device)


def stage_invariance(args) -> tuple[bool, str]:
    import torch

    rlkernels = load_package(args)
    from rlkernels._registry import OPS, TOLERANCES

    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be a true fp32 product
    body, passed = [], True
    for op in selected_ops(args, "invariance"):
        plan = plan_for(op, args.dry_run)
        size = plan.invariance
        probe = cases.draw(op, size, plan.compare_dtypes[0])
        rows_n = cases.batch_rows(probe) or 1
        start = min(100, rows_n // 2) if op.batch_dim is not None else 0  # a chunk that starts mid-batch, as when a batch is split
        candidates = [(kern.name, cases.op_call(overload(kern, op.name)), True) for kern in native_kernels(rlkernels, args.platform, op.name)]
        baseline = None
        if op.bench is not None:
            baseline = cases.baseline_call(op)
            candidates.append((f"`{cases.baseline_code(op)}` (baseline)", baseline, False))  # informative only
        columns = ["1 row", f"rows {start}+" if start else "a chunk", "rerun", "accuracy"]
        table = []
        for dtype in plan.compare_dtypes:
            inputs = cases.draw(op, size, dtype, seed=7).to(args.device)
            reference = reference_result(op, inputs)
            baseline_error = None
            if baseline is not None:
                baseline_error = (baseline(*inputs.args).double() - reference).abs().max().item()
            atol, rtol = TOLERANCES[OPS[op.name].tolerance][dtype]
            for name, fn, required in candidates:
                try:
                    full = fn(*inputs.args)
                    checks = [
                        same_bits(fn(*cases.take_rows(inputs, 0, 1).args), cases.output_rows(op, full, 0, 1)) if rows_n > 1 else None,
                        same_bits(fn(*cases.take_rows(inputs, start, rows_n).args), cases.output_rows(op, full, start, rows_n)) if start > 0 else None,
                        same_bits(fn(*inputs.args), full),
                        accurate(full, reference, atol, rtol, baseline_error),
                    ]
                    cells = " | ".join("-" if ok is None else "yes" if ok else "**no**" if required else "no" for ok in checks)
                    ok = all(c is not False for c in checks)
                except Exception as exc:  # noqa: BLE001  as in compare: report it, go on
                    cells, ok = f"error: {first_line(exc)} |" + " |" * (len(columns) - 1), False
                if required:
                    passed = passed and ok
                print(f"invariance {op.name} {name} {dtype}: {cells}", flush=True)
                table.append(f"| {name} | {dtype} | {cells} |")
            del inputs, reference
        body += [
            "" if body else None,
            (f"{op.name} at {', '.join(f'{d}={n}' for d, n in size.items())} on {args.device}: the first row computed alone, and the rows from "
             f"{start or 'the middle'} computed alone (\"-\": no such split), must equal the same rows of the full result bit for bit; a rerun must "
             f"repeat every bit; accuracy against the spec's reference on float64 inputs within the '{OPS[op.name].tolerance}' tolerances, "
             f"or a largest error at most {BASELINE_ERROR_FACTOR:g}x the baseline's (sizes beyond the spec's reference shape)."),
            "",
            f"| kernel | dtype | {' | '.join(columns)} |",
            "| --- | --- |" + " --- |" * len(columns),
            *table,
        ]
    return passed, "\n".join(line for line in body if line is not None)


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


def bitwise_invariance(op: specs.OpData, fn, inputs: cases.Inputs) -> str:
    """Three bitwise checks of one kernel at one size: the first row alone, the rows from the middle
    of the batch on alone (a chunk), and a rerun, against the full result; "-" where there is no such split."""
    full = fn(*inputs.args)
    rows = cases.batch_rows(inputs) or 1
    start = min(100, rows // 2) if op.batch_dim is not None else 0
    checks = [
        same_bits(fn(*cases.take_rows(inputs, 0, 1).args), cases.output_rows(op, full, 0, 1)) if rows > 1 else None,
        same_bits(fn(*cases.take_rows(inputs, start, rows).args), cases.output_rows(op, full, start, rows)) if start > 0 else None,
        same_bits(fn(*inputs.args), full),
    ]
    return "/".join("-" if ok is None else "yes" if ok else "**no**" for ok in checks)


def flop(op: specs.OpData, sizes: dict[str, int]) -> float | None:
    """Floating-point operations of one call, where the stage knows them (the det_gemm family's 2·M·K·N)."""
    return 2.0 * sizes["M"] * sizes["K"] * sizes["N"] if op.name in FAMILY else None


def speed(seconds: float, work: float | None) -> str:
    return f"{work / seconds / 1e12:.3g}" if work is not None else f"{seconds * 1e3:.3g}"


def stage_bench(args) -> tuple[bool, str]:
    import torch

    rlkernels = load_package(args)
    # cuBLAS in full fp32, as det_gemm is: TF32 would be a different (less accurate) product.
    torch.backends.cuda.matmul.allow_tf32 = False
    measure = timer(args.device)
    deadline = time.monotonic() + args.bench_budget_s
    sections, skipped, errors = [], [], 0
    for op in selected_ops(args, "bench"):
        if op.bench is None:
            sections += ["", f"### {op.name}", "", "Its spec has no bench section: nothing names what to time it against."]
            continue
        plan = plan_for(op, args.dry_run)
        kernels = native_kernels(rlkernels, args.platform, op.name)
        baseline, code = cases.baseline_call(op), cases.baseline_code(op)
        unit = "TFLOP/s" if flop(op, plan.bench[0]) is not None else "ms"
        table = []
        for dtype in plan.bench_dtypes:
            for sizes in plan.bench:
                if time.monotonic() > deadline:
                    skipped.append(f"{op.name} {dtype} {shape_name(sizes)}")
                    continue
                inputs = cases.draw(op, sizes, dtype, seed=11).to(args.device)
                work = flop(op, sizes)
                base = measure(lambda inputs=inputs, baseline=baseline: baseline(*inputs.args))
                row = [speed(base, work)]
                for kernel in kernels:
                    fn = cases.op_call(overload(kernel, op.name))
                    try:
                        t = measure(lambda fn=fn, inputs=inputs: fn(*inputs.args))
                        checks = bitwise_invariance(op, fn, inputs)
                    except Exception as exc:  # noqa: BLE001  as in compare: report it, go on
                        errors += 1
                        row.append(f"error: {first_line(exc)}")
                        continue
                    # Every native kernel of these ops guarantees deterministic and batch_invariant.
                    errors += "no" in checks
                    row.append(f"{speed(t, work)} ({base / t:.2f}×) {checks}")
                    print(f"bench {op.name} {dtype} {shape_name(sizes)} {kernel.name}: {t * 1e3:.3f} ms vs baseline {base * 1e3:.3f} ms ({base / t:.2f}×)", flush=True)
                table.append(f"| {dtype} | {shape_name(sizes)} | " + " | ".join(row) + " |")
                inputs = None  # free this shape's inputs before the next is allocated
                if args.device != "cpu":
                    torch.cuda.empty_cache()
        if table:
            names = " | ".join(f"{k.name} {unit} (× baseline)" for k in kernels)
            sections += ["", f"### {op.name}", "", f"| dtype | {dims_name(plan.bench[0])} | `{code}` {unit} | {names} |", "| --- | --- | --- |" + " --- |" * len(kernels), *table]
    device = torch.cuda.get_device_name() if args.device != "cpu" else "CPU"
    body = [
        (f"{device}; TFLOP/s = 2·M·K·N / time (the det_gemm family), ms per call for other ops; median of 3 batches of calls after a warm-up, "
         f"timed with {'CUDA events' if args.device != 'cpu' else 'perf_counter'}; the baseline is the one each op's spec names (bench.baseline) "
         "on the same tensors, with TF32 off (torch.matmul and F.linear: cuBLAS on the same layout). "
         "After each kernel's speed, its bits: the first row alone / the rows from min(100, rows/2) on alone / a rerun, "
         "each equal to the full result bit for bit (yes), or not (no), or no such split at this size (-). "
         "On a 9.0 device built for 9.0a, wgmma runs its own kernel; elsewhere it hands the call to mma."),
        *sections,
    ]
    if skipped:
        body.append(f"\nOut of benchmark time ({args.bench_budget_s} s); not measured: {', '.join(skipped)}")
    return errors == 0, "\n".join(body)


# --------------------------------------------------------------------------- tiles

# Tile configurations to try for det_gemm's mma kernel, as its spec's params; the spec's own comes
# first.  Shared memory per block: stages * (block_m + block_n) * block_k * 2 bytes, at most 227 KiB.
TILE_KEYS = ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "blocks_per_sm")
TILE_CANDIDATES = [dict(zip(TILE_KEYS, tiles)) for tiles in [(128, 256, 32, 2, 4, 4, 1), (128, 256, 64, 2, 4, 3, 1), (256, 128, 32, 4, 2, 4, 1)]]
TILE_OP, TILE_KERNEL = "det_gemm", "mma"
TILE_SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096)]
TILE_BITS_SHAPE = (777, 4096, 4096)  # partial row tiles; equal bits across configurations expected


def tile_source(params: dict[str, int]) -> str:
    """det_gemm_mma.cu with ``params`` in place of the spec's, rendered through the generator (its
    params overridden, the contracts re-checked); raises generator.variant.VariantError where refused."""
    sys.path.insert(0, str(ROOT))
    from generator.variant import render_kernel

    return render_kernel(ROOT, TILE_OP, TILE_KERNEL, "cuda", params)


def spec_tiles() -> dict[str, int]:
    sys.path.insert(0, str(ROOT))
    from generator.load import load_catalog
    from generator.model import NativeKernel

    kernel = load_catalog(ROOT / "specs", ROOT).op(TILE_OP).kernels[TILE_KERNEL]
    assert isinstance(kernel, NativeKernel)
    return {key: int(kernel.params[key]) for key in TILE_KEYS}


def tile_name(tiles: dict[str, int], spec: dict[str, int]) -> str:
    return "{block_m}x{block_n}x{block_k}, {warps_m}x{warps_n} warps, {stages} stages, {blocks_per_sm}/SM".format(**tiles) + (" (spec)" if tiles == spec else "")


def tile_probe(args) -> int:
    """Child of the tiles stage: one build's mma speed vs cuBLAS, and a digest of its bits."""
    import hashlib
    import json

    import torch

    rlkernels = load_package(args)
    del rlkernels
    mma = getattr(torch.ops.rlkernels, TILE_OP).mma
    measure = timer(args.device)
    result: dict[str, object] = {}
    for m, k, n in DRY_BENCH_SHAPES if args.dry_run else TILE_SHAPES:
        a, b = cases.draw(specs.read_op(TILE_OP, ROOT), {"M": m, "K": k, "N": n}, "bfloat16", seed=11).to(args.device).args
        result[f"{m}×{k}×{n}"] = {"cublas": measure(lambda a=a, b=b: torch.matmul(a, b)), "mma": measure(lambda a=a, b=b: mma(a, b))}
    m, k, n = TILE_BITS_SHAPE
    a, b = cases.draw(specs.read_op(TILE_OP, ROOT), {"M": m, "K": k, "N": n}, "bfloat16", seed=13).to(args.device).args
    result["digest"] = hashlib.sha256(bits(mma(a, b)).cpu().numpy().tobytes()).hexdigest()[:16]
    print("TILE-PROBE " + json.dumps(result), flush=True)
    return 0


def stage_tiles(args) -> tuple[bool, str]:
    import json

    try:
        spec = spec_tiles()
        configurations = [spec, *[t for t in TILE_CANDIDATES if t != spec]]
        sources = {}
        for tiles in configurations:
            try:
                sources[tile_name(tiles, spec)] = tile_source(tiles)
            except Exception as exc:  # noqa: BLE001  a refused configuration is a row of the report
                sources[tile_name(tiles, spec)] = exc
    except ImportError as exc:
        return False, (f"- the tiles stage renders each configuration through the generator (generator/variant.py), whose dependencies "
                       f"are not installed for {sys.executable} ({exc}): pip install -e . (pydantic, Jinja2, PyYAML)")
    if args.platform != "cuda":
        rendered = [name for name, source in sources.items() if isinstance(source, str)]
        refused = [f"{name}: {source}" for name, source in sources.items() if not isinstance(source, str)]
        body = [("The CPU package has no tensor-core kernel: nothing to measure. Each configuration was rendered through the generator "
                f"(no device to build or time it): {'; '.join(rendered)}.")]
        body += [f"- **refused**: {line}" for line in refused]
        return not refused, "\n".join(body)
    source = args.pkg / "csrc/kernels/cuda/det_gemm_mma.cu"
    original = source.read_bytes()
    env, _ = build_env(args)
    deadline = time.monotonic() + args.bench_budget_s
    rows, digests, skipped = [], {}, []
    try:
        for name, variant in sources.items():
            if time.monotonic() > deadline:
                skipped.append(name)
                continue
            if not isinstance(variant, str):
                rows.append(f"| {name} | refused by the generator: {first_line(variant)} |")
                continue
            if variant.encode() != source.read_bytes():
                source.write_text(variant)
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
        if source.read_bytes() != original:
            # Back to the spec's configuration, rebuilt, so that a later `--only compare` (which
            # skips the build stage) tests what the spec says.  Killed before this, the source
            # is still restored by the next build stage's sync.
            source.write_bytes(original)
            if build_in_place(args, env) != 0:
                rows.append("| (restoring the spec's configuration) | build failed (see the log) |")
    shapes = DRY_BENCH_SHAPES if args.dry_run else TILE_SHAPES
    body = [
        (f"det_gemm.mma, bfloat16, each configuration rendered through the generator (generator/variant.py: the spec's params "
         f"overridden, the contracts re-checked) and rebuilt (det_gemm_nt/tn keep theirs). TFLOP/s and × cuBLAS as in the "
         f"benchmark; bits: the result at {'×'.join(map(str, TILE_BITS_SHAPE))} compared with the spec's configuration's."),
        "",
        "| configuration | " + " | ".join(f"{'×'.join(map(str, s))} TFLOP/s (× cuBLAS)" for s in shapes) + " | bits |",
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
    for op in args.op or ():
        command += ["--op", op]
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
    parser.add_argument(
        "--op", action="append", metavar="NAME",
        help=f"the op of the compare, invariance and bench stages (repeatable; default: {', '.join(DEFAULT_OPS['compare'])} for compare and "
             f"invariance, {', '.join(DEFAULT_OPS['bench'])} for bench); in a dry run also the tests stage's",
    )
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
    for op in args.op or ():
        try:
            specs.read_op(op, ROOT)
        except KeyError as exc:
            parser.error(f"--op {op}: {exc.args[0]}")
    if args.tile_probe:
        return tile_probe(args)
    if args.stage:
        return run_stage_here(args)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
