"""The sizes the contract tests hold each kernel to, taken from the kernel's tiles.

Batch sizes 1, t-1, t and t+1 for each row tile t, then at least 2*t+3 and 256 rows; chunk
splits on either side of a tile boundary; padding past the next boundary; a reduction extent
that runs more than stages + 1 steps with a ragged tail; for packed sequences, lengths on either
side of the reduction's block, and for a paged cache, block sizes on either side of it.  A kernel
whose work changed shape past one of its tiles, between calls or between platforms therefore
fails its tests.
"""

from __future__ import annotations

from .interchange import interchange
from .model import NativeKernel, OpSpec

KernelSizes = interchange.KernelSizes
"""Declared with the package's data files: contract_cases.json carries it as it is."""


def tile_values(kernel: NativeKernel, values: tuple[int | str, ...]) -> list[int]:
    """Tile extents with param names resolved (``contracts`` has checked that each names an int param)."""
    return [int(kernel.params[v]) if isinstance(v, str) else v for v in values]


def ragged_extent(op: OpSpec, step: int, stages: int) -> int:
    """stages + 2 whole steps and a tail shorter than a step, where the dimension's constraints allow one."""
    assert op.reduction is not None
    multiple = max((c.multiple_of or 1 for c in op.constraints if c.dim == op.reduction.dim), default=1)
    # About half a step, so a vectorised body and a scalar tail both run.
    start = -(-(step // 2 + 1) // multiple) * multiple
    tail = next((t for t in range(start, step, multiple) if t % step), 0)
    return step * (stages + 2) + tail


def kernel_sizes(op: OpSpec, kernel: NativeKernel) -> KernelSizes:
    """The sizes ``kernel``'s contract tests use."""
    rows = tile_values(kernel, kernel.tiles.rows if kernel.tiles else ())
    sizes = {1} | {size for t in rows for size in (t - 1, t, t + 1) if size >= 1}
    total = max(2 * max(rows, default=1) + 3, 256)
    chunks = tuple(sorted({c for t in rows for c in (t - 1, t + 1) if 1 <= c < total}))
    extents: dict[str, int] = {}
    steps = tile_values(kernel, kernel.tiles.reduction if kernel.tiles else ())
    if op.reduction is not None and steps and kernel.tiles is not None:
        extents[op.reduction.dim] = ragged_extent(op, max(steps), tile_values(kernel, (kernel.tiles.stages,))[0])
    lengths: tuple[int, ...] = ()
    block_sizes: tuple[int, ...] = ()
    if op.tests.sequences is not None or op.tests.paged is not None:
        # Packed sequences cross the reduction's block: the extents go into the sequences'
        # lengths (their offsets must add up), not into the packed dimension.
        block = max(steps, default=1)
        lengths = tuple(sorted({1, 2 * block + 3} | {n for n in (block - 1, block, block + 1) if n >= 1}))
        extents = {}
    if op.tests.paged is not None:
        # A paged cache's blocks smaller and larger than the reduction's block, and one that is
        # not a multiple of it: a sequence's bits may depend on none of them.
        block = max(steps, default=1)
        block_sizes = tuple(sorted({n for n in (1, block // 4, block + block // 2, 2 * block) if n >= 1}))
    return KernelSizes(
        guarantees=tuple(sorted(g.value for g in kernel.guarantees)),
        batch_sizes=tuple(sorted(sizes | {total})) if rows else (),
        chunks=chunks,
        pad_by=max(rows, default=1) + 1,
        extents=extents,
        lengths=lengths,
        block_sizes=block_sizes,
    )
