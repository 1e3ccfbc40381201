"""Compare the CPU kernels of two builds bit for bit, and time them against each other.

    python tools/compare_builds.py [--base REV] [--quick] [--time]

Builds the CPU package of git revision REV (default HEAD: its committed generated/cpu) and of
the working tree's generated/cpu, each in place under .build/compare/ (ccache and ninja keep
rebuilds short), and starts one worker process on each (the two packages register the same
torch library, so they cannot share a process).  Then, for every op and every native CPU
kernel, through the kernel's own overload (torch.ops.rlkernels.<op>.<kernel>), both workers run
the same cases and answer with a digest of each output's dtype, shape and bits (the integer
views: -0.0 is not +0.0, a NaN equals only the same NaN); any two digests that differ are
reported.  The cases come from the generated tests of the op (tests/test_<op>.py of the working
tree's package): every shape of the spec's tests.shapes, the sizes taken from the kernel's tiles
(each batch size, the reduction extent, the packed sequences' lengths), every dimension set to 0,
every dtype and dtype combination, every attribute variant, and with and without each optional
argument; each case on every host code path (RLK_CPU_SIMD=generic, avx2, avx512, avx512_bf16 (the
bfloat16 pairs asked for) and the CPU's own) on 1 and 2 threads (RLK_NUM_THREADS).  With --quick,
the code paths and threads run on the spec's shapes only.  --op NAME compares only that op
(repeatable); --paged adds paged_cases(): paged_attention at models' head sizes (64, 80, 128), cache
blocks of 16 and 32, query groups of 1 and 4, prefill, decode and chunked prefill, windows and a
large scale, and spoiled inputs (infinities and NaN, bad block ids, offsets out of order, bad
lengths), each on every code path and thread count; and attention on the same steps packed (but
for the block ids and lengths, which packing cannot express).  Memory the kernels allocate is filled with NaN first
(torch's fill_uninitialized_memory), so an element one build leaves unwritten shows too.

--time times representative ops, the two builds in turns (old, new, old, new, ...) so that both
see the same machine, and prints the ratio of the medians (new / old); paged_attention and
attention on the shapes of a vLLM step and of a larger model's decode (TIMED_PAGED) on 1 and 2
threads.

Exit status 0 when no case differs, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import io
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILDS = ROOT / ".build" / "compare"
sys.path.insert(0, str(ROOT / "tools"))
from build_wheel import sync_tree

SIMD_PATHS = ("generic", "avx2", "avx512", "avx512_bf16", "native")
THREADS = ("1", "2")
TIMED = [
    # (label, op, kernel, dims, dtype, attrs)
    ("det_gemm bf16 12x1024x32000", "det_gemm", "simt", {"M": 12, "K": 1024, "N": 32000}, "bfloat16", {}),
    ("det_gemm f32 12x1024x32000", "det_gemm", "simt", {"M": 12, "K": 1024, "N": 32000}, "float32", {}),
    ("det_gemm bf16 512x1024x1024", "det_gemm", "simt", {"M": 512, "K": 1024, "N": 1024}, "bfloat16", {}),
    ("det_gemm f32 512x1024x1024", "det_gemm", "simt", {"M": 512, "K": 1024, "N": 1024}, "float32", {}),
    ("det_gemm_nt bf16 12x1024x32000", "det_gemm_nt", "simt", {"M": 12, "K": 1024, "N": 32000}, "bfloat16", {}),
    ("det_gemm_ktree bf16 64x512x1024", "det_gemm_ktree", "tree", {"M": 64, "K": 512, "N": 1024}, "bfloat16", {}),
    ("linear_logp bf16 12x1024x32000", "linear_logp", "rows", {"N": 12, "H": 1024, "V": 32000}, "bfloat16", {}),
    ("linear_logp f32 12x1024x32000", "linear_logp", "rows", {"N": 12, "H": 1024, "V": 32000}, "float32", {}),
    ("silu f32 512x1024", "silu", "elementwise", {"R": 512, "C": 1024}, "float32", {}),
    ("silu bf16 512x1024", "silu", "elementwise", {"R": 512, "C": 1024}, "bfloat16", {}),
    ("swiglu f32 512x1024", "swiglu", "elementwise", {"R": 512, "C": 1024}, "float32", {}),
    ("swiglu bf16 512x1024", "swiglu", "elementwise", {"R": 512, "C": 1024}, "bfloat16", {}),
    ("swiglu_backward f32 512x1024", "swiglu_backward", "elementwise", {"R": 512, "C": 1024}, "float32", {}),
    ("ratio_kl f32 512x1024", "ratio_kl", "elementwise", {"B": 512, "T": 1024}, "float32", {}),
    ("ratio_kl bf16 512x1024", "ratio_kl", "elementwise", {"B": 512, "T": 1024}, "bfloat16", {}),
    ("ratio_kl_backward f32 512x1024", "ratio_kl_backward", "elementwise", {"B": 512, "T": 1024}, "float32", {}),
]
# A vLLM step of a small Qwen2 (8 query heads over 2 key/value heads of 64, cache blocks of 32):
# the prefill of 8 prompts (1864 tokens, causal), and a decode step of the same 8 sequences
# (one query each).  Times the paged_attention calls of one layer.
PROMPTS = [62, 110, 158, 206, 254, 302, 380, 392]
DECODE_KEYS = [230, 257, 284, 311, 339, 366, 393, 420]
# Then one decode query of a larger model (32 query heads over 8 key heads of 128) at 128 and
# 1024 keys, and eight at 1024; and attention on the prefill's sequences packed.
TIMED_PAGED = [
    # (label, op, keys per sequence, queries per sequence, dtype, (HQ, HK, D))
    ("paged_attention bf16 prefill 8 seqs TQ=1864", "paged_attention", PROMPTS, PROMPTS, "bfloat16", (8, 2, 64)),
    ("paged_attention bf16 decode 8 seqs TQ=8", "paged_attention", DECODE_KEYS, [1] * 8, "bfloat16", (8, 2, 64)),
    ("paged_attention f32 decode 8 seqs TQ=8", "paged_attention", DECODE_KEYS, [1] * 8, "float32", (8, 2, 64)),
    ("paged_attention bf16 decode 32/8x128 at 128", "paged_attention", [128], [1], "bfloat16", (32, 8, 128)),
    ("paged_attention bf16 decode 32/8x128 at 1024", "paged_attention", [1024], [1], "bfloat16", (32, 8, 128)),
    ("paged_attention bf16 decode 8 x 32/8x128 at 1024", "paged_attention", [1024] * 8, [1] * 8, "bfloat16", (32, 8, 128)),
    ("attention bf16 prefill 8 seqs TQ=1864", "attention", PROMPTS, PROMPTS, "bfloat16", (8, 2, 64)),
    ("attention bf16 decode 8 seqs TQ=8", "attention", DECODE_KEYS, [1] * 8, "bfloat16", (8, 2, 64)),
]


# ---------------------------------------------------------------------------- building


def _ccache_env() -> dict[str, str]:
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "2"))
    for masquerade in (Path("/usr/lib/ccache"), Path("/usr/lib64/ccache"), Path("/usr/local/lib/ccache")):
        if shutil.which("ccache") and (masquerade / "g++").exists():
            env["PATH"] = f"{masquerade}{os.pathsep}{env.get('PATH', '')}"
            env.setdefault("CCACHE_BASEDIR", str(ROOT))
            env.setdefault("CCACHE_NOHASHDIR", "1")
            break
    return env


def _revision_tree(rev: str) -> Path:
    """generated/cpu as committed at ``rev``, extracted under .build/compare/src-<commit>."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    dest = BUILDS / f"src-{commit[:12]}"
    if not (dest / "generated" / "cpu" / "setup.py").exists():
        archive = subprocess.run(["git", "archive", "--format=tar", commit, "generated/cpu"], cwd=ROOT, check=True, capture_output=True).stdout
        shutil.rmtree(dest, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return dest / "generated" / "cpu"


def build(source: Path, name: str) -> Path:
    dest = BUILDS / name
    dest.mkdir(parents=True, exist_ok=True)
    sync_tree(source, dest)
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=dest, env=_ccache_env(), capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"building {source} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return dest


# ---------------------------------------------------------------------------- the worker


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_dict(sizes: Any) -> Any:
    return dataclasses.asdict(sizes) if dataclasses.is_dataclass(sizes) and not isinstance(sizes, type) else sizes


class _SuiteCases:
    """One op of a package whose tests are the generic contract suite (tests/cases.py, and the test
    modules beside it), under the names of the per-op test modules older packages had."""

    def __init__(self, suite: Any, case: Any) -> None:
        self.case, self.suite = case, suite
        self.SHAPES, self.DTYPES, self.ARGS, self.BATCH_DIM = case.shapes, case.dtypes, case.args, case.batch_dim
        # Per-op modules held each kernel's sizes as a dict; the suite's data file declares them as
        # a class (rlkernels._interchange.KernelSizes) since its layout 1.
        kernels = {platform: {name: _as_dict(sizes) for name, sizes in own.items()} for platform, own in case.kernels.items()}
        self.KERNELS, self.OFFSETS, self.VARIANTS = kernels, case.offsets, case.variants
        self.EMPTY_CASES = [_Param(values) for _, values, _ in suite.empty_cases(case)]

    def make_inputs(self, *args: Any, **kwargs: Any) -> Any:
        return self.case.make_inputs(*args, **kwargs)

    def make_empty_inputs(self, *args: Any, **kwargs: Any) -> Any:
        return self.suite.make_empty_inputs(self.case, *args, **kwargs)

    def run_kernel(self, kernel: str, *args: Any, **attrs: Any) -> Any:
        return self.case.run_kernel(kernel, *args, **attrs)

    def _sequence_dims(self, lengths: dict[str, list[int]]) -> dict[str, int]:
        # cases.sequence_dims; test_contracts._sequence_dims in packages whose suite was one module
        sequence_dims = getattr(self.suite, "sequence_dims", None) or self.suite._sequence_dims
        return dict(sequence_dims(self.case, lengths))


class _Param:
    def __init__(self, values: Any) -> None:
        self.values = values


def _tests_module(package: Path, op: str) -> Any:
    """The test data and helpers of ``op`` in ``package``: its per-op test module, or its case of the
    generic contract suite."""
    tests = package / "tests"
    if (tests / "cases.py").is_file():
        sys.path.insert(0, str(tests))
        suite = _load(tests / "cases.py", "compared_cases")
        if not hasattr(suite, "empty_cases"):  # a suite of one module, whose helpers it held
            suite = _load(tests / "test_contracts.py", "compared_contracts")
        return _SuiteCases(suite, suite.CASES[op])
    return _load(tests / f"test_{op}.py", f"generated_test_{op}")


def _ops(package: Path) -> list[str]:
    tests = package / "tests"
    if (tests / "contract_cases.json").is_file():
        return sorted(json.loads((tests / "contract_cases.json").read_text())["ops"])
    return sorted(p.stem.removeprefix("test_") for p in tests.glob("test_*.py"))


def _digest(outputs: Any) -> str:
    import torch

    digest = hashlib.sha256()
    for t in outputs:
        t = t.detach().contiguous().cpu()
        digest.update(f"{t.dtype}{tuple(t.shape)};".encode())
        if t.numel():
            view = t.view(torch.uint8) if t.dtype == torch.bool else t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
            digest.update(view.numpy().tobytes())
    return digest.hexdigest()


def worker(package: Path, cases_from: Path) -> None:
    """Answer one JSON request per line on stdin: {"op", "kernel", "case"} -> {"inputs", "outputs"}
    digests (or {"error"}); {"time": ...} -> {"seconds": median of the calls}."""
    sys.path.insert(0, str(package))
    import rlkernels
    import torch

    assert rlkernels.NATIVE_ERROR is None, rlkernels.NATIVE_ERROR
    modules: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if "has" in request:  # whether this build has the op at all (an op added since the base has not)
            print(json.dumps({"has": op in rlkernels.OPS}), flush=True)
            continue
        tests = modules.get(op) or modules.setdefault(op, _tests_module(cases_from, op))
        for key in ("RLK_CPU_SIMD", "RLK_NUM_THREADS"):
            value = request.get(key)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        try:
            if "list" in request:
                answer = {"cases": [[kernel, case, everywhere] for kernel in tests.KERNELS.get("cpu", {}) for case, everywhere in cases(tests, kernel, request["list"] == "quick")]}
            elif "time" in request:
                answer = {"seconds": _time(tests, request)}
            else:
                answer = _run_case(tests, request)
        except Exception as exc:  # noqa: BLE001 -- reported, and compared: both builds must fail alike
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(answer), flush=True)
        torch.use_deterministic_algorithms(False)


def _paged_step(step: dict[str, Any], dtype: str) -> list[Any]:
    """paged_attention's inputs for sequences of step["keys"] keys (the cache blocks of each in a
    random order among all of them) and step["queries"] queries each.  step["spoil"] plants what
    the kernel must survive: "values" (infinities, NaN, signed zeros, values of 1e30 and a
    subnormal among the queries, keys and values), "blocks" (block ids -1 and past NB in the
    first sequence's row of the table), "offsets" (query offsets out of order), "lengths" (a
    sequence with fewer keys than queries, another with more than its row of the table holds)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    keys, queries, bs, hq, hk, d = step["keys"], step["queries"], step["BS"], step["HQ"], step["HK"], step["D"]
    spoil = step.get("spoil")
    blocks = [(n + bs - 1) // bs for n in keys]
    order = torch.randperm(sum(blocks), generator=generator).to(torch.int32)
    table = torch.zeros(len(keys), max(blocks), dtype=torch.int32)
    for b, (first, count) in enumerate(zip(itertools.accumulate([0] + blocks), blocks)):
        table[b, :count] = order[first : first + count]
    t = getattr(torch, dtype)
    q = torch.randn(sum(queries), hq, d, generator=generator)
    k_cache, v_cache = (torch.randn(sum(blocks), bs, hk, d, generator=generator) for _ in range(2))
    starts = torch.tensor(list(itertools.accumulate([0] + queries)), dtype=torch.int32)
    lengths = torch.tensor(keys, dtype=torch.int32)
    if spoil == "values":
        for x in (q, k_cache, v_cache):
            flat = x.view(-1)
            picks = torch.randint(0, flat.numel(), (6,), generator=generator)
            flat[picks] = torch.tensor([float("inf"), float("-inf"), float("nan"), -0.0, 1e30, 1e-40])
    elif spoil == "blocks":
        table[0, : blocks[0]] = torch.where(torch.arange(blocks[0]) % 3 == 1, -1, table[0, : blocks[0]])
        table[0, blocks[0] - 1] = sum(blocks) + 7
    elif spoil == "offsets":
        starts[1], starts[2] = starts[2].clone(), starts[1].clone()
    elif spoil == "lengths":
        lengths[0] = max(0, queries[0] - 1)
        lengths[-1] = table.shape[1] * bs + 1
    return [q.to(t), k_cache.to(t), v_cache.to(t), table, lengths, starts]


def _packed_step(step: dict[str, Any], dtype: str) -> list[Any]:
    """attention's inputs for _paged_step's sequences: the same queries, each sequence's keys and
    values packed back to back."""
    import torch

    q, k_cache, v_cache, table, _, starts = _paged_step(step, dtype)
    bs = step["BS"]
    rows = torch.cat([table[b, torch.arange(n) // bs].long() * bs + torch.arange(n) % bs for b, n in enumerate(step["keys"])])
    ends = torch.tensor(list(itertools.accumulate([0] + step["keys"])), dtype=torch.int32)
    return [q, k_cache.flatten(0, 1)[rows], v_cache.flatten(0, 1)[rows], starts, ends]


def paged_cases() -> list[dict[str, Any]]:
    """paged_attention's steps beyond its spec's shapes: head sizes, cache block sizes, query
    groups, prefill, decode and chunked prefill, windows and scales, and spoiled inputs."""
    steps = [
        ([1, 63, 64, 65, 131, 200], [1, 63, 64, 65, 131, 200]),  # prefill
        ([1, 64, 65, 130, 257], [1] * 5),  # decode
        ([150, 70, 300], [37, 70, 5]),  # chunks of prefills
    ]
    variants: list[dict[str, Any]] = [{}, {"causal": False}, {"window": 70}, {"window": 0}, {"scale": 3.0}]
    out = []
    for dtype in ("float32", "float16", "bfloat16"):
        for d, bs, (hq, hk) in itertools.product((64, 128, 80), (16, 32), ((4, 4), (8, 2))):
            for keys, queries in steps:
                for attrs in variants:
                    out.append({"paged_step": {"keys": keys, "queries": queries, "BS": bs, "HQ": hq, "HK": hk, "D": d}, "dtype": dtype, "attrs": attrs})
        for spoil in ("values", "blocks", "offsets", "lengths"):
            for keys, queries in steps:
                step = {"keys": keys, "queries": queries, "BS": 16, "HQ": 8, "HK": 2, "D": 80, "spoil": spoil}
                out.append({"paged_step": step, "dtype": dtype, "attrs": {}})
    return out


def _inputs(tests: Any, case: dict[str, Any]) -> list[Any]:
    if "paged_step" in case:
        return _paged_step(case["paged_step"], case["dtype"])
    if "packed_step" in case:
        return _packed_step(case["packed_step"], case["dtype"])
    if case.get("empty"):
        return list(tests.make_empty_inputs(case["dims"], case["dtype"], "cpu", case.get("none_kept", False)))
    inputs = list(tests.make_inputs(case["dims"], case["dtype"], "cpu", seed=case.get("seed", 0), lengths=case.get("lengths")))
    for index in case.get("drop", ()):
        inputs[index] = None
    return inputs


def _run_case(tests: Any, request: dict[str, Any]) -> dict[str, Any]:
    import torch

    case = request["case"]
    inputs = _inputs(tests, case)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    outputs = tests.run_kernel(request["kernel"], *inputs, **case.get("attrs", {}))
    return {"inputs": _digest([t for t in inputs if t is not None]), "outputs": _digest(outputs)}


def _time(tests: Any, request: dict[str, Any]) -> float:
    case = request["case"]
    inputs = _inputs(tests, case)
    tests.run_kernel(request["kernel"], *inputs, **case.get("attrs", {}))  # warm: pages, caches
    times = []
    for _ in range(request["time"]):
        start = time.perf_counter()
        tests.run_kernel(request["kernel"], *inputs, **case.get("attrs", {}))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ---------------------------------------------------------------------------- the cases


def cases(tests: Any, kernel: str, quick: bool) -> list[tuple[dict[str, Any], bool]]:
    """(case, on every code path and thread count) for one kernel."""
    facts = tests.KERNELS["cpu"][kernel]
    variants = [p.values[0] for p in tests.VARIANTS]
    optional = [i for i, arg in enumerate(tests.ARGS) if arg[3]]
    shapes: list[tuple[dict[str, int], Any, bool]] = [(dict(s), None, True) for s in tests.SHAPES]
    base = dict(tests.SHAPES[0])
    for size in facts.get("batch_sizes", []):
        shapes.append(({**base, tests.BATCH_DIM: size}, None, not quick))
    for dim, extent in facts.get("extents", {}).items():
        shapes.append(({**base, dim: extent}, None, not quick))
        if facts.get("batch_sizes"):
            shapes.append(({**base, dim: extent, tests.BATCH_DIM: max(facts["batch_sizes"])}, None, not quick))
    if facts.get("lengths") and getattr(tests, "OFFSETS", None):
        lengths = {dim: list(facts["lengths"]) for dim in tests.OFFSETS}
        shapes.append((tests._sequence_dims(lengths), lengths, not quick))
    out: list[tuple[dict[str, Any], bool]] = []
    for dtype in tests.DTYPES:
        for dims, lengths, everywhere in shapes:
            for attrs in variants:
                for drop in [()] + [(i,) for i in optional]:
                    out.append(({"dims": dims, "dtype": dtype, "attrs": attrs, "lengths": lengths, "drop": drop}, everywhere))
        for params in tests.EMPTY_CASES:
            dims, none_kept = params.values
            out.append(({"dims": dims, "dtype": dtype, "empty": True, "none_kept": none_kept}, not quick))
    return out


class Worker:
    def __init__(self, package: Path, cases_from: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(package), "--cases-from", str(cases_from)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a worker stopped (exit {self.process.wait()}) on {request}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def compare(old: Worker, new: Worker, cases_from: Path, quick: bool, only_ops: list[str] | None = None, paged: bool = False) -> int:
    ops = [op for op in _ops(cases_from) if not only_ops or op in only_ops]
    total = differing = errors = 0
    for op in ops:
        op_total = op_diff = 0
        if not old.ask({"op": op, "has": True})["has"]:
            print(f"{op}: not in the base build (added since): nothing to compare", flush=True)
            continue
        listed = new.ask({"op": op, "list": "quick" if quick else "all"})
        if "cases" not in listed:
            raise SystemExit(f"{op}: cannot list its cases: {listed}")
        extra = []
        if paged and op == "paged_attention":
            extra = [("blocks", case, True) for case in paged_cases()]
        elif paged and op == "attention":  # the same steps packed, where they can be
            packable = [case for case in paged_cases() if case["paged_step"].get("spoil") in (None, "values", "offsets")]
            extra = [("blocks", {"packed_step": case["paged_step"], "dtype": case["dtype"], "attrs": case["attrs"]}, True) for case in packable]
        for kernel, case, everywhere in listed["cases"] + extra:
            configs = list(itertools.product(SIMD_PATHS, THREADS)) if everywhere else [("native", "2")]
            for simd, threads in configs:
                request = {"op": op, "kernel": kernel, "case": case, "RLK_CPU_SIMD": None if simd == "native" else simd, "RLK_NUM_THREADS": threads}
                a, b = old.ask(request), new.ask(request)
                op_total += 1
                if "error" in a or "error" in b:
                    errors += "error" in a and "error" in b and a == b
                if a != b:
                    op_diff += 1
                    if op_diff <= 5:
                        print(f"  DIFFERS {op}.{kernel} {simd} threads={threads} {json.dumps(case)}: {a} vs {b}", flush=True)
        print(f"{op}: {op_total} cases, {op_diff} differing", flush=True)
        total += op_total
        differing += op_diff
    print(f"total: {total} cases compared, {differing} differing ({errors} failed alike in both builds)")
    return 1 if differing else 0


def timings(old: Worker, new: Worker, rounds: int, calls: int, only: str = "") -> None:
    print(f"timings: median of {calls} calls per turn, {rounds} turns per build, alternating; ratio new / old")
    for label, op, kernel, dims, dtype, attrs in TIMED:
        if only not in label:
            continue
        request = {"op": op, "kernel": kernel, "case": {"dims": dims, "dtype": dtype, "attrs": attrs}, "time": calls}
        olds, news = [], []
        for turn in range(rounds):
            first, second = (old, new) if turn % 2 == 0 else (new, old)
            x, y = first.ask(request), second.ask(request)
            (olds, news)[first is new].append(x["seconds"])
            (olds, news)[second is new].append(y["seconds"])
        o, n = statistics.median(olds), statistics.median(news)
        print(f"  {label:34s} old {o * 1e3:8.3f} ms  new {n * 1e3:8.3f} ms  ratio {n / o:5.3f}", flush=True)
    for label, op, keys, queries, dtype, (hq, hk, d) in TIMED_PAGED:
        if only not in label:
            continue
        step = {"keys": keys, "queries": queries, "BS": 32, "HQ": hq, "HK": hk, "D": d}
        how = "paged_step" if op == "paged_attention" else "packed_step"
        for threads in THREADS:
            request = {"op": op, "kernel": "blocks", "case": {how: step, "dtype": dtype}, "time": calls, "RLK_NUM_THREADS": threads}
            olds, news = [], []
            for turn in range(rounds):
                first, second = (old, new) if turn % 2 == 0 else (new, old)
                x, y = first.ask(request), second.ask(request)
                (olds, news)[first is new].append(x["seconds"])
                (olds, news)[second is new].append(y["seconds"])
            o, n = statistics.median(olds), statistics.median(news)
            print(f"  {label:34s} threads={threads} old {o * 1e3:8.3f} ms  new {n * 1e3:8.3f} ms  ratio {n / o:5.3f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD", help="git revision whose committed generated/cpu is the old build (default HEAD)")
    parser.add_argument("--quick", action="store_true", help="code paths and thread counts on the spec's shapes only")
    parser.add_argument("--time", action="store_true", help="also time representative ops, old against new")
    parser.add_argument("--no-compare", action="store_true", help="skip the bitwise comparison (with --time)")
    parser.add_argument("--only", default="", help="time only the rows whose label contains this text")
    parser.add_argument("--op", action="append", help="compare only this op (repeat for several; default: every op)")
    parser.add_argument("--paged", action="store_true", help="also compare paged_attention on paged_cases() (models' shapes, spoiled inputs), and attention on them packed")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cases-from", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.cases_from)
        return 0
    old_root = build(_revision_tree(args.base), "old")
    new_root = build(ROOT / "generated" / "cpu", "new")
    old, new = Worker(old_root, new_root), Worker(new_root, new_root)
    try:
        status = 0 if args.no_compare else compare(old, new, new_root, args.quick, args.op, args.paged)
        if args.time:
            timings(old, new, args.rounds, args.calls, args.only)
    finally:
        old.close()
        new.close()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
