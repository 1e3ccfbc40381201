# Copied from runtime/rlkernels/_registry.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Registry of this build: every op, its signature and contract, its kernels and, per platform,
the ordered backends that may run it (first available wins).

Read from two files the generator writes beside this module: ``_catalog.json`` (the ops, the
platforms and the tolerance table, the same in every build) and ``_build.json`` (the platform this
build is for, those whose kernels it carries, and each op's backends on them).  The backends are
those the generator's admission rule accepted for the op's contract; nothing here restates that rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from . import _interchange as data
from ._interchange import Attr, Check, DimBinding, Platform, Reduction
from ._interchange import Tensor as Arg
from ._interchange import Tensor as Output

_HERE = Path(__file__).resolve().parent

__all__ = ["Arg", "Attr", "Check", "DimBinding", "Output", "Platform", "Reduction"]


@dataclass(frozen=True)
class Kernel(data.Kernel):
    """A kernel of the catalog, under its name (the data file keys the kernels by name)."""

    name: str = ""


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
    def positions(self) -> dict[str, int]:
        """Each parameter's position among a call's values (tensors, then attributes)."""
        return {name: i for i, name in enumerate(self.params)}

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


class CatalogError(RuntimeError):
    """A data file of the package is missing or damaged (it comes from the generator; reinstall)."""


def _read(cls: type[data.Data], path: Path) -> data.Data:
    try:
        return data.read(cls, path)
    except (OSError, data.DataError) as exc:
        raise CatalogError(f"cannot read the package's data ({exc}); the package is damaged, reinstall it") from None


def _op(entry: data.Op, backends: dict[str, tuple[str, ...]]) -> Op:
    arg_index = {a.name: i for i, a in enumerate(entry.args)}
    out_index = {o.name: i for i, o in enumerate(entry.outputs)}

    def source(text: str) -> GradSource:
        if text.startswith("grad("):
            return GradSource("grad", out_index[text[5:-1]])
        return GradSource("arg", arg_index[text]) if text in arg_index else GradSource("output", out_index[text])

    return Op(
        name=entry.name,
        summary=entry.summary,
        requires=frozenset(entry.requires),
        kernels={name: Kernel(name=name, **{f.name: getattr(k, f.name) for f in fields(k)}) for name, k in sorted(entry.kernels.items())},
        backends=dict(backends),
        reference=entry.reference,
        tolerance=entry.tolerance,
        dtypes=entry.dtypes,
        autocast=entry.autocast,
        autocast_args=entry.autocast_args,
        aliases=entry.aliases,
        dtype_vars=dict(entry.dtype_vars),
        args=entry.args,
        attrs=entry.attrs,
        outputs=entry.outputs,
        dims=entry.dims,
        dynamic_dims=tuple((dim, arg_index[arg]) for dim, arg in entry.dynamic_dims.items()),
        derived_dims=tuple((dim, d.dim, d.plus) for dim, d in entry.derived_dims.items()),
        leading_dim=entry.leading_dim,
        checks=entry.checks,
        backward=tuple(
            BackwardStep(
                step.op, tuple(source(a) for a in step.args), tuple(None if g is None else arg_index[g] for g in step.gives), step.attrs
            )
            for step in entry.backward
        ),
        reduction=entry.reduction,
        contract=entry.requires,
    )


_CATALOG = _read(data.CatalogFile, _HERE / data.CATALOG_FILE)
_BUILD = _read(data.BuildFile, _HERE / data.BUILD_FILE)

PACKAGE: str = _CATALOG.package.name
BASE_VERSION: str = _CATALOG.package.version
DESCRIPTION: str = _CATALOG.package.description
BUILD_PLATFORM: str = _BUILD.platform
"""The platform this build was generated for."""
CARRIED_PLATFORMS: tuple[str, ...] = _BUILD.carried
"""Platforms whose kernels this build carries (its own, then the host's)."""
PLATFORMS: tuple[Platform, ...] = _CATALOG.platforms
"""In the order the platform specs give (detection.order): a plugin platform that can sit beside
another build of torch comes before it."""
TOLERANCES: dict[str, dict[str, tuple[float, float]]] = _CATALOG.tolerances
"""Tolerance classes: dtype → (atol, rtol), for accuracy against the reference.  Determinism and
invariance are always checked bitwise."""
OPS: dict[str, Op] = {entry.name: _op(entry, _BUILD.backends[entry.name]) for entry in _CATALOG.ops}
