# Copied from runtime/tests/test_sequences.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Sequences and paging: packed sequences (offsets) and paged KV caches. A sequence's rows do not
depend on what is packed or stepped with it, on its blocks' placement or size; chunked prefill
and decode give the bits of one pass; offsets out of order give NaN rows."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from cases import CASES, OpCase, Outputs, dtypes, kernels, needs_guarantee, offsets, only, parametrize, sequence_dims, unnamed, variants

# ---------------------------------------------------------------------------- packed sequences
# A sequence's rows must not depend on the sequences packed with it, their number or lengths;
# the lengths cross the kernel's reduction block and include an empty sequence.


def _one_sequence(case: OpCase, inputs: list[Any], lengths: dict[str, list[int]], index: int) -> list[Any]:
    """Sequence ``index`` of packed ``inputs`` on its own: its rows, and offsets [0, length]."""
    starts = {dim: sum(lengths[dim][:index]) for dim in case.offsets}
    alone = []
    for (name, _, shape, _, _), tensor in zip(case.args, inputs):
        dim = next((d for d, arg in case.offsets.items() if arg == name), None)
        if dim is not None:
            alone.append(torch.tensor([0, lengths[dim][index]], dtype=tensor.dtype, device=tensor.device))
        elif shape[:1] and shape[0] in case.offsets:
            alone.append(tensor.narrow(0, starts[shape[0]], lengths[shape[0]][index]).contiguous())
        else:
            alone.append(tensor)
    return alone


def _rows_of(case: OpCase, outputs: Outputs, lengths: dict[str, list[int]], index: int) -> Outputs:
    """The rows of sequence ``index`` in every output led by a packed dimension."""
    taken = []
    for (_, shape, _), tensor in zip(case.outputs, outputs):
        if shape[:1] and shape[0] in case.offsets:
            taken.append(tensor.narrow(0, sum(lengths[shape[0]][:index]), lengths[shape[0]][index]))
    assert taken, "no output has a packed dimension"
    return tuple(taken)


def _packed_lengths(case: OpCase, device: str, kernel: str) -> dict[str, list[int]]:
    """Per packed dimension, the lengths of the test's sequences: every length the kernel's
    tiles call for, an empty sequence among them, and (for the second dimension) the same
    lengths rotated, so that some sequences have more rows in one dimension than in the other."""
    base = list(case.facts(device, kernel).lengths)
    base = [*base[:2], 0, *base[2:]]
    return {dim: base[i:] + base[:i] for i, dim in enumerate(case.offsets)}


packed = unnamed(only(lambda c: bool(c.offsets)))


@parametrize("case, device, kernel, dtype, attrs", packed, kernels("batch_invariant"), dtypes(), variants)
def test_sequence_does_not_depend_on_what_is_packed_with_it(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    needs_guarantee(case, device, kernel, "batch_invariant")
    lengths = _packed_lengths(case, device, kernel)
    inputs = case.make_inputs(sequence_dims(case, lengths), dtype, device, seed=19, lengths=lengths)
    packed_out = case.run_kernel(kernel, *inputs, **attrs)
    count = len(lengths[next(iter(case.offsets))])
    for index in range(count):
        alone = case.run_kernel(kernel, *_one_sequence(case, inputs, lengths, index), **attrs)
        mine = {dim: [lengths[dim][index]] for dim in case.offsets}
        case.assert_bitwise_equal(
            _rows_of(case, alone, mine, 0), _rows_of(case, packed_out, lengths, index), f"{kernel}: sequence {index} alone vs packed with {count - 1} others"
        )
    # The same sequences packed in the opposite order.
    order = list(reversed(range(count)))
    reordered = {dim: [lengths[dim][i] for i in order] for dim in case.offsets}
    parts = [_one_sequence(case, inputs, lengths, i) for i in order]
    repacked = []
    for position, (name, _, shape, _, _) in enumerate(case.args):
        if name in case.offsets.values():
            dim = next(d for d, arg in case.offsets.items() if arg == name)
            repacked.append(offsets(reordered[dim]).to(inputs[position].dtype).to(device))
        elif shape[:1] and shape[0] in case.offsets:
            repacked.append(torch.cat([part[position] for part in parts]))
        else:
            repacked.append(inputs[position])
    again = case.run_kernel(kernel, *repacked, **attrs)
    for new_index, index in enumerate(order):
        case.assert_bitwise_equal(
            _rows_of(case, again, reordered, new_index), _rows_of(case, packed_out, lengths, index), f"{kernel}: sequence {index} packed in reverse order"
        )


def _offsets_out_of_order(case: OpCase) -> Iterator[Any]:
    for dim, arg in case.offsets.items():
        yield f"{arg}", (dim,), ()


@parametrize("case, device, kernel, dtype, dim", packed, kernels(), dtypes(first_only=True), _offsets_out_of_order)
def test_offsets_out_of_order_give_nan_rows_not_another_sequences(case: OpCase, device: str, kernel: str, dtype: str, dim: str) -> None:
    """Offsets that are not in order give no row a sequence (bisection would hand a row another
    sequence's keys, or two sequences would share rows): every row of every packed output is NaN,
    nothing is read out of bounds, and nothing raises (the offsets are never read back)."""
    lengths = {d: [5, 7, 4, 6] for d in case.offsets}
    inputs = case.make_inputs(sequence_dims(case, lengths), dtype, device, seed=23, lengths=lengths)
    position = [name for name, *_ in case.args].index(case.offsets[dim])
    scrambled = inputs[position].clone()
    scrambled[[1, 2]] = scrambled[[2, 1]]  # [0, 5, 12, 16, 22] -> [0, 12, 5, 16, 22]
    inputs[position] = scrambled
    outputs = case.run_kernel(kernel, *inputs, **case.attrs)
    for (name, shape, _), tensor in zip(case.outputs, outputs):
        if shape[:1] and shape[0] in case.offsets:
            assert torch.isnan(tensor.float()).all(), f"{kernel}: {name} has rows that are not NaN with {case.offsets[dim]} = {scrambled.tolist()}"


def _prefix_case(case: OpCase, device: str, kernel: str, dtype: str, seed: int, attrs: dict[str, Any]) -> tuple[dict[str, list[int]], list[Any]]:
    """One sequence with as many queries as keys, crossing the kernel's block twice."""
    if case.prefix_if is not None and not {**case.attrs, **attrs}[case.prefix_if]:
        pytest.skip(f"queries see the keys after their own position when {case.prefix_if} is False: no prefix to chunk or decode against")
    queries, keys = case.offsets
    length = max(case.facts(device, kernel).lengths)
    lengths = {queries: [length], keys: [length]}
    return lengths, case.make_inputs(sequence_dims(case, lengths), dtype, device, seed=seed, lengths=lengths)


def _queries_against_prefix(case: OpCase, inputs: list[Any], start: int, stop: int) -> list[Any]:
    """Queries [start, stop) of the one sequence, against the keys [0, stop): a prefill chunk, or a decode step."""
    queries, keys = case.offsets
    chunk = []
    for (name, _, shape, _, _), tensor in zip(case.args, inputs):
        if name == case.offsets[queries]:
            chunk.append(torch.tensor([0, stop - start], dtype=tensor.dtype, device=tensor.device))
        elif name == case.offsets[keys]:
            chunk.append(torch.tensor([0, stop], dtype=tensor.dtype, device=tensor.device))
        elif shape[:1] == (queries,):
            chunk.append(tensor.narrow(0, start, stop - start).contiguous())
        elif shape[:1] == (keys,):
            chunk.append(tensor.narrow(0, 0, stop).contiguous())
        else:
            chunk.append(tensor)
    return chunk


def _query_rows(case: OpCase, outputs: Outputs, start: int, stop: int) -> Outputs:
    queries = next(iter(case.offsets))
    rows = tuple(o.narrow(0, start, stop - start) for (_, shape, _), o in zip(case.outputs, outputs) if shape[:1] == (queries,))
    assert rows, f"no output has the queries' dimension {queries}"
    return rows


prefixed = unnamed(only(lambda c: c.prefix))


@parametrize("case, device, kernel, dtype, attrs", prefixed, kernels("batch_invariant"), dtypes(), variants)
def test_chunked_prefill_gives_the_bits_of_one_pass(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """The queries in chunks that end on either side of a block boundary, each chunk against its whole prefix."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    lengths, inputs = _prefix_case(case, device, kernel, dtype, 20, attrs)
    full = case.run_kernel(kernel, *inputs, **attrs)
    length = lengths[next(iter(case.offsets))][0]
    cuts = sorted({0, length, *(c for c in case.facts(device, kernel).lengths if 0 < c < length)})
    for start, stop in itertools.pairwise(cuts):
        got = case.run_kernel(kernel, *_queries_against_prefix(case, inputs, start, stop), **attrs)
        case.assert_bitwise_equal(
            _query_rows(case, got, 0, stop - start), _query_rows(case, full, start, stop), f"{kernel}: queries {start}..{stop} against keys 0..{stop}"
        )


@parametrize("case, device, kernel, dtype, attrs", prefixed, kernels("batch_invariant"), dtypes(), variants)
def test_decode_gives_the_bits_of_prefill(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """One new query against the cached keys gives the bits of its position in one pass (rollout vs training)."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    lengths, inputs = _prefix_case(case, device, kernel, dtype, 21, attrs)
    full = case.run_kernel(kernel, *inputs, **attrs)
    length = lengths[next(iter(case.offsets))][0]
    own = case.facts(device, kernel).lengths
    for position in sorted({0, length - 1, *(c - 1 for c in own if 0 < c <= length), *(c for c in own if c < length)}):
        got = case.run_kernel(kernel, *_queries_against_prefix(case, inputs, position, position + 1), **attrs)
        case.assert_bitwise_equal(_query_rows(case, got, 0, 1), _query_rows(case, full, position, position + 1), f"{kernel}: decode at position {position}")


# ---------------------------------------------------------------------------- paged caches
# Sequences whose keys lie in a paged cache (tests.paged): key j of sequence b is row j % BS of
# cache block block_table[b, j / BS], its queries packed rows aligned to the end of its keys.  A
# sequence's rows must not depend on where its blocks lie, on the block size, or on the other
# sequences of the step; its queries in one pass, in chunks against their prefix and one at a time
# (decode) give the same bits; and they are the bits of the op of packed sequences on the same keys.
# Key lengths come from the kernel's reduction block, block sizes lie on either side of it.


class PagedSequence:
    """One sequence of a paged op's step: its queries' rows (per argument led by the queries'
    dimension) and its keys' rows (per cache), each a tensor led by the row count."""

    def __init__(self, queries: dict[str, torch.Tensor], keys: dict[str, torch.Tensor]) -> None:
        self.queries, self.keys = queries, keys

    @property
    def query_count(self) -> int:
        return next(iter(self.queries.values())).shape[0]

    @property
    def key_count(self) -> int:
        return next(iter(self.keys.values())).shape[0]

    def chunk(self, start: int, stop: int) -> PagedSequence:
        """Queries [start, stop) against the keys [0, stop): a prefill chunk, or a decode step."""
        return PagedSequence({n: r[start:stop] for n, r in self.queries.items()}, {n: r[:stop] for n, r in self.keys.items()})


def _paged_rows(case: OpCase, arg: str, count: int, dtype: str, generator: torch.Generator) -> torch.Tensor:
    """``count`` random rows of argument ``arg``: its shape past the rows' dimensions (a cache's
    blocks and block size; a query argument's queries), from the op's first test shape."""
    _, arg_dtype, shape, _, _ = next(a for a in case.args if a[0] == arg)
    assert case.paged is not None
    skip = 2 if arg in case.paged.caches else 1
    sizes = [count, *(case.shapes[0][d] for d in shape[skip:])]
    return torch.randn(sizes, generator=generator).to(getattr(torch, case.dtype_of(dtype, arg_dtype)))


def _query_args(case: OpCase) -> list[str]:
    assert case.paged is not None
    return [name for name, _, shape, _, _ in case.args if shape[:1] == (case.paged.queries,) and name != case.paged.query_offsets]


def _paged_sequences(case: OpCase, device: str, kernel: str, dtype: str, seed: int) -> list[PagedSequence]:
    """The step's sequences: keys of every length the kernel's tiles call for, an empty sequence
    among them, and in turn all of a sequence's keys as queries (one prefill), one query (a
    decode step) or about half of them (a prefill chunk against its prefix)."""
    assert case.paged is not None
    generator = torch.Generator().manual_seed(seed)
    lengths = list(case.facts(device, kernel).lengths)
    lengths = [*lengths[:2], 0, *lengths[2:]]
    found = []
    for index, keys in enumerate(lengths):
        queries = min(keys, (keys, 1, (keys + 1) // 2)[index % 3])
        found.append(
            PagedSequence(
                {arg: _paged_rows(case, arg, queries, dtype, generator) for arg in _query_args(case)},
                {cache: _paged_rows(case, cache, keys, dtype, generator) for cache in case.paged.caches},
            )
        )
    return found


def _paged_inputs(case: OpCase, sequences: list[PagedSequence], block_size: int, device: str, dtype: str, placement: int | None) -> list[Any]:
    """The op's arguments for ``sequences``: caches of ``block_size`` rows per block; the sequences'
    blocks in order (``placement`` None), or shuffled by seed ``placement`` among each other and
    among as many unused blocks, which hold NaN like every row no key fills; block-table entries
    past a sequence's blocks point at unused blocks (or, in order, at block 0)."""
    paged = case.paged
    assert paged is not None
    counts = [-(-s.key_count // block_size) for s in sequences]
    used = sum(counts)
    spare = 0 if placement is None else used + 1
    total = used + spare
    order = torch.arange(total) if placement is None else torch.randperm(total, generator=torch.Generator().manual_seed(placement))
    blocks = list(order[:used].split(counts)) if counts else []
    unused = order[used:]
    width = max(counts, default=0) + 1
    table = torch.zeros(len(sequences), width, dtype=torch.int64)
    for b, ids in enumerate(blocks):
        table[b, : len(ids)] = ids
        for column in range(len(ids), width):
            table[b, column] = unused[(b + column) % len(unused)] if len(unused) else 0
    base = case.make_inputs(case.shapes[0], dtype, "cpu", seed=23)
    inputs: list[Any] = []
    for (name, _, shape, _, _), given in zip(case.args, base):
        if name in paged.caches:
            rows = [s.keys[name] for s in sequences]
            cache = torch.full([total * block_size, *rows[0].shape[1:]], float("nan"), dtype=rows[0].dtype)
            for s_rows, ids in zip(rows, blocks):
                j = torch.arange(s_rows.shape[0])
                cache[ids[j // block_size] * block_size + j % block_size] = s_rows
            inputs.append(cache.reshape(total, block_size, *rows[0].shape[1:]))
        elif name == paged.block_table:
            inputs.append(table.to(given.dtype))
        elif name == paged.lengths:
            inputs.append(torch.tensor([s.key_count for s in sequences], dtype=given.dtype))
        elif name == paged.query_offsets:
            inputs.append(offsets([s.query_count for s in sequences]).to(given.dtype))
        elif shape[:1] == (paged.queries,):
            inputs.append(torch.cat([s.queries[name] for s in sequences]))
        else:
            inputs.append(given)
    return [t.to(device) for t in inputs]


def _paged_rows_of(case: OpCase, outputs: Outputs, sequences: list[PagedSequence], index: int) -> Outputs:
    """Sequence ``index``'s rows of every output led by the queries' dimension."""
    assert case.paged is not None
    start = sum(s.query_count for s in sequences[:index])
    rows = tuple(o.narrow(0, start, sequences[index].query_count) for (_, shape, _), o in zip(case.outputs, outputs) if shape[:1] == (case.paged.queries,))
    assert rows, "no output is led by the queries' dimension"
    return rows


def _assert_finite(outputs: Outputs, what: str) -> None:
    """Every row of a valid step is a number: none read a NaN-filled row no key fills (which equal
    NaN rows on both sides of a comparison would hide)."""
    for index, o in enumerate(outputs):
        assert bool(torch.isfinite(o.float()).all()), f"{what}: output {index} holds a NaN or an infinity"


def _assert_same_sequences(case: OpCase, got: Outputs, want: Outputs, sequences: list[PagedSequence], what: str) -> None:
    _assert_finite(got, what)
    _assert_finite(want, what)
    for index in range(len(sequences)):
        case.assert_bitwise_equal(_paged_rows_of(case, got, sequences, index), _paged_rows_of(case, want, sequences, index), f"sequence {index}: {what}")


paged = unnamed(only(lambda c: c.paged is not None))


@parametrize("case, device, kernel, dtype, attrs", paged, kernels("batch_invariant"), dtypes(), variants)
def test_paged_sequence_does_not_depend_on_block_placement(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """Each block size: the sequences' blocks in order, then shuffled among each other and among
    unused blocks (twice), give every sequence the same bits."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    sequences = _paged_sequences(case, device, kernel, dtype, seed=22)
    for size in case.facts(device, kernel).block_sizes:
        in_order = case.run_kernel(kernel, *_paged_inputs(case, sequences, size, device, dtype, None), **attrs)
        for placement in (24, 25):
            shuffled = case.run_kernel(kernel, *_paged_inputs(case, sequences, size, device, dtype, placement), **attrs)
            _assert_same_sequences(case, shuffled, in_order, sequences, f"{kernel}: blocks of {size} shuffled (seed {placement}) vs in order")


@parametrize("case, device, kernel, dtype, attrs", paged, kernels("batch_invariant"), dtypes(), variants)
def test_paged_sequence_does_not_depend_on_block_size(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """The same sequences in caches of every block size the kernel's tiles call for, on either side
    of its reduction block, each shuffled: the same bits."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    sequences = _paged_sequences(case, device, kernel, dtype, seed=26)
    first, *others = case.facts(device, kernel).block_sizes
    want = case.run_kernel(kernel, *_paged_inputs(case, sequences, first, device, dtype, 27), **attrs)
    for size in others:
        got = case.run_kernel(kernel, *_paged_inputs(case, sequences, size, device, dtype, 27 + size), **attrs)
        _assert_same_sequences(case, got, want, sequences, f"{kernel}: blocks of {size} vs of {first}")


@parametrize("case, device, kernel, dtype, attrs", paged, kernels("batch_invariant"), dtypes(), variants)
def test_paged_sequence_does_not_depend_on_the_other_sequences(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """Each sequence alone against the step (prefills, decode steps and chunks together), and the
    step's sequences in the opposite order."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    sequences = _paged_sequences(case, device, kernel, dtype, seed=28)
    size = case.facts(device, kernel).block_sizes[1 % len(case.facts(device, kernel).block_sizes)]
    step = case.run_kernel(kernel, *_paged_inputs(case, sequences, size, device, dtype, 29), **attrs)
    _assert_finite(step, f"{kernel}: the step")
    for index, sequence in enumerate(sequences):
        alone = case.run_kernel(kernel, *_paged_inputs(case, [sequence], size, device, dtype, 30 + index), **attrs)
        case.assert_bitwise_equal(
            _paged_rows_of(case, alone, [sequence], 0), _paged_rows_of(case, step, sequences, index), f"{kernel}: sequence {index} alone vs in a step of {len(sequences)}"
        )
    reversed_step = sequences[::-1]
    again = case.run_kernel(kernel, *_paged_inputs(case, reversed_step, size, device, dtype, 31), **attrs)
    for index in range(len(sequences)):
        case.assert_bitwise_equal(
            _paged_rows_of(case, again, reversed_step, len(sequences) - 1 - index),
            _paged_rows_of(case, step, sequences, index),
            f"{kernel}: sequence {index} in the step reversed",
        )


@parametrize("case, device, kernel, dtype", paged, kernels(), dtypes(first_only=True))
def test_paged_query_offsets_out_of_order_give_nan_rows(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    """The paged form of test_offsets_out_of_order_give_nan_rows_not_another_sequences: query
    offsets out of order give every query row NaN, never another sequence's keys."""
    assert case.paged is not None
    sequences = [s for s in _paged_sequences(case, device, kernel, dtype, seed=33) if s.query_count]
    assert len(sequences) >= 3, "three sequences with queries, to put the second and third out of order"
    inputs = _paged_inputs(case, sequences, case.facts(device, kernel).block_sizes[0], device, dtype, None)
    position = [name for name, *_ in case.args].index(case.paged.query_offsets)
    scrambled = inputs[position].clone()
    scrambled[[1, 2]] = scrambled[[2, 1]]
    inputs[position] = scrambled
    outputs = case.run_kernel(kernel, *inputs, **case.attrs)
    for (name, shape, _), tensor in zip(case.outputs, outputs):
        if shape[:1] == (case.paged.queries,):
            assert torch.isnan(tensor.float()).all(), f"{kernel}: {name} has rows that are not NaN with {case.paged.query_offsets} = {scrambled.tolist()}"


@parametrize("case, device, kernel, dtype, attrs", unnamed(only(lambda c: c.paged is not None and c.paged.prefix)), kernels("batch_invariant"), dtypes(), variants)
def test_paged_decode_and_chunked_prefill_give_the_bits_of_prefill(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """One sequence: its queries in one pass, in chunks that end on either side of a block boundary
    (each against its whole prefix), and one at a time against the keys up to it (decode), each
    call with its blocks placed anew: the same bits (rollout vs training)."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    if case.prefix_if is not None and not {**case.attrs, **attrs}[case.prefix_if]:
        pytest.skip(f"queries see the keys after their own position when {case.prefix_if} is False: no prefix to chunk or decode against")
    assert case.paged is not None
    own = case.facts(device, kernel)
    length = max(own.lengths)
    generator = torch.Generator().manual_seed(32)
    whole = PagedSequence(
        {arg: _paged_rows(case, arg, length, dtype, generator) for arg in _query_args(case)},
        {cache: _paged_rows(case, cache, length, dtype, generator) for cache in case.paged.caches},
    )
    size = own.block_sizes[1 % len(own.block_sizes)]
    full = _paged_rows_of(case, case.run_kernel(kernel, *_paged_inputs(case, [whole], size, device, dtype, 33), **attrs), [whole], 0)
    _assert_finite(full, f"{kernel}: one pass")
    cuts = sorted({0, length, *(c for c in own.lengths if 0 < c < length)})
    calls = [(start, stop) for start, stop in itertools.pairwise(cuts)]
    calls += [(p, p + 1) for p in sorted({0, length - 1, *(c - 1 for c in own.lengths if 0 < c <= length), *(c for c in own.lengths if c < length)})]
    for start, stop in calls:
        chunk = whole.chunk(start, stop)
        got = _paged_rows_of(case, case.run_kernel(kernel, *_paged_inputs(case, [chunk], size, device, dtype, 34 + start), **attrs), [chunk], 0)
        case.assert_bitwise_equal(got, tuple(o.narrow(0, start, stop - start) for o in full), f"{kernel}: queries {start}..{stop} against keys 0..{stop}")


@parametrize("case, device, kernel, dtype, attrs", unnamed(only(lambda c: c.paged is not None and c.paged.packed is not None)), kernels("batch_invariant"), dtypes(), variants)
def test_paged_gives_the_bits_of_the_packed_op(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """The step, in caches of each block size, against the op of packed sequences (tests.paged.packed)
    on the same keys, packed back to back, through its backend on the same device: the same bits."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    paged = case.paged
    assert paged is not None and paged.packed is not None
    packed = CASES[paged.packed.op]
    backend = packed.backend_for(device).name
    sequences = _paged_sequences(case, device, kernel, dtype, seed=35)
    names = [name for name, *_ in case.args]
    shared_attrs = {name: value for name, value in {**case.attrs, **attrs}.items() if name in packed.attrs}
    for size in case.facts(device, kernel).block_sizes:
        inputs = _paged_inputs(case, sequences, size, device, dtype, 36 + size)
        got = case.run_kernel(kernel, *inputs, **attrs)
        args: list[Any] = []
        for name, (_, packed_dtype, _, _, _) in zip(paged.packed.args, packed.args):
            if name in paged.caches:
                args.append(torch.cat([s.keys[name] for s in sequences]).to(device))
            elif name == paged.lengths:
                args.append(offsets([s.key_count for s in sequences]).to(getattr(torch, packed_dtype)).to(device))
            else:
                args.append(inputs[names.index(name)])
        want = packed.run_kernel(backend, *args, **shared_attrs)
        _assert_finite(got, f"{kernel} with blocks of {size}")
        case.assert_bitwise_equal(got, want, f"{kernel} with blocks of {size} vs {packed.name}/{backend} on the same keys")
