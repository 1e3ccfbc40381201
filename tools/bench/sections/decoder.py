"""A patched transformers model on CPU vs the unpatched model: a realistic Qwen2 patched with
rlkernels.transformers against the same model unpatched (sdpa, full logits, log_softmax), forward
and forward+backward.  Two sections: ``transformers``, a small model whose every row takes well
under a second, and ``transformers-large``, a model large enough that the matrix products dominate
(a forward+backward takes many seconds on one core), with fewer rows."""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ..cases import ModelSize
from ..core import LONG_BASELINE_S, Context, Formatted, OneTable, same_bits, time_alternately, yes
from ..machine import cpu_flags, has_amx


@dataclass(frozen=True)
class DecoderSize:
    """A Qwen2 built from a config in code: hidden H, layers, MLP width I (ModelSize's 2.75 H),
    heads as the model section's layer has them (H / 64 query heads of 64, half as many KV heads),
    vocabulary V; ``batch`` rows of ``length`` tokens."""

    hidden: int
    layers: int = 4
    vocab: int = 32000
    batch: int = 4
    length: int = 128

    @property
    def layer(self) -> ModelSize:
        return ModelSize(tokens=self.batch * self.length, hidden=self.hidden, vocab=self.vocab)

    @property
    def intermediate(self) -> int:
        return self.layer.intermediate

    @property
    def heads(self) -> int:
        return self.layer.heads

    @property
    def kv_heads(self) -> int:
        return self.layer.kv_heads


DECODER_SIZES = [DecoderSize(hidden=256)]
DECODER_DTYPES = ["float32", "bfloat16"]
DECODER_PASSES = ["forward", "fwd+bwd"]
DECODER_MIN_REPS, DECODER_ROW_BUDGET_S = 3, 4.0

# Large enough that the products dominate: 16 heads over 8 KV heads, I = 2816, 4 × 512 tokens.  A
# bfloat16 forward+backward of one model takes seconds even on both cores of the 2-core machine the
# report is measured on, so this section runs forward+backward only (the step a trainer takes), in
# bfloat16 (what models train in) and float32, and no more pairs than the minimum: four rows
# (two dtypes, one and all threads) of minutes each.
LARGE_SIZES = [DecoderSize(hidden=1024, layers=8, vocab=32000, batch=4, length=512)]
LARGE_DTYPES = ["bfloat16", "float32"]
LARGE_PASSES = ["fwd+bwd"]
LARGE_MIN_REPS, LARGE_ROW_BUDGET_S = 3, 0.0

HEADER = [
    "| model | inputs | step | batch | threads | patched ms | unpatched ms | patched / unpatched speed | same bits every repeat | row 0 alone = in batch |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |",
]


@dataclass
class DecoderRow:
    hidden: int
    batch: int
    length: int
    dtype: str
    step: str
    threads: int
    patched_ms: float
    unpatched_ms: float
    ratio: float
    reps: int
    deterministic: bool
    invariant: bool
    torch_amx: bool = False
    """The CPU has AMX, which torch's bfloat16 matmul (oneDNN) uses and rlkernels' GEMMs cannot (rows
    measured before this was recorded ran on CPUs without it)."""
    model: str = "Qwen2"
    """The model family (rows recorded before this field were Qwen2's)."""

    @property
    def what(self) -> str:
        return f"{self.model} H={self.hidden} {self.step} {self.dtype} {self.batch}×{self.length}"


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


class DecoderSection(OneTable):
    name = "transformers"
    title = "A patched transformers model on CPU vs the unpatched model"
    row_type = DecoderRow
    dtypes, passes = DECODER_DTYPES, DECODER_PASSES
    min_reps, row_budget_s = DECODER_MIN_REPS, DECODER_ROW_BUDGET_S
    selection = "every size, dtype and step, on one thread and on all"
    """What the section runs, in the notes' words."""
    goal = "the goal on CPU is within 1.5×, a ratio of at least 0.67"

    model = "Qwen2"
    """The family of the rows' model (make builds it)."""

    def __init__(self, sizes: Sequence[DecoderSize] | None = None) -> None:
        self.sizes = list(sizes if sizes is not None else DECODER_SIZES)

    def make(self, size: DecoderSize, dtype):
        return make_decoder(size, dtype)

    def run(self, context: Context) -> list[DecoderRow]:
        try:
            import transformers  # noqa: F401
        except ImportError:
            sys.exit(f"bench: the {self.name} section needs transformers (pip install 'rlkernels[transformers]')")
        context.package()
        cases = context.cases([(size, dtype, step) for size in self.sizes for dtype in self.dtypes for step in self.passes])
        return context.each_thread_count(self, cases, lambda threads, size, dtype, step: self._bench(context, threads, size, dtype, step))

    def _bench(self, context: Context, threads: int, size: DecoderSize, dtype_name: str, step: str) -> DecoderRow:
        import rlkernels.transformers as rlkt
        import torch

        unpatched = self.make(size, getattr(torch, dtype_name))
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

        timing = time_alternately(
            timed(patched, patched_lp), timed(unpatched, lambda x: unpatched_logprobs(unpatched, x)), *context.reps(self.min_reps, self.row_budget_s)
        )
        with torch.no_grad():
            alone = patched_lp(ids[:1])
        return DecoderRow(
            hidden=size.hidden, batch=size.batch, length=size.length, dtype=dtype_name, step=step, threads=threads,
            patched_ms=timing.kernel_median * 1e3, unpatched_ms=timing.baseline_median * 1e3, ratio=timing.ratio, reps=len(timing.kernel_s),
            deterministic=timing.differing == 0, invariant=same_bits(alone[0], timing.first[0]), torch_amx=has_amx(cpu_flags()), model=self.model,
        )

    def format(self, rows: Sequence[DecoderRow]) -> Formatted:
        lines = [
            f"| {r.model} H={r.hidden} | {r.dtype} | {r.step} | {r.batch}×{r.length} | {r.threads} | {r.patched_ms:.1f} | {r.unpatched_ms:.1f}{amx_mark(r)} | "
            f"**{r.ratio:.2f}** | {yes(r.deterministic)} ({r.reps} runs) | {yes(r.invariant)} |"
            for r in rows
        ]
        return Formatted([*HEADER, *lines], self.notes(rows))

    def described(self, m: DecoderSize) -> str:
        """One size of the section's model, in the notes' words."""
        return (
            f"H = {m.hidden}, {m.layers} layers, {m.heads} heads over {m.kv_heads} KV heads, I = {m.intermediate}, V = {m.vocab}, "
            f"{m.batch} rows of {m.length} tokens"
        )

    def notes(self, rows: Sequence[DecoderRow] = ()) -> str:
        sizes = "; ".join(self.described(m) for m in self.sizes)
        more = f"more while the row has run under {self.row_budget_s} s" if self.row_budget_s > 0 else "no more"
        amx = (
            "\n* (AMX) after an unpatched time: the CPU has AMX, and torch's bfloat16 matmul (oneDNN) runs its\n"
            "  products there; rlkernels' GEMMs cannot (AMX's sums are not specified step by step), so on such a\n"
            "  CPU the bfloat16 rows compare the vector units with the matrix units."
        ) if any(amx_mark(r) for r in rows) else ""
        return f"""\
* A transformers {self.model} built from a config ({sizes}), random weights, in the row's dtype.
  Rows: {self.selection}.
* Patched: `rlkernels.transformers.patch(model)` and `token_logprobs(model, ids)` (linear_logp on the
  LM head, no logits). Unpatched: a copy of the same model with sdpa attention, its logits, then
  `log_softmax(logits.float()).gather(...)`. forward: under `torch.no_grad()`; fwd+bwd: the sum of the
  log-probs, backward to every parameter.
* Speed ratio: median of the paired ratios (below 1 means slower than the unpatched model;
  {self.goal}); at least {self.min_reps} pairs, {more}
  (one pair where an unpatched call takes over {LONG_BASELINE_S:.0f} s). Last column: row 0's log-probs computed alone have the bits
  they have in the batch.{amx}"""


def amx_mark(row: DecoderRow) -> str:
    return " (AMX)" if row.torch_amx and row.dtype == "bfloat16" else ""


class LargeDecoderSection(DecoderSection):
    name = "transformers-large"
    title = "A patched transformers model on CPU vs the unpatched model, large enough that products dominate"
    dtypes, passes = LARGE_DTYPES, LARGE_PASSES
    min_reps, row_budget_s = LARGE_MIN_REPS, LARGE_ROW_BUDGET_S
    goal = "the goal at this size, where the products decide, is a ratio of at least 1.0"
    selection = (
        "forward+backward only, the step a trainer takes, in bfloat16 and float32, on one thread and on all; "
        "a forward+backward of one model takes seconds on the cores the report is measured on, so the section "
        "keeps to these rows and the minimum number of pairs, and `make bench` leaves it out "
        "(`python -m tools.bench transformers-large` measures it)"
    )

    def __init__(self, sizes: Sequence[DecoderSize] | None = None) -> None:
        super().__init__(sizes if sizes is not None else LARGE_SIZES)


# Qwen3-MoE at the small decoder's size: 8 experts of I = H / 2 (a width of 2 × 2.75 H / 8 per
# token's two experts would be too thin to measure the products), top 2, every layer sparse.
MOE_EXPERTS, MOE_TOP_K = 8, 2


def make_moe_decoder(size: DecoderSize, dtype):
    import torch
    import transformers

    config = transformers.Qwen3MoeConfig(
        hidden_size=size.hidden, num_hidden_layers=size.layers, num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
        head_dim=size.hidden // size.heads, intermediate_size=size.intermediate, moe_intermediate_size=size.hidden // 2,
        num_experts=MOE_EXPERTS, num_experts_per_tok=MOE_TOP_K, norm_topk_prob=True, vocab_size=size.vocab,
        max_position_embeddings=size.length, attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(config)
    with torch.no_grad():  # the routers start at zero, where every expert ties: spread the tokens
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.5)
    return model.to(dtype).eval()


class MoeDecoderSection(DecoderSection):
    name = "transformers-moe"
    title = "A patched transformers mixture of experts on CPU vs the unpatched model"
    model = "Qwen3-MoE"
    goal = "the goal for the MoE layer is a ratio of at least 0.8"

    def make(self, size: DecoderSize, dtype):
        return make_moe_decoder(size, dtype)

    def described(self, m: DecoderSize) -> str:
        return (
            f"H = {m.hidden}, {m.layers} layers, every one sparse: {MOE_EXPERTS} experts of I = {m.hidden // 2}, top {MOE_TOP_K} "
            f"(renormalised), {m.heads} heads over {m.kv_heads} KV heads, V = {m.vocab}, {m.batch} rows of {m.length} tokens; "
            "patched, rlkernels.moe's rule (one det_linear call per expert that received rows); unpatched, transformers' "
            "default experts implementation"
        )
