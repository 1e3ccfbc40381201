# Copied from runtime/rlkernels/_references.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""PyTorch reference implementations: the definition each op's kernels are tested
against.  Plain PyTorch in float32; never a backend (they make no guarantees)."""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F


def _in_order(offsets: list[int]) -> bool:
    """Whether offsets never decrease: out of order, a row may lie in two sequences, so no row has one."""
    return all(a <= b for a, b in pairwise(offsets))


def _sequences(cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, total_q: int, total_k: int) -> list[tuple[int, int, int, int]]:
    """(q0, q1, k0, k1) of every sequence whose ranges lie in order inside the packed tensors; none
    while either offsets array is out of order."""
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if not (_in_order(cq) and _in_order(ck)):
        return []
    return [
        (cq[b], cq[b + 1], ck[b], ck[b + 1])
        for b in range(len(cq) - 1)
        if 0 <= cq[b] <= cq[b + 1] <= total_q and 0 <= ck[b] <= ck[b + 1] <= total_k
    ]


def _attention_scale(scale: float, head_dim: int) -> float:
    return scale if scale != 0.0 else (head_dim**-0.5 if head_dim > 0 else 1.0)


def _visible(queries: int, keys: int, causal: bool, window: int) -> torch.Tensor:
    """[queries, keys]: whether query i (at key position keys - queries + i) sees key j."""
    position = (keys - queries) + torch.arange(queries)[:, None]
    j = torch.arange(keys)[None, :]
    seen = torch.ones(queries, keys, dtype=torch.bool)
    if causal:
        seen &= j <= position
    if window >= 0:
        seen &= j >= position - window
    return seen


def _per_query_head(x: torch.Tensor, group: int) -> torch.Tensor:
    """[T, HK, D] -> [T, HK * group, D]: each key head repeated for the query heads it serves."""
    return x.repeat_interleave(group, dim=1)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
    scale: float = 0.0, causal: bool = True, window: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax attention per sequence, in float64; o 0 and lse -inf for a query that sees
    no key, NaN for rows no valid sequence holds."""
    total_q, heads, head_dim = q.shape
    group = heads // k.shape[1] if k.shape[1] else 1
    s_scale = _attention_scale(scale, head_dim)
    o = torch.full(q.shape, float("nan"), dtype=torch.float64)
    lse = torch.full((total_q, heads), float("nan"), dtype=torch.float64)
    for q0, q1, k0, k1 in _sequences(cu_seqlens_q, cu_seqlens_k, total_q, k.shape[0]):
        qs = q[q0:q1].double()
        ks = _per_query_head(k[k0:k1].double(), group)
        vs = _per_query_head(v[k0:k1].double(), group)
        seen = _visible(q1 - q0, k1 - k0, causal, window)
        scores = torch.einsum("ihd,jhd->hij", qs, ks) * s_scale
        scores = scores.masked_fill(~seen, float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)  # -inf where no key is seen
        weights = torch.where(seen, torch.exp(scores - torch.where(torch.isinf(row_lse), 0.0, row_lse)[..., None]), 0.0)
        o[q0:q1] = torch.einsum("hij,jhd->ihd", weights, vs)
        lse[q0:q1] = row_lse.transpose(0, 1)
    return o.float(), lse.float().detach()


def attention_backward(
    grad_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, scale: float = 0.0, causal: bool = True, window: int = -1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of attention from the given o and lse, in float64 (the flash-attention backward's formulas)."""
    total_q, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads if kv_heads else 1
    s_scale = _attention_scale(scale, head_dim)
    dq = torch.full(q.shape, float("nan"), dtype=torch.float64)
    dk = torch.full(k.shape, float("nan"), dtype=torch.float64)
    dv = torch.full(v.shape, float("nan"), dtype=torch.float64)
    for q0, q1, k0, k1 in _sequences(cu_seqlens_q, cu_seqlens_k, total_q, k.shape[0]):
        qs, dos, os_ = q[q0:q1].double(), grad_o[q0:q1].double(), o[q0:q1].double()
        ks = _per_query_head(k[k0:k1].double(), group)
        vs = _per_query_head(v[k0:k1].double(), group)
        seen = _visible(q1 - q0, k1 - k0, causal, window)
        scores = torch.einsum("ihd,jhd->hij", qs, ks) * s_scale
        p = torch.where(seen, torch.exp(scores - lse[q0:q1].double().transpose(0, 1)[..., None]), 0.0)
        dp = torch.einsum("ihd,jhd->hij", dos, vs)
        delta = (dos * os_).sum(-1).transpose(0, 1)[..., None]
        ds = torch.where(seen, p * (dp - delta), 0.0)
        dq[q0:q1] = s_scale * torch.einsum("hij,jhd->ihd", ds, ks)
        per_head_k = s_scale * torch.einsum("hij,ihd->jhd", ds, qs)
        per_head_v = torch.einsum("hij,ihd->jhd", p, dos)
        dk[k0:k1] = per_head_k.reshape(k1 - k0, kv_heads, group, head_dim).sum(2)
        dv[k0:k1] = per_head_v.reshape(k1 - k0, kv_heads, group, head_dim).sum(2)
    return dq.float(), dk.float(), dv.float()

def _owner(starts: list[int], row: int) -> int | None:
    """The sequence of query row ``row``: the last b with starts[b] <= row, found by the kernels'
    bisection (for offsets in order, the one sequence whose range holds the row)."""
    if len(starts) < 2 or starts[0] > row:
        return None
    lo, hi = 0, len(starts) - 2
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2
        if starts[mid] <= row:
            lo = mid
        else:
            hi = mid - 1
    return lo


def paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor, scale: float = 0.0, causal: bool = True, window: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """attention over each sequence's keys gathered from the paged caches, key j of sequence b
    being row j % BS of block block_table[b, j / BS], in float64.  A query row belongs to the
    sequence the bisection over query_start_loc finds (``_owner``); NaN rows (o and lse) where that
    sequence is invalid (its queries out of order or past TQ, fewer keys than queries, more keys
    than its row of the block table holds) or does not hold the row, and where a key the query
    sees lies in a block outside [0, NB); every row NaN while query_start_loc is out of order."""
    total_q, heads = q.shape[0], q.shape[1]
    blocks, block_size = k_cache.shape[0], k_cache.shape[1]
    o = torch.full(q.shape, float("nan"))
    lse = torch.full((total_q, heads), float("nan"))
    starts, lengths, table = query_start_loc.tolist(), seq_lens.tolist(), block_table.tolist()
    if not _in_order(starts[: len(lengths) + 1]):  # the kernels read B + 1 offsets
        return o, lse.detach()
    done: dict[int, tuple[int, torch.Tensor, torch.Tensor]] = {}
    for b in range(len(starts) - 1):
        q0, q1, keys = starts[b], starts[b + 1], lengths[b]
        if not (0 <= q0 <= q1 <= total_q and q1 - q0 <= keys <= block_table.shape[1] * block_size):
            continue
        ids = torch.tensor([table[b][j // block_size] for j in range(keys)], dtype=torch.int64)
        bad = (ids < 0) | (ids >= blocks)
        rows = torch.where(bad, 0, ids) * block_size + torch.arange(keys) % block_size
        k, v = (
            cache.reshape(blocks * block_size, *cache.shape[2:])[rows] if blocks else cache.new_zeros((keys, *cache.shape[2:])) for cache in (k_cache, v_cache)
        )
        seq_o, seq_lse = attention(q[q0:q1], k, v, torch.tensor([0, q1 - q0]), torch.tensor([0, keys]), scale, causal, window)
        poisoned = (_visible(q1 - q0, keys, causal, window) & bad[None, :]).any(-1)
        done[b] = (q0, torch.where(poisoned[:, None, None], float("nan"), seq_o), torch.where(poisoned[:, None], float("nan"), seq_lse))
    for row in range(total_q):
        owner = _owner(starts, row)
        if owner is not None and owner in done and row < starts[owner + 1]:
            q0, seq_o, seq_lse = done[owner]
            o[row], lse[row] = seq_o[row - q0], seq_lse[row - q0]
    return o, lse.detach()


def column_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)

def det_gemm(a: torch.Tensor, b: torch.Tensor, out_fp32: bool = False) -> torch.Tensor:
    return a @ b

def det_gemm_ktree(a: torch.Tensor, b: torch.Tensor, leaf: int = 32) -> torch.Tensor:
    """Leaves of `leaf` products summed in float32, rounded to bf16, combined by mid-split bf16 adds."""
    leaves = [(a[:, k : k + leaf].float() @ b[k : k + leaf].float()).to(torch.bfloat16) for k in range(0, a.shape[1], leaf)]

    def combine(lo: int, hi: int) -> torch.Tensor:
        if hi == lo:  # K = 0: no leaves, an empty sum
            return torch.zeros(a.shape[0], b.shape[1], dtype=torch.bfloat16)
        if hi - lo == 1:
            return leaves[lo]
        mid = lo + (hi - lo) // 2
        return combine(lo, mid) + combine(mid, hi)  # a bf16 add: float32 sum rounded to bf16

    return combine(0, len(leaves)).float()

def det_gemm_nt(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, out_fp32: bool = False) -> torch.Tensor:
    return F.linear(a, b, bias)

def det_gemm_tn(a: torch.Tensor, b: torch.Tensor, out_fp32: bool = False) -> torch.Tensor:
    return a.T @ b

def embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """weight[ids]; a NaN row where ids is outside [0, V)."""
    valid = (ids >= 0) & (ids < weight.shape[0])
    if weight.shape[0] > 0:
        rows = weight[torch.where(valid, ids, torch.zeros_like(ids))]
    else:  # no row to pick: every id is outside the table
        rows = weight.new_zeros((*ids.shape, weight.shape[1]))
    # where() routes gradients by selection: the NaN rows send nothing back to the table.
    return torch.where(valid.unsqueeze(-1), rows, torch.full_like(rows, float("nan")))

def embedding_backward(grad_y: torch.Tensor, ids: torch.Tensor, weight: torch.Tensor, out_fp32: bool = False) -> torch.Tensor:
    """The sum of grad_y's rows into the rows their ids select, in float64 (returned as float32);
    ids outside [0, V) add nothing."""
    valid = (ids >= 0) & (ids < weight.shape[0])
    grad = torch.zeros(weight.shape, dtype=torch.float64)
    return grad.index_add(0, ids[valid], grad_y[valid].double()).float()


def _grpo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, correction=0, keepdim=True)
    return (rewards - mean) / std.clamp(min=1e-6)


def grpo_loss(
    ratio: torch.Tensor,
    kl: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.04,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked token mean of -min(ratio * A, clip(ratio) * A) + beta * kl, and the advantages A."""
    adv = _grpo_advantages(rewards)
    a = adv.unsqueeze(-1)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a)
    per_token = torch.where(mask, beta * kl - surrogate, torch.zeros_like(ratio))
    return per_token.sum() / mask.sum().clamp(min=1).float(), adv


def grpo_loss_backward(
    grad_loss: torch.Tensor,
    ratio: torch.Tensor,
    mask: torch.Tensor,
    adv: torch.Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.04,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of grpo_loss with respect to ratio and kl, given the advantages."""
    scale = grad_loss / mask.sum().clamp(min=1).float()
    a = adv.unsqueeze(-1)
    unclipped = ratio * a <= ratio.clamp(1 - eps_low, 1 + eps_high) * a
    zero = torch.zeros_like(ratio)
    grad_ratio = torch.where(mask & unclipped, -(scale * a), zero)
    grad_kl = torch.where(mask, (beta * scale).expand_as(ratio), zero)
    return grad_ratio, grad_kl


def linear_logp(
    h: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor, ignore_index: int = -100, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log_softmax(h @ weight.T / temperature)[r, ids[r]], the softmax's entropy and the logsumexp;
    0 for all three where ids is ignore_index, and an lp of NaN (with NaN gradients) where ids is
    any other value outside [0, V).  In float64, returned as float32."""
    logits = F.linear(h.double(), weight.double()) / temperature
    ignored = ids == ignore_index
    valid = (ids >= 0) & (ids < logits.shape[-1]) & ~ignored
    lse = torch.logsumexp(logits, dim=-1)
    logprobs = logits - lse.unsqueeze(-1)
    p = logprobs.exp()
    # A logit whose p is 0 adds 0 (p z goes to 0 with p), also one of -inf, where p z is NaN.
    entropy = lse - torch.where(p == 0, 0.0, p * logits).sum(dim=-1)
    if logits.shape[-1] > 0:
        picked = logits.gather(-1, torch.where(valid, ids, torch.zeros_like(ids)).unsqueeze(-1)).squeeze(-1)
    else:  # no column to pick
        picked = torch.zeros_like(lse)
    zero = torch.zeros_like(lse)
    # NaN that depends on the logits of the invalid rows only, so that their gradient is NaN too
    # (where() routes gradients by selection, so no NaN reaches the other rows).
    invalid = torch.where(valid | ignored, zero, lse) * float("nan")
    return (
        torch.where(ignored, zero, torch.where(valid, picked - lse, invalid)).float(),
        torch.where(ignored, zero, entropy).float(),
        torch.where(ignored, zero, lse).detach().float(),
    )


def linear_logp_backward(
    grad_lp: torch.Tensor,
    grad_entropy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor,
    ids: torch.Tensor,
    lse: torch.Tensor,
    entropy: torch.Tensor,
    ignore_index: int = -100,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """With z = h @ weight.T / temperature and the incoming gradients divided by the temperature,
    dz = grad_lp (onehot(ids) - p) - grad_entropy p (z - mu) with p = exp(z - lse) and
    mu = lse - entropy, the entropy's term left out of rows whose grad_entropy is 0 and of logits
    whose p is 0 (where it goes to 0 with p, and p (z - mu) is NaN for z = -inf); grad_h = dz @
    weight, grad_weight = dz.T @ h.  Rows of ignore_index add nothing, rows of any other id
    outside [0, V) are NaN.  In float64, returned as float32."""
    h, weight, grad_lp, grad_entropy, lse, entropy = (t.double() for t in (h, weight, grad_lp, grad_entropy, lse, entropy))
    logits = F.linear(h, weight) / temperature
    grad_lp, grad_entropy = grad_lp / temperature, grad_entropy / temperature
    ignored = ids == ignore_index
    valid = (ids >= 0) & (ids < logits.shape[-1]) & ~ignored
    onehot = (torch.arange(logits.shape[-1]) == ids.unsqueeze(-1)).to(logits.dtype)
    p = torch.exp(logits - lse.unsqueeze(-1))
    mu = (lse - entropy).unsqueeze(-1)
    from_entropy = grad_entropy.unsqueeze(-1) * (p * (logits - mu))
    dz = grad_lp.unsqueeze(-1) * (onehot - p) - torch.where((grad_entropy == 0).unsqueeze(-1) | (p == 0), 0.0, from_entropy)
    dz = torch.where(valid.unsqueeze(-1), dz, torch.full_like(dz, float("nan")))
    dz = torch.where(ignored.unsqueeze(-1), torch.zeros_like(dz), dz)
    return (dz @ weight).float(), (dz.T @ h).float()


def logp(logits: torch.Tensor, ids: torch.Tensor, ignore_index: int = -100, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """With the logits divided by the temperature (in float32, none at 1): logits[r, ids[r]] -
    logsumexp(logits[r]), and the logsumexp; 0 for both where ids is ignore_index, and an lp of NaN
    (with NaN gradients) where ids is any other value outside [0, V)."""
    if temperature != 1.0:
        logits = logits.float() / temperature
    ignored = ids == ignore_index
    valid = (ids >= 0) & (ids < logits.shape[-1]) & ~ignored
    lse = torch.logsumexp(logits, dim=-1)
    if logits.shape[-1] > 0:
        picked = logits.gather(-1, torch.where(valid, ids, torch.zeros_like(ids)).unsqueeze(-1)).squeeze(-1)
    else:  # no column to pick
        picked = torch.zeros_like(lse)
    zero = torch.zeros_like(lse)
    # NaN that depends on the logits of the invalid rows only, so that their gradient is NaN too
    # (where() routes gradients by selection, so no NaN reaches the other rows).
    invalid = torch.where(valid | ignored, zero, lse) * float("nan")
    return torch.where(ignored, zero, torch.where(valid, picked - lse, invalid)), torch.where(ignored, zero, lse).detach()


def logp_backward(
    grad_lp: torch.Tensor, logits: torch.Tensor, ids: torch.Tensor, lse: torch.Tensor, ignore_index: int = -100, temperature: float = 1.0
) -> torch.Tensor:
    """(grad_lp / t) * (onehot(ids) - exp(logits / t - lse)) for the temperature t, rows of
    ignore_index zero, rows of any other id outside [0, V) NaN."""
    if temperature != 1.0:
        logits, grad_lp = logits.float() / temperature, grad_lp / temperature
    ignored = ids == ignore_index
    valid = (ids >= 0) & (ids < logits.shape[-1]) & ~ignored
    onehot = (torch.arange(logits.shape[-1]) == ids.unsqueeze(-1)).to(logits.dtype)
    grad = grad_lp.unsqueeze(-1) * (onehot - torch.exp(logits - lse.unsqueeze(-1)))
    grad = torch.where(valid.unsqueeze(-1), grad, torch.full_like(grad, float("nan")))
    return torch.where(ignored.unsqueeze(-1), torch.zeros_like(grad), grad)

def pack(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x[mask]: the rows whose mask entry is true, in (b, s) order; and the sequences' offsets."""
    cu_seqlens = F.pad(mask.sum(dim=1).cumsum(dim=0), (1, 0))
    return x[mask], cu_seqlens


def ratio_kl(lp: torch.Tensor, old_lp: torch.Tensor, ref_lp: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """exp(lp - old_lp) and exp(d) - d - 1 (as expm1(d) - d) with d = ref_lp - lp, where mask; 0 elsewhere."""
    zero = torch.zeros_like(lp)
    ratio = torch.exp(torch.where(mask, lp - old_lp, zero))
    d = torch.where(mask, ref_lp - lp, zero)
    kl = torch.expm1(d) - d
    return torch.where(mask, ratio, zero), torch.where(mask, kl, zero)


def ratio_kl_backward(
    grad_ratio: torch.Tensor, grad_kl: torch.Tensor, lp: torch.Tensor, old_lp: torch.Tensor, ref_lp: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """grad_ratio * exp(lp - old_lp) - grad_kl * expm1(ref_lp - lp) where mask; 0 elsewhere."""
    zero = torch.zeros_like(lp)
    ratio = torch.exp(torch.where(mask, lp - old_lp, zero))
    kl_slope = torch.expm1(torch.where(mask, ref_lp - lp, zero))
    return torch.where(mask, grad_ratio * ratio - grad_kl * kl_slope, zero)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """y = x * rsqrt(mean(x^2) + eps) * w per row; also returns rstd."""
    rstd = torch.rsqrt(x.square().mean(dim=-1) + eps)
    return x * rstd[:, None] * w, rstd


def rms_norm_backward(
    grad_y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of rms_norm from the given rstd (not one recomputed from x)."""
    r = rstd[:, None]
    gw = grad_y * w
    c = (gw * x).sum(dim=-1, keepdim=True)
    dx = r * (gw - x * (c * r * r / x.shape[-1]))
    dw = (grad_y * (x * r)).sum(dim=0)
    return dx, dw


def _rope_cos_sin(position_ids: torch.Tensor, dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, in float64, of rope's float32 angles: [rows, dim / 2]."""
    exponent = torch.arange(0, dim, 2, dtype=torch.float32) / dim  # 2i/D, rounded once in float32
    ln_theta = torch.tensor(theta, dtype=torch.float32).double().log()
    inv_freq = torch.exp(-exponent.double() * ln_theta).float()  # theta^(-2i/D), rounded once
    angle = (position_ids.float()[:, None] * inv_freq[None, :]).double()  # the float32 product
    return angle.cos(), angle.sin()


def _rope_rotate(x: torch.Tensor, position_ids: torch.Tensor, theta: float, interleaved: bool, sign: float) -> torch.Tensor:
    """x rotated by the angles of rope times sign (+1 or -1), in float64."""
    cos, sin = _rope_cos_sin(position_ids, x.shape[-1], theta)
    cos, sin = cos[:, None, :], sign * sin[:, None, :]
    wide = x.double()
    half = x.shape[-1] // 2
    x1, x2 = (wide[..., 0::2], wide[..., 1::2]) if interleaved else (wide[..., :half], wide[..., half:])
    y1, y2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    y = torch.stack([y1, y2], dim=-1).flatten(-2) if interleaved else torch.cat([y1, y2], dim=-1)
    return y.to(x.dtype)


def rope(x: torch.Tensor, position_ids: torch.Tensor, theta: float = 10000.0, interleaved: bool = False) -> torch.Tensor:
    """Rotary embedding: pairs (i, i + D/2), or (2i, 2i + 1) when interleaved, of every head of row n
    rotated by position_ids[n] * theta^(-2i/D); the float32 angles of the kernels, the rest in float64."""
    return _rope_rotate(x, position_ids, theta, interleaved, 1.0)


def rope_backward(grad_y: torch.Tensor, position_ids: torch.Tensor, theta: float = 10000.0, interleaved: bool = False) -> torch.Tensor:
    """The transposed rotation of rope: grad_y rotated by the negated angles, in float64."""
    return _rope_rotate(grad_y, position_ids, theta, interleaved, -1.0)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """1 / (1 + exp(-x))."""
    return torch.sigmoid(x)


def sigmoid_backward(grad_y: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dy * (1 - y) * y, y = sigmoid(x) the forward's output."""
    return grad_y * (1 - y) * y


def silu(x: torch.Tensor) -> torch.Tensor:
    """x * sigmoid(x)."""
    return x * torch.sigmoid(x)


def silu_backward(grad_y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dy * s * (1 + x * (1 - s)), s = sigmoid(x)."""
    s = torch.sigmoid(x)
    return grad_y * (s * (1 + x * (1 - s)))


def softmax(logits: torch.Tensor) -> torch.Tensor:
    """torch.softmax of each row, in float32."""
    return torch.softmax(logits.float(), dim=-1)


def softmax_backward(grad_probs: torch.Tensor, probs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """probs * (grad_probs - sum over v of grad_probs * probs) in float32; logits give only the
    gradient's dtype."""
    return probs * (grad_probs - (grad_probs * probs).sum(dim=-1, keepdim=True))


def swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """silu(g) * u."""
    return g * torch.sigmoid(g) * u


def swiglu_backward(grad_y: torch.Tensor, g: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dg, du) of silu(g) * u."""
    s = torch.sigmoid(g)
    dg = grad_y * u * (s * (1 + g * (1 - s)))
    du = grad_y * (g * s)
    return dg, du


def unpack(packed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The inverse of pack: packed rows at the true positions of mask, zeros elsewhere."""
    x = packed.new_zeros((*mask.shape, packed.shape[-1]))
    return x.index_put((mask,), packed)
