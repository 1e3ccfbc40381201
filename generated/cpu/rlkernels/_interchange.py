# Copied from runtime/rlkernels/_interchange.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""The data files the generator writes into a package and the package reads, declared once.

A package's hand-written Python is the same in every build; what varies with the specs reaches it
as three JSON files, each the ``encode``-d form of one class below:

- ``<package>/_catalog.json``: ``CatalogFile`` (the ops, the platforms, the tolerance table);
- ``<package>/_build.json``: ``BuildFile`` (the platform, the kernels it carries, what setup.py builds);
- ``tests/contract_cases.json``: ``ContractCases`` (what the generic contract suite runs per op).

The generator builds these objects (``generator/package_data.py``) and the package decodes them
(``_registry``, ``tests/cases.py``, ``setup.py``), so both sides are type-checked against the same
declaration.  Standard library only: the generator imports this file without torch, and setup.py
before the package is built.  ``SCHEMA`` is written into every file and checked on reading: a
package whose data another generator version wrote fails to load, naming both versions.

Spec names appear here only as strings (keys and values), never as identifiers.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

SCHEMA = 1
"""The version of these files' layout; raised whenever a field changes meaning or is removed."""

PROVENANCE_KEY = "_generated"
"""The key holding the generator's provenance line (JSON has no comments); not part of the data."""

CATALOG_FILE = "_catalog.json"
BUILD_FILE = "_build.json"
CASES_FILE = "contract_cases.json"
"""Beside the contract suite (``tests/``); the other two beside the package's modules."""

CheckKind = Literal[
    "layout",
    "rank",
    "dtype",
    "same_dtype",
    "same_device",
    "dim",
    "multiple_of",
    "multiple_of_dim",
    "equals_dim",
    "count_nonzero",
    "contiguous",
    "finite",
    "bound",
]
Relation = Literal[">", ">=", "<", "<="]


class DataError(ValueError):
    """A data file does not have the declared layout: damaged, or written for another version."""


# --- _catalog.json ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    description: str


@dataclass(frozen=True)
class Platform:
    name: str
    display_name: str
    kind: Literal["host", "device"]
    device_type: str
    dispatch_key: str
    import_module: str | None
    available: str | None
    version_attr: str | None
    version_attr_set: bool
    wheel_label: str
    toolkit_version_from: str | None = None


@dataclass(frozen=True)
class Tensor:
    """A tensor argument or output: ``dtype`` is a dtype or a dtype variable, ``dtypes`` those it may take."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    dtypes: tuple[str, ...]
    doc: str = ""
    optional: bool = False
    """Arguments only: the argument may be None."""
    differentiable: bool = True
    """Outputs only: false for an output autograd must not claim a gradient for."""
    float32_if: str | None = None
    """Outputs only: a bool attribute that, when true, makes this output float32."""


@dataclass(frozen=True)
class Attr:
    name: str
    type: Literal["float", "int", "bool"]
    default: bool | int | float
    doc: str = ""


@dataclass(frozen=True)
class Kernel:
    kind: Literal["native", "reference"]
    """"native" (compiled into the extension) or "reference" (a Python callable)."""
    guarantees: tuple[str, ...]
    python: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    """A reference's keyword arguments, always passed after the op's own."""
    doc: str = ""


@dataclass(frozen=True)
class DimBinding:
    """The first argument axis that carries a dimension; every later use must equal it."""

    dim: str
    arg: str
    axis: int


@dataclass(frozen=True)
class Check:
    """One input check.  ``message`` is the fixed part, shared by the Python and C++ checks."""

    kind: CheckKind
    arg: str
    """The tensor argument checked, or (``finite`` and ``bound``) the attribute."""
    message: str
    optional: bool = False
    """The argument may be None; the check applies only when it is given."""
    rank: int = 0
    dtypes: tuple[str, ...] = ()
    other: str = ""
    """The other argument the check compares with ("" for none)."""
    axis: int = 0
    other_axis: int = 0
    multiple_of: int = 1
    dim: str = ""
    """The dimension a shape check is about."""
    relation: Relation = ">="
    bound: int | float = 0
    """``bound`` checks: the value must be ``<relation> <bound>``."""
    plus: int = 0
    """equals_dim: what is added to the other dimension's size."""


ATTRIBUTE_CHECKS: frozenset[CheckKind] = frozenset({"finite", "bound"})
"""Checks of an attribute's value (``arg`` names the attribute); the others check a tensor."""


@dataclass(frozen=True)
class DerivedDim:
    dim: str
    """The dimension it follows."""
    plus: int


@dataclass(frozen=True)
class BackwardStep:
    """``op(*args)`` gives the gradients of ``gives``: an arg is a forward argument or output name,
    or ``grad(<output>)``; a None in ``gives`` drops that output of the step."""

    op: str
    args: tuple[str, ...]
    gives: tuple[str | None, ...]
    attrs: tuple[str, ...]
    """The forward op's attributes passed on, by name."""


@dataclass(frozen=True)
class Reduction:
    dim: str
    order: str
    accumulator: str
    chunk: int | None = None
    leaf: int | None = None
    lanes: int | None = None
    block: int | None = None
    step: str = "add"
    inner: Reduction | None = None


@dataclass(frozen=True)
class Op:
    name: str
    summary: str
    aliases: tuple[str, ...]
    dtype_vars: tuple[tuple[str, tuple[str, ...]], ...]
    """(variable, the dtypes it ranges over), in the spec's order (a case of several dtypes is spelled in it)."""
    args: tuple[Tensor, ...]
    attrs: tuple[Attr, ...]
    outputs: tuple[Tensor, ...]
    dims: tuple[DimBinding, ...]
    dynamic_dims: dict[str, str]
    """Dimension -> the argument whose nonzero entries it counts."""
    derived_dims: dict[str, DerivedDim]
    leading_dim: str | None
    checks: tuple[Check, ...]
    requires: tuple[str, ...]
    kernels: dict[str, Kernel]
    reference: str
    tolerance: str
    dtypes: tuple[str, ...]
    autocast: Literal["lower_precision", "float32", "none"]
    autocast_args: tuple[str, ...]
    backward: tuple[BackwardStep, ...]
    reduction: Reduction | None


@dataclass(frozen=True)
class CatalogFile:
    """``_catalog.json``: the same in every package."""

    package: Package
    tolerances: dict[str, dict[str, tuple[float, float]]]
    """Class -> dtype -> (atol, rtol)."""
    platforms: tuple[Platform, ...]
    """In detection order: a plugin platform that can sit beside another build of torch comes first."""
    ops: tuple[Op, ...]
    schema: int = SCHEMA


# --- _build.json -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ArchFloor:
    entry: str
    reason: str


@dataclass(frozen=True)
class Setup:
    """What the package's setup.py builds: the extension builder, sources, flags, target
    architectures and wheel label of one platform."""

    platform: str
    display_name: str
    kind: Literal["host", "device"]
    compiler: str
    import_module: str | None
    extension_module: str
    extension: str
    compiler_key: str | None
    arch_env: str | None
    archs: tuple[str, ...]
    arch_floor: ArchFloor | None
    device_available: str | None
    strip_flags: tuple[str, ...]
    pins: tuple[str, ...]
    sources: tuple[str, ...]
    host_flags: tuple[str, ...]
    device_flags: tuple[str, ...]
    version_attr: str | None
    version_attr_set: bool
    version_from: str | None
    version_parts: int
    version_separator: str
    wheel_label: str
    toolkit_home: str | None
    toolkit_hint: str


@dataclass(frozen=True)
class BuildFile:
    """``_build.json``: the platform one package is built for, the platforms whose kernels it carries
    (its own, then the host's), and per op the backends each of them admits, first available first."""

    platform: str
    carried: tuple[str, ...]
    backends: dict[str, dict[str, tuple[str, ...]]]
    setup: Setup
    schema: int = SCHEMA


# --- tests/contract_cases.json ----------------------------------------------------------------


@dataclass(frozen=True)
class Values:
    """How the tests fill an integer argument: [low, high), high possibly a dimension name;
    ``include`` planted at every ``every``-th element."""

    low: int = 0
    high: int | str = 2
    include: tuple[int, ...] = ()
    every: int = 5


@dataclass(frozen=True)
class Sequences:
    offsets: tuple[tuple[str, str], ...]
    """(packed dimension, the argument holding its offsets); the queries' first."""
    prefix: bool
    prefix_if: str | None


@dataclass(frozen=True)
class PackedOp:
    op: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Paged:
    queries: str
    query_offsets: str
    lengths: str
    block_table: str
    caches: tuple[str, ...]
    prefix: bool
    prefix_if: str | None
    packed: PackedOp | None


@dataclass(frozen=True)
class KernelSizes:
    """The sizes one native kernel's tiles call for in the tests."""

    guarantees: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    chunks: tuple[int, ...]
    pad_by: int
    extents: dict[str, int]
    """Reduction dimension -> the extent its tests run (empty for packed sequences, whose lengths carry it)."""
    lengths: tuple[int, ...]
    """Sequence lengths of a packed-sequence or paged op's tests (empty otherwise)."""
    block_sizes: tuple[int, ...] = ()
    """Cache block sizes of a paged op's tests, on either side of its reduction block (empty otherwise)."""


@dataclass(frozen=True)
class OpCases:
    shapes: tuple[dict[str, int], ...]
    batch_dim: str | None
    sequences: Sequences | None
    paged: Paged | None
    variants: tuple[dict[str, bool | int | float], ...]
    values: dict[str, Values]
    counted: dict[str, str]
    """Dimension -> the argument whose nonzero entries give it."""
    divides: dict[str, str]
    """Dimension -> the dimension it must divide."""
    follows: dict[str, tuple[str, int]]
    """Dimension -> (the dimension whose size gives it, what is added)."""
    dtype_cases: tuple[str, ...]
    kernels: dict[str, dict[str, KernelSizes]]
    """Carried platform -> native kernel -> its sizes."""


@dataclass(frozen=True)
class ContractCases:
    package: str
    ops: dict[str, OpCases]
    schema: int = SCHEMA


# --- encoding ---------------------------------------------------------------------------------

Data = TypeVar("Data")


def encode(value: Any) -> Any:
    """``value`` as JSON data: a dataclass as an object without the fields that hold their
    default (the reader fills them in), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            # The same type as well as equal: 0.0 is not the default 0, nor False 0.
            if f.default is not dataclasses.MISSING and type(item) is type(f.default) and item == f.default and f.name != "schema":
                continue
            if f.default_factory is not dataclasses.MISSING and item == f.default_factory():
                continue
            out[f.name] = encode(item)
        return out
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    if isinstance(value, dict):
        return {key: encode(item) for key, item in value.items()}
    return value


def decode(cls: type[Data], data: Any) -> Data:
    """A ``cls`` from JSON data, every field checked against its declared type; a mismatch raises
    ``DataError`` naming the field's path."""
    return typing.cast(Data, _decode(cls, data, cls.__name__))


def read(cls: type[Data], path: Path, max_bytes: int = 64 * 1024 * 1024) -> Data:
    """Decode the file at ``path`` (at most ``max_bytes``), checking its schema version."""
    with open(path, "rb") as file:
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise DataError(f"{path}: larger than {max_bytes} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise DataError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(data).__name__}")
    data.pop(PROVENANCE_KEY, None)
    if data.get("schema") != SCHEMA:
        raise DataError(
            f"{path}: written in data layout {data.get('schema')!r}, this package reads layout {SCHEMA}; regenerate and rebuild the package"
        )
    try:
        return decode(cls, data)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode(hint: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return data
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(data, dict):
            raise DataError(f"{where}: expected an object, got {data!r:.80}")
        fields = {f.name: f for f in dataclasses.fields(hint)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise DataError(f"{where}: unknown field {unknown[0]!r}; expected one of {', '.join(fields)}")
        hints = _hints(hint)
        values = {}
        for name, f in fields.items():
            if name in data:
                values[name] = _decode(hints[name], data[name], f"{where}.{name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise DataError(f"{where}: missing field {name!r}")
        return hint(**values)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if data is None and type(None) in options:
            return None
        problems = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _decode(option, data, where)
            except DataError as exc:
                problems.append(str(exc))
        raise DataError(problems[0] if len(problems) == 1 else f"{where}: {data!r:.80} is none of {hint}")
    if origin is Literal:
        if data not in typing.get_args(hint) or isinstance(data, bool) != any(isinstance(a, bool) for a in typing.get_args(hint)):
            raise DataError(f"{where}: expected one of {', '.join(map(repr, typing.get_args(hint)))}, got {data!r:.80}")
        return data
    if origin is tuple:
        if not isinstance(data, list):
            raise DataError(f"{where}: expected a list, got {data!r:.80}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], item, f"{where}[{i}]") for i, item in enumerate(data))
        if len(args) != len(data):
            raise DataError(f"{where}: expected {len(args)} items, got {len(data)}")
        return tuple(_decode(a, item, f"{where}[{i}]") for i, (a, item) in enumerate(zip(args, data)))
    if origin is dict:
        if not isinstance(data, dict):
            raise DataError(f"{where}: expected an object, got {data!r:.80}")
        _, item_hint = typing.get_args(hint)
        return {key: _decode(item_hint, item, f"{where}[{key!r}]") for key, item in data.items()}
    if hint is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise DataError(f"{where}: expected a number, got {data!r:.80}")
        return float(data)
    if hint in (int, str, bool, type(None)):
        if type(data) is not hint:
            raise DataError(f"{where}: expected {hint.__name__}, got {data!r:.80}")
        return data
    raise TypeError(f"{where}: no decoding for {hint!r}")  # a declaration above uses a type this reader lacks
