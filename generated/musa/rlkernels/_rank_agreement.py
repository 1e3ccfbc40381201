# Copied from runtime/rlkernels/_rank_agreement.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""What the ranks of a tensor-parallel call must agree on, compared with one small all_gather.

A tensor-parallel call gives the bits of one device only when every rank holds an equal part of
whole leaves, the same replicated inputs, and its own part of the same full weight.  No rank can
see the others' inputs, so on a layer's first call every rank all-gathers one short int64 vector:
whether its own inputs passed its own checks, which call it is in, its sizes and settings, a
checksum of each replicated input, and where its part of the weight was cut from.  Every rank then
reads the same table and reaches the same verdict: all go on, or all raise (a rank whose own
inputs were bad raises its own error, the others a ``LayoutError`` naming it), so no rank is left
waiting in a collective the others abandoned.

The checksum (``digest``) is two sums over the bytes of the tensor's integer view, computed with
torch ops on the tensor's device: it tells apart the usual mistakes (another seed, another batch,
a stale copy), not deliberately crafted ones.

Kept free of the package's generated modules, so that its rules can be tested without a build.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.distributed as dist

Check = Literal["first", "every", "layout"]
"""``first``: sizes, settings, replicated inputs and the weights' sources, on the first call of
each layer.  ``every``: the same on every call (one small all_gather and a host synchronisation
per call).  ``layout``: sizes and settings only, on the first call of each layer."""
CHECKS: tuple[Check, ...] = ("first", "every", "layout")


def check_mode(check: object) -> None:
    """Refuse a check mode that is not one of CHECKS."""
    if check not in CHECKS:
        raise ValueError(f"check: expected one of {', '.join(repr(c) for c in CHECKS)}, got {check!r}")


class LayoutError(ValueError):
    """A shape, dtype, process group or input for which the result would depend on the parallel
    layout, or would differ between ranks."""


# --------------------------------------------------------------------------------------------
# The checksum
# --------------------------------------------------------------------------------------------

PRIME = 2_147_483_647
"""2^31 - 1: the sums are taken modulo this prime."""
PERIOD = 65_521
"""The largest prime below 2^16: byte i is weighted by (i mod PERIOD) + 1."""
ROWS = 64
"""Rows of PERIOD bytes summed per step: 4 MiB of bytes, a 32 MiB float64 temporary whatever the
tensor's size."""


def digest(tensor: torch.Tensor) -> torch.Tensor:
    """int64 [2] on the tensor's device: (sum of (b_i + 1), sum of (b_i + 1)(i mod PERIOD + 1)),
    both modulo PRIME, over the bytes b_i of the tensor's bits in row-major order.

    Changing one byte changes the first sum; swapping two different bytes less than PERIOD apart
    changes the second; the +1 makes zero bytes count, so the length counts too.  The bytes are
    laid out in rows of PERIOD, so that every row has the same weights and both sums of a step are
    one matrix product, rows [R, PERIOD] @ [ones, weights] [PERIOD, 2], read once; the +1s are
    added after, in closed form.  In float64 every partial sum is an integer below 2^53 (a row's
    weighted sum at most 255 x 65521 x 65522 / 2 < 2^39, a step's ROWS times that), so it is exact
    and does not depend on the order torch or the device adds in."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    weights = torch.arange(1, PERIOD + 1, dtype=torch.float64, device=raw.device)
    both = torch.stack([torch.ones_like(weights), weights], dim=1)
    total = torch.zeros(2, dtype=torch.int64, device=raw.device)
    whole = raw.numel() // PERIOD * PERIOD
    steps = [raw[start : min(start + ROWS * PERIOD, whole)].view(-1, PERIOD) for start in range(0, whole, ROWS * PERIOD)]
    if whole < raw.numel():
        steps.append(raw[whole:].view(1, -1))
    for step in steps:
        rows, columns = step.shape
        ones = torch.tensor([rows * columns, rows * columns * (columns + 1) // 2], dtype=torch.float64, device=raw.device)
        total += ((step.to(torch.float64) @ both[:columns]).sum(dim=0) + ones).to(torch.int64) % PRIME
    return total % PRIME


# --------------------------------------------------------------------------------------------
# Where a rank's part of a weight was cut from
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A part cut by ``shard`` (or ``load_full``): part ``part`` of ``parts`` along ``dim`` of a
    full tensor whose checksum is ``full``."""

    full: torch.Tensor
    dim: int
    part: int
    parts: int


_sources: dict[int, tuple[weakref.ref[torch.Tensor], Source]] = {}


def _forget_source(key: int) -> Callable[[weakref.ref[torch.Tensor]], None]:
    """A weakref callback: drop the entry when its tensor goes (ids are reused afterwards)."""

    def forget(ref: weakref.ref[torch.Tensor]) -> None:
        entry = _sources.get(key)
        if entry is not None and entry[0] is ref:
            del _sources[key]

    return forget


def record_source(tensor: torch.Tensor, source: Source) -> None:
    """Remember where ``tensor`` (this very object, while it lives) was cut from."""
    key = id(tensor)
    _sources[key] = (weakref.ref(tensor, _forget_source(key)), source)


def source_of(tensor: torch.Tensor) -> Source | None:
    entry = _sources.get(id(tensor))
    return entry[1] if entry is not None and entry[0]() is tensor else None


# --------------------------------------------------------------------------------------------
# The first call of a layer
# --------------------------------------------------------------------------------------------

_checked: dict[tuple[Any, ...], weakref.ref[torch.Tensor] | None] = {}
"""The layers checked so far: by call, group, check mode and weight (a weak reference to it), or
by call, group, check mode and a key of sizes for calls without a weight (``None``)."""


def _key(call: str, group: Any, check: object, anchor: object) -> tuple[Any, ...]:
    return (call, id(group), dist.get_world_size(group), repr(check), id(anchor) if isinstance(anchor, torch.Tensor) else anchor)


def _already_checked(key: tuple[Any, ...], anchor: object) -> bool:
    if key not in _checked:
        return False
    ref = _checked[key]
    return ref is None or ref() is anchor


def _forget_check(key: tuple[Any, ...]) -> Callable[[weakref.ref[torch.Tensor]], None]:
    def forget(ref: weakref.ref[torch.Tensor]) -> None:
        if _checked.get(key) is ref:
            del _checked[key]

    return forget


def _mark_checked(key: tuple[Any, ...], anchor: object) -> None:
    _checked[key] = weakref.ref(anchor, _forget_check(key)) if isinstance(anchor, torch.Tensor) else None


def forget_checks(anchor: torch.Tensor) -> None:
    """Check the layers whose weight is ``anchor`` again on their next call (its values were replaced)."""
    for key in [k for k, ref in _checked.items() if ref is not None and ref() is anchor]:
        del _checked[key]


# --------------------------------------------------------------------------------------------
# What a call's ranks must agree on
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Same:
    """A number every rank must hold the same: a size (with ``leaf``: also a positive multiple of
    it, whole leaves of a tree) or a setting (with ``names``: its value's name by code)."""

    argument: str
    what: str
    value: int
    leaf: int = 0
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Replicated:
    """An input every rank must pass with the same bits; ``why`` says why it is replicated."""

    argument: str
    why: str
    tensor: torch.Tensor


@dataclass(frozen=True)
class Part:
    """This rank's part of a weight split along ``dim``: rank r must hold part r of the group's
    size, of the same full weight as the other ranks'."""

    argument: str
    tensor: torch.Tensor
    dim: int


@dataclass(frozen=True)
class Terms:
    sizes: tuple[Same, ...]
    replicated: tuple[Replicated, ...] = ()
    part: Part | None = None


CALLS = ("column_parallel_linear", "row_parallel_linear", "linear_logp", "gather_last_dim", "scatter_last_dim", "expert_parallel_experts")
VECTOR = 40
"""int64 entries each rank sends: the same number for every call, so ranks in different calls
still meet in one all_gather and are told so."""


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def size_problem(same: Same, values: Sequence[int]) -> str | None:
    """What is wrong with the values ``same`` takes on ranks 0, 1, ... (None: nothing)."""
    unequal = [rank for rank, value in enumerate(values) if value != values[0]]
    partial = [rank for rank, value in enumerate(values) if same.leaf and (value <= 0 or value % same.leaf)]
    if not unequal and not partial:
        return None

    def shown(value: int) -> str:
        return repr(same.names[value]) if same.names and 0 <= value < len(same.names) else str(value)

    expected = f"{same.what} to be the same on every rank" + (f" and a positive multiple of {same.leaf} (whole leaves of the tree)" if same.leaf else "")
    got = ", ".join(f"{shown(value)} on rank {rank}" for rank, value in enumerate(values))
    why = []
    if unequal:
        why.append(f"{_ranks(unequal)} {'differs' if len(unequal) == 1 else 'differ'} from rank 0")
    if partial:
        why.append(f"{_ranks(partial)} {'holds' if len(partial) == 1 else 'hold'} no whole number of leaves")
    return f"{same.argument}: expected {expected}, got {got} ({'; '.join(why)})"


def replicated_problem(replicated: Replicated, digests: Sequence[tuple[int, int]]) -> str | None:
    """What is wrong with the checksums ``replicated`` has on ranks 0, 1, ... (None: nothing)."""
    unlike = [rank for rank, d in enumerate(digests) if d != digests[0]]
    if not unlike:
        return None
    return (
        f"{replicated.argument}: expected the same bits on every rank ({replicated.why}), got bits on {_ranks(unlike)} "
        f"that differ from rank 0's (checksums of the integer view of the bits: "
        + ", ".join(f"{d[0]:08x}{d[1]:08x} on rank {rank}" for rank, d in enumerate(digests))
        + ")"
    )


def part_problem(part: Part, sources: Sequence[tuple[int, int, int, tuple[int, int]] | None]) -> str | None:
    """What is wrong with where the ranks' parts were cut from: per rank (dim, part, parts, checksum
    of the full weight), or None for a part not cut by shard or load_full.  None: nothing."""
    world = len(sources)
    unknown = [rank for rank, s in enumerate(sources) if s is None]
    if unknown:
        if len(unknown) == world:
            return None  # every rank cut its own part: only the sizes can be compared
        known = [rank for rank in range(world) if rank not in unknown]
        return (
            f"{part.argument}: expected every rank's part cut the same way, got parts cut by shard or load_full on {_ranks(known)} "
            f"and parts of their own on {_ranks(unknown)}: the sources of the parts cannot be compared (cut them all with "
            f"shard or load_full, or pass check='layout' to compare sizes only)"
        )
    known_sources = [s for s in sources if s is not None]
    misplaced = [rank for rank, s in enumerate(known_sources) if (s[0], s[1], s[2]) != (part.dim, rank, world)]
    if misplaced:
        got = ", ".join(f"part {s[1]} of {s[2]} along dim {s[0]} on rank {rank}" for rank, s in enumerate(known_sources))
        return f"{part.argument}: expected rank r to hold part r of {world} along dim {part.dim} (cut by shard in this group), got {got}"
    unlike = [rank for rank, s in enumerate(known_sources) if s[3] != known_sources[0][3]]
    if unlike:
        return (
            f"{part.argument}: expected every rank's part cut from the same full weight, got parts of another full weight on "
            f"{_ranks(unlike)} than on rank 0 (checksums of the full weights: "
            + ", ".join(f"{s[3][0]:08x}{s[3][1]:08x} on rank {rank}" for rank, s in enumerate(known_sources))
            + ")"
        )
    return None


def _vector(call: str, terms: Terms | None, digests: bool, device: torch.device) -> torch.Tensor:
    if terms is None:  # this rank's own inputs were refused: it says so and sends nothing else
        return torch.tensor([1, CALLS.index(call)] + [0] * (VECTOR - 2), dtype=torch.int64, device=device)
    head = [0, CALLS.index(call)] + [same.value for same in terms.sizes]
    pieces = [torch.tensor(head, dtype=torch.int64, device=device)]
    zero = torch.zeros(2, dtype=torch.int64, device=device)
    for replicated in terms.replicated:
        pieces.append(digest(replicated.tensor).to(device) if digests else zero)
    if terms.part is not None:
        source = source_of(terms.part.tensor) if digests else None
        if source is None:
            pieces.append(torch.zeros(6, dtype=torch.int64, device=device))
        else:
            pieces.append(torch.tensor([1, source.dim, source.part, source.parts], dtype=torch.int64, device=device))
            pieces.append(source.full.to(device))
    vector = torch.cat(pieces)
    if vector.numel() > VECTOR:
        raise AssertionError(f"{call}: {vector.numel()} entries to agree on, more than VECTOR ({VECTOR})")
    return torch.cat([vector, torch.zeros(VECTOR - vector.numel(), dtype=torch.int64, device=device)])


def _gather(vector: torch.Tensor, group: Any) -> list[list[int]]:
    world = dist.get_world_size(group)
    if world == 1:
        return [vector.tolist()]
    parts = [torch.empty_like(vector) for _ in range(world)]
    dist.all_gather(parts, vector, group=group)
    return torch.stack(parts).cpu().tolist()


def verdict(call: str, terms: Terms, digests: bool, table: Sequence[Sequence[int]]) -> str | None:
    """The first thing the ranks' vectors (``table``, rank by rank) disagree on, as a message; the
    same on every rank, since every rank reads the same table.  None: they agree."""
    codes = [row[1] for row in table]
    if any(code != CALLS.index(call) for code in codes):
        got = ", ".join(f"{CALLS[code] if 0 <= code < len(CALLS) else code} on rank {rank}" for rank, code in enumerate(codes))
        return f"{call}: expected every rank in the same call, got {got}"
    at = 2
    for index, same in enumerate(terms.sizes):
        problem = size_problem(same, [row[at + index] for row in table])
        if problem:
            return problem
    at += len(terms.sizes)
    for replicated in terms.replicated:
        if digests:
            problem = replicated_problem(replicated, [(row[at], row[at + 1]) for row in table])
            if problem:
                return problem
        at += 2
    if terms.part is not None and digests:
        sources = [(row[at + 1], row[at + 2], row[at + 3], (row[at + 4], row[at + 5])) if row[at] else None for row in table]
        return part_problem(terms.part, sources)
    return None


def agree(call: str, group: Any, check: object, anchor: object, device: torch.device, terms_of: Callable[[], Terms]) -> None:
    """Run this rank's own checks (``terms_of``, which raises on bad input) and, on the first call of
    the layer ``anchor`` (its weight, or a key) under ``check`` -- or on every call with ``every`` --
    compare the terms across ``group`` in one all_gather.  Every rank raises if any rank's input is
    refused or the ranks disagree; a layer is marked checked only when they agree."""
    key = _key(call, group, check, anchor)
    error: Exception | None = None
    terms: Terms | None = None
    try:
        check_mode(check)
        terms = terms_of()
    except (ValueError, TypeError) as exc:
        error = exc
    if check != "every" and _already_checked(key, anchor):
        if error is not None:
            raise error
        return
    digests = check != "layout"
    table = _gather(_vector(call, terms, digests, device), group)
    refused = [rank for rank, row in enumerate(table) if row[0]]
    if error is not None:
        raise error
    if refused:
        raise LayoutError(
            f"{call}: {_ranks(refused)} refused {'its' if len(refused) == 1 else 'their'} own inputs (see the error raised there); "
            f"every rank stops rather than wait in a collective those ranks left"
        )
    assert terms is not None
    problem = verdict(call, terms, digests, table)
    if problem:
        raise LayoutError(problem)
    if check != "every":
        _mark_checked(key, anchor)
