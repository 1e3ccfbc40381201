"""Tensor parallelism on CPU: rlkernels.distributed's fixed-order combine against torch.distributed's
all_reduce, on 2 and 4 gloo ranks spawned on this machine, alone and inside a row-parallel linear."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import BUILD, Context, Formatted, OneTable, same_bits, yes

TP_WORLDS = [2, 4]
TP_SHAPE = (256, 1024, 1024)  # tokens M, input features K (split across ranks), output features N
# Pairs per row, the same count on every rank (the collectives pair up call by call): the combine
# alone takes milliseconds and is noisy, the linear about a second.
TP_REPS = {"combine": 40, "row-parallel linear": 6}

HEADER = [
    ("| what | M×K×N | ranks | fixed-order ms | all_reduce ms | fixed-order / all_reduce speed | bytes received per rank (fixed order / all_reduce) | "
    "same bits every repeat | fixed order = one device | all_reduce = one device |"),
    "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |",
]


@dataclass
class TpRow:
    what: str
    shape: tuple[int, ...]
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


def _tp_rank(rank: int, world: int, init: str, package: str, out: str, reps: dict[str, int]) -> None:
    """One rank (spawned): times the fixed-order combine and all_reduce alternately, the same number
    of calls on every rank; rank 0 writes the rows."""
    import datetime as dt

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
        for rep in range(reps[what]):
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
                "what": what, "shape": list(TP_SHAPE), "world": world,
                "tree_ms": statistics.median(times["tree"]) * 1e3, "reduce_ms": statistics.median(times["all_reduce"]) * 1e3,
                "ratio": statistics.median(a / t for t, a in zip(times["tree"], times["all_reduce"])), "reps": reps[what],
                # received per rank: every other rank's partial; a ring all_reduce's reduce-scatter + all_gather
                "tree_bytes": (world - 1) * size, "reduce_bytes": 2 * (world - 1) * size // world,
                "deterministic": differing == 0,
                "invariant": what == "combine" or same_bits(first["tree"], one_device),
                "reduce_invariant": what == "combine" or same_bits(first["all_reduce"], one_device),
            })
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def bench_tp(world: int, reps: dict[str, int]) -> list[TpRow]:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        context = torch.multiprocessing.get_context("spawn")
        procs = [context.Process(target=_tp_rank, args=(rank, world, f"{tmp}/rendezvous", str(BUILD), f"{tmp}/rows.json", reps)) for rank in range(world)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(900)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        if [proc.exitcode for proc in procs] != [0] * world:
            sys.exit(f"bench: the tensor-parallel ranks at world size {world} failed (exit codes {[proc.exitcode for proc in procs]})")
        return [TpRow(**{**row, "shape": tuple(row["shape"])}) for row in json.loads(Path(f"{tmp}/rows.json").read_text())]


class TpSection(OneTable):
    name = "tp"
    title = "Tensor parallelism on CPU: fixed-order combine vs all_reduce"
    row_type = TpRow

    def run(self, context: Context) -> list[TpRow]:
        context.package()  # built in BUILD, which the ranks import
        reps = {what: 1 for what in TP_REPS} if context.quick else TP_REPS
        rows = []
        for world in context.cases(TP_WORLDS):
            for row in bench_tp(world, reps):
                context.emit(self, row)
                rows.append(row)
        return rows

    def format(self, rows: Sequence[TpRow]) -> Formatted:
        lines = []
        for r in rows:
            same = "—" if r.what == "combine" else yes(r.invariant)
            reduce_same = "—" if r.what == "combine" else yes(r.reduce_invariant)
            lines.append(
                f"| {r.what} | {'×'.join(map(str, r.shape))} | {r.world} | {r.tree_ms:.2f} | {r.reduce_ms:.2f} | **{r.ratio:.2f}** | "
                f"{r.tree_bytes / 2**20:.2f} MiB / {r.reduce_bytes / 2**20:.2f} MiB | {yes(r.deterministic)} ({r.reps} runs) | {same} | {reduce_same} |"
            )
        return Formatted([*HEADER, *lines], self.notes())

    def notes(self) -> str:
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
