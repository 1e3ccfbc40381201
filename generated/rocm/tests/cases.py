# Copied from runtime/tests/cases.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""What the contract suite runs for each op, and the helpers its tests share.

The contract suite is one set of tests, run for every op of the catalog from its registry entry
and its test data, the way PyTorch's OpInfo drives its tests over every op; its modules are one
per family of properties, all parametrised here (``parametrize`` and its columns) over ``CASES``:

- ``test_accuracy``: against the reference within the op's tolerance class, on empty inputs, and
  the same bits through the native op, lifted leading dimensions and bool bytes;
- ``test_invariance``: every guarantee each native kernel declares, checked bitwise at the sizes
  its tiles call for, through the kernel's own overload (``torch.ops.<package>.<op>.<kernel>``),
  and bits that do not depend on the caller's floating-point mode;
- ``test_sequences``: packed sequences and paged caches;
- ``test_autograd``: gradients, or a clear refusal where the spec declares no backward;
  forward-mode AD, torch.func and vmap;
- ``test_input_errors``: bad inputs rejected with errors that name the argument;
- ``test_torch_integration``: ``torch.library.opcheck`` on every overload, autocast,
  torch.compile and meta tensors.

Test ids start with the op's name; ``pytest tests --op NAME`` runs one op's contracts (``-k NAME``
also matches the ops whose names contain NAME).

The data comes from two places: the package's registry (the op's signature, kernels and
backends) and ``contract_cases.json`` beside this file (the test shapes, the batch dimension,
packed sequences, attribute variants, how to fill integer arguments and, per native kernel, the
sizes its tiles call for), both written by the generator from the op specs.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import torch

from bitwise import bits

if TYPE_CHECKING:
    from rlkernels._interchange import KernelSizes, OpCases, Paged

_FILE = Path(__file__).with_name("contract_cases.json")
# The file names its package, whose declaration of the file's layout then reads it in full.
PACKAGE: str = json.loads(_FILE.read_text(encoding="utf-8"))["package"]
package = importlib.import_module(PACKAGE)
registry = importlib.import_module(f"{PACKAGE}._registry")
runtime = importlib.import_module(f"{PACKAGE}._runtime")
interchange = importlib.import_module(f"{PACKAGE}._interchange")
_DATA = interchange.read(interchange.ContractCases, _FILE)

Inputs = list[Any]
Outputs = tuple[torch.Tensor, ...]


def device_type(platform: str) -> str:
    return next(p.device_type for p in registry.PLATFORMS if p.name == platform)


def present(platform: str) -> bool:
    return platform == "cpu" or runtime.detect_platform() == platform


def absent_reason(platform: str) -> str:
    return f"no {platform} device in this process (detected platform: {runtime.detect_platform()})"


DEVICE_TYPE = device_type(registry.BUILD_PLATFORM)


def offsets(lengths: Sequence[int]) -> torch.Tensor:
    return torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0)


def _random_split(total: int, entries: int, generator: torch.Generator) -> torch.Tensor:
    """Offsets of ``entries - 1`` sequences that together cover ``total`` rows, in random lengths."""
    if entries < 2:
        return torch.zeros(entries, dtype=torch.int64)  # no sequence: no row belongs to one
    cuts = torch.randint(0, total + 1, (entries - 2,), generator=generator).sort().values
    return torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.full((1,), total)])


class OpCase:
    """One op of the catalog: its test data and the helpers its contract tests use."""

    def __init__(self, name: str, data: OpCases) -> None:
        op = registry.OPS[name]
        self.name = name
        self.op = op
        self.shapes: list[dict[str, int]] = [dict(shape) for shape in data.shapes]
        # (name, dtype or dtype variable, shape, optional, how to fill it)
        self.args = [(a.name, a.dtype, a.shape, a.optional, data.values.get(a.name)) for a in op.args]
        self.attrs: dict[str, Any] = {a.name: a.default for a in op.attrs}
        # (name, shape, differentiable)
        self.outputs = [(o.name, o.shape, o.differentiable) for o in op.outputs]
        # Dimensions whose size is the number of true entries of an argument (they follow its data).
        self.counted: dict[str, str] = data.counted
        # Dimensions another must be a multiple of, and those (a divisor 0 leaves only 0).
        self.divides: dict[str, str] = data.divides
        # Dimensions another one's size gives (B1 = B + 1): dimension -> (that one, what is added).
        self.follows: dict[str, tuple[str, int]] = data.follows
        sequences = data.sequences
        # Packed sequences: dimension -> the argument holding its offsets (cu_seqlens).
        self.offsets: dict[str, str] = dict(sequences.offsets) if sequences else {}
        # The first packed dimension's rows see the second's aligned to the end, each only up to its own position.
        self.prefix: bool = bool(sequences and sequences.prefix)
        # The bool attribute under which alone that holds, if any.
        self.prefix_if: str | None = sequences.prefix_if if sequences else None
        # Sequences whose keys lie in a paged cache (tests.paged): the queries' dimension, and the
        # arguments holding the queries' offsets, the keys' lengths, the block table and the caches.
        self.paged: Paged | None = data.paged
        if self.paged is not None:
            self.prefix_if = self.paged.prefix_if
        self.grad_inputs = list(op.grad_inputs)
        # Each case gives every dtype variable a dtype; an op with several variables spells a case as
        # their dtypes joined by "/", in the order of dtype_vars, and its tests run every combination.
        self.dtype_vars = list(op.dtype_vars)
        self.dtypes: list[str] = list(data.dtype_cases)
        self.leading_dim = op.leading_dim
        self.batch_dim: str | None = data.batch_dim
        self.variants_data: list[dict[str, Any]] = [dict(v) for v in data.variants]
        # Every native kernel this package carries for the op, per platform, with the sizes taken from
        # its spec's tiles: batch sizes around each row tile and past two of them, chunk splits on
        # either side of a tile boundary, padding past the next one, and a reduction extent that runs
        # more than stages + 1 steps with a ragged tail.
        self.kernels: dict[str, dict[str, KernelSizes]] = {p: data.kernels[p] for p in registry.CARRIED_PLATFORMS}
        self.reduction = op.reduction
        self.dynamic = bool(op.dynamic_dims)

    # ------------------------------------------------------------------ settings

    @property
    def flags(self) -> list[Any]:
        """Bool attributes that change what the kernels compute (a layout, a mode), each at its other
        setting, and the variants that set a float attribute (a temperature): accuracy and
        portability are checked there too."""
        switches = {o.float32_if for o in self.op.outputs if o.float32_if}
        found = [pytest.param({a.name: not a.default}, id=a.name) for a in self.op.attrs if a.type == "bool" and a.name not in switches]
        floats = {a.name for a in self.op.attrs if a.type == "float"}
        found += [pytest.param(dict(v), id="-".join(f"{k}={v[k]}" for k in sorted(v))) for v in self.variants_data if floats & set(v)]
        return found

    @property
    def variants(self) -> list[Any]:
        """The contract holds for every attribute setting; an output widened to float32 shows a changed
        summation order that rounding to a 16-bit dtype can hide."""
        found = [pytest.param({}, id="defaults")]
        found += [pytest.param({o.float32_if: True}, id=o.float32_if) for o in self.op.outputs if o.float32_if]
        found += [pytest.param(dict(v), id="-".join(f"{k}={v[k]}" for k in sorted(v))) for v in self.variants_data]
        return found + [f for f in self.flags if dict(f.values[0]) not in self.variants_data]

    def facts(self, device: str, kernel: str) -> KernelSizes:
        return self.kernels[runtime.platform_of(device)][kernel]

    def declares(self, platform: str, kernel: str, guarantee: str) -> bool:
        return guarantee in self.kernels[platform][kernel].guarantees

    # ------------------------------------------------------------------ calls

    def run(self, *args: Any, **attrs: Any) -> Outputs:
        out = getattr(package, self.name)(*args, **{**self.attrs, **attrs})
        return out if isinstance(out, tuple) else (out,)

    def run_kernel(self, kernel: str, *args: Any, **attrs: Any) -> Outputs:
        """One kernel, through its own overload (not the backend the registry would pick)."""
        out = self.overload(kernel)(*args, **{**self.attrs, **attrs})
        return out if isinstance(out, tuple) else (out,)

    def overload(self, kernel: str) -> Any:
        return getattr(getattr(runtime.ops_namespace(), self.name), kernel)

    def of_floating(self, kernel: str | None, inputs: Inputs) -> tuple[Callable[..., Outputs], tuple[torch.Tensor, ...]]:
        """The public function (``kernel`` None) or one overload as a function of the floating
        arguments alone, the others held at ``inputs``, and those arguments: what torch.func's
        transforms and dual tensors take, since only a floating tensor carries a tangent or a gradient."""
        positions = [i for i, t in enumerate(inputs) if t is not None and t.is_floating_point()]

        def function(*floating: torch.Tensor) -> Outputs:
            values = list(inputs)
            for i, value in zip(positions, floating):
                values[i] = value
            return self.run(*values) if kernel is None else self.run_kernel(kernel, *values)

        return function, tuple(inputs[i] for i in positions)

    def reference(self, *args: Any, **attrs: Any) -> Outputs:
        kernel = self.op.kernels[self.op.reference]
        fn = runtime._resolve(kernel.python)
        cpu = [t.cpu().float() if t is not None and t.is_floating_point() else (None if t is None else t.cpu()) for t in args]
        out = fn(*cpu, **{**self.attrs, **attrs, **kernel.kwargs})
        return out if isinstance(out, tuple) else (out,)

    def backend_for(self, device: str) -> Any:
        return runtime.select_backend(self.name, runtime.platform_of(device))

    # ------------------------------------------------------------------ inputs

    def dtype_of(self, case: str, var: str) -> str:
        """The dtype that ``case`` gives dtype variable ``var``."""
        parts = case.split("/")
        return parts[self.dtype_vars.index(var)] if len(parts) > 1 else case

    def tolerance(self, case: str) -> tuple[float, float]:
        """The loosest tolerance among the case's dtypes: a float32 weight does not make a bfloat16 result more precise."""
        pairs = [registry.TOLERANCES[self.op.tolerance][dtype] for dtype in case.split("/")]
        return max(atol for atol, _ in pairs), max(rtol for _, rtol in pairs)

    def make_inputs(
        self, dims: dict[str, int], dtype: str, device: str, seed: int = 0, plant: int | None = None, lengths: dict[str, list[int]] | None = None
    ) -> Inputs:
        """Random inputs of ``dims``; integer arguments get the spec's ``include`` values planted,
        or only the first ``plant`` of them.  Offsets arguments (packed sequences) split their
        dimension into sequences: of the given ``lengths`` (dimension -> list), else at random."""
        generator = torch.Generator().manual_seed(seed)
        tensors: Inputs = []
        offsets_of = {arg: dim for dim, arg in self.offsets.items()}
        if self.paged is not None:
            offsets_of[self.paged.query_offsets] = self.paged.queries
        for name, arg_dtype, shape, _, values in self.args:
            size = [dims[d] for d in shape]
            torch_dtype = getattr(torch, self.dtype_of(dtype, arg_dtype) if len(arg_dtype) == 1 else arg_dtype)
            if name in offsets_of:
                dim = offsets_of[name]
                split = offsets(lengths[dim]) if lengths else _random_split(dims[dim], size[0], generator)
                assert list(split.shape) == size and int(split[-1] if split.numel() else 0) <= dims[dim], (name, split, dims)
                tensors.append(split.to(torch_dtype).to(device))
                continue
            if values is None and torch_dtype.is_floating_point:
                tensor = torch.randn(size, generator=generator)
            else:
                values = values or interchange.Values()
                high = dims[values.high] if isinstance(values.high, str) else values.high
                # An empty range (a zero-size vocabulary) leaves only the values planted below and `low`.
                tensor = torch.randint(values.low, high, size, generator=generator) if high > values.low else torch.full(size, values.low)
                flat = tensor.view(-1)
                include = values.include[:plant]
                for i, position in enumerate(range(0, flat.numel(), values.every) if include else ()):
                    flat[position] = include[i % len(include)]
            tensors.append(tensor.to(torch_dtype).to(device))
        if self.paged is not None:
            self._fill_key_lengths(tensors, dims, generator)
        return tensors

    def _fill_key_lengths(self, tensors: Inputs, dims: dict[str, int], generator: torch.Generator) -> None:
        """A paged op's keys per sequence: its queries (aligned to the end of its keys) and a random
        number of earlier keys, at most what its block-table row holds; as many as its queries
        where the row cannot even hold those (a sequence the kernels must answer with NaN)."""
        assert self.paged is not None
        names = [name for name, *_ in self.args]
        shapes = {name: shape for name, _, shape, _, _ in self.args}
        starts = tensors[names.index(self.paged.query_offsets)].cpu().long()
        queries = (starts[1:] - starts[:-1]).tolist()
        capacity = dims[shapes[self.paged.block_table][1]] * dims[shapes[self.paged.caches[0]][1]]
        keys = [q + int(torch.randint(0, max(capacity - q, 0) + 1, (1,), generator=generator)) for q in queries]
        index = names.index(self.paged.lengths)
        old = tensors[index]
        tensors[index] = torch.tensor(keys, dtype=torch.int64).reshape(old.shape).to(old.dtype).to(old.device)

    def without_optional(self, inputs: Inputs) -> Inputs:
        return [None if optional else t for t, (_, _, _, optional, _) in zip(inputs, self.args)]

    @property
    def has_optional(self) -> bool:
        return any(optional for _, _, _, optional, _ in self.args)

    # ------------------------------------------------------------------ comparisons

    def assert_bitwise_equal(self, got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], what: str) -> None:
        assert len(got) == len(want), f"{what}: {len(got)} outputs against {len(want)}"
        for index, (g, w) in enumerate(zip(got, want)):
            name = self.outputs[index][0] if len(got) == len(self.outputs) else f"output {index}"
            assert g.dtype == w.dtype, f"{what}: {name} has dtype {g.dtype} against {w.dtype}"
            assert g.shape == w.shape, f"{what}: {name} has shape {tuple(g.shape)} against {tuple(w.shape)}"
            differ = bits(g) != bits(w)
            if bool(differ.any()):
                first = int(differ.reshape(-1).nonzero()[0])
                raise AssertionError(
                    f"{what}: {name} differs in the bits of {int(differ.sum())} of {g.numel()} elements, first at flat index {first}: "
                    f"{g.detach().cpu().reshape(-1)[first].item()!r} against {w.detach().cpu().reshape(-1)[first].item()!r}"
                )

    # ------------------------------------------------------------------ contract sizes

    def contract_dims(self, device: str, kernel: str) -> dict[str, int]:
        """The first test shape with the kernel's reduction extent and, for a batched op, its largest batch."""
        own = self.facts(device, kernel)
        dims = {**self.shapes[0], **own.extents}
        if self.batch_dim is not None and own.batch_sizes:
            dims[self.batch_dim] = max(own.batch_sizes)
        return dims

    def batch_axes(self) -> list[int | None]:
        return [shape.index(self.batch_dim) if self.batch_dim in shape else None for _, _, shape, _, _ in self.args]

    def take(self, tensors: Inputs, start: int, stop: int) -> Inputs:
        return [t if axis is None else t.narrow(axis, start, stop - start).contiguous() for t, axis in zip(tensors, self.batch_axes())]

    @property
    def batched_outputs(self) -> list[int]:
        """Batch invariance is a property of the outputs that have the batch dimension: each of their
        rows must not depend on the other rows.  An output reduced over the batch (a weight
        gradient, a loss) depends on every row by definition and is outside the guarantee."""
        return [i for i, (_, shape, _) in enumerate(self.outputs) if self.batch_dim in shape]

    def out_take(self, outputs: Outputs, start: int, stop: int) -> Outputs:
        """The batched outputs' rows [start, stop)."""
        return tuple(outputs[i].narrow(self.outputs[i][1].index(self.batch_dim), start, stop - start) for i in self.batched_outputs)

    def batched(self, outputs: Outputs) -> Outputs:
        assert len(outputs) == len(self.outputs), f"{len(outputs)} outputs, the spec declares {len(self.outputs)}"
        return tuple(outputs[i] for i in self.batched_outputs)


CASES: dict[str, OpCase] = {name: OpCase(name, data) for name, data in _DATA.ops.items() if name in registry.OPS}
"""Every op of the catalog, by name: those of contract_cases.json the package's registry holds
(the two come from one generate, so that is all of them: test_accuracy holds them to it; another
package's registry, as tools/compare_builds.py imports one, may lack some)."""
UNREGISTERED = sorted(set(_DATA.ops) - set(registry.OPS))


def targets(case: OpCase, device_kernels_only: bool = False) -> list[tuple[str, str, str, Any]]:
    """(platform, device, kernel, marks) for every native kernel of every platform the package
    carries, on that platform's device; skipped (saying why) where no such device is present."""
    found = []
    for platform, by_kernel in case.kernels.items():
        if device_kernels_only and device_type(platform) == "cpu":
            continue
        marks = () if present(platform) else (pytest.mark.skip(reason=absent_reason(platform)),)
        found += [(platform, device_type(platform), kernel, marks) for kernel in by_kernel]
    return found


def devices() -> list[tuple[str, Any]]:
    """The CPU, and this build's device where it has one: (device, marks)."""
    found: list[tuple[str, Any]] = [("cpu", ())]
    if DEVICE_TYPE != "cpu":
        found.append((DEVICE_TYPE, () if present(registry.BUILD_PLATFORM) else (pytest.mark.skip(reason=absent_reason(registry.BUILD_PLATFORM)),)))
    return found


# ---------------------------------------------------------------------------- parametrisation
# The columns a contract test is parametrised by, each a function of the op's case giving
# (id, values, marks) rows; ``parametrize`` crosses them for every op of the catalog.


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


def unnamed(column: Callable[[OpCase], Iterator[Any]]) -> Callable[[OpCase], Iterator[Any]]:
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
    assert guarantee in case.facts(device, kernel).guarantees, f"{kernel} on {runtime.platform_of(device)} does not declare {guarantee}"


# ---------------------------------------------------------------------------- inputs of the empty-input and packed-sequence contracts
# Also read by tools/compare_builds.py and the device emulator's comparisons.


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


def _entries(case: OpCase) -> str:
    """The offsets arguments' dimension: sequences + 1."""
    return next(shape[0] for name, _, shape, _, _ in case.args if name in case.offsets.values())


def sequence_dims(case: OpCase, lengths: dict[str, list[int]]) -> dict[str, int]:
    count = len(next(iter(lengths.values())))
    return {**case.shapes[0], **{dim: sum(lengths[dim]) for dim in case.offsets}, _entries(case): count + 1}
