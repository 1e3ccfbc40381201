"""Benchmarks, as ratios against baselines measured in the same process.

    python tools/bench.py [kernel] [model] [transformers] [tp] [generator]   (make bench: all five)
    python tools/bench.py gemm                              (det_gemm's rows of kernel only)
    python tools/bench.py model --op swiglu --op logp       (some rows of the model table)

Prints, and writes to docs/performance.md:
  * the CPU det_gemm kernel (float32 and bfloat16 inputs) against torch.matmul on the
    same tensors, on one thread and on all of them, with the GFLOP/s each achieved and
    whether the kernel's outputs were bitwise deterministic and batch-invariant in the run
    (a table per code path -- AVX-512, AVX2, portable -- each from the last run that took it);
  * logp and rms_norm against the PyTorch code they replace, the same way;
  * model: every op of one layer of a small model (det_linear projections, swiglu, silu,
    rms_norm, logp) at its shapes, against the PyTorch code it replaces;
  * transformers: a tiny but realistic Qwen2 patched with rlkernels.transformers against the same
    model unpatched (sdpa, full logits, log_softmax), forward and forward+backward;
  * tp: rlkernels.distributed's fixed-order combine against torch.distributed's all_reduce, on 2
    and 4 gloo ranks spawned on this machine, alone and inside a row-parallel linear;
  * the generator: a full generate of the catalog, a no-op generate (which must write
    nothing) recognised as such and one rendered all the same (--full), and synthetic catalogs
    of 100, 300 and 1,000 copies of det_gemm; then its two goals (a no-op generate of the
    catalog under 0.3 s, under 2 ms per op and platform at 1,000 ops) against what it measured.

A run of some sections only (e.g. `python tools/bench.py model`) keeps the other sections of the
existing docs/performance.md, each marked with the date and machine of the run that measured it.

The CPU package is built from generated/cpu in .build/bench-cpu (copied files keep
their mtimes when unchanged, so the build is incremental).  The machines this runs on
are shared and noisy: kernel and baseline are timed alternately, and the speed ratio
is the median of the paired ratios, which moves much less than the absolute numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from build_wheel import sync_tree

BUILD = ROOT / ".build" / "bench-cpu"
DOC = ROOT / "docs" / "performance.md"

GEMM_SHAPES = [(256, 1024, 1024), (1024, 1024, 1024), (2048, 2048, 2048)]  # M, K, N
GEMM_DTYPES = ["float32", "bfloat16"]
INVARIANT_ROWS = 8  # rows computed alone and compared with the same rows of the full batch
ROW_BUDGET_S = 2.0  # timing per table row, after at least MIN_REPS pairs
# A baseline call longer than this (bfloat16 autograd through F.linear on a CPU without bfloat16
# instructions takes over a minute) is timed in one pair only.
LONG_BASELINE_S = 10.0
MIN_REPS, MAX_REPS = 5, 25
GENERATE_REPS = 5
SYNTHETIC_OPS = [100, 300, 1000]


# ---------------------------------------------------------------- building the package


def build_cpu_package():
    start = time.perf_counter()
    BUILD.mkdir(parents=True, exist_ok=True)
    sync_tree(ROOT / "generated" / "cpu", BUILD)
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=BUILD, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"bench: building generated/cpu failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    print(f"built generated/cpu in {BUILD.relative_to(ROOT)} ({time.perf_counter() - start:.1f} s)")
    sys.path.insert(0, str(BUILD))
    import rlkernels

    if not Path(rlkernels.__file__).resolve().is_relative_to(BUILD):
        sys.exit(f"bench: imported rlkernels from {rlkernels.__file__}, not from {BUILD}")
    if rlkernels.NATIVE_ERROR is not None:
        sys.exit(f"bench: rlkernels._C did not load: {rlkernels.NATIVE_ERROR}")
    return rlkernels


# ---------------------------------------------------------------- det_gemm vs torch.matmul


@dataclass
class GemmRow:
    dtype: str
    shape: tuple[int, int, int]
    threads: int
    kernel_gflops: float
    torch_gflops: float
    ratio: float
    reps: int
    deterministic: bool
    invariant: bool


def same_bits(x, y) -> bool:
    import torch

    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[x.dtype]
    return x.shape == y.shape and x.dtype == y.dtype and torch.equal(x.view(bits), y.view(bits))


def time_alternately(kernel, baseline, min_reps: int = MIN_REPS, budget_s: float = ROW_BUDGET_S):
    """Times kernel and baseline in alternating order, at least min_reps pairs, then more
    until budget_s has passed (at most MAX_REPS).

    Returns both lists of seconds, the kernel's first output and how many later outputs
    differed from it in any bit.
    """
    first = kernel()  # also the warm-up: page faults, thread pools, lazy initialisation
    warm_up = time.perf_counter()
    baseline()
    if time.perf_counter() - warm_up > LONG_BASELINE_S:
        min_reps = 1  # a call this long times well on its own; two more pairs would add minutes
    kernel_s, baseline_s, differing = [], [], 0
    start = time.perf_counter()
    while len(kernel_s) < min_reps or (len(kernel_s) < MAX_REPS and time.perf_counter() - start < budget_s):
        order = [(kernel, kernel_s), (baseline, baseline_s)]
        if len(kernel_s) % 2:
            order.reverse()
        for fn, times in order:
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
            if fn is kernel:
                differing += not same_bits(out, first)
    return kernel_s, baseline_s, first, differing


def bench_gemm(rlkernels, threads: int, dtype_name: str, shape: tuple[int, int, int]) -> GemmRow:
    import torch

    m, k, n = shape
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(k, n, generator=g).to(dtype)
    kernel_s, torch_s, full, differing = time_alternately(lambda: rlkernels.det_gemm(a, b), lambda: torch.matmul(a, b))
    flops = 2.0 * m * n * k
    return GemmRow(
        dtype=dtype_name,
        shape=shape,
        threads=threads,
        kernel_gflops=flops / statistics.median(kernel_s) / 1e9,
        torch_gflops=flops / statistics.median(torch_s) / 1e9,
        ratio=statistics.median(t / s for s, t in zip(kernel_s, torch_s)),
        reps=len(kernel_s),
        deterministic=differing == 0,
        invariant=same_bits(rlkernels.det_gemm(a[:INVARIANT_ROWS], b), full[:INVARIANT_ROWS]),
    )


def thread_counts() -> list[int]:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sorted({1, available})


def on_each_thread_count(cases, bench, fmt) -> list:
    """bench(threads, *case) for every case, on one thread and then on all, printing each row."""
    import torch

    rows = []
    for threads in thread_counts():
        torch.set_num_threads(threads)
        os.environ["RLK_NUM_THREADS"] = str(threads)  # the kernels read it on every call
        for case in cases:
            row = bench(threads, *case)
            print(fmt(row), flush=True)
            rows.append(row)
    return rows


def run_gemm(rlkernels) -> list[GemmRow]:
    cases = [(dtype_name, shape) for dtype_name in GEMM_DTYPES for shape in GEMM_SHAPES]
    return on_each_thread_count(cases, lambda threads, d, shape: bench_gemm(rlkernels, threads, d, shape), format_gemm_row)


GEMM_HEADER = (
    "| inputs | M×K×N | threads | det_gemm GFLOP/s | torch.matmul GFLOP/s | det_gemm / torch speed | "
    "same bits every repeat | rows 0–7 alone = in batch |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"
)


def format_gemm_row(r: GemmRow) -> str:
    yes = {True: "yes", False: "**NO**"}
    return (
        f"| {r.dtype} | {'×'.join(map(str, r.shape))} | {r.threads} | {r.kernel_gflops:.1f} | {r.torch_gflops:.1f} | "
        f"**{r.ratio:.2f}** | {yes[r.deterministic]} ({r.reps} runs) | {yes[r.invariant]} |"
    )


# ---------------------------------------------------------------- the generator


@dataclass
class GenRow:
    what: str
    ops: int
    platforms: int
    files: int
    full_s: float
    """Into an empty output tree."""
    render_s: float
    """Again, unchanged, rendering everything (`generate --full`)."""
    noop_s: float
    """Again, unchanged: recognised as such, nothing rendered (`generate`)."""
    reps: int
    plain_write_s: float = 0.0
    """The same files written into an empty folder beside it with plain open/write: what this
    file system itself charges for creating them, the floor of a full generate."""

    def per_op_platform_ms(self, seconds: float) -> float:
        return seconds * 1000 / (self.ops * self.platforms)


# ---------------------------------------------------------------- RL ops vs their PyTorch code


@dataclass
class OpRow:
    op: str
    dtype: str
    shape: str
    threads: int
    kernel_ms: float
    torch_ms: float
    ratio: float
    reps: int
    deterministic: bool
    invariant: bool


# (op, sizes, what PyTorch code is the baseline): a Qwen-sized vocabulary and a long batch.
OP_CASES = [
    ("logp", {"N": 512, "V": 32768}),
    ("logp", {"N": 64, "V": 151936}),
    ("rms_norm", {"T": 4096, "H": 4096}),
]
OP_DTYPES = ["float32", "bfloat16"]
OP_BASELINES = {
    "logp": "torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None])",
    "rms_norm": "torch.nn.functional.rms_norm(x, (H,), w, eps)",
}


def op_inputs(op: str, sizes: dict[str, int], dtype):
    import torch

    g = torch.Generator().manual_seed(0)
    if op == "logp":
        logits = torch.randn(sizes["N"], sizes["V"], generator=g).to(dtype)
        ids = torch.randint(0, sizes["V"], (sizes["N"],), generator=g)
        return (
            (logits, ids),
            lambda logits=logits, ids=ids: torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None]).squeeze(1),
        )
    x = torch.randn(sizes["T"], sizes["H"], generator=g).to(dtype)
    w = torch.randn(sizes["H"], generator=g).to(dtype)
    return (x, w), lambda x=x, w=w: torch.nn.functional.rms_norm(x, (sizes["H"],), w, 1e-6)


def bench_op(rlkernels, threads: int, op: str, sizes: dict[str, int], dtype_name: str) -> OpRow:
    import torch

    inputs, baseline = op_inputs(op, sizes, getattr(torch, dtype_name))
    fn = getattr(rlkernels, op)
    kernel_s, torch_s, first, differing = time_alternately(lambda: fn(*inputs)[0], baseline)
    alone = fn(*(t[:INVARIANT_ROWS] for t in inputs)) if op == "logp" else fn(inputs[0][:INVARIANT_ROWS], inputs[1])
    return OpRow(
        op=op,
        dtype=dtype_name,
        shape=" ".join(f"{k}={v}" for k, v in sizes.items()),
        threads=threads,
        kernel_ms=statistics.median(kernel_s) * 1e3,
        torch_ms=statistics.median(torch_s) * 1e3,
        ratio=statistics.median(t / s for s, t in zip(kernel_s, torch_s)),
        reps=len(kernel_s),
        deterministic=differing == 0,
        invariant=same_bits(alone[0], first[:INVARIANT_ROWS]),
    )


def run_ops(rlkernels) -> list[OpRow]:
    cases = [(op, sizes, dtype_name) for op, sizes in OP_CASES for dtype_name in OP_DTYPES]
    return on_each_thread_count(cases, lambda threads, op, sizes, d: bench_op(rlkernels, threads, op, sizes, d), format_op_row)


OP_HEADER = (
    "| op | inputs | sizes | threads | rlkernels ms | PyTorch ms | rlkernels / PyTorch speed | same bits every repeat | rows 0–7 alone = in batch |\n"
    "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |"
)


def format_op_row(r: OpRow) -> str:
    return (
        f"| {r.op} | {r.dtype} | {r.shape} | {r.threads} | {r.kernel_ms:.2f} | {r.torch_ms:.2f} | **{r.ratio:.2f}** | "
        f"{'yes' if r.deterministic else '**no**'} ({r.reps} runs) | {'yes' if r.invariant else '**no**'} |"
    )


OP_NOTES = """\
* Baselines, on the same tensors: """ + "; ".join(f"{op}: `{code}`" for op, code in OP_BASELINES.items()) + """.
  They are what a training loop writes without this package: neither promises the same bits
  on another device or batch size.
* rlkernels: the CPU kernels, whose bits equal the device kernels' (the ops declare
  `portable`); threads split rows, never a row's reduction.  Speed ratio and columns as above.
* logp also returns the log-sum-exp (for its backward), which the baseline does not compute."""


# ---------------------------------------------------------------- a patched transformers model


@dataclass(frozen=True)
class DecoderSize:
    """A small Qwen2 built from a config in code: hidden H, layers, heads over KV heads, MLP width I
    (ModelSize's 2.75 H), vocabulary V; ``batch`` rows of ``length`` tokens."""

    hidden: int
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 32000
    batch: int = 4
    length: int = 128

    @property
    def intermediate(self) -> int:
        return ModelSize(tokens=self.batch * self.length, hidden=self.hidden).intermediate


# H = 1024 takes several seconds a forward+backward per model on one core of a shared 2-core
# machine, past the minutes this section may take there; add it where the cores allow.
DECODER_SIZES = [DecoderSize(hidden=256)]
DECODER_DTYPES = ["float32", "bfloat16"]
DECODER_PASSES = ["forward", "fwd+bwd"]


@dataclass
class DecoderRow:
    size: DecoderSize
    dtype: str
    step: str
    threads: int
    patched_ms: float
    unpatched_ms: float
    ratio: float
    reps: int
    deterministic: bool
    invariant: bool

    # write_doc's and main's names for the columns every table shares
    @property
    def op(self) -> str:
        return f"Qwen2 H={self.size.hidden} {self.step}"

    @property
    def shape(self) -> str:
        return f"{self.size.batch}×{self.size.length}"


def make_decoder(size: DecoderSize, dtype):
    import torch
    import transformers

    config = transformers.Qwen2Config(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
        intermediate_size=size.intermediate, vocab_size=size.vocab, max_position_embeddings=size.length, attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).to(dtype).eval()


def unpatched_logprobs(model, ids):
    """What a training loop writes without this package: the full logits, log_softmax in float32, gather."""
    import torch

    logits = model(ids).logits[:, :-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]


def bench_decoder(rlkernels, threads: int, size: DecoderSize, dtype_name: str, step: str) -> DecoderRow:
    import copy

    import rlkernels.transformers as rlkt
    import torch

    unpatched = make_decoder(size, getattr(torch, dtype_name))
    patched = rlkt.patch(copy.deepcopy(unpatched))
    ids = torch.randint(0, size.vocab, (size.batch, size.length), generator=torch.Generator().manual_seed(1))

    def patched_lp(x):
        return rlkt.token_logprobs(patched, x)[:, :-1]

    def timed(model, logprobs):
        if step == "forward":
            def run():
                with torch.no_grad():
                    return logprobs(ids)
        else:
            def run():
                model.zero_grad(set_to_none=True)
                lp = logprobs(ids)
                lp.sum().backward()
                return lp.detach()
        return run

    patched_s, unpatched_s, first, differing = time_alternately(
        timed(patched, patched_lp), timed(unpatched, lambda x: unpatched_logprobs(unpatched, x)), min_reps=DECODER_MIN_REPS, budget_s=DECODER_ROW_BUDGET_S
    )
    with torch.no_grad():
        alone = patched_lp(ids[:1])
    return DecoderRow(
        size=size, dtype=dtype_name, step=step, threads=threads,
        patched_ms=statistics.median(patched_s) * 1e3, unpatched_ms=statistics.median(unpatched_s) * 1e3,
        ratio=statistics.median(t / s for s, t in zip(patched_s, unpatched_s)), reps=len(patched_s),
        deterministic=differing == 0, invariant=same_bits(alone[0], first[0]),
    )


DECODER_MIN_REPS, DECODER_ROW_BUDGET_S = 3, 4.0


def run_decoder(rlkernels) -> list[DecoderRow]:
    try:
        import transformers  # noqa: F401
    except ImportError:
        sys.exit("bench: the transformers section needs transformers (pip install 'rlkernels[transformers]')")
    cases = [(size, dtype_name, step) for size in DECODER_SIZES for dtype_name in DECODER_DTYPES for step in DECODER_PASSES]
    return on_each_thread_count(cases, lambda threads, size, d, step: bench_decoder(rlkernels, threads, size, d, step), format_decoder_row)


DECODER_HEADER = (
    "| model | inputs | step | batch | threads | patched ms | unpatched ms | patched / unpatched speed | same bits every repeat | row 0 alone = in batch |\n"
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |"
)


def format_decoder_row(r: DecoderRow) -> str:
    return (
        f"| Qwen2 H={r.size.hidden} | {r.dtype} | {r.step} | {r.shape} | {r.threads} | {r.patched_ms:.1f} | {r.unpatched_ms:.1f} | **{r.ratio:.2f}** | "
        f"{'yes' if r.deterministic else '**no**'} ({r.reps} runs) | {'yes' if r.invariant else '**no**'} |"
    )


def decoder_notes() -> str:
    sizes = "; ".join(
        f"H = {m.hidden}, {m.layers} layers, {m.heads} heads over {m.kv_heads} KV heads, I = {m.intermediate}, V = {m.vocab}, "
        f"{m.batch} rows of {m.length} tokens" for m in DECODER_SIZES
    )
    return f"""\
* A transformers Qwen2 built from a config ({sizes}), random weights, in the row's dtype.
* Patched: `rlkernels.transformers.patch(model)` and `token_logprobs(model, ids)` (linear_logp on the
  LM head, no logits). Unpatched: a copy of the same model with sdpa attention, its logits, then
  `log_softmax(logits.float()).gather(...)`. forward: under `torch.no_grad()`; fwd+bwd: the sum of the
  log-probs, backward to every parameter.
* Speed ratio: median of the paired ratios (below 1 means slower than the unpatched model; the goal
  on CPU is within 1.5×, a ratio of at least 0.67); at least {DECODER_MIN_REPS} pairs, more while the row
  has run under {DECODER_ROW_BUDGET_S} s (one pair where an unpatched call takes over {LONG_BASELINE_S:.0f} s). Last column: row 0's log-probs computed alone have the bits
  they have in the batch."""


# ---------------------------------------------------------------- tensor parallelism

TP_WORLDS = [2, 4]
TP_SHAPE = (256, 1024, 1024)  # tokens M, input features K (split across ranks), output features N
# Pairs per row, the same count on every rank (the collectives pair up call by call): the combine
# alone takes milliseconds and is noisy, the linear about a second.
TP_REPS = {"combine": 40, "row-parallel linear": 6}


@dataclass
class TpRow:
    what: str
    world: int
    tree_ms: float
    reduce_ms: float
    ratio: float
    reps: int
    tree_bytes: int
    reduce_bytes: int
    deterministic: bool
    invariant: bool
    reduce_invariant: bool
    dtype: str = "bfloat16"
    threads: int = 1

    @property
    def op(self) -> str:
        return f"{self.what} at {self.world} ranks"

    @property
    def shape(self) -> str:
        return "×".join(map(str, TP_SHAPE))


def _tp_rank(rank: int, world: int, init: str, package: str, out: str) -> None:
    """One rank of the tensor-parallel section (spawned): times the fixed-order combine and
    all_reduce alternately, the same number of calls on every rank; rank 0 writes the rows."""
    import datetime as dt
    import json

    sys.path.insert(0, package)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["RLK_NUM_THREADS"] = "1"
    import rlkernels
    import rlkernels.distributed as rlkd

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world, timeout=dt.timedelta(seconds=600))
    m, k, n = TP_SHAPE
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16)
    xs, ws = rlkd.shard(x, 1), rlkd.shard(w, 1)
    partial = rlkernels.det_gemm_ktree(xs, ws.t().contiguous())
    one_device = rlkernels.det_gemm_ktree(x, w.t().contiguous()) if rank == 0 else None
    cases = {
        "combine": lambda reduce: rlkd._combine(partial, None, reduce),
        "row-parallel linear": lambda reduce: rlkd.row_parallel_linear(xs, ws, reduce=reduce),
    }
    rows = []
    for what, fn in cases.items():
        first = {reduce: fn(reduce) for reduce in ("tree", "all_reduce")}  # warm-up
        times: dict[str, list[float]] = {"tree": [], "all_reduce": []}
        differing = 0
        for rep in range(TP_REPS[what]):
            for reduce in ("tree", "all_reduce") if rep % 2 == 0 else ("all_reduce", "tree"):
                dist.barrier()
                t = time.perf_counter()
                y = fn(reduce)
                times[reduce].append(time.perf_counter() - t)
                if reduce == "tree":
                    differing += not same_bits(y, first["tree"])
        if rank == 0:
            size = m * n * 2  # one partial, bfloat16
            rows.append({
                "what": what, "world": world,
                "tree_ms": statistics.median(times["tree"]) * 1e3, "reduce_ms": statistics.median(times["all_reduce"]) * 1e3,
                "ratio": statistics.median(a / t for t, a in zip(times["tree"], times["all_reduce"])), "reps": TP_REPS[what],
                # received per rank: every other rank's partial; a ring all_reduce's reduce-scatter + all_gather
                "tree_bytes": (world - 1) * size, "reduce_bytes": 2 * (world - 1) * size // world,
                "deterministic": differing == 0,
                "invariant": what == "combine" or same_bits(first["tree"], one_device),
                "reduce_invariant": what == "combine" or same_bits(first["all_reduce"], one_device),
            })
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def bench_tp(world: int) -> list[TpRow]:
    import json

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        context = torch.multiprocessing.get_context("spawn")
        procs = [context.Process(target=_tp_rank, args=(rank, world, f"{tmp}/rendezvous", str(BUILD), f"{tmp}/rows.json")) for rank in range(world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(900)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        if [proc.exitcode for proc in procs] != [0] * world:
            sys.exit(f"bench: the tensor-parallel ranks at world size {world} failed (exit codes {[proc.exitcode for proc in procs]})")
        return [TpRow(**row) for row in json.loads(Path(f"{tmp}/rows.json").read_text())]


def run_tp() -> list[TpRow]:
    rows = []
    for world in TP_WORLDS:
        for row in bench_tp(world):
            print(format_tp_row(row), flush=True)
            rows.append(row)
    return rows


TP_HEADER = (
    "| what | M×K×N | ranks | fixed-order ms | all_reduce ms | fixed-order / all_reduce speed | bytes received per rank (fixed order / all_reduce) | "
    "same bits every repeat | fixed order = one device | all_reduce = one device |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |"
)


def format_tp_row(r: TpRow) -> str:
    yes = {True: "yes", False: "**no**"}
    same = "—" if r.what == "combine" else yes[r.invariant]
    reduce_same = "—" if r.what == "combine" else yes[r.reduce_invariant]
    return (
        f"| {r.what} | {r.shape} | {r.world} | {r.tree_ms:.2f} | {r.reduce_ms:.2f} | **{r.ratio:.2f}** | "
        f"{r.tree_bytes / 2**20:.2f} MiB / {r.reduce_bytes / 2**20:.2f} MiB | {yes[r.deterministic]} ({r.reps} runs) | {same} | {reduce_same} |"
    )


def tp_notes() -> str:
    m, k, n = TP_SHAPE
    return f"""\
* `rlkernels.distributed` on gloo, ranks spawned on this machine, one thread each. Row-parallel
  linear: x [{m}, {k}] and a weight [{n}, {k}] split along K, each rank's det_gemm_ktree partial then
  the combine; combine: the combine alone on one [{m}, {n}] bf16 partial. Fixed order: all_gather,
  then the K-tree's pairwise adds; all_reduce: torch.distributed.all_reduce (the backend's order).
* Speed ratio: median of the paired ratios (all_reduce time / fixed-order time; below 1 means the
  fixed order is slower); {TP_REPS["combine"]} pairs for the combine, {TP_REPS["row-parallel linear"]} for the linear, alternating,
  each call after a barrier.
* Bytes received per rank: the gather receives every other rank's partial, (ranks − 1) × M N × 2;
  a ring all_reduce receives 2 (ranks − 1) / ranks × M N × 2 -- ranks / 2 times less, and a
  reduce-scatter alone (ranks − 1) / ranks × M N × 2, ranks times less.
* "= one device": the row-parallel output compared bitwise with det_gemm_ktree over the whole of K
  on one process."""


# ---------------------------------------------------------------- a small model's shapes


@dataclass(frozen=True)
class ModelSize:
    """The tensors of one layer of a small decoder: tokens T, hidden H, MLP width I, vocabulary V."""

    tokens: int
    hidden: int
    vocab: int = 32000

    @property
    def intermediate(self) -> int:
        # 2.75 H rounded up to a multiple of 64: 704 for H = 256, 2816 for H = 1024.
        return (self.hidden * 11 // 4 + 63) // 64 * 64


@dataclass(frozen=True)
class ModelOp:
    """One row kind of the model-shapes table: an rlkernels call and the PyTorch code it replaces.

    inputs(m) names each input and its shape; "ids" is drawn as token ids below m.vocab, a
    linear layer's weight "w" [out, in] as standard normals over sqrt(in), the rest as standard
    normals, each in the row's dtype.  `batched` names the inputs whose first
    dimension is the tokens: the batch-invariance check runs the kernel on their first rows.
    kernel and baseline take the inputs in order and return one tensor each (the kernel's
    first output when it has several).
    """

    name: str
    baseline_code: str
    inputs: Callable[[ModelSize], dict[str, tuple[int, ...]]]
    batched: tuple[str, ...]
    kernel: Callable[..., object]
    baseline: Callable[..., object]
    op: str = ""  # the rlkernels function it needs (default: name's first word); rows are skipped without it

    @property
    def needs(self) -> str:
        return self.op or self.name.split()[0]


def _model_ops() -> list[ModelOp]:
    import torch
    import torch.nn.functional as F

    def linear(name: str, out_dim: Callable[[ModelSize], int], in_dim: Callable[[ModelSize], int]) -> ModelOp:
        return ModelOp(
            name=f"det_linear {name}",
            baseline_code="F.linear(x, w)",
            inputs=lambda m: {"x": (m.tokens, in_dim(m)), "w": (out_dim(m), in_dim(m))},
            batched=("x",),
            kernel=lambda rlk, x, w: rlk.det_linear(x, w),
            baseline=lambda x, w: F.linear(x, w),
        )

    hidden, inter, vocab = (lambda m: m.hidden), (lambda m: m.intermediate), (lambda m: m.vocab)
    return [
        linear("q/k/v/o", hidden, hidden),
        linear("MLP up/gate", inter, hidden),
        linear("MLP down", hidden, inter),
        linear("vocabulary", vocab, hidden),
        ModelOp(
            name="swiglu",
            baseline_code="F.silu(g) * u",
            inputs=lambda m: {"g": (m.tokens, m.intermediate), "u": (m.tokens, m.intermediate)},
            batched=("g", "u"),
            kernel=lambda rlk, g, u: rlk.swiglu(g, u),
            baseline=lambda g, u: F.silu(g) * u,
        ),
        ModelOp(
            name="silu",
            baseline_code="F.silu(x)",
            inputs=lambda m: {"x": (m.tokens, m.intermediate)},
            batched=("x",),
            kernel=lambda rlk, x: rlk.silu(x),
            baseline=lambda x: F.silu(x),
        ),
        ModelOp(
            name="rms_norm",
            baseline_code="F.rms_norm(x, (H,), w, 1e-6)",
            inputs=lambda m: {"x": (m.tokens, m.hidden), "w": (m.hidden,)},
            batched=("x",),
            kernel=lambda rlk, x, w: rlk.rms_norm(x, w, 1e-6)[0],
            baseline=lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
        ),
        ModelOp(
            name="logp",
            baseline_code="torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None])",
            inputs=lambda m: {"logits": (m.tokens, m.vocab), "ids": (m.tokens,)},
            batched=("logits", "ids"),
            kernel=lambda rlk, logits, ids: rlk.logp(logits, ids)[0],
            baseline=lambda logits, ids: torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None]).squeeze(1),
        ),
        ModelOp(
            name="linear_logp",
            baseline_code="torch.log_softmax(F.linear(h, w).float(), -1).gather(-1, ids[:, None])",
            inputs=lambda m: {"h": (m.tokens, m.hidden), "w": (m.vocab, m.hidden), "ids": (m.tokens,)},
            batched=("h", "ids"),
            kernel=lambda rlk, h, w, ids: rlk.linear_logp(h, w, ids)[0],
            baseline=lambda h, w, ids: torch.log_softmax(F.linear(h, w).float(), -1).gather(-1, ids[:, None]).squeeze(1),
        ),
        ModelOp(
            name="embedding",
            baseline_code="F.embedding(ids, w)",
            inputs=lambda m: {"w": (m.vocab, m.hidden), "ids": (m.tokens,)},
            batched=("ids",),
            kernel=lambda rlk, w, ids: rlk.embedding(w, ids),
            baseline=lambda w, ids: F.embedding(ids, w),
        ),
        ModelOp(
            name="rope",
            baseline_code="x * cos + rotate_half(x) * sin, cos and sin from the positions (transformers' Llama)",
            inputs=lambda m: {"x": (m.tokens, m.hidden // HEAD_DIM, HEAD_DIM), "ids": (m.tokens,)},
            batched=("x", "ids"),
            kernel=lambda rlk, x, ids: rlk.rope(x, ids),
            baseline=_rotary_baseline,
        ),
        ModelOp(
            name="attention",
            baseline_code="F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), one sequence",
            inputs=lambda m: {
                "q": (m.tokens, m.hidden // HEAD_DIM, HEAD_DIM),
                "k": (m.tokens, m.hidden // HEAD_DIM // 2, HEAD_DIM),
                "v": (m.tokens, m.hidden // HEAD_DIM // 2, HEAD_DIM),
            },
            batched=("q", "k", "v"),
            kernel=lambda rlk, q, k, v: rlk.attention(q, k, v, _one_sequence(q), _one_sequence(k))[0],
            baseline=lambda q, k, v: F.scaled_dot_product_attention(
                q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
            ).transpose(0, 1),
        ),
        ModelOp(
            name="det_linear MLP up/gate fwd+bwd",
            baseline_code="F.linear(x, w), then torch.autograd.grad for x and w; dx compared",
            inputs=lambda m: {"x": (m.tokens, m.hidden), "w": (m.intermediate, m.hidden), "dy": (m.tokens, m.intermediate)},
            batched=("x", "dy"),
            kernel=lambda rlk, x, w, dy: _grads(rlk.det_linear, (x, w), dy)[0],
            baseline=lambda x, w, dy: _grads(F.linear, (x, w), dy)[0],
            op="det_linear",
        ),
        ModelOp(
            name="swiglu fwd+bwd",
            baseline_code="F.silu(g) * u, then torch.autograd.grad for g and u; dg compared",
            inputs=lambda m: {"g": (m.tokens, m.intermediate), "u": (m.tokens, m.intermediate), "dy": (m.tokens, m.intermediate)},
            batched=("g", "u", "dy"),
            kernel=lambda rlk, g, u, dy: _grads(rlk.swiglu, (g, u), dy)[0],
            baseline=lambda g, u, dy: _grads(lambda g, u: F.silu(g) * u, (g, u), dy)[0],
            op="swiglu",
        ),
        ModelOp(
            name="rms_norm fwd+bwd",
            baseline_code="F.rms_norm(x, (H,), w, 1e-6), then torch.autograd.grad for x and w; dx compared",
            inputs=lambda m: {"x": (m.tokens, m.hidden), "w": (m.hidden,), "dy": (m.tokens, m.hidden)},
            batched=("x", "dy"),
            kernel=lambda rlk, x, w, dy: _grads(lambda x, w: rlk.rms_norm(x, w, 1e-6)[0], (x, w), dy)[0],
            baseline=lambda x, w, dy: _grads(lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6), (x, w), dy)[0],
            op="rms_norm",
        ),
        ModelOp(
            name="linear_logp fwd+bwd",
            baseline_code="the same log_softmax expression, then torch.autograd.grad for h and w; dh compared",
            inputs=lambda m: {"h": (m.tokens, m.hidden), "w": (m.vocab, m.hidden), "ids": (m.tokens,), "dlp": (m.tokens,)},
            batched=("h", "ids", "dlp"),
            kernel=lambda rlk, h, w, ids, dlp: _grads(lambda h, w: rlk.linear_logp(h, w, ids)[0], (h, w), dlp)[0],
            baseline=lambda h, w, ids, dlp: _grads(
                lambda h, w: torch.log_softmax(F.linear(h, w).float(), -1).gather(-1, ids[:, None]).squeeze(1), (h, w), dlp
            )[0],
            op="linear_logp",
        ),
        ModelOp(
            name="attention fwd+bwd",
            baseline_code="the same sdpa call, then torch.autograd.grad for q, k and v; dq compared",
            inputs=lambda m: {
                "q": (m.tokens, m.hidden // HEAD_DIM, HEAD_DIM),
                "k": (m.tokens, m.hidden // HEAD_DIM // 2, HEAD_DIM),
                "v": (m.tokens, m.hidden // HEAD_DIM // 2, HEAD_DIM),
                "do": (m.tokens, m.hidden // HEAD_DIM, HEAD_DIM),
            },
            batched=("q", "k", "v", "do"),
            kernel=lambda rlk, q, k, v, do: _grads(lambda q, k, v: rlk.attention(q, k, v, _one_sequence(q), _one_sequence(k))[0], (q, k, v), do)[0],
            baseline=lambda q, k, v, do: _grads(
                lambda q, k, v: F.scaled_dot_product_attention(
                    q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
                ).transpose(0, 1),
                (q, k, v),
                do,
            )[0],
            op="attention",
        ),
    ]


def _grads(fn, inputs, grad):
    """The gradients of fn(*inputs) (one output) against `grad`, for every input: forward and backward."""
    import torch

    leaves = [t.detach().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return torch.autograd.grad(out, leaves, grad.to(out.dtype))


HEAD_DIM = 64  # heads of the model-shape rows: hidden / 64 query heads, half as many key/value heads


def _one_sequence(x):
    """cu_seqlens of one sequence holding every row of x (the rows 0-7 check runs on a prefix)."""
    import torch

    return torch.tensor([0, x.shape[0]], dtype=torch.int32)


def _rotary_baseline(x, positions):
    """transformers' Llama rotary embedding: cos/sin from the positions each call, then rotate_half."""
    import torch

    dim = x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype)[:, None, :], emb.sin().to(x.dtype)[:, None, :]
    half = dim // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


MODEL_SIZES = [ModelSize(tokens=512, hidden=256), ModelSize(tokens=512, hidden=1024)]
MODEL_DTYPES = ["float32", "bfloat16"]
# A shorter budget than the tables above: the largest rows (a bfloat16 vocabulary projection at
# H = 1024) take seconds per call, and the whole section must stay within a few minutes.
MODEL_MIN_REPS, MODEL_ROW_BUDGET_S = 5, 1.5


@dataclass
class ModelRow:
    op: str
    dtype: str
    hidden: int
    shape: str
    threads: int
    kernel_ms: float
    torch_ms: float
    ratio: float
    reps: int
    deterministic: bool
    invariant: bool


def model_inputs(case: ModelOp, m: ModelSize, dtype) -> dict:
    import torch

    g = torch.Generator().manual_seed(0)

    def draw(name: str, shape: tuple[int, ...]):
        if name == "ids":
            return torch.randint(0, m.vocab, shape, generator=g)
        x = torch.randn(*shape, generator=g)
        if name == "w" and len(shape) == 2:
            x = x * shape[1] ** -0.5  # a linear layer's weight, at nn.Linear's scale
        return x.to(dtype)

    return {name: draw(name, shape) for name, shape in case.inputs(m).items()}


def bench_model_op(rlkernels, threads: int, case: ModelOp, m: ModelSize, dtype_name: str) -> ModelRow:
    import torch

    inputs = model_inputs(case, m, getattr(torch, dtype_name))
    args = list(inputs.values())
    kernel_s, torch_s, first, differing = time_alternately(
        lambda: case.kernel(rlkernels, *args), lambda: case.baseline(*args), min_reps=MODEL_MIN_REPS, budget_s=MODEL_ROW_BUDGET_S
    )
    alone = case.kernel(rlkernels, *(t[:INVARIANT_ROWS] if name in case.batched else t for name, t in inputs.items()))
    return ModelRow(
        op=case.name,
        dtype=dtype_name,
        hidden=m.hidden,
        shape=", ".join(f"{name} {'×'.join(map(str, t.shape))}" for name, t in inputs.items()),
        threads=threads,
        kernel_ms=statistics.median(kernel_s) * 1e3,
        torch_ms=statistics.median(torch_s) * 1e3,
        ratio=statistics.median(t / s for s, t in zip(kernel_s, torch_s)),
        reps=len(kernel_s),
        deterministic=differing == 0,
        invariant=same_bits(alone, first[:INVARIANT_ROWS]),
    )


def run_model(rlkernels, only: set[str] | None = None) -> list[ModelRow]:
    """only: the ModelOp names (or their first words) to run; every op when None."""
    cases = []
    for case in _model_ops():
        if only is not None and not {case.name, case.needs} & only:
            continue
        if not hasattr(rlkernels, case.needs):
            print(f"(model shapes: rlkernels has no {case.needs}; its rows are skipped)")
            continue
        cases += [(case, m, dtype_name) for m in MODEL_SIZES for dtype_name in MODEL_DTYPES]
    return on_each_thread_count(cases, lambda threads, case, m, d: bench_model_op(rlkernels, threads, case, m, d), format_model_row)


MODEL_HEADER = (
    "| op | inputs | H | tensors | threads | rlkernels ms | PyTorch ms | rlkernels / PyTorch speed | same bits every repeat | rows 0–7 alone = in batch |\n"
    "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |"
)


def format_model_row(r: ModelRow) -> str:
    return (
        f"| {r.op} | {r.dtype} | {r.hidden} | {r.shape} | {r.threads} | {r.kernel_ms:.2f} | {r.torch_ms:.2f} | **{r.ratio:.2f}** | "
        f"{'yes' if r.deterministic else '**no**'} ({r.reps} runs) | {'yes' if r.invariant else '**no**'} |"
    )


def model_notes() -> str:
    sizes = "; ".join(f"H = {m.hidden}: T = {m.tokens}, I = {m.intermediate}, V = {m.vocab}" for m in MODEL_SIZES)
    by_op: dict[str, str] = {}  # one baseline per rlkernels function (the det_linear rows share theirs)
    for case in _model_ops():
        by_op.setdefault(case.needs + (" fwd+bwd" if case.name.endswith("fwd+bwd") else ""), case.baseline_code)
    baselines = "; ".join(f"{op}: `{code}`" for op, code in by_op.items())
    return f"""\
* One layer of a small decoder ({sizes}; I is 2.75 H rounded
  to a multiple of 64), every tensor in the row's dtype except the token ids.  Inputs are
  standard normals, and a linear layer's weight [out, in] standard normals over √in, a model's
  scale: the vocabulary rows' logits then spread about 1, as a model's do.  (With standard
  normal weights they would spread √H, and most of a row's 32,000 probabilities would be
  subnormal numbers, which some CPUs -- Intel's, through microcode assists -- compute tens of
  times slower than others: this package's kernels and PyTorch's both slow down, unequally.)
* Baselines, on the same tensors: {baselines}.
* Speed ratio: median of the paired ratios, as above (below 0.5 means more than twice the
  PyTorch time); at least {MODEL_MIN_REPS} pairs, more while the row has run under {MODEL_ROW_BUDGET_S} s (one pair where a
  PyTorch call takes over {LONG_BASELINE_S:.0f} s).
* fwd+bwd rows: the forward and the backward through autograd, timed together; the gradient
  named in the baseline column is the one compared (the others sum over rows).
* silu and swiglu evaluate rlk_math.h's portable sigmoid, faithful to under 1 ulp and the same bits
  on every platform: e^-|x| as a float pair, then a quotient corrected with its exact residual --
  several times the instructions of a plain exp and divide, so these rows are bound by arithmetic,
  and their float32 rows gain less from a second thread than F.silu does (compare the one- and
  two-thread rows).  float32 blocks are computed where
  they lie, with no copy first.  Faster code for the same sigmoid gives the same bits only with the
  same operations, and those are already vectorised; a cheaper sigmoid would change silu's bits.
* linear_logp's backward multiplies a float32 dz, as its spec defines it, so both of its gradient
  sums take float32 products (an fma each) whatever the inputs' dtype, and it recomputes the logits
  rather than keep them: bfloat16 fwd+bwd runs two bfloat16 products (the logits, twice) and two
  float32 ones where PyTorch's autograd runs three bfloat16 ones.  A bfloat16 dot product
  (vdpbf16ps) does two products per lane in the time of one fma, so if every product, theirs and
  ours, ran at its instruction's full rate, these rows would take 2/2 + 2 = 3 units of time to
  PyTorch's 3/2: a ratio of 0.5 that no tiling changes.  They measure above it as far as PyTorch's
  bfloat16 products fall short of that rate."""

def make_project(dest: Path, copies: int) -> None:
    shutil.copytree(ROOT / "specs", dest / "specs")
    shutil.copytree(ROOT / "templates", dest / "templates")
    source = (dest / "specs" / "ops" / "det_gemm.yaml").read_text()
    assert source.count("\nname: det_gemm\n") == 1, "det_gemm.yaml no longer has a top-level `name: det_gemm` line"
    for i in range(copies):
        name = f"det_gemm_copy{i:04d}"
        (dest / "specs" / "ops" / f"{name}.yaml").write_text(source.replace("\nname: det_gemm\n", f"\nname: {name}\n"))


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file outside specs/ and templates/: content hash and mtime."""
    return {
        p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in {"specs", "templates"}
    }


def plain_write(root: Path) -> float:
    """Seconds to write every file under generated/ into an empty folder beside it, each with one
    open and write (no fsync, no rename, no check): the file system's own cost of the files."""
    files = {p.relative_to(root / "generated"): p.read_bytes() for p in sorted((root / "generated").rglob("*")) if p.is_file()}
    dest = root / "plain-write"
    start = time.perf_counter()
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)
    seconds = time.perf_counter() - start
    shutil.rmtree(dest)
    return seconds


def clear_outputs(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name not in {"specs", "templates"}:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def generate(root: Path, *args: str) -> tuple[float, str]:
    """Seconds one in-process `generate` took, and what it printed."""
    from generator.cli import main

    quiet = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        code = main(["--root", str(root), "generate", *args])
    seconds = time.perf_counter() - start
    if code != 0:
        sys.exit(f"bench: generate failed in {root} (exit {code}):\n{quiet.getvalue()[-3000:]}")
    return seconds, quiet.getvalue()


RECOGNISED = "so nothing was rendered"


def bench_generator(what: str, copies: int, reps: int) -> GenRow:
    with tempfile.TemporaryDirectory(prefix="rlk-bench-") as tmp:
        root = Path(tmp)
        make_project(root, copies)
        full, plain = [], []
        for _ in range(reps):
            clear_outputs(root)
            full.append(generate(root)[0])
            plain.append(plain_write(root))
        before = snapshot(root)
        rendered, noop = [], []
        for _ in range(reps):  # alternately, so that both see the same load
            for args, times in ((("--full",), rendered), ((), noop)):
                seconds, out = generate(root, *args)
                times.append(seconds)
                assert (RECOGNISED in out) == (not args), f"generate {' '.join(args)}: {out[-500:]}"
                after = snapshot(root)
                touched = sorted(rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel))
                assert not touched, f"a no-op generate {' '.join(args)} wrote {len(touched)} files, e.g. {touched[:5]}"
        return GenRow(
            what=what,
            ops=len(list((root / "specs" / "ops").glob("*.yaml"))),
            platforms=len(list((root / "specs" / "platforms").glob("*.yaml"))),
            files=sum(1 for p in (root / "generated").rglob("*") if p.is_file()),
            full_s=statistics.median(full),
            render_s=statistics.median(rendered),
            noop_s=statistics.median(noop),
            reps=reps,
            plain_write_s=statistics.median(plain),
        )


def run_generator() -> list[GenRow]:
    sys.path.insert(0, str(ROOT))
    rows = [bench_generator("catalog (specs/)", 0, GENERATE_REPS)]
    print(format_gen_row(rows[-1]), flush=True)
    for copies in SYNTHETIC_OPS:
        # One run each: a 1,000-op catalog takes tens of seconds, and growth is what these rows show.
        rows.append(bench_generator(f"catalog + {copies:,} copies of det_gemm", copies, 1))
        print(format_gen_row(rows[-1]), flush=True)
    return rows


GEN_HEADER = (
    "| catalog | ops | platforms | files | runs | full generate | ms / op / platform | the same files, plain writes | ms / op / platform | "
    "no-op generate, rendered (`--full`) | ms / op / platform | no-op generate | ms / op / platform |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def format_gen_row(r: GenRow) -> str:
    return (
        f"| {r.what} | {r.ops:,} | {r.platforms} | {r.files:,} | {r.reps} | {r.full_s * 1000:,.0f} ms | "
        f"{r.per_op_platform_ms(r.full_s):.2f} | {r.plain_write_s * 1000:,.0f} ms | {r.per_op_platform_ms(r.plain_write_s):.2f} | "
        f"{r.render_s * 1000:,.0f} ms | {r.per_op_platform_ms(r.render_s):.2f} | "
        f"{r.noop_s * 1000:,.0f} ms | {r.per_op_platform_ms(r.noop_s):.3f} |"
    )


NOOP_GOAL_S = 0.3
PER_OP_GOAL_MS = 2.0


def gen_goals(rows: list[GenRow]) -> list[str]:
    """The generator's two goals, as measured in this run, on this machine."""

    def verdict(ok: bool) -> str:
        return "met" if ok else "**not met**"

    catalog = rows[0]
    largest = rows[-1]
    where = f"{cpu_model()} ({platform.machine()}), {os.cpu_count()} logical CPUs"
    with contextlib.suppress(OSError):
        where += f", load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])} at the end"
    lines = [
        "| goal | target | measured | |",
        "| --- | ---: | ---: | --- |",
        (
            f"| no-op generate of the catalog ({catalog.ops} ops), in-process | < {NOOP_GOAL_S * 1000:.0f} ms | "
            f"{catalog.noop_s * 1000:,.0f} ms | {verdict(catalog.noop_s < NOOP_GOAL_S)} |"
        ),
    ]
    for label, seconds in (("no-op generate", largest.noop_s), ("no-op generate, rendered (`--full`)", largest.render_s), ("full generate", largest.full_s)):
        ms = largest.per_op_platform_ms(seconds)
        lines.append(f"| {label}, {largest.ops:,} ops | < {PER_OP_GOAL_MS:.0f} ms / op / platform | {ms:.3f} ms | {verdict(ms < PER_OP_GOAL_MS)} |")
    floor = largest.per_op_platform_ms(largest.plain_write_s)
    return [
        *lines,
        "",
        (
            f"Measured on {where}.  Writing the {largest.files:,} files of the largest catalog with plain open/write took "
            f"{floor:.3f} ms / op / platform on this file system, in the same run: the floor under a full generate's time."
        ),
    ]


# ---------------------------------------------------------------- the report


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


def compiler() -> str:
    cxx = os.environ.get("CXX", "c++")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
        return out.splitlines()[0] if out else cxx
    return cxx


def machine_lines(command: str, with_torch: bool) -> list[str]:
    lines = [f"| CPU | {cpu_model()} ({platform.machine()}), {os.cpu_count()} logical CPUs, {thread_counts()[-1]} usable |"]
    with contextlib.suppress(OSError):
        lines.append(f"| Load average at start | {' '.join(Path('/proc/loadavg').read_text().split()[:3])} |")
    if with_torch:
        import torch

        flags, cap = cpu_flags(), os.environ.get("RLK_CPU_SIMD", "native")
        # rlk_parallel.h's host_simd(): the widest instruction set this CPU runs, capped by RLK_CPU_SIMD;
        # det_gemm's register tile on each.
        if {"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma"} <= flags and cap not in ("generic", "avx2"):
            rows_path, path = "AVX-512 (F, VL, BW, DQ) + FMA", "AVX-512, 12 × 32 tiles, an fma per product"
            if "avx512_bf16" in flags and cap != "avx512":
                # det_gemm_simt.j2: bfloat16 operands two k per vdpbf16ps where that is exact
                path += " (bfloat16: two per AVX512-BF16 dot product)"
        elif {"avx2", "fma"} <= flags and cap != "generic":
            rows_path, path = "AVX2 + FMA", "AVX2 + FMA, 6 × 16 tiles, an fma per product"
        else:
            rows_path, path = "baseline (compiler default)", "portable (4 lanes, 3 × 16 tiles, the C library's fmaf)"
        lines += [
            f"| torch | {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}) |",
            f"| det_gemm code path | {path} |",
            f"| Row and elementwise kernels' code path | {rows_path} |",
            f"| Compiler | {compiler()} |",
        ]
    lines += [
        f"| Python | {platform.python_version()} |",
        f"| Command | `{command}` |",
        f"| Date (UTC) | {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} |",
    ]
    return lines


GEMM_NOTES = """\
* Speed ratio: median over the runs of (torch.matmul time / det_gemm time), each pair timed
  back to back in alternating order; above 1 means det_gemm was faster.  GFLOP/s are
  2·M·N·K over the median time of each.
* det_gemm: one float32 accumulator per output, one fused multiply-add for each k in ascending
  order, one rounding at the store; threads split rows and columns, never K.
  Threads: `RLK_NUM_THREADS`, set with `torch.set_num_threads` for each row.
* The bfloat16 baseline is torch.matmul on the bfloat16 tensors, which may use bfloat16
  dot-product instructions (AVX512-BF16, AMX) that add products in pairs at twice the float32
  rate or more.  det_gemm uses AVX512-BF16's vdpbf16ps where the CPU has it and the operands
  make it exact (each of its two additions is an fma, in k order: the same bits; see
  rlk_lanes.h), and the fma path elsewhere; AMX, whose sums are not specified step by step,
  it cannot use.
* "rows 0–7 alone = in batch": det_gemm(a[:8], b) compared bitwise with rows 0–7 of
  det_gemm(a, b) from the timed runs; "same bits every repeat": every timed output compared
  bitwise with the first."""

GEN_NOTES = """\
* Each synthetic catalog is specs/ plus N copies of det_gemm.yaml under other names; ops
  counts the original too.  ms / op / platform = time / (ops × platforms).
* Full generate: into an empty output tree.  The same files, plain writes: the files that full
  generate wrote, written again into an empty folder beside it with one open and write each (no
  fsync, no staging, no rename): what the file system charges for them, measured in the same run.
  No-op generate: again, unchanged, alternating the
  two kinds; the bench fails unless every file outside specs/ and templates/ keeps its bytes and
  its mtime.  `generate` recognises the unchanged inputs and outputs from the digests the last
  run stored in .build/generate-state.json and renders nothing (generator/noop.py,
  tests/test_noop_generate.py); `generate --full` renders everything and compares, which is also
  what any change to an input or an output costs.
* Timed in-process through `generator.cli.main`, so interpreter start-up is not included.  Catalogs
  of 1,500 files to render or more are rendered in one worker process per CPU, and 300 op specs
  or more are read in one per CPU (`--jobs`)."""


SECTION_TITLES = {
    "gemm": "det_gemm on CPU vs torch.matmul",
    "ops": "logp and rms_norm on CPU vs PyTorch",
    "model": "A small model's ops on CPU vs PyTorch",
    "transformers": "A patched transformers model on CPU vs the unpatched model",
    "tp": "Tensor parallelism on CPU: fixed-order combine vs all_reduce",
    "generator": "Generator",
}


def _facts(lines: list[str]) -> dict[str, str]:
    """The machine table's rows (``| key | value |``) as a mapping."""
    return {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines if line.count("|") >= 3}


def _run_of(facts: dict[str, str]) -> str:
    return f"{facts.get('Date (UTC)', 'an earlier date')} on {facts.get('CPU', 'another machine')}, torch {facts.get('torch', 'unknown')}"


def previous_sections() -> tuple[dict[str, str], dict[str, str]]:
    """The sections of the doc as it stands (title -> body), and the machine facts of the run that wrote it."""
    if not DOC.is_file():
        return {}, {}
    text = DOC.read_text()
    facts = _facts(text.split("\n## ")[0].splitlines())
    sections = {}
    for chunk in text.split("\n## ")[1:]:
        title, _, body = chunk.partition("\n")
        sections[title.strip()] = body.strip("\n")
    return sections, facts


GEMM_PATH_HEADING = "### Code path: "


def gemm_tables(body: str | None, facts: dict[str, str]) -> dict[str, str]:
    """The det_gemm section as it stands: code path -> its run's line and table.  Each code path
    (AVX-512, AVX2, portable) keeps the table of the last run that took it, as one machine runs one."""
    if not body:
        return {}
    if GEMM_PATH_HEADING not in body:  # a section from before the tables were kept per code path
        table = [line for line in body.splitlines() if line.startswith("|")]
        path = facts.get("det_gemm code path")
        kept = re.match(r"\*Not measured by this run: the table of the run of (.*)\.\*", body)
        run = kept.group(1) if kept else _run_of(facts)
        return {path: f"*Run of {run}.*\n\n" + "\n".join(table)} if table and path else {}
    tables = {}
    for chunk in body.split(GEMM_PATH_HEADING)[1:]:
        path, _, rest = chunk.partition("\n")
        lines = rest.strip("\n").splitlines()
        keep = [line for line in lines if line.startswith(("|", "*Run of"))]
        tables[path.strip()] = "\n".join(keep[:1] + [""] + keep[1:]) if keep else ""
    return tables


def gemm_section(machine: list[str], rows: list[GemmRow], previous: dict[str, str]) -> list[str]:
    facts = _facts(machine)
    path = facts.get("det_gemm code path", "unknown")
    parts = [f"{GEMM_PATH_HEADING}{path}\n", f"*Run of {_run_of(facts)}.*\n", GEMM_HEADER, *map(format_gemm_row, rows)]
    for other, table in previous.items():
        if other != path:
            parts += ["", f"{GEMM_PATH_HEADING}{other}\n", table]
    return [*parts, "", GEMM_NOTES]


def write_doc(
    machine: list[str], gemm_rows: list[GemmRow], op_rows: list[OpRow], model_rows: list[ModelRow], gen_rows: list[GenRow], decoder_rows: list[DecoderRow],
    tp_rows: list[TpRow],
) -> None:
    """A section this run did not measure keeps the previous run's table, marked with that run's date."""
    parts = [
        "# Performance\n",
        "Written by `make bench` (`tools/bench.py`); rerun it rather than editing this file.",
        "Read the ratios: each baseline is measured in the same process, alternating with what it",
        "is compared to; absolute numbers move with the machine's load.\n",
        "| Machine | |\n| --- | --- |",
        *machine,
    ]
    previous, previous_facts = previous_sections()
    previous_date = _run_of(previous_facts)
    measured = {
        "gemm": gemm_section(machine, gemm_rows, gemm_tables(previous.get(SECTION_TITLES["gemm"]), previous_facts)) if gemm_rows else None,
        "ops": [OP_HEADER, *map(format_op_row, op_rows), "", OP_NOTES] if op_rows else None,
        "model": [MODEL_HEADER, *map(format_model_row, model_rows), "", model_notes()] if model_rows else None,
        "transformers": [DECODER_HEADER, *map(format_decoder_row, decoder_rows), "", decoder_notes()] if decoder_rows else None,
        "tp": [TP_HEADER, *map(format_tp_row, tp_rows), "", tp_notes()] if tp_rows else None,
        "generator": [*gen_goals(gen_rows), "", GEN_HEADER, *map(format_gen_row, gen_rows), "", GEN_NOTES] if gen_rows else None,
    }
    for key, title in SECTION_TITLES.items():
        if measured[key] is not None:
            parts += [f"\n## {title}\n", *measured[key]]
            continue
        kept = previous.get(title)
        if kept is None:
            continue
        note = f"*Not measured by this run: the table of the run of {previous_date}.*"
        body = kept if kept.startswith("*Not measured by this run") else f"{note}\n\n{kept}"
        parts += [f"\n## {title}\n", body]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(parts) + "\n")
    print(f"wrote {DOC.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sections", nargs="*", metavar="kernel|gemm|model|transformers|tp|generator", help="what to run (default: all; gemm: det_gemm's rows of kernel)"
    )
    parser.add_argument("--op", action="append", metavar="NAME", help="model section only, this op only (repeatable); writes no report")
    args = parser.parse_args()
    sections = args.sections or ["kernel", "model", "transformers", "tp", "generator"]
    if not set(sections) <= {"kernel", "gemm", "model", "transformers", "tp", "generator"}:
        parser.error(f"unknown section in {sections}; expected kernel, gemm, model, transformers, tp and/or generator")
    command = " ".join([os.path.relpath(sys.executable, ROOT), os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    machine = machine_lines(command, with_torch=bool({"kernel", "gemm", "model", "transformers", "tp"} & set(sections)))
    print("\n".join(machine))
    gemm_rows, op_rows, model_rows, gen_rows, decoder_rows, tp_rows = [], [], [], [], [], []
    if {"kernel", "gemm", "model", "transformers", "tp"} & set(sections):
        rlkernels = build_cpu_package()
    if {"kernel", "gemm"} & set(sections):
        print("\n" + GEMM_HEADER)
        gemm_rows = run_gemm(rlkernels)
    if "kernel" in sections:
        print("\n" + OP_HEADER)
        op_rows = run_ops(rlkernels)
    if "model" in sections:
        print("\n" + MODEL_HEADER)
        model_rows = run_model(rlkernels, set(args.op) if args.op else None)
    if "transformers" in sections and not args.op:
        print("\n" + DECODER_HEADER)
        decoder_rows = run_decoder(rlkernels)
    if "tp" in sections and not args.op:
        print("\n" + TP_HEADER)
        tp_rows = run_tp()
    if "generator" in sections:
        print("\n" + GEN_HEADER)
        gen_rows = run_generator()
        print("\n" + "\n".join(gen_goals(gen_rows)))
    if args.op:
        print(f"(--op: a partial model table; {DOC.relative_to(ROOT)} left as it was)")
    else:
        write_doc(machine, gemm_rows, op_rows, model_rows, gen_rows, decoder_rows, tp_rows)
    failed = [r for r in [*gemm_rows, *op_rows, *model_rows, *decoder_rows, *tp_rows] if not (r.deterministic and r.invariant)]
    for r in failed:
        print(f"bench: {getattr(r, 'op', 'det_gemm')} {r.dtype} {r.shape} on {r.threads} threads was not bitwise stable", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
