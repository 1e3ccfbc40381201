"""The C ABI between an op's torch bindings and its kernels' launchers.

Every name a spec declares reaches generated C++ glue here, and only here, with a prefix per
kind: input tensors ``arg_<name>``, outputs ``out_<name>``, dimensions ``dim_<D>``, attributes
``attr_<name>``, dtype variables ``dtype_<V>`` and the run-time dtype of an output whose dtype is
chosen at run time ``dtype_out_<name>``.  The prefixes are prefix-free among themselves (none is
the start of another, and a dtype variable is one capital letter, so ``dtype_<V>`` never spells
``dtype_out_...``), so two spec names of different kinds never meet, and no spec name can be
one of the generator's own identifiers (``stream``, ``status``, ``device_guard``,
``num_threads``, helper functions) or a macro such as ``NDEBUG`` used as a dimension name.

Kernel templates reach a spec name through the name maps of ``CAbi`` (``abi.arg.a``,
``abi.dim.M``): a name the spec does not declare raises ``AbiNameError``, which the renderer
reports against the spec line that names the template.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import PlatformSpec
    from .views import OpView

ATTR_CPP = {"float": "float", "int": "int64_t", "bool": "bool"}
_INT64_MIN = -(1 << 63)


def number_literal(value: float) -> str:
    """A checked spec number (an attribute's range bound) as a C++ literal: an int64 or a double."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    if isinstance(value, int):
        return "INT64_MIN" if value == _INT64_MIN else f"INT64_C({value})"
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return repr(value)


class AbiNameError(Exception):
    """A template asked for a spec name the op does not declare.  Not a LookupError: Jinja turns
    those into an undefined value, and this must stop the render with its own message."""

    def __init__(self, op: str, kind: str, name: str, declared: tuple[str, ...]) -> None:
        self.op, self.kind, self.name, self.declared = op, kind, name, declared
        super().__init__(
            f"{kind} {name!r}, which op {op} does not declare (its {kind}s: {', '.join(declared) or 'none'})"
        )


class NameMap:
    """Spec name -> C++ identifier, for the names of one kind an op declares.

    Read as ``names.x`` or ``names["x"]`` (``AbiNameError`` for an undeclared name), ``"x" in
    names`` (a declared name?), and iterated in the spec's order.  It has no public attribute of
    its own, so a spec name can never reach one (an argument named ``items`` or ``get``)."""

    __slots__ = ("_kind", "_names", "_op", "_prefix")

    def __init__(self, op: str, kind: str, prefix: str, names: tuple[str, ...]) -> None:
        self._op, self._kind, self._prefix, self._names = op, kind, prefix, names

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)  # Python's and Jinja's own probes (__html__, _fields, ...)
        return self[name]

    def __getitem__(self, name: str) -> str:
        if name not in self._names:
            raise AbiNameError(self._op, self._kind, name, self._names)
        return self._prefix + name

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"NameMap({self._kind}: {', '.join(self._names)})"


@dataclass(frozen=True)
class Param:
    """One launcher parameter: its C++ type and name."""

    type: str
    name: str


@dataclass(frozen=True, eq=False)
class CAbi:
    """An op's launcher ABI: the parameters of every kernel's launcher, the arguments the bindings
    pass, and the name maps kernel templates reach spec names through."""

    view: OpView

    @functools.cached_property
    def arg(self) -> NameMap:
        """Input tensors (``const void*`` in a launcher, ``at::Tensor`` in the bindings)."""
        return NameMap(self.view.name, "argument", "arg_", tuple(a.name for a in self.view.spec.args))

    @functools.cached_property
    def out(self) -> NameMap:
        """Outputs (``void*`` in a launcher; the tensors the bindings allocate)."""
        return NameMap(self.view.name, "output", "out_", tuple(o.name for o in self.view.spec.outputs))

    @functools.cached_property
    def dim(self) -> NameMap:
        """Every dimension: bound by an argument, counted from data, or derived."""
        spec = self.view.spec
        names = tuple(d.dim for d in self.view.dims) + tuple(spec.dynamic_dims) + tuple(spec.derived_dims)
        return NameMap(self.view.name, "dimension", "dim_", names)

    @functools.cached_property
    def attr(self) -> NameMap:
        return NameMap(self.view.name, "attribute", "attr_", tuple(a.name for a in self.view.spec.attrs))

    @functools.cached_property
    def dtype(self) -> NameMap:
        """Dtype variables: the run-time dtype each kernel switches on."""
        return NameMap(self.view.name, "dtype variable", "dtype_", self.view.signature.dtype_vars)

    @functools.cached_property
    def out_dtype(self) -> NameMap:
        """The run-time dtype of each output whose dtype is only known at run time (float32_if)."""
        return NameMap(self.view.name, "output with a run-time dtype", "dtype_out_", tuple(o.name for o in self.view.variable_outputs))

    @functools.cached_property
    def empty_outputs(self) -> str:
        """A C++ condition on the launcher's dimensions that holds when every output has no element
        (nothing to write, so a launcher may return at once), or "" when some output always has
        one (a scalar, or only dimensions derived as another plus a positive number)."""
        spec = self.view.spec
        never_zero = {name for name, derived in spec.derived_dims.items() if derived.plus > 0}
        shapes = [frozenset(d for d in o.shape if d not in never_zero) for o in spec.outputs]
        if not shapes or any(not shape for shape in shapes):
            return ""
        # An output whose dimensions include another's is empty whenever that one is.
        minimal = [s for s in dict.fromkeys(shapes) if not any(other < s for other in shapes)]
        terms = [" || ".join(f"{self.dim[d]} == 0" for d in self.dim if d in shape) for shape in minimal]
        return " && ".join(f"({t})" if len(minimal) > 1 and "||" in t else t for t in terms)

    def params(self, target: PlatformSpec) -> tuple[Param, ...]:
        """The launcher's parameters, in order: inputs, outputs, dtypes, dimensions, attributes,
        then the stream (a device) or the threads the host kernel may use."""
        spec = self.view.spec
        params = [Param("const void*", self.arg[a.name]) for a in spec.args]
        params += [Param("void*", self.out[o.name]) for o in spec.outputs]
        params += [Param("Dtype", self.dtype[v]) for v in self.view.signature.dtype_vars]
        params += [Param("Dtype", self.out_dtype[o.name]) for o in self.view.variable_outputs]
        params += [Param("int64_t", self.dim[d]) for d in self.dim]
        params += [Param(ATTR_CPP[a.type], self.attr[a.name]) for a in spec.attrs]
        if target.types.stream is not None:
            params.append(Param(target.types.stream, "stream"))
        else:
            params.append(Param("int64_t", "num_threads"))  # the host's stream: how many threads it may use
        return tuple(params)

    def launcher_params(self, target: PlatformSpec) -> str:
        """The launcher's parameter list, as its declaration and definition write it."""
        return ", ".join(f"{p.type} {p.name}" for p in self.params(target))

    def forward(self, target: PlatformSpec, values: Mapping[str, str] | None = None) -> str:
        """Arguments of a call from inside a launcher to another launcher of the same op (the
        next backend): each parameter passed on by name, or as ``values`` gives it (keyed by the
        parameter's name, e.g. ``{abi.attr.out_fp32: "false"}``)."""
        values = dict(values or {})
        names = [p.name for p in self.params(target)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise ValueError(f"{self.view.name}'s launcher has no parameter {', '.join(unknown)} (it has {', '.join(names)})")
        return ", ".join(values.get(name, name) for name in names)

    def launcher_args(self, target: PlatformSpec) -> str:
        """What the bindings pass to a launcher, from their own locals (named as the parameters)."""
        spec = self.view.spec
        args = [f"{self.arg[a.name]}.has_value() ? {self.arg[a.name]}->data_ptr() : nullptr" if a.optional else f"{self.arg[a.name]}.data_ptr()" for a in spec.args]
        args += [f"{self.out[o.name]}.data_ptr()" for o in spec.outputs]
        args += [f"to_rlk_dtype({self.arg[self.view.signature.dtype_leader(v).name]})" for v in self.view.signature.dtype_vars]
        args += [f"to_rlk_dtype({self.out[o.name]})" for o in self.view.variable_outputs]
        args += [self.dim[d] for d in self.dim]
        args += [f"static_cast<{ATTR_CPP[a.type]}>({self.attr[a.name]})" for a in spec.attrs]
        args.append("stream" if target.types.stream is not None else "at::get_num_threads()")
        return ", ".join(args)
