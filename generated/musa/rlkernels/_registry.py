# Copied from runtime/rlkernels/_registry.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Registry of this build: every op, its signature and contract, its kernels and, per platform,
the ordered backends that may run it (first available wins).

Read from two files the generator writes beside this module: ``_catalog.json`` (the ops, the
platforms and the tolerance table, the same in every build) and ``_build.json`` (the platform this
build is for, those whose kernels it carries, and each op's backends on them).  The backends are
those the generator's admission rule accepted for the op's contract; nothing here restates that rule.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Kernel:
    name: str
    kind: str
    """"native" (compiled into the extension) or "reference" (a Python callable)."""
    guarantees: frozenset[str]
    python: str | None = None
    doc: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    """A reference's keyword arguments, always passed after the op's own."""


@dataclass(frozen=True)
class Arg:
    """A tensor argument: ``dtype`` is a dtype or a dtype variable; ``dtypes`` those it may take."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    dtypes: tuple[str, ...]
    optional: bool = False
    doc: str = ""


@dataclass(frozen=True)
class Attr:
    name: str
    type: str
    """"float", "int" or "bool"."""
    default: float | int | bool
    doc: str = ""


@dataclass(frozen=True)
class Output:
    name: str
    dtype: str
    shape: tuple[str, ...]
    dtypes: tuple[str, ...]
    differentiable: bool = True
    float32_if: str | None = None
    """A bool attribute that, when true, makes this output float32."""
    doc: str = ""


@dataclass(frozen=True)
class DimBinding:
    """The first argument axis that carries a dimension."""

    dim: str
    arg: int
    """Index of the argument."""
    axis: int


@dataclass(frozen=True)
class Check:
    """One input check: the same rule and message as the C++ bindings' (see ``_checks``)."""

    kind: str
    arg: int
    message: str
    optional: bool = False
    rank: int = 0
    dtypes: tuple[str, ...] = ()
    other: int = -1
    """Index of the other argument the check compares with (-1: none)."""
    axis: int = 0
    other_axis: int = 0
    multiple_of: int = 1
    dim: str = ""
    """The dimension a shape check is about."""
    relation: str = ">="
    bound: float = 0
    """A ``bound`` check's rule: the attribute must be ``<relation> <bound>``."""
    plus: int = 0
    """equals_dim: what is added to the other argument's size."""


@dataclass(frozen=True)
class GradSource:
    """An argument of a backward step: a forward tensor (``kind`` "arg" or "output", by index),
    or the incoming gradient of an output (``kind`` "grad")."""

    kind: str
    index: int


@dataclass(frozen=True)
class BackwardStep:
    op: str
    args: tuple[GradSource, ...]
    gives: tuple[int | None, ...]
    """Per output of the step: the index of the forward argument whose gradient it is, or None."""
    attrs: tuple[str, ...]
    """Attributes of the forward op passed on to the step, by name."""


@dataclass(frozen=True)
class Reduction:
    dim: str
    order: str
    leaf: int | None = None


@dataclass(frozen=True)
class Op:
    name: str
    summary: str
    requires: frozenset[str]
    kernels: dict[str, Kernel] = field(hash=False)
    backends: dict[str, tuple[str, ...]] = field(hash=False)
    """Carried platform → ordered backend names.  An empty tuple means "unsupported there"."""
    reference: str
    tolerance: str
    dtypes: tuple[str, ...]
    autocast: str = "none"
    """Under torch.autocast: "lower_precision" casts the arguments of ``autocast_args`` to the
    autocast dtype, "float32" to float32, "none" leaves them as they are."""
    autocast_args: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    dtype_vars: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    args: tuple[Arg, ...] = ()
    attrs: tuple[Attr, ...] = ()
    outputs: tuple[Output, ...] = ()
    dims: tuple[DimBinding, ...] = ()
    dynamic_dims: tuple[tuple[str, int], ...] = ()
    """(dimension, index of the argument whose nonzero entries it counts)."""
    derived_dims: tuple[tuple[str, str, int], ...] = ()
    """(dimension, the dimension it follows, offset)."""
    leading_dim: str | None = None
    checks: tuple[Check, ...] = ()
    backward: tuple[BackwardStep, ...] = ()
    reduction: Reduction | None = None
    contract: tuple[str, ...] = ()
    """``requires`` in the spec's order."""

    @property
    def params(self) -> tuple[str, ...]:
        """Every parameter of the public function, tensors then attributes."""
        return tuple(a.name for a in self.args) + tuple(a.name for a in self.attrs)

    @property
    def grad_inputs(self) -> tuple[str, ...]:
        """Forward arguments that receive a gradient from some backward step."""
        given = {index for step in self.backward for index in step.gives if index is not None}
        return tuple(a.name for i, a in enumerate(self.args) if i in given)

    @property
    def native_kernels(self) -> tuple[str, ...]:
        return tuple(name for name, k in sorted(self.kernels.items()) if k.kind == "native")


@dataclass(frozen=True)
class Platform:
    name: str
    display_name: str
    kind: str
    device_type: str
    dispatch_key: str
    import_module: str | None
    available: str | None
    version_attr: str | None
    version_attr_set: bool
    wheel_label: str
    toolkit_version_from: str | None = None


class CatalogError(RuntimeError):
    """A data file of the package is missing or damaged (it comes from the generator; reinstall)."""


def _read(name: str) -> Any:
    path = _HERE / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path}: cannot read the package's data ({exc}); the package is damaged, reinstall it") from None


def _op(entry: dict[str, Any], backends: dict[str, list[str]]) -> Op:
    args = tuple(
        Arg(a["name"], a["dtype"], tuple(a["shape"]), tuple(a["dtypes"]), a.get("optional", False), a.get("doc", "")) for a in entry["args"]
    )
    outputs = tuple(
        Output(o["name"], o["dtype"], tuple(o["shape"]), tuple(o["dtypes"]), o.get("differentiable", True), o.get("float32_if"), o.get("doc", ""))
        for o in entry["outputs"]
    )
    arg_index = {a.name: i for i, a in enumerate(args)}
    # Checks name a tensor argument or, after them, an attribute: their position in a call's values.
    param_index = {**arg_index, **{a["name"]: len(args) + i for i, a in enumerate(entry["attrs"])}}
    out_index = {o.name: i for i, o in enumerate(outputs)}

    def source(text: str) -> GradSource:
        if text.startswith("grad("):
            return GradSource("grad", out_index[text[5:-1]])
        return GradSource("arg", arg_index[text]) if text in arg_index else GradSource("output", out_index[text])

    def check(c: dict[str, Any]) -> Check:
        return Check(
            kind=c["kind"],
            arg=param_index[c["arg"]],
            message=c["message"],
            optional=c.get("optional", False),
            rank=c.get("rank", 0),
            dtypes=tuple(c.get("dtypes", ())),
            other=arg_index[c["other"]] if "other" in c else -1,
            axis=c.get("axis", 0),
            other_axis=c.get("other_axis", 0),
            multiple_of=c.get("multiple_of", 1),
            dim=c.get("dim", ""),
            relation=c.get("relation", ">="),
            bound=c.get("bound", 0),
            plus=c.get("plus", 0),
        )

    reduction = entry.get("reduction")
    return Op(
        name=entry["name"],
        summary=entry["summary"],
        requires=frozenset(entry["requires"]),
        kernels={
            name: Kernel(name, k["kind"], frozenset(k["guarantees"]), k.get("python"), k.get("doc", ""), k.get("kwargs", {}))
            for name, k in sorted(entry["kernels"].items())
        },
        backends={platform: tuple(names) for platform, names in backends.items()},
        reference=entry["reference"],
        tolerance=entry["tolerance"],
        dtypes=tuple(entry["dtypes"]),
        autocast=entry["autocast"],
        autocast_args=tuple(entry["autocast_args"]),
        aliases=tuple(entry["aliases"]),
        dtype_vars={var: tuple(dtypes) for var, dtypes in entry["dtype_vars"]},
        args=args,
        attrs=tuple(Attr(a["name"], a["type"], a["default"], a.get("doc", "")) for a in entry["attrs"]),
        outputs=outputs,
        dims=tuple(DimBinding(d["dim"], arg_index[d["arg"]], d["axis"]) for d in entry["dims"]),
        dynamic_dims=tuple((dim, arg_index[arg]) for dim, arg in entry["dynamic_dims"].items()),
        derived_dims=tuple((dim, d["dim"], d["plus"]) for dim, d in entry["derived_dims"].items()),
        leading_dim=entry["leading_dim"],
        checks=tuple(check(c) for c in entry["checks"]),
        backward=tuple(
            BackwardStep(
                step["op"],
                tuple(source(a) for a in step["args"]),
                tuple(None if g is None else arg_index[g] for g in step["gives"]),
                tuple(step["attrs"]),
            )
            for step in entry["backward"]
        ),
        reduction=Reduction(reduction["dim"], reduction["order"], reduction.get("leaf")) if reduction is not None else None,
        contract=tuple(entry["requires"]),
    )


_CATALOG = _read("_catalog.json")
_BUILD = _read("_build.json")

PACKAGE: str = _CATALOG["package"]["name"]
BASE_VERSION: str = _CATALOG["package"]["version"]
DESCRIPTION: str = _CATALOG["package"]["description"]
BUILD_PLATFORM: str = _BUILD["platform"]
"""The platform this build was generated for."""
CARRIED_PLATFORMS: tuple[str, ...] = tuple(_BUILD["carried"])
"""Platforms whose kernels this build carries (its own, then the host's)."""
PLATFORMS: tuple[Platform, ...] = tuple(Platform(**p) for p in _CATALOG["platforms"])
"""In the order the platform specs give (detection.order): a plugin platform that can sit beside
another build of torch comes before it."""
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    name: {dtype: (float(atol), float(rtol)) for dtype, (atol, rtol) in table.items()} for name, table in _CATALOG["tolerances"].items()
}
"""Tolerance classes: dtype → (atol, rtol), for accuracy against the reference.  Determinism and
invariance are always checked bitwise."""
OPS: dict[str, Op] = {entry["name"]: _op(entry, _BUILD["backends"][entry["name"]]) for entry in _CATALOG["ops"]}
