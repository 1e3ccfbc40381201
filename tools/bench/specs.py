"""The few facts of an op spec that the benchmarks and tools/gpu_check.py use, read with PyYAML alone.

The generator validates every spec (``make check``: generator/model.py, including the ``bench``
section); this reads the validated files without pydantic, so that tools/gpu_check.py runs on a
GPU machine that has torch and PyYAML but not the generator's dependencies.
tests/test_bench_sections.py checks that it reads what the generator's model reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
FLOATS = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Arg:
    name: str
    dtype: str
    """float32, ..., int64, or a dtype variable (one capital letter)."""
    shape: tuple[str, ...]
    optional: bool = False
    low: int = 0
    high: int | str = 2
    """The tests' range of an integer argument's values, [low, high); high may name a dimension."""

    @property
    def floating(self) -> bool:
        return self.dtype in FLOATS or len(self.dtype) == 1


@dataclass(frozen=True)
class LayerCase:
    sizes: dict[str, int | str]
    """Dimension -> a size, or a size of the decoder layer (tokens, hidden, ...)."""
    label: str
    backward: bool = False


@dataclass(frozen=True)
class Bench:
    baseline_torch: str | None
    """A name of tools/bench/baselines.py's vocabulary, or None when the baseline is a kernel."""
    baseline_kernel: str | None
    """A reference kernel of the same spec."""
    dtypes: tuple[str, ...]
    shapes: tuple[dict[str, int], ...] = ()
    layer: tuple[LayerCase, ...] = ()


@dataclass(frozen=True)
class OpData:
    name: str
    aliases: tuple[str, ...]
    args: tuple[Arg, ...]
    attrs: dict[str, Any]
    """Attribute -> its default."""
    outputs: tuple[tuple[str, tuple[str, ...]], ...]
    """(name, shape) of each output."""
    batch_dim: str | None
    offsets: dict[str, str]
    """Dimension -> the argument holding its sequence offsets (packed variable-length sequences)."""
    prefix: bool
    """With the attributes' defaults, a sequence's first rows (queries and keys alike) are a
    sequence of their own (tests.sequences.prefix, under prefix_if): causal attention."""
    test_shapes: tuple[dict[str, int], ...]
    reference: str
    tolerance: str
    references: dict[str, str]
    """Reference kernel -> its Python callable (dotted name)."""
    has_backward: bool
    bench: Bench | None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def dims_of(self, arg: str) -> tuple[str, ...]:
        return next(a.shape for a in self.args if a.name == arg)


def _bench(data: dict[str, Any] | None, name: str) -> Bench | None:
    if data is None:
        return None
    baseline = data["baseline"]
    layer = tuple(
        LayerCase(sizes=dict(case["sizes"]), label=case.get("label") or name, backward=bool(case.get("backward", False))) for case in data.get("layer", ())
    )
    return Bench(
        baseline_torch=baseline.get("torch"),
        baseline_kernel=baseline.get("kernel"),
        dtypes=tuple(data["dtypes"]),
        shapes=tuple(dict(shape) for shape in data.get("shapes", ())),
        layer=layer,
    )


def parse(data: dict[str, Any]) -> OpData:
    """One op spec's mapping (as PyYAML reads the file)."""
    args = []
    for arg in data["args"]:
        values = arg.get("values") or {}
        args.append(
            Arg(
                name=arg["name"], dtype=arg["dtype"], shape=tuple(arg["shape"]), optional=bool(arg.get("optional", False)),
                low=values.get("low", 0), high=values.get("high", 2),
            )
        )
    tests = data["tests"]
    kernels = data["kernels"]
    attrs = {attr["name"]: attr["default"] for attr in data.get("attrs", ())}
    sequences = tests.get("sequences") or {}
    return OpData(
        name=data["name"],
        aliases=tuple(data.get("aliases", ())),
        args=tuple(args),
        attrs=attrs,
        outputs=tuple((out["name"], tuple(out["shape"])) for out in data["outputs"]),
        batch_dim=tests.get("batch_dim"),
        offsets=dict(sequences.get("offsets", {})),
        prefix=bool(sequences.get("prefix", False)) and bool(attrs.get(sequences.get("prefix_if"), True)),
        test_shapes=tuple(dict(shape) for shape in tests["shapes"]),
        reference=data["reference"],
        tolerance=data["tolerance"],
        references={name: k["python"] for name, k in kernels.items() if k["kind"] == "reference"},
        has_backward=bool(data.get("backward")),
        bench=_bench(data.get("bench"), data["name"]),
    )


def read_op(name: str, root: Path = ROOT) -> OpData:
    path = root / "specs" / "ops" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (root / "specs" / "ops").glob("*.yaml")))
        raise KeyError(f"no op spec {path.relative_to(root)} (ops: {known})")
    return parse(yaml.safe_load(path.read_text()))


@lru_cache(maxsize=4)
def read_ops(root: Path = ROOT) -> dict[str, OpData]:
    """Every op of the catalog, by name, in name order (read once per run: treat it as read-only)."""
    return {p.stem: parse(yaml.safe_load(p.read_text())) for p in sorted((root / "specs" / "ops").glob("*.yaml"))}
