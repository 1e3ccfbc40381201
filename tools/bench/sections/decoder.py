"""A patched transformers model on CPU vs the unpatched model: a tiny but realistic Qwen2 patched with
rlkernels.transformers against the same model unpatched (sdpa, full logits, log_softmax), forward
and forward+backward."""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ..cases import ModelSize
from ..core import LONG_BASELINE_S, Context, Formatted, OneTable, same_bits, time_alternately, yes


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
DECODER_MIN_REPS, DECODER_ROW_BUDGET_S = 3, 4.0

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

    @property
    def what(self) -> str:
        return f"Qwen2 H={self.hidden} {self.step} {self.dtype} {self.batch}×{self.length}"


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

    def __init__(self, sizes: Sequence[DecoderSize] = tuple(DECODER_SIZES)) -> None:
        self.sizes = list(sizes)

    def run(self, context: Context) -> list[DecoderRow]:
        try:
            import transformers  # noqa: F401
        except ImportError:
            sys.exit("bench: the transformers section needs transformers (pip install 'rlkernels[transformers]')")
        context.package()
        cases = context.cases([(size, dtype, step) for size in self.sizes for dtype in DECODER_DTYPES for step in DECODER_PASSES])
        return context.each_thread_count(self, cases, lambda threads, size, dtype, step: self._bench(context, threads, size, dtype, step))

    def _bench(self, context: Context, threads: int, size: DecoderSize, dtype_name: str, step: str) -> DecoderRow:
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

        timing = time_alternately(
            timed(patched, patched_lp), timed(unpatched, lambda x: unpatched_logprobs(unpatched, x)), *context.reps(DECODER_MIN_REPS, DECODER_ROW_BUDGET_S)
        )
        with torch.no_grad():
            alone = patched_lp(ids[:1])
        return DecoderRow(
            hidden=size.hidden, batch=size.batch, length=size.length, dtype=dtype_name, step=step, threads=threads,
            patched_ms=timing.kernel_median * 1e3, unpatched_ms=timing.baseline_median * 1e3, ratio=timing.ratio, reps=len(timing.kernel_s),
            deterministic=timing.differing == 0, invariant=same_bits(alone[0], timing.first[0]),
        )

    def format(self, rows: Sequence[DecoderRow]) -> Formatted:
        lines = [
            f"| Qwen2 H={r.hidden} | {r.dtype} | {r.step} | {r.batch}×{r.length} | {r.threads} | {r.patched_ms:.1f} | {r.unpatched_ms:.1f} | "
            f"**{r.ratio:.2f}** | {yes(r.deterministic)} ({r.reps} runs) | {yes(r.invariant)} |"
            for r in rows
        ]
        return Formatted([*HEADER, *lines], self.notes())

    def notes(self) -> str:
        sizes = "; ".join(
            f"H = {m.hidden}, {m.layers} layers, {m.heads} heads over {m.kv_heads} KV heads, I = {m.intermediate}, V = {m.vocab}, "
            f"{m.batch} rows of {m.length} tokens" for m in self.sizes
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
