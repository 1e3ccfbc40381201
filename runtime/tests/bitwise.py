"""Bitwise comparison of tensors: integer views of their bits, so -0.0 is not +0.0 and a NaN
equals only the same NaN (``torch.equal`` says otherwise for both).  The contract suite's, and
the project's tests' (``tests/bitwise.py`` reads this file): one definition."""

from __future__ import annotations

import torch


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers, on the CPU (its element size picks the integer type; a bool
    tensor's bytes as uint8, an integer tensor as it is)."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bool:
        return tensor.view(torch.uint8)
    if tensor.is_floating_point():
        return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])
    return tensor


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, same dtype and the same bits."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(bits(a), bits(b)))
