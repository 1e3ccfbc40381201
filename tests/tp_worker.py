"""One rank of the tensor-parallel tests: a tiny bf16 decoder on rlkernels.distributed.

Every rank builds the same full weights from one seed and keeps its part: q/k/v, gate and up
column-parallel (split by output rows: heads, FFN columns), o and down row-parallel (split by
input columns), the LM head vocabulary-parallel; embedding and RMS norms replicated.  One GRPO
step runs on the package's ops: embedding → (RMSNorm → q/k/v → RoPE → attention → o → RMSNorm →
gate/up → SwiGLU → down) x layers → RMSNorm → linear_logp → ratio_kl → grpo_loss → backward.
One launch of 4 processes holds the layouts as process groups of 1, 2 and 4 ranks (ranks 0, 0-1,
0-3), so each process imports torch and the package once; each rank writes its log-probs, loss
and gradients to ``out/tp<size>-<reduce>-rank<r>.pt``, and a sparse MoE block's output and
gradients with its 8 experts sharded over the same groups (expert parallelism) to
``out/ep<size>-<combine>-rank<r>.pt``.  Ranks 0 and 1 then run, as a group of 2,
calls whose ranks disagree (``disagreements``) and write what each raised to
``out/tp2-disagreements-rank<r>.pt``.
Kept free of pytest: spawned processes import it.
"""

from __future__ import annotations

import datetime
import sys
import time
import traceback
from pathlib import Path
from typing import Any

VOCAB, HIDDEN, HEADS, HEAD_DIM, FFN, LAYERS = 512, 64, 4, 32, 256, 2
GROUPS, SEQUENCES, TOKENS = 1, 2, 16  # GRPO: 1 group of 2 completions, 16 tokens each


def full_weights(torch: Any) -> dict[str, Any]:
    """The whole model's weights, the same on every rank and at every world size."""
    gen = torch.Generator().manual_seed(0)

    def randn(*shape: int, scale: float) -> Any:
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)

    w: dict[str, Any] = {"embed": randn(VOCAB, HIDDEN, scale=1.0), "head": randn(VOCAB, HIDDEN, scale=0.2), "norm": 1 + randn(HIDDEN, scale=0.1)}
    for layer in range(LAYERS):
        for name, shape in (("q", (HEADS * HEAD_DIM, HIDDEN)), ("k", (HEADS * HEAD_DIM, HIDDEN)), ("v", (HEADS * HEAD_DIM, HIDDEN)),
                            ("o", (HIDDEN, HEADS * HEAD_DIM)), ("gate", (FFN, HIDDEN)), ("up", (FFN, HIDDEN)), ("down", (HIDDEN, FFN))):
            w[f"{layer}.{name}"] = randn(*shape, scale=shape[1] ** -0.5 * 1.5)
        w[f"{layer}.norm1"] = 1 + randn(HIDDEN, scale=0.1)
        w[f"{layer}.norm2"] = 1 + randn(HIDDEN, scale=0.1)
    return w


# How each weight is split: 0 by rows (column-parallel, vocabulary-parallel), 1 by columns
# (row-parallel), None replicated.
SPLIT = {"q": 0, "k": 0, "v": 0, "gate": 0, "up": 0, "o": 1, "down": 1, "head": 0}


def split_of(name: str) -> int | None:
    return SPLIT.get(name.split(".")[-1])


def grpo_step(torch: Any, rlk: Any, rlkd: Any, params: dict[str, Any], reduce: str, group: Any) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(1)
    n = SEQUENCES * TOKENS
    ids = torch.randint(0, VOCAB, (SEQUENCES, TOKENS), generator=gen)
    targets = torch.randint(0, VOCAB, (SEQUENCES, TOKENS), generator=gen)
    old_lp = -torch.rand(SEQUENCES, TOKENS, generator=gen) * 8
    ref_lp = -torch.rand(SEQUENCES, TOKENS, generator=gen) * 8
    mask = torch.rand(SEQUENCES, TOKENS, generator=gen) > 0.2
    rewards = torch.tensor([[1.0, -0.5]])
    positions = torch.arange(TOKENS).repeat(SEQUENCES)
    cu = torch.arange(0, n + 1, TOKENS, dtype=torch.int32)

    x = rlk.embedding(params["embed"], ids.reshape(-1))
    for layer in range(LAYERS):
        p = {name: params[f"{layer}.{name}"] for name in ("q", "k", "v", "o", "gate", "up", "down", "norm1", "norm2")}
        h = rlk.rms_norm(x, p["norm1"], 1e-6)[0]
        q, k, v = (rlkd.column_parallel_linear(h, p[name], reduce=reduce, group=group).view(n, -1, HEAD_DIM) for name in "qkv")
        q, k = rlk.rope(q, positions), rlk.rope(k, positions)
        attn = rlk.attention(q, k, v, cu, cu)[0]
        x = x + rlkd.row_parallel_linear(attn.reshape(n, -1), p["o"], reduce=reduce, group=group)
        h = rlk.rms_norm(x, p["norm2"], 1e-6)[0]
        g = rlkd.column_parallel_linear(h, p["gate"], reduce=reduce, group=group)
        u = rlkd.column_parallel_linear(h, p["up"], reduce=reduce, group=group)
        x = x + rlkd.row_parallel_linear(rlk.swiglu(g, u), p["down"], reduce=reduce, group=group)
    h = rlk.rms_norm(x, params["norm"], 1e-6)[0]
    lp, entropy = rlkd.linear_logp(h.view(SEQUENCES, TOKENS, HIDDEN), params["head"], targets, reduce=reduce, group=group)
    ratio, kl = rlk.ratio_kl(lp, old_lp, ref_lp, mask)
    shape = (GROUPS, SEQUENCES, TOKENS)
    loss = rlk.grpo_loss(ratio.view(shape), kl.view(shape), mask.view(shape), rewards)[0]
    loss.backward()
    return {
        "lp": lp.detach(), "entropy": entropy.detach(), "loss": loss.detach(),
        "grads": {name: t.grad for name, t in params.items()},
    }


EXPERTS, EXPERT_FFN, TOP_K, MOE_TOKENS = 8, 32, 2, 24


def moe_weights(torch: Any) -> dict[str, Any]:
    """A sparse block's full weights and inputs, the same on every rank and at every world size."""
    gen = torch.Generator().manual_seed(4)

    def randn(*shape: int, scale: float) -> Any:
        return (torch.randn(*shape, generator=gen) * scale).to(torch.bfloat16)

    return {
        "x": randn(MOE_TOKENS, HIDDEN, scale=1.0), "router": randn(EXPERTS, HIDDEN, scale=0.5),
        "gate_up": randn(EXPERTS, 2 * EXPERT_FFN, HIDDEN, scale=HIDDEN**-0.5), "down": randn(EXPERTS, HIDDEN, EXPERT_FFN, scale=EXPERT_FFN**-0.5),
    }


# How the sparse block's tensors are split: the experts' weights by expert, the rest replicated.
MOE_SPLIT = {"gate_up": 0, "down": 0}


def moe_step(torch: Any, rlk: Any, rlkd: Any, full: dict[str, Any], combine: str, group: Any) -> dict[str, Any]:
    """The sparse block on rlkernels.distributed's expert parallelism: its output and (for the
    gathered combine) every tensor's gradient of a weighted sum of it."""
    params = {
        name: (t.clone() if MOE_SPLIT.get(name) is None else rlkd.shard(t, MOE_SPLIT[name], group=group)).requires_grad_(combine == "gather")
        for name, t in full.items()
    }
    logits = rlk.det_linear(params["x"], params["router"])
    y = rlkd.expert_parallel_experts(params["x"], logits, params["gate_up"], params["down"], TOP_K, True, group=group, combine=combine)
    if combine != "gather":
        return {"y": y.detach(), "grads": {}}
    (y.float() * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return {"y": y.detach(), "grads": {name: t.grad for name, t in params.items()}}


def moe_single_device(torch: Any, rlk: Any, full: dict[str, Any]) -> dict[str, Any]:
    """The same block on one device: rlkernels.moe.experts_forward on the full weights."""
    from rlkernels import moe

    params = {name: t.clone().requires_grad_(True) for name, t in full.items()}
    logits = rlk.det_linear(params["x"], params["router"])
    y = moe.experts_forward(params["x"], logits, params["gate_up"], params["down"], TOP_K, True)
    (y.float() * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
    return {"y": y.detach(), "grads": {name: t.grad for name, t in params.items()}}


def helpers(torch: Any, rlkd: Any, group: Any) -> dict[str, Any]:
    """scatter_last_dim then gather_last_dim, forward and backward, on a replicated tensor."""
    x = torch.arange(4 * 64, dtype=torch.float32).view(4, 64).requires_grad_(True)
    part = rlkd.scatter_last_dim(x, group=group)
    back = rlkd.gather_last_dim(part * 3, group=group)
    (back * torch.linspace(-1, 1, 64)).sum().backward()
    return {"part": part.detach(), "back": back.detach(), "grad": x.grad}


def refusals(torch: Any, rlkd: Any, group: Any, three: Any) -> dict[str, str]:
    """The messages of inputs the layers refuse."""
    out = {}
    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    cases = {
        "float32": lambda: rlkd.row_parallel_linear(x.float(), torch.zeros(8, 64), group=group),
        "ragged": lambda: rlkd.row_parallel_linear(torch.zeros(4, 48, dtype=torch.bfloat16), torch.zeros(8, 48, dtype=torch.bfloat16), group=group),
        "features": lambda: rlkd.column_parallel_linear(x, torch.zeros(32, 96, dtype=torch.bfloat16), group=group),
        "reduce": lambda: rlkd.row_parallel_linear(x, torch.zeros(8, 64, dtype=torch.bfloat16), reduce="ring", group=group),
        "vocab": lambda: rlkd.linear_logp(x, torch.zeros(40, 64, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.int64), group=group),
        "group": lambda: rlkd.row_parallel_linear(x, torch.zeros(8, 64, dtype=torch.bfloat16), group=three),
        "ids": lambda: rlkd.linear_logp(x, torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.int32), group=group),
    }
    for name, call in cases.items():
        try:
            call()
        except (ValueError, TypeError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        else:
            out[name] = "accepted"
    return out


def disagreements(torch: Any, rlkd: Any, groups: dict[int, Any], rank: int) -> dict[str, Any]:
    """Calls on ranks 0 and 1 (a group of 2) whose ranks hold what no rank can see is wrong alone:
    parts of other sizes, other bits of a replicated input, parts of other full weights.  Each
    case is a function of its own; ``outcomes`` runs them."""
    group = groups[2]
    gen = torch.Generator().manual_seed(3)

    def randn(*shape: int, seed: int | None = None) -> Any:
        g = gen if seed is None else torch.Generator().manual_seed(seed)
        return (torch.randn(*shape, generator=g) * 0.3).to(torch.bfloat16)

    h, x, ffn = randn(8, HIDDEN), randn(8, HIDDEN), randn(8, FFN)
    ids = torch.randint(0, VOCAB, (8,), generator=gen)
    head, up, down = randn(VOCAB, HIDDEN), randn(FFN, HIDDEN), randn(HIDDEN, FFN)
    own = 1 + rank  # something that differs by rank

    def uneven(full: Any, dim: int, first: int) -> Any:
        """The user's own split: rank 0 the first ``first`` entries along ``dim``, rank 1 the rest."""
        return full.narrow(dim, 0, first).clone() if rank == 0 else full.narrow(dim, first, full.shape[dim] - first).clone()

    def modules_with_parts(first: int) -> Any:
        column, row = rlkd.ColumnParallelLinear(HIDDEN, FFN, group=group), rlkd.RowParallelLinear(FFN, HIDDEN, group=group)
        column.weight = torch.nn.Parameter(uneven(up, 0, first))
        row.weight = torch.nn.Parameter(uneven(down, 1, first))
        return row(column(x))

    def loaded(layer: Any, full: Any) -> Any:
        layer.load_full(full)
        return layer

    def twice(check: str) -> Any:
        """The same layer called twice; only the second call's input differs on rank 1."""
        weight = rlkd.shard(up, 0, group=group)
        rlkd.column_parallel_linear(x, weight, group=group, check=check)
        return rlkd.column_parallel_linear(x + rank, weight, group=group, check=check)

    def with_module_check(value: str, call: Any) -> Any:
        saved, rlkd.CHECK = rlkd.CHECK, value
        try:
            return call()
        finally:
            rlkd.CHECK = saved

    def mixed_sources() -> Any:
        weight = rlkd.shard(up, 0, group=group) if rank == 0 else up.narrow(0, FFN // 2, FFN // 2).clone()
        return rlkd.column_parallel_linear(x, weight, group=group)

    big = randn(VOCAB + 384, HIDDEN)
    experts = moe_weights(torch)
    logits = rlk_logits(torch, experts)

    def ep(gate_up: Any, down: Any, x: Any = experts["x"], router_logits: Any = logits) -> Any:
        return rlkd.expert_parallel_experts(x, router_logits, gate_up, down, TOP_K, True, group=group)

    return {
        # experts: other numbers per rank, parts of other full weights, other tokens
        "uneven experts": lambda: ep(uneven(experts["gate_up"], 0, 3), uneven(experts["down"], 0, 3)),
        "other full experts": lambda: ep(rlkd.shard(experts["gate_up"] * own, 0, group=group), rlkd.shard(experts["down"], 0, group=group)),
        "other tokens": lambda: ep(rlkd.shard(experts["gate_up"], 0, group=group), rlkd.shard(experts["down"], 0, group=group), x=experts["x"] * own),
        "too few experts": lambda: ep(rlkd.shard(experts["gate_up"][:4], 0, group=group), rlkd.shard(experts["down"][:4], 0, group=group)),

        # parts of other sizes, or of no whole number of leaves
        "uneven vocabulary": lambda: rlkd.linear_logp(h, uneven(big, 0, VOCAB), ids, group=group),
        "partial leaves on one rank": lambda: rlkd.linear_logp(h, uneven(randn(112, HIDDEN), 0, 48), ids, group=group),
        "uneven column-parallel": lambda: rlkd.column_parallel_linear(x, uneven(up, 0, 160), group=group),
        "uneven row-parallel": lambda: rlkd.row_parallel_linear(uneven(ffn, 1, 160), uneven(down, 1, 160), group=group),
        "uneven modules": lambda: modules_with_parts(160),
        "uneven gather": lambda: rlkd.gather_last_dim(uneven(ffn, 1, 160), group=group),
        # gathered as bytes: another dtype would be read as this one (a last dimension of its own, first called here)
        "other dtype gathered": lambda: rlkd.gather_last_dim(ffn[:, :72].to((torch.bfloat16, torch.float16)[rank]), group=group),
        # a rank that asks for x's gradient would wait in the backward's combine alone
        "x's gradient on one rank": lambda: rlkd.column_parallel_linear(x.detach().requires_grad_(rank == 0), rlkd.shard(up, 0, group=group), group=group),
        # settings, and one rank's own refusal
        "other reduce": lambda: rlkd.row_parallel_linear(ffn[:, :128], rlkd.shard(down, 1, group=group), group=group, reduce=("tree", "all_reduce")[rank]),
        "other ignore_index": lambda: rlkd.linear_logp(h, rlkd.shard(head, 0, group=group), ids, group=group, ignore_index=-100 * own),
        "one rank's float32": lambda: rlkd.row_parallel_linear(ffn[:, :128].to((torch.bfloat16, torch.float32)[rank]), rlkd.shard(down, 1, group=group), group=group),
        "bad check": lambda: rlkd.column_parallel_linear(x, rlkd.shard(up, 0, group=group), group=group, check="sometimes"),
        "other check": lambda: rlkd.column_parallel_linear(x, rlkd.shard(up, 0, group=group), group=group, check=("first", "layout")[rank]),
        "other call": lambda: rlkd.column_parallel_linear(x, rlkd.shard(up, 0, group=group), group=group) if rank == 0 else
            rlkd.row_parallel_linear(ffn[:, :128], rlkd.shard(down, 1, group=group), group=group),
        # replicated inputs with other bits
        "other x": lambda: rlkd.column_parallel_linear(x * own, rlkd.shard(up, 0, group=group), group=group),
        "other h": lambda: rlkd.linear_logp(h * own, rlkd.shard(head, 0, group=group), ids, group=group),
        "other ids": lambda: rlkd.linear_logp(h, rlkd.shard(head, 0, group=group), (ids + rank) % VOCAB, group=group),
        "other scattered x": lambda: rlkd.scatter_last_dim(ffn * own, group=group),  # a last dimension the helpers did not scatter
        # parts of other full weights, or not at their rank's place
        "other full weights": lambda: rlkd.column_parallel_linear(x, rlkd.shard(randn(FFN, HIDDEN, seed=10 + rank), 0, group=group), group=group),
        "other full weights loaded": lambda: loaded(rlkd.RowParallelLinear(FFN, HIDDEN, group=group), randn(HIDDEN, FFN, seed=20 + rank))(ffn[:, :128]),
        "parts of another group": lambda: rlkd.linear_logp(h, rlkd.shard(head, 0, group=groups[4]), ids, group=group),
        "own part on one rank": mixed_sources,
        # load_full takes the layer's dtype and shape only
        "load_full float32": lambda: loaded(rlkd.ColumnParallelLinear(HIDDEN, FFN, group=group), up.float()),
        "load_full shape": lambda: loaded(rlkd.RowParallelLinear(FFN, HIDDEN, group=group), down.t()),
        # the switch
        "other x, check=layout": lambda: rlkd.column_parallel_linear(x * own, rlkd.shard(up, 0, group=group), group=group, check="layout"),
        "other x, CHECK=layout": lambda: with_module_check("layout", lambda: rlkd.column_parallel_linear(x * own, rlkd.shard(up, 0, group=group), group=group)),
        "other x on a second call, check=first": lambda: twice("first"),
        "other x on a second call, check=every": lambda: twice("every"),
    }


def rlk_logits(torch: Any, experts: dict[str, Any]) -> Any:
    """The router's logits of the sparse block's tokens (det_linear)."""
    import rlkernels as rlk

    return rlk.det_linear(experts["x"], experts["router"])


def outcomes(cases: dict[str, Any]) -> dict[str, str]:
    """Each case's outcome on this rank: ``accepted``, or the error's type and message."""
    out = {}
    for name, call in cases.items():
        try:
            call()
        except (ValueError, TypeError, RuntimeError) as exc:
            out[name] = f"{type(exc).__name__}: {exc}"
        else:
            out[name] = "accepted"
    return out


def against_single_device(torch: Any, rlk: Any, rlkd: Any, group: Any) -> dict[str, Any]:
    """linear_logp at world size 1 (its logits kept for the backward, and computed again there) and the
    single-device op on the same inputs: values and gradients."""
    gen = torch.Generator().manual_seed(2)
    h = (torch.randn(40, HIDDEN, generator=gen)).to(torch.bfloat16)
    head = (torch.randn(VOCAB, HIDDEN, generator=gen) * 0.3).to(torch.bfloat16)
    ids = torch.randint(0, VOCAB, (40,), generator=gen)
    ids[3] = -100
    out = {}
    keep = rlkd.KEEP_LOGITS_BYTES
    for name, fn in (("distributed", lambda *a: rlkd.linear_logp(*a, group=group)), ("single", lambda *a: rlk.linear_logp(*a)[:2]),
                     ("recomputed", lambda *a: rlkd.linear_logp(*a, group=group))):
        rlkd.KEEP_LOGITS_BYTES = 0 if name == "recomputed" else keep  # the backward computes the logits again
        hh, ww = h.clone().requires_grad_(True), head.clone().requires_grad_(True)
        lp, entropy = fn(hh, ww, ids)
        (lp.sum() + 0.5 * entropy.sum()).backward()
        out[name] = {"lp": lp.detach(), "entropy": entropy.detach(), "grad h": hh.grad, "grad weight": ww.grad}
    rlkd.KEEP_LOGITS_BYTES = keep
    out["lp only"] = lp_only_with_an_infinite_logit(torch, rlk, rlkd, group)
    return out


def lp_only_with_an_infinite_logit(torch: Any, rlk: Any, rlkd: Any, group: Any) -> dict[str, Any]:
    """A loss of the log-probs alone, the entropy left as a metric, where one logit overflows to -inf
    in float32 (h[2, 0] * head[5, 0] = -1e40; column 0 is zero elsewhere, so every other logit is
    ordinary).  That logit's probability is 0, so the entropy and the gradients are finite; its
    terms, 0 * inf = NaN as written, must reach neither.  With the float64 autograd reference on the
    same inputs, where nothing overflows."""
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(8, HIDDEN, generator=gen).to(torch.bfloat16)
    head = (torch.randn(VOCAB, HIDDEN, generator=gen) * 0.3).to(torch.bfloat16)
    h[:, 0], head[:, 0] = 0, 0
    h[2, 0], head[5, 0] = 1e20, -1e20
    ids = torch.randint(0, VOCAB, (8,), generator=gen)
    hh, ww = h.clone().requires_grad_(True), head.clone().requires_grad_(True)
    lp, entropy = rlkd.linear_logp(hh, ww, ids, group=group)
    lp.sum().backward()
    h64, w64 = h.double().requires_grad_(True), head.double().requires_grad_(True)
    logprobs = torch.log_softmax(h64 @ w64.t(), dim=1)
    lp64 = logprobs.gather(1, ids.unsqueeze(1)).squeeze(1)
    lp64.sum().backward()
    entropy64 = -(logprobs.exp() * logprobs).sum(dim=1)
    overflowed = bool(torch.isneginf(rlk.det_linear(h, head, None, out_fp32=True)[2, 5]))
    return {"lp": lp.detach(), "entropy": entropy.detach(), "grad h": hh.grad, "grad weight": ww.grad, "overflowed": overflowed,
            "reference": {"lp": lp64.detach(), "entropy": entropy64.detach(), "grad h": h64.grad, "grad weight": w64.grad}}


def main(rank: int, world: int, init_file: str, package: str, out: str, layouts: tuple[int, ...]) -> None:
    """Rank ``rank`` of ``world``; for each tensor-parallel size in ``layouts``, ranks [0, size) form a
    process group and run the GRPO step on it, with the fixed-order combine and, at the largest
    size, with all_reduce.  Every rank joins every group's creation, as torch.distributed requires."""
    began = time.monotonic()
    try:
        sys.path.insert(0, package)
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        import rlkernels as rlk
        import rlkernels.distributed as rlkd

        timings = {"import": time.monotonic() - began}
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
        try:
            groups = {size: dist.new_group(list(range(size))) for size in layouts}
            three = dist.new_group([0, 1, 2])  # not a power of two: refused
            full = full_weights(torch)
            for size in layouts:
                if rank >= size:
                    continue
                group = groups[size]
                torch.save(helpers(torch, rlkd, group), Path(out) / f"tp{size}-helpers-rank{rank}.pt")
                for reduce in ("tree", "all_reduce") if size == max(layouts) else ("tree",):
                    params = {}
                    for name, weight in full.items():
                        dim = split_of(name)
                        params[name] = (weight.clone() if dim is None else rlkd.shard(weight, dim, group=group)).requires_grad_(True)
                    step = time.monotonic()
                    torch.save(grpo_step(torch, rlk, rlkd, params, reduce, group), Path(out) / f"tp{size}-{reduce}-rank{rank}.pt")
                    timings[f"tp{size} {reduce}"] = time.monotonic() - step
                experts = moe_weights(torch)
                for combine in ("gather", "all_reduce") if size == max(layouts) else ("gather",):
                    torch.save(moe_step(torch, rlk, rlkd, experts, combine, group), Path(out) / f"ep{size}-{combine}-rank{rank}.pt")
            if 2 in groups and rank < 2:
                torch.save(outcomes(disagreements(torch, rlkd, groups, rank)), Path(out) / f"tp2-disagreements-rank{rank}.pt")
            if rank == 0:
                torch.save(refusals(torch, rlkd, groups[min(layouts)], three), Path(out) / "refusals.pt")
                torch.save(against_single_device(torch, rlk, rlkd, groups[min(layouts)]), Path(out) / "single.pt")
                torch.save(moe_single_device(torch, rlk, moe_weights(torch)), Path(out) / "moe-single.pt")
            (Path(out) / f"seconds-rank{rank}.txt").write_text(repr({k: round(v, 2) for k, v in timings.items()}))
            dist.barrier()
        finally:
            dist.destroy_process_group()
    except BaseException:
        (Path(out) / f"error-rank{rank}.txt").write_text(traceback.format_exc())
        raise
