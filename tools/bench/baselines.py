"""The PyTorch code an op's spec may name as its benchmark baseline (``bench.baseline.torch``).

A closed vocabulary: generator/model.py's ``TorchBaseline`` lists these names and nothing else, so
a spec chooses among them and never names code to run.  Each takes the op's arguments in the spec's
order (None for an absent optional one) and its attributes by name, and returns one tensor: what
the op's first output is compared with.  ``code`` is what the report shows, with {0}, {1}, ...
standing for the spec's argument names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Baseline:
    code: str
    fn: Callable[..., Any]

    def shown(self, arg_names: tuple[str, ...]) -> str:
        return self.code.format(*arg_names)


def _linear(x, w, bias=None, **_):
    import torch.nn.functional as F

    return F.linear(x, w, bias)


def _matmul_tn(a, b, **_):
    return a.t() @ b


def _silu_mul(g, u, **_):
    import torch.nn.functional as F

    return F.silu(g) * u


def _silu(x, **_):
    import torch.nn.functional as F

    return F.silu(x)


def _rms_norm(x, w, eps=1e-6, **_):
    import torch.nn.functional as F

    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _log_softmax_gather(logits, ids, **_):
    import torch

    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, None]).squeeze(1)


def _linear_log_softmax_gather(h, w, ids, **_):
    import torch
    import torch.nn.functional as F

    return torch.log_softmax(F.linear(h, w).float(), -1).gather(-1, ids[:, None]).squeeze(1)


def _embedding(w, ids, **_):
    import torch.nn.functional as F

    return F.embedding(ids, w)


def _rotary_llama(x, positions, **_):
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


def _sdpa_causal(q, k, v, *_offsets, **_):
    """One causal sequence of every row ([tokens, heads, head dim] in, as the op takes them)."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True).transpose(0, 1)


BASELINES: dict[str, Baseline] = {
    "linear": Baseline("F.linear({0}, {1})", _linear),
    "matmul_tn": Baseline("{0}.t() @ {1}", _matmul_tn),
    "silu_mul": Baseline("F.silu({0}) * {1}", _silu_mul),
    "silu": Baseline("F.silu({0})", _silu),
    "rms_norm": Baseline("F.rms_norm({0}, (H,), {1}, 1e-6)", _rms_norm),
    "log_softmax_gather": Baseline("torch.log_softmax({0}.float(), -1).gather(-1, {1}[:, None])", _log_softmax_gather),
    "linear_log_softmax_gather": Baseline("torch.log_softmax(F.linear({0}, {1}).float(), -1).gather(-1, {2}[:, None])", _linear_log_softmax_gather),
    "embedding": Baseline("F.embedding({1}, {0})", _embedding),
    "rotary_llama": Baseline("x * cos + rotate_half(x) * sin, cos and sin from the positions (transformers' Llama)", _rotary_llama),
    "sdpa_causal": Baseline("F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), one sequence", _sdpa_causal),
}
