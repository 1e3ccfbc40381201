"""Bitwise comparison of tensors for the project's tests: integer views of the bits, so -0.0 is
not +0.0 and a NaN equals only the same NaN (``torch.equal`` says otherwise for both)."""

from __future__ import annotations

from typing import Any


def bits(t: Any) -> Any:
    """The integer view of a tensor's bits (its element size picks the integer type)."""
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        return t
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same_bits(a: Any, b: Any) -> bool:
    """Same shape, same dtype and the same bits."""
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(bits(a), bits(b)))
