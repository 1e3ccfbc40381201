"""A small model's ops on CPU vs PyTorch: every op of one decoder layer, at the layer's sizes, against
the PyTorch code it replaces.  Which ops, where the layer calls them (their sizes in terms of the
layer's: tokens, hidden, ...), which of them also run forward and backward, and each baseline, are
data of the ops' specs (``bench.layer``, ``bench.baseline``); this section supplies the layer's
sizes and the order of the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import specs
from ..cases import (
    ModelSize,
    backward_note,
    baseline_call,
    baseline_code,
    batch_rows,
    draw,
    layer_sizes,
    op_call,
    output_rows,
    take_rows,
    with_backward,
)
from ..core import INVARIANT_ROWS, LONG_BASELINE_S, Context, Formatted, OneTable, same_bits, time_alternately, yes

MODEL_SIZES = [ModelSize(tokens=512, hidden=256), ModelSize(tokens=512, hidden=1024)]
# A shorter budget than the tables above: the largest rows (a bfloat16 vocabulary projection at
# H = 1024) take seconds per call, and the whole section must stay within a few minutes.
MODEL_MIN_REPS, MODEL_ROW_BUDGET_S = 5, 1.5
# The table's order: as a decoder layer calls them (an op not named here comes after, by name).
ORDER = ("det_gemm_nt", "swiglu", "silu", "rms_norm", "logp", "linear_logp", "embedding", "rope", "attention")

HEADER = [
    "| op | inputs | H | tensors | threads | rlkernels ms | PyTorch ms | rlkernels / PyTorch speed | same bits every repeat | rows 0–7 alone = in batch |",
    "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
]

NOTES_TAIL = """\
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


@dataclass(frozen=True)
class RowKind:
    """One row kind of the table: an op where the layer calls it, forward or forward and backward."""

    op: specs.OpData
    case: specs.LayerCase
    backward: bool

    @property
    def label(self) -> str:
        return self.case.label + (" fwd+bwd" if self.backward else "")

    @property
    def key(self) -> str:
        """The row kind's name in the notes: the label's first word (det_linear), with fwd+bwd."""
        return self.case.label.split()[0] + (" fwd+bwd" if self.backward else "")

    def selected(self, only: frozenset[str] | None) -> bool:
        return only is None or bool({self.label, self.case.label, self.key.split()[0], *self.op.names} & only)


def row_kinds(ops: dict[str, specs.OpData]) -> list[RowKind]:
    """Every op's forward rows in the table's order, then the rows that also run the backward."""
    ordered = sorted((op for op in ops.values() if op.bench is not None and op.bench.layer), key=lambda op: (ORDER + (op.name,)).index(op.name))
    forward = [RowKind(op, case, False) for op in ordered for case in op.bench.layer]  # type: ignore[union-attr]
    return forward + [RowKind(kind.op, kind.case, True) for kind in forward if kind.case.backward]


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

    @property
    def what(self) -> str:
        return f"{self.op} {self.dtype} {self.shape}"


class ModelSection(OneTable):
    name = "model"
    title = "A small model's ops on CPU vs PyTorch"
    row_type = ModelRow

    def __init__(self, sizes: Sequence[ModelSize] = tuple(MODEL_SIZES)) -> None:
        self.sizes = list(sizes)

    def run(self, context: Context) -> list[ModelRow]:
        rlk = context.package()
        cases = []
        for kind in row_kinds(context.ops()):
            if not kind.selected(context.only):
                continue
            if not hasattr(rlk, kind.op.name):
                context.out(f"(model shapes: rlkernels has no {kind.op.name}; its rows are skipped)")
                continue
            cases += [(kind, m, dtype) for m in self.sizes for dtype in kind.op.bench.dtypes]  # type: ignore[union-attr]

        def bench(threads: int, kind: RowKind, m: ModelSize, dtype: str) -> ModelRow:
            op = kind.op
            kernel, baseline = op_call(getattr(rlk, op.name)), baseline_call(op)
            inputs = draw(op, layer_sizes(kind.case.sizes, m), dtype, layer_scale=True, grad=kind.backward)
            assert batch_rows(inputs), f"{kind.label}: no rows of a batch to take alone at {inputs.sizes}"
            alone_inputs = take_rows(inputs, 0, INVARIANT_ROWS)
            if kind.backward:
                timed_kernel, timed_baseline = with_backward(kernel, inputs), with_backward(baseline, inputs)
                alone, dims = with_backward(kernel, alone_inputs)(), next(a.shape for a in op.args if a.floating)
            else:
                def timed_kernel():
                    return kernel(*inputs.args)

                def timed_baseline():
                    return baseline(*inputs.args)

                alone, dims = kernel(*alone_inputs.args), op.outputs[0][1]
            timing = time_alternately(timed_kernel, timed_baseline, *context.reps(MODEL_MIN_REPS, MODEL_ROW_BUDGET_S))
            return ModelRow(
                op=kind.label, dtype=dtype, hidden=m.hidden, shape=inputs.shown(), threads=threads,
                kernel_ms=timing.kernel_median * 1e3, torch_ms=timing.baseline_median * 1e3, ratio=timing.ratio,
                reps=len(timing.kernel_s), deterministic=timing.differing == 0,
                invariant=same_bits(alone, output_rows(op, timing.first, 0, INVARIANT_ROWS, dims)),
            )

        return context.each_thread_count(self, context.cases(cases, kind=lambda case: case[0].label), bench)

    def format(self, rows: Sequence[ModelRow]) -> Formatted:
        lines = [
            f"| {r.op} | {r.dtype} | {r.hidden} | {r.shape} | {r.threads} | {r.kernel_ms:.2f} | {r.torch_ms:.2f} | **{r.ratio:.2f}** | "
            f"{yes(r.deterministic)} ({r.reps} runs) | {yes(r.invariant)} |"
            for r in rows
        ]
        return Formatted([*HEADER, *lines], self.notes())

    def notes(self, ops: dict[str, specs.OpData] | None = None) -> str:
        sizes = "; ".join(f"H = {m.hidden}: T = {m.tokens}, I = {m.intermediate}, V = {m.vocab}" for m in self.sizes)
        by_kind: dict[str, str] = {}  # one baseline per rlkernels function (the det_linear rows share theirs)
        for kind in row_kinds(ops if ops is not None else specs.read_ops()):
            code = baseline_code(kind.op)
            by_kind.setdefault(kind.key, backward_note(kind.op, code) if kind.backward else code)
        baselines = "; ".join(f"{key}: `{code}`" for key, code in by_kind.items())
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
{NOTES_TAIL}"""
