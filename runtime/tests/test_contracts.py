"""The contract suite: one set of tests, run for every op of the catalog from its registry entry
and its test data (``cases``), the way PyTorch's OpInfo drives one test class over every op.

For each op: accuracy against the reference within its tolerance class; every guarantee each
native kernel declares, checked bitwise at the sizes its tiles call for, through the kernel's own
overload (``torch.ops.<package>.<op>.<kernel>``); ``torch.library.opcheck`` on every overload;
gradients, or a clear refusal where the spec declares no backward; and bad inputs rejected with
errors that name the argument.  Test ids start with the op's name; ``pytest tests --op NAME``
runs one op's contracts (``-k NAME`` also matches the ops whose names contain NAME).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import torch
from cases import CASES, UNREGISTERED, OpCase, Outputs, device_type, devices, offsets, package, registry, runtime, targets
from torch.autograd import forward_ad

# ---------------------------------------------------------------------------- parametrisation


def _shape_id(shape: dict[str, int]) -> str:
    return "x".join(f"{k}{v}" for k, v in sorted(shape.items()))


def kernels(guarantee: str | None = None, device_only: bool = False, extra: tuple[str, ...] = ()) -> Callable[[OpCase], Iterator[Any]]:
    """Every native kernel the package carries (that declares ``guarantee``), with its device;
    ``extra``: also these pseudo-kernels on the CPU ("default": the op's own dispatch;
    "public": the public function)."""

    def column(case: OpCase) -> Iterator[Any]:
        for platform, device, kernel, marks in targets(case, device_only):
            if guarantee is None or case.declares(platform, kernel, guarantee):
                yield f"{platform}-{kernel}", (device, kernel), marks
        for name in extra:
            yield {"default": "default", "public": "public"}[name], ("cpu", None if name == "public" else name), ()

    return column


def dtypes(first_only: bool = False) -> Callable[[OpCase], Iterator[Any]]:
    def column(case: OpCase) -> Iterator[Any]:
        for dtype in case.dtypes[:1] if first_only else case.dtypes:
            yield dtype, (dtype,), ()

    return column


def shapes(case: OpCase) -> Iterator[Any]:
    for shape in case.shapes:
        yield _shape_id(shape), (shape,), ()


def variants(case: OpCase) -> Iterator[Any]:
    for param in case.variants:
        yield param.id, param.values, param.marks


def flags(case: OpCase) -> Iterator[Any]:
    for param in case.flags:
        yield param.id, param.values, param.marks


def defaults_and_flags(case: OpCase) -> Iterator[Any]:
    yield "defaults", ({},), ()
    yield from flags(case)


def on_devices(case: OpCase) -> Iterator[Any]:
    for device, marks in devices():
        yield device, (device,), marks


def only(predicate: Callable[[OpCase], bool]) -> Callable[[OpCase], Iterator[Any]]:
    """A column with one empty case for the ops ``predicate`` holds for, none for the others."""

    def column(case: OpCase) -> Iterator[Any]:
        if predicate(case):
            yield "", (), ()

    return column


def _ids(column: Callable[[OpCase], Iterator[Any]]) -> Callable[[OpCase], Iterator[Any]]:
    """``column`` without an id of its own (for filters)."""

    def strip(case: OpCase) -> Iterator[Any]:
        for _, values, marks in column(case):
            yield None, values, marks

    return strip


Test = TypeVar("Test", bound=Callable[..., None])


def parametrize(names: str, *columns: Callable[[OpCase], Iterator[Any]]) -> Callable[[Test], Test]:
    """``_cases`` with filters' empty ids left out of the test id."""
    params = []
    for name, case in CASES.items():
        combos: list[tuple[list[str], list[Any], list[Any]]] = [([], [], [])]
        for column in columns:
            combos = [
                ([*ids, ident] if ident else ids, [*values, *more], [*marks, *more_marks])
                for ids, values, marks in combos
                for ident, more, more_marks in column(case)
            ]
        params += [pytest.param(case, *values, id="-".join([name, *ids]), marks=marks) for ids, values, marks in combos]
    mark: Callable[[Test], Test] = pytest.mark.parametrize(names, params)
    return mark


def named(name: str) -> Callable[[str], str]:
    """assert_close's message, led by the output's name."""
    return lambda message: f"{name}: {message}"


def needs_guarantee(case: OpCase, device: str, kernel: str, guarantee: str) -> None:
    """The kernel declares ``guarantee`` (the parametrisation only offers such kernels; checked again)."""
    assert guarantee in case.facts(device, kernel)["guarantees"], f"{kernel} on {runtime.platform_of(device)} does not declare {guarantee}"


def test_every_op_of_the_registry_has_its_cases() -> None:
    """The registry and the test data come from one generate: each op of one is an op of the other."""
    assert UNREGISTERED == [] and set(CASES) == set(registry.OPS)


# ---------------------------------------------------------------------------- accuracy


@parametrize("case, device, kernel, dtype, shape", kernels(), dtypes(), shapes)
def test_accuracy(case: OpCase, device: str, kernel: str, dtype: str, shape: dict[str, int]) -> None:
    check_accuracy(case, device, kernel, dtype, shape, {})


@parametrize("case, device, kernel, dtype, shape, attrs", kernels(), dtypes(), shapes, flags)
def test_accuracy_at_other_settings(case: OpCase, device: str, kernel: str, dtype: str, shape: dict[str, int], attrs: dict[str, Any]) -> None:
    check_accuracy(case, device, kernel, dtype, shape, attrs)


def check_accuracy(case: OpCase, device: str, kernel: str, dtype: str, shape: dict[str, int], attrs: dict[str, Any]) -> None:
    inputs = case.make_inputs(shape, dtype, device)
    got = case.run_kernel(kernel, *inputs, **attrs)
    want = case.reference(*inputs, **attrs)
    assert len(got) == len(want) == len(case.outputs), f"{len(got)} outputs, the reference gives {len(want)}, the spec declares {len(case.outputs)}"
    atol, rtol = case.tolerance(dtype)
    for (name, shape_dims, _), g, w in zip(case.outputs, got, want):
        assert list(g.shape) == [shape[d] if d in shape else w.shape[i] for i, d in enumerate(shape_dims)], name
        if g.is_floating_point():
            # A NaN the spec defines (e.g. an id outside the vocabulary) must be NaN in both.
            torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol, rtol=rtol, equal_nan=True, msg=named(name))
        else:
            assert torch.equal(g.cpu(), w.to(g.dtype)), f"{name}: integer output differs from the reference"


@parametrize("case, device, kernel, dtype", _ids(only(lambda c: c.has_optional)), kernels(), dtypes())
def test_accuracy_without_optional_arguments(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    """Every optional argument left out (None): the kernel's own path without them, against the reference, every run alike."""
    inputs = case.without_optional(case.make_inputs(case.shapes[0], dtype, device))
    got = case.run_kernel(kernel, *inputs)
    want = case.reference(*inputs)
    atol, rtol = case.tolerance(dtype)
    for (name, _, _), g, w in zip(case.outputs, got, want):
        torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol, rtol=rtol, equal_nan=True, msg=named(name))
    case.assert_bitwise_equal(case.run_kernel(kernel, *inputs), got, f"{kernel}: repeated run without optional arguments")


# ---------------------------------------------------------------------------- empty inputs
# Every dimension the arguments have, set to 0 in turn (a counted one follows its mask), and,
# where the op takes a mask, a mask with no true entry: every output element must still be
# written, so new memory starts as NaN (and integers as their largest value) to show any
# element a kernel leaves alone.


def empty_cases(case: OpCase) -> Iterator[Any]:
    # A dimension another one's size gives (B1 = B + 1) follows it, as a counted one follows its mask.
    dims = list(dict.fromkeys(d for _, _, shape, _, _ in case.args for d in shape if d not in case.counted and d not in case.follows))
    for d in dims:
        sizes = {**case.shapes[0], d: 0, **({case.divides[d]: 0} if d in case.divides else {})}
        sizes.update({dim: sizes[base] + plus for dim, (base, plus) in case.follows.items()})
        yield f"{d}0", (sizes, False), ()
    if any(dtype == "bool" for _, dtype, _, _, _ in case.args):
        yield "nothing-kept", (dict(case.shapes[0]), True), ()


def make_empty_inputs(case: OpCase, dims: dict[str, int], dtype: str, device: str, none_kept: bool = False, seed: int = 16) -> list[Any]:
    """make_inputs on ``dims``, with every boolean argument false if ``none_kept``, and each
    counted dimension resized to the count its argument holds."""
    dims = dict(dims)
    inputs = case.make_inputs(dims, dtype, device, seed=seed)
    names = [name for name, *_ in case.args]
    if none_kept:
        inputs = [torch.zeros_like(t) if t.dtype == torch.bool else t for t in inputs]
    for dim, source in case.counted.items():
        dims[dim] = int(inputs[names.index(source)].count_nonzero())
        for index, (_, _, shape, _, _) in enumerate(case.args):
            if dim in shape:
                old = inputs[index]
                inputs[index] = torch.randn([dims[d] for d in shape], generator=torch.Generator().manual_seed(seed)).to(old.dtype).to(device)
    return inputs


@pytest.fixture
def new_memory_is_garbage() -> Iterator[None]:
    """torch.empty (at::empty in the bindings too) fills NaN, and integers with their largest value."""
    settings: Any = torch.utils.deterministic  # its flag is set through the module's own property
    was = torch.are_deterministic_algorithms_enabled(), settings.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    settings.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(was[0])
    settings.fill_uninitialized_memory = was[1]


@parametrize("case, device, kernel, dtype, dims, none_kept", kernels(), dtypes(), empty_cases)
def test_empty_inputs_give_fully_written_outputs(
    case: OpCase, device: str, kernel: str, dtype: str, dims: dict[str, int], none_kept: bool, new_memory_is_garbage: None
) -> None:
    """Zero rows, zero sequences, zero-size dimensions: every output element is the reference's."""
    inputs = make_empty_inputs(case, dims, dtype, device, none_kept)
    got = case.run_kernel(kernel, *inputs)
    torch.use_deterministic_algorithms(False)  # the reference may use ops without a deterministic variant
    want = case.reference(*inputs)
    assert len(got) == len(want) == len(case.outputs)
    atol, rtol = case.tolerance(dtype)
    for (name, _, _), g, w in zip(case.outputs, got, want):
        assert g.shape == w.shape, f"{name}: shape {tuple(g.shape)}, the reference's {tuple(w.shape)}"
        if g.is_floating_point():
            torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol, rtol=rtol, equal_nan=True, msg=named(name))
        else:
            assert torch.equal(g.cpu(), w.to(g.dtype)), f"{name}: {g.cpu().tolist()} against the reference's {w.tolist()}"


# ---------------------------------------------------------------------------- determinism and batch invariance


@parametrize("case, device, kernel, dtype, attrs", kernels("deterministic"), dtypes(), variants)
def test_deterministic(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    needs_guarantee(case, device, kernel, "deterministic")
    inputs = case.make_inputs(case.contract_dims(device, kernel), dtype, device, seed=1)
    first = case.run_kernel(kernel, *inputs, **attrs)
    for _ in range(3):
        case.assert_bitwise_equal(case.run_kernel(kernel, *inputs, **attrs), first, f"{kernel}: repeated run")


@parametrize("case, device, kernel, dtype, attrs", _ids(only(lambda c: c.batch_dim is not None)), kernels("batch_invariant"), dtypes(), variants)
def test_batch_invariant(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    needs_guarantee(case, device, kernel, "batch_invariant")
    own = case.facts(device, kernel)
    dims = case.contract_dims(device, kernel)
    assert case.batch_dim is not None
    total = dims[case.batch_dim]
    inputs = case.make_inputs(dims, dtype, device, seed=2)
    outputs = case.run_kernel(kernel, *inputs, **attrs)
    full = case.batched(outputs)
    assert full, "batch_invariant needs an output with the batch dimension"

    for size in own["batch_sizes"]:
        # Every row, as part of a batch of `size`: the whole batch cut into consecutive pieces.
        for start in range(0, total, size):
            stop = min(start + size, total)
            got = case.batched(case.run_kernel(kernel, *case.take(inputs, start, stop), **attrs))
            case.assert_bitwise_equal(got, case.out_take(outputs, start, stop), f"{kernel}: rows {start}..{stop} as a batch of {stop - start} vs {total}")

    axes = [case.outputs[i][1].index(case.batch_dim) for i in case.batched_outputs]
    for at in own["chunks"]:
        head = case.batched(case.run_kernel(kernel, *case.take(inputs, 0, at), **attrs))
        tail = case.batched(case.run_kernel(kernel, *case.take(inputs, at, total), **attrs))
        chunked = tuple(torch.cat([h, t], dim=axis) for h, t, axis in zip(head, tail, axes))
        case.assert_bitwise_equal(chunked, full, f"{kernel}: chunked at {at} of {total}")

    pad = own["pad_by"]
    padded_inputs = [
        t if axis is None else torch.cat([t, torch.zeros_like(t.narrow(axis, 0, 1)).expand(*[pad if i == axis else s for i, s in enumerate(t.shape)])], dim=axis)
        for t, axis in zip(inputs, case.batch_axes())
    ]
    case.assert_bitwise_equal(case.out_take(case.run_kernel(kernel, *padded_inputs, **attrs), 0, total), full, f"{kernel}: {total} rows padded by {pad}")


# ---------------------------------------------------------------------------- layout invariance
# The reduction dimension cut into 2, 4 and 8 equal parts (tensor-parallel shards), each part
# reduced on its own and the parts combined pairwise by mid-split with adds in the output dtype,
# must give the whole reduction's bits.  The parts hold 12, 6 and 3 leaves: subtrees that are
# not powers of two are covered too.
PARTS = (2, 4, 8)


def _part(case: OpCase, tensors: list[Any], index: int, size: int) -> list[Any]:
    """Part ``index`` (``size`` elements of the reduction dimension) of every argument that has it."""
    assert case.reduction is not None
    dim = case.reduction.dim
    return [t if dim not in shape else t.narrow(shape.index(dim), index * size, size).contiguous() for t, (_, _, shape, _, _) in zip(tensors, case.args)]


def _pairwise(results: list[Outputs]) -> Outputs:
    """((p0 + p1) + (p2 + p3)) ...: the mid-split tree over the parts, each add in the outputs' dtype."""
    if len(results) == 1:
        return results[0]
    mid = len(results) // 2
    return tuple(left + right for left, right in zip(_pairwise(results[:mid]), _pairwise(results[mid:])))


@parametrize("case, device, kernel, dtype", _ids(only(lambda c: c.reduction is not None and c.reduction.order == "k_tree")), kernels("layout_invariant"), dtypes())
def test_layout_invariant(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    needs_guarantee(case, device, kernel, "layout_invariant")
    assert case.reduction is not None and case.reduction.leaf is not None
    extent = case.reduction.leaf * max(PARTS) * 3
    inputs = case.make_inputs({**case.shapes[0], case.reduction.dim: extent}, dtype, device, seed=4)
    whole = case.run_kernel(kernel, *inputs)
    for parts in PARTS:
        size = extent // parts
        combined = _pairwise([case.run_kernel(kernel, *_part(case, inputs, index, size)) for index in range(parts)])
        case.assert_bitwise_equal(combined, whole, f"{kernel}: {case.reduction.dim} = {extent} in {parts} parts of {size}, combined pairwise")


# ---------------------------------------------------------------------------- packed sequences
# A sequence's rows must not depend on the sequences packed with it, their number or lengths;
# the lengths cross the kernel's reduction block and include an empty sequence.


def _entries(case: OpCase) -> str:
    """The offsets arguments' dimension: sequences + 1."""
    return next(shape[0] for name, _, shape, _, _ in case.args if name in case.offsets.values())


def _sequence_dims(case: OpCase, lengths: dict[str, list[int]]) -> dict[str, int]:
    count = len(next(iter(lengths.values())))
    return {**case.shapes[0], **{dim: sum(lengths[dim]) for dim in case.offsets}, _entries(case): count + 1}


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
    base = list(case.facts(device, kernel)["lengths"])
    base = [*base[:2], 0, *base[2:]]
    return {dim: base[i:] + base[:i] for i, dim in enumerate(case.offsets)}


packed = _ids(only(lambda c: bool(c.offsets)))


@parametrize("case, device, kernel, dtype, attrs", packed, kernels("batch_invariant"), dtypes(), variants)
def test_sequence_does_not_depend_on_what_is_packed_with_it(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    needs_guarantee(case, device, kernel, "batch_invariant")
    lengths = _packed_lengths(case, device, kernel)
    inputs = case.make_inputs(_sequence_dims(case, lengths), dtype, device, seed=19, lengths=lengths)
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
    inputs = case.make_inputs(_sequence_dims(case, lengths), dtype, device, seed=23, lengths=lengths)
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
    length = max(case.facts(device, kernel)["lengths"])
    lengths = {queries: [length], keys: [length]}
    return lengths, case.make_inputs(_sequence_dims(case, lengths), dtype, device, seed=seed, lengths=lengths)


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


prefixed = _ids(only(lambda c: c.prefix))


@parametrize("case, device, kernel, dtype, attrs", prefixed, kernels("batch_invariant"), dtypes(), variants)
def test_chunked_prefill_gives_the_bits_of_one_pass(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """The queries in chunks that end on either side of a block boundary, each chunk against its whole prefix."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    lengths, inputs = _prefix_case(case, device, kernel, dtype, 20, attrs)
    full = case.run_kernel(kernel, *inputs, **attrs)
    length = lengths[next(iter(case.offsets))][0]
    cuts = sorted({0, length, *(c for c in case.facts(device, kernel)["lengths"] if 0 < c < length)})
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
    own = case.facts(device, kernel)["lengths"]
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
    skip = 2 if arg in case.paged["caches"] else 1
    sizes = [count, *(case.shapes[0][d] for d in shape[skip:])]
    return torch.randn(sizes, generator=generator).to(getattr(torch, case.dtype_of(dtype, arg_dtype)))


def _query_args(case: OpCase) -> list[str]:
    assert case.paged is not None
    return [name for name, _, shape, _, _ in case.args if shape[:1] == (case.paged["queries"],) and name != case.paged["query_offsets"]]


def _paged_sequences(case: OpCase, device: str, kernel: str, dtype: str, seed: int) -> list[PagedSequence]:
    """The step's sequences: keys of every length the kernel's tiles call for, an empty sequence
    among them, and in turn all of a sequence's keys as queries (one prefill), one query (a
    decode step) or about half of them (a prefill chunk against its prefix)."""
    assert case.paged is not None
    generator = torch.Generator().manual_seed(seed)
    lengths = list(case.facts(device, kernel)["lengths"])
    lengths = [*lengths[:2], 0, *lengths[2:]]
    found = []
    for index, keys in enumerate(lengths):
        queries = min(keys, (keys, 1, (keys + 1) // 2)[index % 3])
        found.append(
            PagedSequence(
                {arg: _paged_rows(case, arg, queries, dtype, generator) for arg in _query_args(case)},
                {cache: _paged_rows(case, cache, keys, dtype, generator) for cache in case.paged["caches"]},
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
        if name in paged["caches"]:
            rows = [s.keys[name] for s in sequences]
            cache = torch.full([total * block_size, *rows[0].shape[1:]], float("nan"), dtype=rows[0].dtype)
            for s_rows, ids in zip(rows, blocks):
                j = torch.arange(s_rows.shape[0])
                cache[ids[j // block_size] * block_size + j % block_size] = s_rows
            inputs.append(cache.reshape(total, block_size, *rows[0].shape[1:]))
        elif name == paged["block_table"]:
            inputs.append(table.to(given.dtype))
        elif name == paged["lengths"]:
            inputs.append(torch.tensor([s.key_count for s in sequences], dtype=given.dtype))
        elif name == paged["query_offsets"]:
            inputs.append(offsets([s.query_count for s in sequences]).to(given.dtype))
        elif shape[:1] == (paged["queries"],):
            inputs.append(torch.cat([s.queries[name] for s in sequences]))
        else:
            inputs.append(given)
    return [t.to(device) for t in inputs]


def _paged_rows_of(case: OpCase, outputs: Outputs, sequences: list[PagedSequence], index: int) -> Outputs:
    """Sequence ``index``'s rows of every output led by the queries' dimension."""
    assert case.paged is not None
    start = sum(s.query_count for s in sequences[:index])
    rows = tuple(o.narrow(0, start, sequences[index].query_count) for (_, shape, _), o in zip(case.outputs, outputs) if shape[:1] == (case.paged["queries"],))
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


paged = _ids(only(lambda c: c.paged is not None))


@parametrize("case, device, kernel, dtype, attrs", paged, kernels("batch_invariant"), dtypes(), variants)
def test_paged_sequence_does_not_depend_on_block_placement(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """Each block size: the sequences' blocks in order, then shuffled among each other and among
    unused blocks (twice), give every sequence the same bits."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    sequences = _paged_sequences(case, device, kernel, dtype, seed=22)
    for size in case.facts(device, kernel)["block_sizes"]:
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
    first, *others = case.facts(device, kernel)["block_sizes"]
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
    size = case.facts(device, kernel)["block_sizes"][1 % len(case.facts(device, kernel)["block_sizes"])]
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
    inputs = _paged_inputs(case, sequences, case.facts(device, kernel)["block_sizes"][0], device, dtype, None)
    position = [name for name, *_ in case.args].index(case.paged["query_offsets"])
    scrambled = inputs[position].clone()
    scrambled[[1, 2]] = scrambled[[2, 1]]
    inputs[position] = scrambled
    outputs = case.run_kernel(kernel, *inputs, **case.attrs)
    for (name, shape, _), tensor in zip(case.outputs, outputs):
        if shape[:1] == (case.paged["queries"],):
            assert torch.isnan(tensor.float()).all(), f"{kernel}: {name} has rows that are not NaN with {case.paged['query_offsets']} = {scrambled.tolist()}"


@parametrize("case, device, kernel, dtype, attrs", _ids(only(lambda c: c.paged is not None and c.paged["prefix"])), kernels("batch_invariant"), dtypes(), variants)
def test_paged_decode_and_chunked_prefill_give_the_bits_of_prefill(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """One sequence: its queries in one pass, in chunks that end on either side of a block boundary
    (each against its whole prefix), and one at a time against the keys up to it (decode), each
    call with its blocks placed anew: the same bits (rollout vs training)."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    if case.prefix_if is not None and not {**case.attrs, **attrs}[case.prefix_if]:
        pytest.skip(f"queries see the keys after their own position when {case.prefix_if} is False: no prefix to chunk or decode against")
    assert case.paged is not None
    own = case.facts(device, kernel)
    length = max(own["lengths"])
    generator = torch.Generator().manual_seed(32)
    whole = PagedSequence(
        {arg: _paged_rows(case, arg, length, dtype, generator) for arg in _query_args(case)},
        {cache: _paged_rows(case, cache, length, dtype, generator) for cache in case.paged["caches"]},
    )
    size = own["block_sizes"][1 % len(own["block_sizes"])]
    full = _paged_rows_of(case, case.run_kernel(kernel, *_paged_inputs(case, [whole], size, device, dtype, 33), **attrs), [whole], 0)
    _assert_finite(full, f"{kernel}: one pass")
    cuts = sorted({0, length, *(c for c in own["lengths"] if 0 < c < length)})
    calls = [(start, stop) for start, stop in itertools.pairwise(cuts)]
    calls += [(p, p + 1) for p in sorted({0, length - 1, *(c - 1 for c in own["lengths"] if 0 < c <= length), *(c for c in own["lengths"] if c < length)})]
    for start, stop in calls:
        chunk = whole.chunk(start, stop)
        got = _paged_rows_of(case, case.run_kernel(kernel, *_paged_inputs(case, [chunk], size, device, dtype, 34 + start), **attrs), [chunk], 0)
        case.assert_bitwise_equal(got, tuple(o.narrow(0, start, stop - start) for o in full), f"{kernel}: queries {start}..{stop} against keys 0..{stop}")


@parametrize("case, device, kernel, dtype, attrs", _ids(only(lambda c: c.paged is not None and c.paged["packed"] is not None)), kernels("batch_invariant"), dtypes(), variants)
def test_paged_gives_the_bits_of_the_packed_op(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """The step, in caches of each block size, against the op of packed sequences (tests.paged.packed)
    on the same keys, packed back to back, through its backend on the same device: the same bits."""
    needs_guarantee(case, device, kernel, "batch_invariant")
    paged = case.paged
    assert paged is not None
    packed = CASES[paged["packed"]["op"]]
    backend = packed.backend_for(device).name
    sequences = _paged_sequences(case, device, kernel, dtype, seed=35)
    names = [name for name, *_ in case.args]
    shared_attrs = {name: value for name, value in {**case.attrs, **attrs}.items() if name in packed.attrs}
    for size in case.facts(device, kernel)["block_sizes"]:
        inputs = _paged_inputs(case, sequences, size, device, dtype, 36 + size)
        got = case.run_kernel(kernel, *inputs, **attrs)
        args: list[Any] = []
        for name, (_, packed_dtype, _, _, _) in zip(paged["packed"]["args"], packed.args):
            if name in paged["caches"]:
                args.append(torch.cat([s.keys[name] for s in sequences]).to(device))
            elif name == paged["lengths"]:
                args.append(offsets([s.key_count for s in sequences]).to(getattr(torch, packed_dtype)).to(device))
            else:
                args.append(inputs[names.index(name)])
        want = packed.run_kernel(backend, *args, **shared_attrs)
        _assert_finite(got, f"{kernel} with blocks of {size}")
        case.assert_bitwise_equal(got, want, f"{kernel} with blocks of {size} vs {packed.name}/{backend} on the same keys")


# ---------------------------------------------------------------------------- portability


def _portable_kernels(case: OpCase) -> Iterator[Any]:
    if all(device_type(platform) == "cpu" for platform in case.kernels):
        reason = "this package carries no device kernels: portability compares a device kernel with the CPU's"
        yield "no-device", (None, None), (pytest.mark.skip(reason=reason),)
        return
    yield from kernels("portable", device_only=True)(case)


@parametrize("case, device, kernel, dtype, attrs", _portable_kernels, dtypes(), defaults_and_flags)
def test_portable(case: OpCase, device: str, kernel: str, dtype: str, attrs: dict[str, Any]) -> None:
    """Each device kernel that declares portable gives the bits of the CPU's kernel."""
    needs_guarantee(case, device, kernel, "portable")
    cpu_kernel = case.backend_for("cpu")
    if "portable" not in cpu_kernel.guarantees:
        pytest.skip(f"the CPU's {cpu_kernel.name} does not declare portable")
    for seed, shape in enumerate((case.shapes[1 % len(case.shapes)], case.contract_dims(device, kernel))):
        inputs = case.make_inputs(shape, dtype, device, seed=3 + seed)
        got = case.run_kernel(kernel, *inputs, **attrs)
        case.assert_bitwise_equal(got, case.run_kernel(cpu_kernel.name, *[t.cpu() for t in inputs], **attrs), f"{kernel} on {device} vs {cpu_kernel.name} on cpu")


# ---------------------------------------------------------------------------- torch.library


def _opcheck_inputs(case: OpCase, dtype: str, device: str) -> list[Any]:
    # opcheck compares outputs with NaN unequal to NaN: only the first planted value (ignore_index,
    # a mask's false entries), not the later ones that the spec may answer with NaN (an id
    # outside the vocabulary).
    inputs = case.make_inputs(case.shapes[0], dtype, device, seed=13, plant=1)
    return [t.requires_grad_(name in case.grad_inputs) for (name, *_), t in zip(case.args, inputs)]


@parametrize("case, device, kernel, dtype", kernels(extra=("default",)), dtypes(first_only=True))
def test_opcheck(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    """torch.library.opcheck: schema, fake kernel, autograd registration and AOT dispatch of each overload."""
    overload = case.overload(kernel)
    tests = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(overload, tuple(_opcheck_inputs(case, dtype, device)), case.attrs, test_utils=tests)
    if not case.op.backward:
        # No backward: the registration check needs inputs that require grad (differentiating then raises, by design).
        inputs = tuple(t.requires_grad_(t.is_floating_point()) for t in case.make_inputs(case.shapes[0], dtype, device, seed=13, plant=1))
        torch.library.opcheck(overload, inputs, case.attrs, test_utils=("test_autograd_registration",))


@parametrize("case, device", on_devices)
def test_native_op_matches_public_function(case: OpCase, device: str) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=4)
    native = case.overload("default")(*inputs, **case.attrs)
    native = native if isinstance(native, tuple) else (native,)
    case.assert_bitwise_equal(native, case.run(*inputs), "torch.ops vs public function")


# ---------------------------------------------------------------------------- autocast


def _autocast_case(case: OpCase, policy: str, autocast_dtype: str) -> str:
    """The dtype case to start from: float32 inputs for a policy that lowers them (and for none),
    inputs in the autocast dtype for one that widens them to float32; the first case the op allows
    otherwise."""
    start = autocast_dtype if policy == "float32" else "float32"
    dtype_case = "/".join([start] * max(len(case.dtype_vars), 1))
    return dtype_case if dtype_case in case.dtypes else case.dtypes[0]


def _cast_by_hand(case: OpCase, inputs: list[Any], dtype: torch.dtype) -> list[Any]:
    """The inputs as the op's policy casts them: the arguments it names, to ``dtype``."""
    return [t.to(dtype) if t is not None and name in case.op.autocast_args else t for (name, *_), t in zip(case.args, inputs)]


def mixed(case: OpCase) -> Iterator[Any]:
    """With two arguments or more to cast, they also come in mixed dtypes (a float32 weight with a
    bfloat16 activation), which only the cast lets through the op's dtype checks."""
    yield "same", (False,), ()
    if len(case.op.autocast_args) > 1:
        yield "mixed", (True,), ()


def autocast_dtypes(case: OpCase) -> Iterator[Any]:
    for dtype in ("bfloat16", "float16"):
        yield dtype, (dtype,), ()


@parametrize("case, device, kernel, autocast_dtype, mixed", kernels(extra=("default", "public")), autocast_dtypes, mixed)
def test_autocast_follows_the_declared_policy(case: OpCase, device: str, kernel: str | None, autocast_dtype: str, mixed: bool) -> None:
    """Under torch.autocast the op casts as its spec declares: the public function and every
    overload give the outputs, bits and dtypes, of the op called outside autocast on the inputs
    cast by hand."""
    policy = case.op.autocast
    inputs = case.make_inputs(case.shapes[0], _autocast_case(case, policy, autocast_dtype), device, seed=6)
    cast_to = {"lower_precision": getattr(torch, autocast_dtype), "float32": torch.float32, "none": None}[policy]
    if mixed:  # every cast argument after the first in the dtype the policy casts to
        first = case.op.autocast_args[0]
        inputs = [t.to(cast_to) if t is not None and name != first and name in case.op.autocast_args else t for (name, *_), t in zip(case.args, inputs)]
    want = case.run(*(inputs if cast_to is None else _cast_by_hand(case, inputs, cast_to)))
    with torch.autocast(device, dtype=getattr(torch, autocast_dtype)):
        got = case.run(*inputs) if kernel is None else case.run_kernel(kernel, *inputs)
    case.assert_bitwise_equal(got, want, f"{kernel or 'public function'} under autocast({autocast_dtype}) vs inputs cast by hand ({policy})")


# ---------------------------------------------------------------------------- torch.compile and meta tensors


@parametrize("case", _ids(only(lambda c: True)))
def test_fake_kernel_under_torch_compile(case: OpCase) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=5)
    torch._dynamo.reset()  # every op's test compiles afresh, within dynamo's recompile limit
    default = case.overload("default")

    def native(*args: Any) -> Any:
        return default(*args)

    compiled = torch.compile(native, backend="aot_eager", fullgraph=True)
    if case.dynamic:
        # Output sizes depend on the data: let the graph carry them as unbacked symbols.
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            got = compiled(*inputs, *case.attrs.values())
    else:
        got = compiled(*inputs, *case.attrs.values())
    got = got if isinstance(got, tuple) else (got,)
    case.assert_bitwise_equal(got, case.run(*inputs), "torch.compile vs eager")


@parametrize("case", _ids(only(lambda c: True)))
def test_public_function_on_meta_tensors(case: OpCase) -> None:
    """Shapes and dtypes without data: the public function answers from the fake kernel."""
    if case.dynamic or case.counted:
        pytest.skip("an output size or a check depends on the data, which a meta tensor does not hold")
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=15)
    want = case.run(*inputs)
    got = case.run(*[t.to("meta") for t in inputs])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device.type == "meta" and g.shape == w.shape and g.dtype == w.dtype


@parametrize("case, device", _ids(only(lambda c: c.leading_dim is not None)), on_devices)
def test_leading_dimensions_are_flattened_and_restored(case: OpCase, device: str) -> None:
    """The leading dimension given as two dimensions gives the same bits, shaped back."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=11)
    flat = case.run(*inputs)
    lead = (case.leading_dim,)
    lifted = [t.unsqueeze(0) if shape[:1] == lead else t for t, (_, _, shape, _, _) in zip(inputs, case.args)]
    expected = tuple(o.unsqueeze(0) if shape[:1] == lead else o for o, (_, shape, _) in zip(flat, case.outputs))
    case.assert_bitwise_equal(case.run(*lifted), expected, "leading dimensions")


def bool_bytes(case: OpCase) -> Iterator[Any]:
    """Each bool argument, its true entries stored as another nonzero byte."""
    for index, (name, dtype, _, _, _) in enumerate(case.args):
        if dtype == "bool":
            for byte in (2, 255):
                yield f"{name}-{byte}", (index, byte), ()


@parametrize("case, index, byte, device", bool_bytes, on_devices)
def test_a_bool_argument_reads_each_byte_as_its_truth(case: OpCase, index: int, byte: int, device: str) -> None:
    """Torch lets any bytes be viewed as bool (a uint8 mask's .view(torch.bool)), and indexes by
    such a mask as by its truth: every nonzero byte true.  The op gives the bits it gives for the
    same mask stored as 0s and 1s."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=21)
    want = case.run(*inputs)
    spoiled = list(inputs)
    spoiled[index] = (inputs[index].view(torch.uint8) * byte).view(torch.bool)
    assert spoiled[index].view(torch.uint8).max() == byte  # the test's own premise: such bytes reach the op
    case.assert_bitwise_equal(case.run(*spoiled), want, f"{case.args[index][0]} stored as bytes 0 and {byte}")


def disagreeing_leads(case: OpCase) -> Iterator[Any]:
    """Each further argument that starts with the leading dimension, given flat or with its
    leading sizes in another order than the first such argument's."""
    lead = (case.leading_dim,)
    positions = [i for i, (_, _, shape, optional, _) in enumerate(case.args) if case.leading_dim is not None and shape[:1] == lead and not optional]
    for index in positions[1:]:
        for how in ("flat", "transposed"):
            yield f"{case.args[index][0]}-{how}", (positions[0], index, how), ()


@parametrize("case, first, index, how", disagreeing_leads)
def test_leading_dimensions_that_disagree_are_an_input_error(case: OpCase, first: int, index: int, how: str) -> None:
    """Every argument that starts with the leading dimension must give it as the same several
    sizes: flattened alone, [T, B] ids beside [B, T] rows would pair each row with another's."""
    shape = next((s for s in case.shapes if s[case.leading_dim] >= 2), None)
    if shape is None:
        pytest.skip(f"every test shape has {case.leading_dim} = 1, whose sizes cannot be put in another order")
    inputs = case.make_inputs(shape, case.dtypes[0], "cpu", seed=12)
    lead = (case.leading_dim,)
    given = [t.unsqueeze(0) if spec[:1] == lead else t for t, (_, _, spec, _, _) in zip(inputs, case.args)]  # [1, N, ...]
    given[index] = inputs[index] if how == "flat" else inputs[index].unsqueeze(1)  # [N, ...] or [N, 1, ...]
    name, first_name = case.args[index][0], case.args[first][0]
    with pytest.raises(package.InputError, match=f"^{case.name}: argument '{name}' must have shape .* \\(argument '{first_name}' gives its leading dimension"):
        getattr(package, case.name)(*given, **case.attrs)


@parametrize("case", _ids(only(lambda c: True)))
def test_public_function_under_torch_compile(case: OpCase) -> None:
    """Backend choice and checks trace too: the public function compiles into one graph, its
    lookups traced from empty (earlier calls would have left their answers cached)."""
    torch._dynamo.reset()
    for cache in (runtime._CHOSEN, runtime._OVERLOADS, runtime._PLATFORM_OF):
        cache.clear()
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=12)
    function = getattr(package, case.name)

    def public(*args: Any) -> Any:
        return function(*args)

    compiled = torch.compile(public, backend="aot_eager", fullgraph=not case.dynamic)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case.dynamic:
            with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                got = compiled(*inputs)
        else:
            got = compiled(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    case.assert_bitwise_equal(got, case.run(*inputs), "compiled public function vs eager")
    # Tracing the package's own code warns about nothing (torch's deprecation notices aside).
    ours = [str(w.message) for w in caught if not issubclass(w.category, DeprecationWarning)]
    assert not ours, f"torch.compile warned: {ours}"


# ---------------------------------------------------------------------------- gradients


def _loss_and_grads(case: OpCase, inputs: list[Any], outputs_of: Callable[..., Outputs], cotangent_seed: int, output_dtypes: dict[str, torch.dtype] | None = None) -> Any:
    output_dtypes = output_dtypes or {}
    leaves = [None if t is None else t.detach().requires_grad_(name in case.grad_inputs) for (name, *_), t in zip(case.args, inputs)]
    outputs = outputs_of(*leaves)
    generator = torch.Generator().manual_seed(cotangent_seed)
    # Cotangents are rounded to each output's dtype first, so the float32 reference
    # receives exactly the gradients the kernels receive.
    loss: Any = sum(
        (o.float() * torch.randn(o.shape, generator=generator).to(output_dtypes.get(name, o.dtype)).float().to(o.device)).sum()
        for o, (name, _, differentiable) in zip(outputs, case.outputs)
        if differentiable and o.is_floating_point()
    )
    return torch.autograd.grad(loss, [leaf for leaf in leaves if leaf is not None and leaf.requires_grad])


differentiable = _ids(only(lambda c: bool(c.op.backward)))


@parametrize("case, device, dtype", differentiable, on_devices, dtypes())
def test_backward_matches_reference(case: OpCase, device: str, dtype: str) -> None:
    inputs = case.make_inputs(case.shapes[0], dtype, device, seed=7)
    got = _loss_and_grads(case, inputs, case.run, cotangent_seed=8)
    output_dtypes = {name: o.dtype for (name, *_), o in zip(case.outputs, case.run(*inputs))}
    ref_inputs = [t.cpu().float() if t.is_floating_point() else t.cpu() for t in inputs]
    want = _loss_and_grads(case, ref_inputs, case.reference, cotangent_seed=8, output_dtypes=output_dtypes)
    atol, rtol = case.tolerance(dtype)
    for name, g, w in zip(case.grad_inputs, got, want):
        torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol * 4, rtol=rtol * 4, equal_nan=True, msg=named(f"grad of {name}"))


@parametrize("case, device, dtype", _ids(only(lambda c: bool(c.op.backward) and c.has_optional)), on_devices, dtypes())
def test_backward_without_optional_arguments(case: OpCase, device: str, dtype: str) -> None:
    """Every optional argument left out (None): the gradients of the others, against the reference's."""
    inputs = case.without_optional(case.make_inputs(case.shapes[0], dtype, device, seed=7))
    got = _loss_and_grads(case, inputs, case.run, cotangent_seed=8)
    output_dtypes = {name: o.dtype for (name, *_), o in zip(case.outputs, case.run(*inputs))}
    ref_inputs = [None if t is None else t.cpu().float() if t.is_floating_point() else t.cpu() for t in inputs]
    want = _loss_and_grads(case, ref_inputs, case.reference, cotangent_seed=8, output_dtypes=output_dtypes)
    names = [name for (name, *_), t in zip(case.args, inputs) if t is not None and name in case.grad_inputs]
    assert len(got) == len(want) == len(names)
    atol, rtol = case.tolerance(dtype)
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g.cpu().float(), w.float(), atol=atol * 4, rtol=rtol * 4, equal_nan=True, msg=named(f"grad of {name}"))


@parametrize("case, device, dtype", differentiable, on_devices, dtypes())
def test_backward_is_deterministic(case: OpCase, device: str, dtype: str) -> None:
    inputs = case.make_inputs(case.shapes[0], dtype, device, seed=9)
    first = _loss_and_grads(case, inputs, case.run, cotangent_seed=10)
    case.assert_bitwise_equal(_loss_and_grads(case, inputs, case.run, cotangent_seed=10), first, "repeated backward")


def undifferentiated(case: OpCase) -> Iterator[Any]:
    """The floating arguments the backward gives no gradient for."""
    if case.op.backward:
        for a in case.op.args:
            if a.dtypes[0] in ("float32", "float16", "bfloat16") and a.name not in case.grad_inputs:
                yield a.name, (a.name,), ()


@parametrize("case, device, arg", on_devices, undifferentiated)
def test_no_silent_gradient_for_undifferentiated_arguments(case: OpCase, device: str, arg: str) -> None:
    """The backward gives no gradient for these arguments: asking for one is refused, never answered with None."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=14)
    leaves = [t.requires_grad_(name == arg) for (name, *_), t in zip(case.args, inputs)]
    outputs = case.run(*leaves)
    loss = sum(o.float().sum() for o, (_, _, differentiable) in zip(outputs, case.outputs) if differentiable and o.requires_grad)
    with pytest.raises(RuntimeError, match="no gradient flows to"):
        loss.backward()  # type: ignore[union-attr]


@parametrize("case, device, kernel", _ids(only(lambda c: not c.op.backward)), kernels(extra=("public",)))
def test_not_differentiable_is_refused(case: OpCase, device: str, kernel: str | None) -> None:
    """The spec declares no backward: differentiating through the op raises instead of giving no or zero gradients."""
    inputs = [t.requires_grad_(t.is_floating_point()) for t in case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=14)]
    outputs = case.run(*inputs) if kernel is None else case.run_kernel(kernel, *inputs)
    loss = sum(o.float().sum() for o in outputs if o.is_floating_point())
    with pytest.raises(RuntimeError, match="is not differentiable"):
        loss.backward()  # type: ignore[union-attr]
    with torch.no_grad():
        assert not any(o.requires_grad for o in (case.run(*inputs) if kernel is None else case.run_kernel(kernel, *inputs)))


# ---------------------------------------------------------------------------- forward mode, torch.func and vmap
# One rule for every op, at its autograd kernel, which the public function and every overload
# reach: a tangent is refused (no op has a forward derivative, and below autograd a tangent would
# be dropped, reading as zeros), and so is a gradient asked inside a torch.func transform.
# torch.func.vmap runs the op once per sample, through torch's per-sample fallback.


def forward_modes(case: OpCase) -> Iterator[Any]:
    for mode in ("jvp", "jacfwd", "dual", "dual_under_no_grad"):
        yield mode, (mode,), ()


def _refusal(case: OpCase, what: str) -> str:
    return re.escape(f"{registry.PACKAGE}.{case.name} {what}")


@parametrize("case, device, kernel, mode", kernels(extra=("default", "public")), forward_modes)
def test_forward_mode_ad_is_refused(case: OpCase, device: str, kernel: str | None, mode: str) -> None:
    """A tangent through the op, by torch.func.jvp, jacfwd or dual tensors (with grad mode on or
    off), raises naming the op, instead of giving a zero tangent or none."""
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=23)
    function, primals = case.of_floating(kernel, inputs)
    generator = torch.Generator().manual_seed(24)
    tangents = tuple(torch.randn(p.shape, generator=generator).to(p.dtype).to(p.device) for p in primals)
    with pytest.raises(RuntimeError, match=_refusal(case, "does not support forward-mode AD")):
        if mode == "jvp":
            torch.func.jvp(function, primals, tangents)
        elif mode == "jacfwd":
            # With respect to one scale of every floating input: jacfwd's own path (vmap over jvp), at a basis of one.
            torch.func.jacfwd(lambda scale: function(*(p * scale for p in primals)))(torch.ones((), device=device))
        else:
            with torch.no_grad() if mode == "dual_under_no_grad" else contextlib.nullcontext(), forward_ad.dual_level():
                function(*(forward_ad.make_dual(p, t) for p, t in zip(primals, tangents)))


def reverse_transforms(case: OpCase) -> Iterator[Any]:
    for transform in ("grad", "vjp"):
        yield transform, (transform,), ()


@parametrize("case, device, kernel, transform", kernels(extra=("default", "public")), reverse_transforms)
def test_gradient_under_a_torch_func_transform_is_refused(case: OpCase, device: str, kernel: str | None, transform: str) -> None:
    """torch.func.grad and vjp raise naming the op (the op's autograd runs outside torch.func's
    transforms), where torch would name none; an op without a backward says it is not differentiable."""
    function, primals = case.of_floating(kernel, case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=25))
    what = "does not support gradients under torch.func transforms" if case.op.backward else "is not differentiable"
    with pytest.raises(RuntimeError, match=_refusal(case, what)):
        if transform == "grad":
            torch.func.grad(lambda *floating: sum(o.float().sum() for o in function(*floating) if o.is_floating_point()))(*primals)
        else:
            torch.func.vjp(function, *primals)


@parametrize("case, device, kernel", kernels(extra=("default", "public")))
def test_vmap_gives_each_samples_bits(case: OpCase, device: str, kernel: str | None) -> None:
    """torch.func.vmap over two samples gives each sample's own bits, or raises: never another result.
    An op whose output size follows its data (pack) cannot stack its samples, and a check that
    reads a value (.item()) cannot run under vmap; torch refuses both."""
    samples = [case.make_inputs(case.shapes[0], case.dtypes[0], device, seed=seed) for seed in (26, 27)]
    def call(*values: Any) -> Outputs:
        return case.run(*values) if kernel is None else case.run_kernel(kernel, *values)

    stacked = [None if first is None else torch.stack([first, second]) for first, second in zip(*samples)]
    try:
        got = torch.func.vmap(call)(*stacked)
    except RuntimeError as refused:
        assert case.dynamic or "vmap" in str(refused), f"vmap raised where it has no reason to: {refused}"
        return
    want = tuple(torch.stack(outputs) for outputs in zip(call(*samples[0]), call(*samples[1])))
    case.assert_bitwise_equal(got, want, "vmap over two samples vs each sample alone")


# ---------------------------------------------------------------------------- bad inputs
# Each case breaks one check; both the public function and the native op must refuse
# with a message naming the argument.


def _breaker(check: Any) -> tuple[str, Any] | None:
    """(case id, how to break the argument) for one check of the registry, or None."""
    kind, axis = check.kind, check.axis
    if kind == "layout":  # a sparse tensor: other layouts in test_a_tensor_of_another_layout_is_refused_by_name
        return "layout", lambda t: t.to_sparse()
    if kind == "rank":
        # Fewer dimensions than the spec: extra leading ones may be legal (leading_dim), missing ones never are.
        rank = check.rank
        return "rank", lambda t: t.reshape(-1) if rank >= 2 else (t.reshape(-1)[0] if rank == 1 else t.unsqueeze(0))
    if kind == "dtype":
        wrong = torch.float64 if "int32" in check.dtypes else torch.int32
        return "dtype", lambda t: t.to(wrong)
    if kind == "same_dtype":
        return "same-dtype", lambda t: t.to(torch.float16 if t.dtype != torch.float16 else torch.float32)
    if kind == "same_device":
        return "device", lambda t: t.to("meta")
    if kind in ("dim", "count_nonzero", "equals_dim"):
        return {"dim": "dim", "count_nonzero": "count", "equals_dim": "equals"}[kind], lambda t: torch.cat([t, t.narrow(axis, 0, 1)], dim=axis)
    if kind in ("multiple_of", "multiple_of_dim"):
        return "multiple", None  # a size that breaks a divisibility rule: every argument rebuilt
    if kind == "contiguous" and check.rank > 0:  # a 0-d tensor is always contiguous
        return "contiguous", lambda t: torch.stack([t, t], dim=-1)[..., 0]
    return None


def bad_cases(case: OpCase) -> Iterator[Any]:
    names = [a.name for a in case.op.args]
    for check in case.op.checks:
        found = _breaker(check)
        if found is None:
            continue
        kind, breaker = found
        arg = names[check.arg]
        ident = f"dim-{check.dim}-{arg}" if kind == "dim" else f"{kind}-{check.dim}" if kind in ("multiple", "count", "equals") else f"{kind}-{arg}"
        yield ident, (arg, {"dim": check.dim} if kind == "multiple" else breaker, check.message), ()


def entries(case: OpCase) -> Iterator[Any]:
    for entry in ("public", "native"):
        yield entry, (entry,), ()


@parametrize("case, arg, breaker, message, entry", bad_cases, entries)
def test_bad_input_is_rejected(case: OpCase, arg: str, breaker: Any, message: str, entry: str) -> None:
    if isinstance(breaker, dict):  # a size that breaks a divisibility rule: rebuild every argument
        dims = dict(case.shapes[0])
        dims[breaker["dim"]] -= 1
        inputs = case.make_inputs(dims, case.dtypes[0], "cpu", seed=6)
    else:
        inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=6)
        index = [name for name, *_ in case.args].index(arg)
        inputs[index] = breaker(inputs[index])
    call = getattr(package, case.name) if entry == "public" else case.overload("default")
    with pytest.raises((ValueError, RuntimeError)) as caught:
        call(*inputs)
    assert message in str(caught.value), f"expected {message!r} in {str(caught.value)!r}"
    assert f"'{arg}'" in str(caught.value)


# ---------------------------------------------------------------------------- tensors of another layout
# Sparse (COO, CSR), nested (of strided parts, which report torch.strided, or jagged) and mkldnn
# tensors have no strides, some not even sizes: every tensor argument is refused by its layout
# before any other check reads it, naming the argument and the layout, by the public function and
# by the native op (the bindings register its entry points for those layouts' dispatch keys too).
# A jagged nested tensor is a Python subclass that never reaches the native op's dispatch.


def _other_layouts(tensor: torch.Tensor) -> Iterator[tuple[str, Callable[[torch.Tensor], Any], str, tuple[str, ...]]]:
    """(id, how to build it from ``tensor``, the layout the message names, the entries that see it)."""
    both = ("public", "native")
    yield "sparse_coo", lambda t: t.to_sparse(), "torch.sparse_coo", both
    if tensor.dim() >= 2:
        # Of ones: a batch of CSR matrices needs as many entries in each (the values are not read).
        yield "sparse_csr", lambda t: torch.ones_like(t).to_sparse_csr(), "torch.sparse_csr", both
    yield "nested", lambda t: torch.nested.nested_tensor([t]), "a nested tensor", both
    if tensor.dim() >= 1:
        yield "jagged", lambda t: torch.nested.nested_tensor([t, t], layout=torch.jagged), "a nested tensor", ("public",)
    if tensor.dim() >= 1 and tensor.is_floating_point():
        yield "mkldnn", lambda t: t.to_mkldnn(), "torch._mkldnn", both


def other_layout_cases(case: OpCase) -> Iterator[Any]:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=22)
    for index, ((name, *_), tensor) in enumerate(zip(case.args, inputs)):
        for ident, build, got, entries in _other_layouts(tensor):
            for entry in entries:
                yield f"{name}-{ident}-{entry}", (index, build, got, entry), ()


@parametrize("case, index, build, got, entry", other_layout_cases)
def test_a_tensor_of_another_layout_is_refused_by_name(case: OpCase, index: int, build: Callable[[torch.Tensor], Any], got: str, entry: str) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=22)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes that sparse CSR and nested tensors are in beta
        inputs[index] = build(inputs[index])
    name = case.args[index][0]
    call = getattr(package, case.name) if entry == "public" else case.overload("default")
    with pytest.raises(package.InputError if entry == "public" else (ValueError, RuntimeError)) as caught:
        call(*inputs, **case.attrs)
    expected = f"{case.name}: argument '{name}' must be a dense tensor (layout torch.strided, not nested), got {got}"
    assert expected in str(caught.value), f"expected {expected!r} in {str(caught.value)!r}"


# ---------------------------------------------------------------------------- arguments of the wrong type
# A list, None (for a required argument), an int or a NumPy array where a tensor belongs: the
# public function raises InputTypeError (an InputError and a TypeError) naming the argument,
# what it expects and what it got, before reading any attribute of it; also when the other
# arguments carry extra leading dimensions, or require grad.


def _wrong_values(tensor: torch.Tensor) -> list[tuple[str, Any, str]]:
    values: list[tuple[str, Any, str]] = [("list", tensor.reshape(-1).tolist() if tensor.dim() == 0 else tensor.tolist(), "list"), ("int", 3, "int")]
    try:
        import numpy as np

        values.append(("ndarray", np.zeros(tuple(tensor.shape), dtype=np.float32), "numpy.ndarray"))
    except ImportError:
        pass
    return values


def wrong_type_cases(case: OpCase) -> Iterator[Any]:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=17)
    for index, ((name, _, _, optional, _), tensor) in enumerate(zip(case.args, inputs)):
        for ident, value, got in _wrong_values(tensor) + ([] if optional else [("None", None, "NoneType")]):
            yield f"{name}-{ident}", (index, value, got), ()


def lifted(case: OpCase) -> Iterator[Any]:
    yield "plain", (False,), ()
    if case.leading_dim is not None:  # the op takes extra leading dimensions
        yield "leading-dims", (True,), ()


@parametrize("case, index, value, got, lifted", wrong_type_cases, lifted)
def test_wrong_argument_type_is_an_input_error(case: OpCase, index: int, value: Any, got: str, lifted: bool) -> None:
    inputs = [t.requires_grad_(name in case.grad_inputs) for (name, *_), t in zip(case.args, case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=17))]
    if lifted:
        lead = (case.leading_dim,)
        inputs = [t.detach().unsqueeze(0).requires_grad_(t.requires_grad) if shape[:1] == lead else t for t, (_, _, shape, _, _) in zip(inputs, case.args)]
    inputs[index] = value
    name, optional = case.args[index][0], case.args[index][3]
    with pytest.raises(package.InputTypeError) as caught:
        getattr(package, case.name)(*inputs, **case.attrs)
    assert isinstance(caught.value, (package.InputError, TypeError))
    expected = "a torch.Tensor or None" if optional else "a torch.Tensor"
    assert str(caught.value) == f"{case.name}: argument '{name}' must be {expected}, got {got}"


def wrong_attribute_values(case: OpCase) -> Iterator[Any]:
    for a in case.op.attrs:
        wrong: list[Any] = ["1", None]
        if a.type != "bool":
            wrong.append(True)
        if a.type == "int":
            wrong.append(1.5)
        if a.type == "bool":
            wrong.append(1)
        for value in wrong:
            yield f"{a.name}-{value!r}", (a.name, value), ()


@parametrize("case, attr, value", wrong_attribute_values)
def test_wrong_attribute_type_is_an_input_error(case: OpCase, attr: str, value: Any) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=18)
    with pytest.raises(package.InputTypeError, match=f"{case.name}: attribute '{attr}' must be .*, got {type(value).__name__}"):
        getattr(package, case.name)(*inputs, **{**case.attrs, attr: value})


# ---------------------------------------------------------------------------- attribute values
# A float attribute must be finite within float32's range (the kernels receive float32, and a NaN
# passes no comparison a kernel makes), and not a nonzero value that float32 holds as 0 (a scale of
# 1e-46 would arrive as the 0 that means "the default"); a spec's range bounds narrow it, met by
# the value as given and as float32.  Both the public function and the native op refuse a value
# outside, naming the attribute and the value.


def _next_float32(x: float, toward: float) -> float:
    """The float32 next to ``x`` (a float32) in the direction of ``toward``."""
    return float(torch.nextafter(torch.tensor(x, dtype=torch.float32), torch.tensor(toward, dtype=torch.float32)))


def _just_outside(relation: str, bound: float, integral: bool) -> float:
    """The value nearest ``bound`` that breaks ``value <relation> bound``: for a float, the nearest
    float32 (one nearer, a float64, could be one float32 holds as 0, which the finite check refuses
    first)."""
    if relation in (">", "<"):
        return int(bound) if integral else float(bound)
    step = -1 if relation == ">=" else 1
    return int(bound) + step if integral else _next_float32(float(bound), step * math.inf)


def attribute_values_outside(case: OpCase) -> Iterator[Any]:
    names = [a.name for a in case.op.args] + [a.name for a in case.op.attrs]
    kinds = {a.name: a.type for a in case.op.attrs}
    for check in case.op.checks:
        attr = names[check.arg] if check.kind in ("finite", "bound") else None
        if check.kind == "finite":
            for value in (math.nan, math.inf, -math.inf, 1e39, -(10**39), 1e-46, -(2.0**-150)):
                yield f"{attr}-{value!r}", (attr, value, check.message), ()
        elif check.kind == "bound":
            value = _just_outside(check.relation, check.bound, kinds[attr] == "int")
            yield f"{attr}-{check.relation}-{value!r}", (attr, value, check.message), ()
            if kinds[attr] == "float" and check.relation in (">", "<") and check.bound != 0:
                # Inside as a float64, the bound itself as float32 (a bound of 0 leaves no such
                # value that the finite check does not refuse first).
                inside = math.nextafter(float(check.bound), math.inf if check.relation == ">" else -math.inf)
                yield f"{attr}-{check.relation}-float32-{inside!r}", (attr, inside, check.message), ()


@parametrize("case, attr, value, message, entry", attribute_values_outside, entries)
def test_attribute_value_outside_its_range_is_refused(case: OpCase, attr: str, value: Any, message: str, entry: str) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=19)
    call = getattr(package, case.name) if entry == "public" else case.overload("default")
    if entry == "native" and isinstance(value, int) and abs(value) > 2**63:
        value = float(value)  # the torch schema's double: an int this large does not reach the op's checks as one
    with pytest.raises(package.InputError if entry == "public" else (ValueError, RuntimeError)) as caught:
        call(*inputs, **{**case.attrs, attr: value})
    assert message in str(caught.value), f"expected {message!r} in {str(caught.value)!r}"


def attribute_values_at_the_edge(case: OpCase) -> Iterator[Any]:
    """The edge values a range admits: an inclusive bound itself, the next float32 inside an
    exclusive one (the kernels receive float32)."""
    names = [a.name for a in case.op.args] + [a.name for a in case.op.attrs]
    for check in case.op.checks:
        if check.kind == "bound":
            attr = names[check.arg]
            value = float(check.bound) if check.relation in (">=", "<=") else _next_float32(float(check.bound), math.inf if check.relation == ">" else -math.inf)
            yield f"{attr}-{check.relation}-{value!r}", (attr, value), ()


@parametrize("case, attr, value", attribute_values_at_the_edge)
def test_attribute_value_at_the_edge_of_its_range_is_accepted(case: OpCase, attr: str, value: float) -> None:
    inputs = case.make_inputs(case.shapes[0], case.dtypes[0], "cpu", seed=20)
    getattr(package, case.name)(*inputs, **{**case.attrs, attr: value})


# ---------------------------------------------------------------------------- the caller's floating-point mode
# A process may flush subnormals to zero (torch.set_flush_denormal(True): x86's FTZ and DAZ, Arm's
# FZ) or change the rounding mode; a host kernel computes in IEEE's default mode whatever the
# caller set, so its bits never depend on it, and gives the caller's mode back.


def _host_kernels(case: OpCase) -> Iterator[Any]:
    for platform, device, kernel, marks in targets(case):
        if device_type(platform) == "cpu":
            yield f"{platform}-{kernel}", (device, kernel), marks


def _with_subnormals(t: torch.Tensor) -> torch.Tensor:
    """Every third element of a float tensor replaced by a subnormal of its dtype (of either sign)."""
    if not t.is_floating_point() or t.numel() == 0:
        return t
    tiny = torch.finfo(t.dtype).tiny
    flat = t.detach().clone().reshape(-1)
    steps = torch.arange(flat.numel(), dtype=torch.float64)
    subnormal = (tiny * ((steps % 7) + 1) / 8 * torch.where(steps % 2 == 0, 1.0, -1.0)).to(t.dtype)
    flat[::3] = subnormal[::3]
    return flat.reshape(t.shape)


@parametrize("case, device, kernel, dtype", _host_kernels, dtypes())
def test_the_callers_flush_to_zero_mode_changes_no_bit(case: OpCase, device: str, kernel: str, dtype: str) -> None:
    inputs = [_with_subnormals(t) for t in case.make_inputs(case.shapes[0], dtype, device, seed=21)]
    want = case.run_kernel(kernel, *inputs, **case.attrs)
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU has no flush-to-zero mode torch can set (no SSE3 on x86)")
    try:
        got = case.run_kernel(kernel, *inputs, **case.attrs)
        still_flushing = torch.tensor([torch.finfo(torch.float32).tiny]) / 2 == 0
    finally:
        torch.set_flush_denormal(False)
    case.assert_bitwise_equal(got, want, f"{kernel} with the caller flushing subnormals vs without")
    assert bool(still_flushing), "the kernel did not give the caller its flush-to-zero mode back"
