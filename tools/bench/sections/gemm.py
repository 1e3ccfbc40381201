"""det_gemm and det_gemm_ktree on CPU vs torch.matmul: the sizes and baseline of each op's spec (its
bench section), on one thread and on all, with the GFLOP/s of each and whether the kernel's outputs
were bitwise deterministic and batch-invariant in the run.  One table per code path (AVX-512, AVX2,
portable; both ops run det_gemm's register tiles), each from the last run that took it, as one
machine runs one of them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import specs
from ..cases import baseline_call, draw, op_call, output_rows, take_rows
from ..core import INVARIANT_ROWS, MIN_REPS, ROW_BUDGET_S, Context, Formatted, same_bits, time_alternately, yes

OP = "det_gemm"
OPS = (OP, "det_gemm_ktree")
"""The GEMMs of this section, in its order (the ops section leaves them out)."""

HEADER = [
    "| op | inputs | M×K×N | threads | rlkernels GFLOP/s | torch.matmul GFLOP/s | rlkernels / torch speed | same bits every repeat | rows 0–7 alone = in batch |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
]

NOTES = """\
* Speed ratio: median over the runs of (torch.matmul time / det_gemm time), each pair timed
  back to back in alternating order; above 1 means det_gemm was faster.  GFLOP/s are
  2·M·N·K over the median time of each.
* det_gemm: one float32 accumulator per output, one fused multiply-add for each k in ascending
  order, one rounding at the store; threads split rows and columns, never K.
  Threads: `RLK_NUM_THREADS`, set with `torch.set_num_threads` for each row.
* det_gemm_ktree (bfloat16 only): the same register tiles over each leaf of 32 values of k, from
  zero, each leaf's sums rounded to bfloat16 and added by the mid-split tree in bfloat16 (a stack
  of tree nodes per tile). Its sizes after the square one are rlkernels.distributed's K-tree
  products in the tensor-parallel step of the tp section on one rank (64 tokens), those whose K the
  ranks split: down's forward (by a transposed weight, so run transposed, as 512×1024×64), up's
  input gradient and the vocabulary head's input gradient.
* The bfloat16 baseline is torch.matmul on the bfloat16 tensors, which may use bfloat16
  dot-product instructions (AVX512-BF16, AMX) that add products in pairs at twice the float32
  rate or more.  det_gemm uses AVX512-BF16's vdpbf16ps where the CPU has it and the operands
  make it exact (each of its two additions is an fma, in k order: the same bits; see
  rlk_lanes.h), and the fma path elsewhere; AMX, whose sums are not specified step by step,
  it cannot use.
* "rows 0–7 alone = in batch": det_gemm(a[:8], b) compared bitwise with rows 0–7 of
  det_gemm(a, b) from the timed runs; "same bits every repeat": every timed output compared
  bitwise with the first."""


@dataclass
class GemmRow:
    dtype: str
    shape: tuple[int, ...]
    threads: int
    kernel_gflops: float
    torch_gflops: float
    ratio: float
    reps: int
    deterministic: bool
    invariant: bool
    op: str = OP  # rows kept from runs before det_gemm_ktree joined the table are det_gemm's

    @property
    def what(self) -> str:
        return f"{self.op} {self.dtype} {'×'.join(map(str, self.shape))}"


class GemmSection:
    name = "gemm"
    title = "det_gemm and det_gemm_ktree on CPU vs torch.matmul"
    variant_heading = "Code path"
    row_type = GemmRow
    needs_torch = True

    def variant(self, facts: Mapping[str, str]) -> str:
        # A CPU whose torch has AMX for bfloat16 keeps a table of its own: its baseline is another kind of unit.
        amx = ", torch with AMX" if facts.get("Matrix instructions", "").startswith("AMX") else ""
        return facts.get("det_gemm code path", "unknown") + amx

    def run(self, context: Context) -> list[GemmRow]:
        ops = [context.ops()[name] for name in OPS]
        for op in ops:
            assert op.bench is not None, f"{op.name}'s spec has no bench section"
        cases = context.cases(
            [(op, dtype, sizes) for op in ops if op.bench for dtype in op.bench.dtypes for sizes in op.bench.shapes], kind=lambda case: case[0].name
        )

        def bench(threads: int, op: specs.OpData, dtype: str, sizes: dict[str, int]) -> GemmRow:
            kernel = op_call(getattr(context.package(), op.name))
            baseline = baseline_call(op)
            inputs = draw(op, sizes, dtype)
            timing = time_alternately(lambda: kernel(*inputs.args), lambda: baseline(*inputs.args), *context.reps(MIN_REPS, ROW_BUDGET_S))
            flops = 2.0 * math.prod(sizes.values())
            alone = kernel(*take_rows(inputs, 0, INVARIANT_ROWS).args)
            return GemmRow(
                op=op.name, dtype=dtype, shape=tuple(sizes.values()), threads=threads,
                kernel_gflops=flops / timing.kernel_median / 1e9, torch_gflops=flops / timing.baseline_median / 1e9,
                ratio=timing.ratio, reps=len(timing.kernel_s), deterministic=timing.differing == 0,
                invariant=same_bits(alone, output_rows(op, timing.first, 0, INVARIANT_ROWS)),
            )

        return context.each_thread_count(self, cases, bench)

    def format(self, rows: Sequence[GemmRow]) -> Formatted:
        lines = [
            f"| {r.op} | {r.dtype} | {'×'.join(map(str, r.shape))} | {r.threads} | {r.kernel_gflops:.1f} | {r.torch_gflops:.1f} | "
            f"**{r.ratio:.2f}** | {yes(r.deterministic, '**NO**')} ({r.reps} runs) | {yes(r.invariant, '**NO**')} |"
            for r in rows
        ]
        return Formatted([*HEADER, *lines], NOTES)
