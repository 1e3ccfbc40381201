"""Tensor parallelism on CPU: rlkernels.distributed's fixed-order combine against torch.distributed's
all_reduce, on 2 and 4 gloo ranks spawned on this machine, alone and inside a row-parallel linear;
and one training step (forward and backward) of an MLP and a vocabulary head through
rlkernels.distributed against the same step written with torch's bf16 matmuls and all_reduce, on 1
and 2 ranks."""

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
from typing import Any

from ..core import BUILD, Context, Formatted, OneTable, same_bits, yes

TP_WORLDS = [2, 4]
TP_SHAPE = (256, 1024, 1024)  # tokens M, input features K (split across ranks), output features N
STEP = "MLP + vocabulary head, forward + backward"
STEP_WORLDS = [1, 2]
STEP_SHAPE = (64, 512, 1024, 2048)  # tokens T, hidden H, FFN width F, vocabulary V
STEP_BASELINE = "torch bf16 matmuls + all_reduce"
# Pairs per row, the same count on every rank (the collectives pair up call by call): the combine
# alone takes milliseconds and is noisy, the linear about a second, the step tens of milliseconds.
TP_REPS = {"combine": 40, "row-parallel linear": 6, STEP: 20}


def cases_at(world: int) -> list[str]:
    """What the ranks of a world of this size measure."""
    return [what for what in TP_REPS if world in (STEP_WORLDS if what == STEP else TP_WORLDS)]


HEADER = [
    ("| what | sizes | ranks | rlkernels.distributed ms | baseline ms | rlkernels / baseline speed | baseline | bytes received per rank (fixed order / all_reduce) | "
    "same bits every repeat | rlkernels = one device | baseline = one device |"),
    "| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- | --- |",
]


@dataclass
class TpRow:
    what: str
    shape: tuple[int, ...]
    world: int
    tree_ms: float
    """rlkernels.distributed's time: the fixed-order combine, the layer or the step."""
    reduce_ms: float
    """The baseline's time."""
    ratio: float
    reps: int
    tree_bytes: int
    """Bytes each rank receives (0: not counted, for the step)."""
    reduce_bytes: int
    deterministic: bool
    invariant: bool
    reduce_invariant: bool
    baseline: str = "all_reduce"  # rows kept from runs before the step's row had only this baseline


# ---------------------------------------------------------------- the training step


class _SumOfRanks:
    """Megatron's two collectives of a tensor-parallel layer, as autograd functions over all_reduce:
    ``forward`` sums every rank's tensor (a row-parallel output; its gradient, replicated, passes
    unchanged), ``backward`` passes a replicated tensor on and sums the gradients of its uses on
    every rank (a column-parallel input)."""

    @staticmethod
    def functions(group: Any) -> tuple[Any, Any]:
        import torch
        import torch.distributed as dist

        class InForward(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                x = x.clone()
                dist.all_reduce(x, group=group)
                return x

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                return grad

        class InBackward(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                return x.view_as(x)

            @staticmethod
            def backward(ctx: Any, grad: Any) -> Any:
                grad = grad.contiguous().clone()
                dist.all_reduce(grad, group=group)
                return grad

        return InForward.apply, InBackward.apply


def _step_inputs(torch: Any) -> dict[str, Any]:
    """The step's full weights (bf16, at nn.Linear's scale), input and target ids, the same on every rank."""
    t, h, f, v = STEP_SHAPE
    g = torch.Generator().manual_seed(1)

    def weight(rows: int, cols: int) -> Any:
        return (torch.randn(rows, cols, generator=g) * cols**-0.5).to(torch.bfloat16)

    return {"x": torch.randn(t, h, generator=g).to(torch.bfloat16), "up": weight(f, h), "down": weight(h, f), "head": weight(v, h),
            "ids": torch.randint(0, v, (t,), generator=g)}


SPLIT = {"x": None, "up": 0, "down": 1, "head": 0}
"""How the step's tensors are split: by rows (column-parallel up, vocabulary-parallel head), by
columns (row-parallel down), or replicated."""


def _step_params(rlkd: Any, inputs: dict[str, Any], group: Any) -> dict[str, Any]:
    """This rank's parts of the step's tensors, leaves of autograd."""
    return {name: (inputs[name].clone() if dim is None else rlkd.shard(inputs[name], dim, group=group)).requires_grad_(True) for name, dim in SPLIT.items()}


def _rlkernels_step(rlk: Any, rlkd: Any, params: dict[str, Any], ids: Any, group: Any) -> dict[str, Any]:
    """up (column-parallel) → SiLU → down (row-parallel) → vocabulary-parallel log-probs, then the
    backward of their negative mean: every sum over ranks' parts a K-tree product or the fixed-order
    combine, every other product det_gemm's."""
    for p in params.values():
        p.grad = None
    h = rlk.silu(rlkd.column_parallel_linear(params["x"], params["up"], group=group))
    y = rlkd.row_parallel_linear(h, params["down"], group=group)
    lp, _entropy = rlkd.linear_logp(y, params["head"], ids, group=group)
    (-lp.mean()).backward()
    return {"lp": lp.detach(), **{f"grad {name}": p.grad for name, p in params.items()}}


def _torch_step(world: int, params: dict[str, Any], ids: Any, group: Any) -> dict[str, Any]:
    """The same step as plain PyTorch writes it (Megatron's layout): bf16 F.linear, all_reduce of the
    row-parallel output and of the column-parallel inputs' gradients, a vocabulary-parallel
    log-softmax whose maxima, sums and picked logits are all_reduced; the entropy as a metric."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    for p in params.values():
        p.grad = None
    in_forward, in_backward = _SumOfRanks.functions(group) if world > 1 else (lambda x: x, lambda x: x)
    x = in_backward(params["x"])
    y = in_forward(F.linear(F.silu(F.linear(x, params["up"])), params["down"]))
    logits = F.linear(in_backward(y), params["head"]).float()
    part = logits.shape[1]
    start = dist.get_rank(group) * part
    with torch.no_grad():
        m = logits.amax(dim=1)
        if world > 1:
            dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    shifted = logits - m.unsqueeze(1)
    local = (ids >= start) & (ids < start + part)
    picked = torch.where(local, shifted.gather(1, (ids - start).clamp(0, part - 1).unsqueeze(1)).squeeze(1), torch.zeros_like(m))
    e = shifted.exp()
    sums = in_forward(torch.stack([e.sum(dim=1), picked]))
    lse = sums[0].log()
    lp = sums[1] - lse
    with torch.no_grad():
        _entropy = lse - in_forward((e * shifted).sum(dim=1)) / sums[0]
    (-lp.mean()).backward()
    return {"lp": lp.detach(), **{f"grad {name}": p.grad for name, p in params.items()}}


def _same_step(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(same_bits(a[name], b[name]) for name in a)


def _as_rank_part(one: dict[str, Any], world: int) -> dict[str, Any]:
    """Rank 0's part of a one-device step's results (its split tensors' first parts)."""
    out = {}
    for name, value in one.items():
        dim = SPLIT.get(name.removeprefix("grad "))
        out[name] = value if dim is None else value.narrow(dim, 0, value.shape[dim] // world)
    return out


# ---------------------------------------------------------------- the ranks


def _tp_rank(rank: int, world: int, init: str, package: str, out: str, reps: dict[str, int]) -> None:
    """One rank (spawned): times what a world of this size measures (cases_at), rlkernels.distributed
    and its baseline alternately, the same number of calls on every rank; rank 0 writes the rows."""
    import datetime as dt

    sys.path.insert(0, package)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["RLK_NUM_THREADS"] = "1"
    import rlkernels
    import rlkernels.distributed as rlkd

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world, timeout=dt.timedelta(seconds=600))
    whats = cases_at(world)
    m, k, n = TP_SHAPE
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, k, generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, generator=g) * k**-0.5).to(torch.bfloat16)
    xs, ws = rlkd.shard(x, 1), rlkd.shard(w, 1)
    partial = rlkernels.det_gemm_ktree(xs, ws.t().contiguous())
    one_device = rlkernels.det_gemm_ktree(x, w.t().contiguous()) if rank == 0 else None
    cases: dict[str, Any] = {
        "combine": lambda reduce: rlkd._combine(partial, None, reduce),
        "row-parallel linear": lambda reduce: rlkd.row_parallel_linear(xs, ws, reduce=reduce),
    }
    step_one: dict[str, Any] = {}
    if STEP in whats:
        inputs = _step_inputs(torch)
        params = _step_params(rlkd, inputs, None)
        cases[STEP] = lambda kind: _rlkernels_step(rlkernels, rlkd, params, inputs["ids"], None) if kind == "tree" else _torch_step(world, params, inputs["ids"], None)
        # Both steps on one device (a group of rank 0 alone), for the "= one device" columns.
        alone = dist.new_group([0])
        if rank == 0:
            one = _step_params(rlkd, inputs, alone)
            step_one = {
                "tree": _as_rank_part(_rlkernels_step(rlkernels, rlkd, one, inputs["ids"], alone), world),
                "all_reduce": _as_rank_part(_torch_step(1, one, inputs["ids"], alone), world),
            }
    rows = []
    for what in whats:
        fn = cases[what]
        same = _same_step if what == STEP else same_bits
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
                    differing += not same(y, first["tree"])
        if rank == 0:
            size = m * n * 2  # one partial, bfloat16
            row: dict[str, Any] = {
                "what": what, "world": world,
                "tree_ms": statistics.median(times["tree"]) * 1e3, "reduce_ms": statistics.median(times["all_reduce"]) * 1e3,
                "ratio": statistics.median(a / t for t, a in zip(times["tree"], times["all_reduce"])), "reps": reps[what],
                "deterministic": differing == 0,
            }
            if what == STEP:
                row.update({
                    "shape": list(STEP_SHAPE), "tree_bytes": 0, "reduce_bytes": 0, "baseline": STEP_BASELINE,
                    "invariant": _same_step(first["tree"], step_one["tree"]), "reduce_invariant": _same_step(first["all_reduce"], step_one["all_reduce"]),
                })
            else:
                row.update({
                    "shape": list(TP_SHAPE),
                    # received per rank: every other rank's partial; a ring all_reduce's reduce-scatter + all_gather
                    "tree_bytes": (world - 1) * size, "reduce_bytes": 2 * (world - 1) * size // world,
                    "invariant": what == "combine" or same_bits(first["tree"], one_device),
                    "reduce_invariant": what == "combine" or same_bits(first["all_reduce"], one_device),
                })
            rows.append(row)
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
    title = "Tensor parallelism on CPU: rlkernels.distributed vs all_reduce and torch's bf16 matmuls"
    row_type = TpRow

    def run(self, context: Context) -> list[TpRow]:
        context.package()  # built in BUILD, which the ranks import
        reps = {what: 1 for what in TP_REPS} if context.quick else TP_REPS
        rows = []
        for world in context.cases(sorted(set(TP_WORLDS) | set(STEP_WORLDS))):
            for row in bench_tp(world, reps):
                context.emit(self, row)
                rows.append(row)
        return rows

    def format(self, rows: Sequence[TpRow]) -> Formatted:
        lines = []
        for r in rows:
            compared = r.what != "combine" and r.world > 1  # a combine has no one-device result; one rank is one device
            same = yes(r.invariant) if compared else "—"
            reduce_same = yes(r.reduce_invariant) if compared else "—"
            received = f"{r.tree_bytes / 2**20:.2f} MiB / {r.reduce_bytes / 2**20:.2f} MiB" if r.tree_bytes or r.reduce_bytes else "—"
            lines.append(
                f"| {r.what} | {'×'.join(map(str, r.shape))} | {r.world} | {r.tree_ms:.2f} | {r.reduce_ms:.2f} | **{r.ratio:.2f}** | {r.baseline} | "
                f"{received} | {yes(r.deterministic)} ({r.reps} runs) | {same} | {reduce_same} |"
            )
        return Formatted([*HEADER, *lines], self.notes())

    def notes(self) -> str:
        m, k, n = TP_SHAPE
        t, h, f, v = STEP_SHAPE
        return f"""\
* `rlkernels.distributed` on gloo, ranks spawned on this machine, one thread each. Row-parallel
  linear: x [{m}, {k}] and a weight [{n}, {k}] split along K, each rank's det_gemm_ktree partial then
  the combine; combine: the combine alone on one [{m}, {n}] bf16 partial. Fixed order: all_gather,
  then the K-tree's pairwise adds; all_reduce: torch.distributed.all_reduce (the backend's order).
* {STEP} (sizes T×H×F×V): x [{t}, {h}] → ColumnParallelLinear's product ({h} → {f}) → SiLU (the
  package's) → RowParallelLinear's ({f} → {h}) → linear_logp over a vocabulary of {v}, then the
  backward of −mean(log-prob) to x and every weight, all bf16. Baseline: the same step as plain
  PyTorch writes it in Megatron's layout -- bf16 `F.linear`, `F.silu`, all_reduce of the
  row-parallel output and of the column-parallel inputs' gradients, a vocabulary-parallel
  log-softmax (maxima, sums and picked logits all_reduced), the entropy as a metric. One rank runs
  the whole step.
* Speed ratio: median of the paired ratios (baseline time / rlkernels time; below 1 means
  rlkernels is slower); {TP_REPS["combine"]} pairs for the combine, {TP_REPS["row-parallel linear"]} for the linear, {TP_REPS[STEP]} for the step,
  alternating, each call after a barrier.
* Bytes received per rank: the gather receives every other rank's partial, (ranks − 1) × M N × 2;
  a ring all_reduce receives 2 (ranks − 1) / ranks × M N × 2 -- ranks / 2 times less, and a
  reduce-scatter alone (ranks − 1) / ranks × M N × 2, ranks times less.
* "= one device": the row-parallel output compared bitwise with det_gemm_ktree over the whole of K
  on one process; for the step, rank 0's log-probs and gradients (its parts of the split weights)
  with the same step's on a group of rank 0 alone, each step with its own one-device run."""
