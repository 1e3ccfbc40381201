"""Ops at sizes of their own on CPU vs the PyTorch code they replace: every op whose spec's bench
section gives ``shapes`` (the GEMMs' are the gemm section's), against the baseline it names."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .. import specs
from ..cases import baseline_call, baseline_code, draw, op_call, output_rows, take_rows
from ..core import INVARIANT_ROWS, MIN_REPS, ROW_BUDGET_S, Context, Formatted, OneTable, same_bits, time_alternately, yes
from .gemm import OPS as GEMM_OPS

HEADER = [
    "| op | inputs | sizes | threads | rlkernels ms | PyTorch ms | rlkernels / PyTorch speed | same bits every repeat | rows 0–7 alone = in batch |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
]

# Prose that holds for one op's rows, below the table when they are in it.
OP_NOTES = {"logp": "* logp also returns the log-sum-exp (for its backward), which the baseline does not compute."}


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

    @property
    def what(self) -> str:
        return f"{self.op} {self.dtype} {self.shape}"


def benched(ops: dict[str, specs.OpData]) -> list[specs.OpData]:
    return [op for op in ops.values() if op.bench is not None and op.bench.shapes and op.name not in GEMM_OPS]


class OpsSection(OneTable):
    name = "ops"
    row_type = OpRow

    def __init__(self, ops: dict[str, specs.OpData] | None = None) -> None:
        self._ops = ops

    @property
    def ops(self) -> list[specs.OpData]:
        if self._ops is None:
            self._ops = specs.read_ops()
        return benched(self._ops)

    @property
    def title(self) -> str:
        return f"{' and '.join(op.name for op in self.ops)} on CPU vs PyTorch"

    def run(self, context: Context) -> list[OpRow]:
        rlk = context.package()
        cases = context.cases(
            [(op, sizes, dtype) for op in benched(context.ops()) if op.bench for sizes in op.bench.shapes for dtype in op.bench.dtypes], kind=lambda case: case[0].name
        )

        def bench(threads: int, op: specs.OpData, sizes: dict[str, int], dtype: str) -> OpRow:
            kernel = op_call(getattr(rlk, op.name))
            baseline = baseline_call(op)
            inputs = draw(op, sizes, dtype)
            timing = time_alternately(lambda: kernel(*inputs.args), lambda: baseline(*inputs.args), *context.reps(MIN_REPS, ROW_BUDGET_S))
            alone = kernel(*take_rows(inputs, 0, INVARIANT_ROWS).args)
            return OpRow(
                op=op.name, dtype=dtype, shape=" ".join(f"{k}={v}" for k, v in sizes.items()), threads=threads,
                kernel_ms=statistics.median(timing.kernel_s) * 1e3, torch_ms=statistics.median(timing.baseline_s) * 1e3,
                ratio=timing.ratio, reps=len(timing.kernel_s), deterministic=timing.differing == 0,
                invariant=same_bits(alone, output_rows(op, timing.first, 0, INVARIANT_ROWS)),
            )

        return context.each_thread_count(self, cases, bench)

    def format(self, rows: Sequence[OpRow]) -> Formatted:
        lines = [
            f"| {r.op} | {r.dtype} | {r.shape} | {r.threads} | {r.kernel_ms:.2f} | {r.torch_ms:.2f} | **{r.ratio:.2f}** | "
            f"{yes(r.deterministic)} ({r.reps} runs) | {yes(r.invariant)} |"
            for r in rows
        ]
        ops = [op for op in self.ops if op.name in {r.op for r in rows}] or self.ops
        baselines = "; ".join(f"{op.name}: `{baseline_code(op)}`" for op in ops)
        notes = [
            f"* Baselines, on the same tensors: {baselines}.",
            "  They are what a training loop writes without this package: neither promises the same bits",
            "  on another device or batch size.",
            "* rlkernels: the CPU kernels, whose bits equal the device kernels' (the ops declare",
            "  `portable`); threads split rows, never a row's reduction.  Speed ratio and columns as above.",
            *(OP_NOTES[op.name] for op in ops if op.name in OP_NOTES),
        ]
        return Formatted([*HEADER, *lines], "\n".join(notes))
