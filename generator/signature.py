"""What an op's signature implies: which argument binds each dimension, the dtypes each tensor
may take, how outputs get their dtype, the leading dimension, the torch schema.

Derived once per op (``views.OpView.signature``); the input checks, the C++ ABI, the package
data and the review files all read these facts from here.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from .interchange import interchange
from .model import Attr, Dtype, OpSpec, Output, TensorArg

FLOATS = ("float32", "float16", "bfloat16")


DimBinding = interchange.DimBinding
"""The first argument axis that carries a dimension; every later use must equal it (declared with the package's data files)."""


@dataclass(frozen=True)
class DimCheck:
    """A later use of a bound dimension, which must equal the binding's size."""

    arg: str
    axis: int
    dim: str
    bound: DimBinding


def attr_default(attr: Attr) -> str:
    """The default as the torch schema and Python write it."""
    if attr.type == "bool":
        return "True" if attr.default else "False"
    if attr.type == "float":
        return repr(float(attr.default))
    return str(int(attr.default))


@dataclass(frozen=True)
class Signature:
    """The facts of one op's signature.  The spec is frozen, so each is worked out once."""

    spec: OpSpec

    @functools.cached_property
    def dims(self) -> tuple[DimBinding, ...]:
        seen: dict[str, DimBinding] = {}
        for arg in self.spec.args:
            if arg.optional:
                continue
            for axis, dim in enumerate(arg.shape):
                seen.setdefault(dim, DimBinding(dim, arg.name, axis))
        return tuple(seen.values())

    @functools.cached_property
    def dim_checks(self) -> tuple[DimCheck, ...]:
        bound = {d.dim: d for d in self.dims}
        return tuple(
            DimCheck(arg.name, axis, dim, bound[dim])
            for arg in self.spec.args
            for axis, dim in enumerate(arg.shape)
            if (bound[dim].arg, bound[dim].axis) != (arg.name, axis)
        )

    @property
    def dtype_vars(self) -> tuple[str, ...]:
        return tuple(sorted(self.spec.dtype_vars))

    def dtype_leader(self, var: str) -> TensorArg:
        """The first argument whose dtype binds ``var``."""
        return next(a for a in self.spec.args if a.dtype == var)

    def allowed_dtypes(self, tensor: TensorArg | Output) -> tuple[str, ...]:
        if tensor.dtype in self.spec.dtype_vars:
            return tuple(d.value for d in self.spec.dtype_vars[tensor.dtype])
        return (tensor.dtype,)

    @functools.cached_property
    def dtypes(self) -> tuple[str, ...]:
        """Every floating dtype the op's tests must cover: the variables' sets, else the fixed float dtypes."""
        found = {d.value for values in self.spec.dtype_vars.values() for d in values}
        found |= {a.dtype for a in self.spec.args if a.dtype in FLOATS}
        return tuple(d.value for d in Dtype if d.value in found and d.value in FLOATS) or ("float32",)

    @functools.cached_property
    def dtype_cases(self) -> tuple[str, ...]:
        """The dtype settings the contract tests run.  With at most one dtype variable, one dtype
        per case (``dtypes``); with several, every combination, each spelled with its dtypes joined
        by "/" in the spec's order of the variables (e.g. "bfloat16/float32" for D, W)."""
        if len(self.spec.dtype_vars) < 2:
            return self.dtypes
        choices = [[d.value for d in dtypes] for dtypes in self.spec.dtype_vars.values()]
        return tuple("/".join(case) for case in itertools.product(*choices))

    def dtype_combinations(self, names: list[str] | tuple[str, ...]) -> tuple[tuple[tuple[str, Dtype], ...], ...]:
        """Every assignment of a dtype to each of the variables ``names``, as (variable, dtype) pairs."""
        choices = [self.spec.dtype_vars[name] for name in names]
        return tuple(tuple(zip(names, case, strict=True)) for case in itertools.product(*choices))

    @property
    def variable_outputs(self) -> tuple[Output, ...]:
        """Outputs whose dtype is only known at run time (float32_if)."""
        return tuple(o for o in self.spec.outputs if o.float32_if is not None)

    def output_dtype_source(self, out: Output) -> tuple[str, str | None]:
        """(argument whose options the output copies, fixed dtype or None)."""
        if out.dtype in self.spec.dtype_vars:
            return self.dtype_leader(out.dtype).name, None
        return self.spec.args[0].name, out.dtype

    @property
    def float_args(self) -> tuple[TensorArg, ...]:
        return tuple(a for a in self.spec.args if self.allowed_dtypes(a)[0] in FLOATS)

    @property
    def autocast_args(self) -> tuple[TensorArg, ...]:
        """The arguments torch.autocast casts under the op's policy: those whose dtype is a dtype variable."""
        if self.spec.autocast == "none":
            return ()
        return tuple(a for a in self.spec.args if a.dtype in self.spec.dtype_vars)

    def leads_with(self, tensor: TensorArg | Output) -> bool:
        """Whether ``tensor``'s first dimension is the op's leading_dim (flattened by the public function)."""
        return self.spec.leading_dim is not None and tensor.shape[:1] == (self.spec.leading_dim,)

    @property
    def output_dims(self) -> tuple[DimBinding, ...]:
        """Argument-bound dimensions that some output's shape needs (directly or through a derived one)."""
        needed = {d for o in self.spec.outputs for d in o.shape}
        needed |= {derived.dim for name, derived in self.spec.derived_dims.items() if name in needed}
        return tuple(d for d in self.dims if d.dim in needed)

    @functools.cached_property
    def torch_schema(self) -> str:
        """The schema after the op's name, as ``TORCH_LIBRARY``'s ``m.def`` takes it."""
        params = [f"Tensor{'?' if a.optional else ''} {a.name}" for a in self.spec.args]
        params += [f"{a.type} {a.name}={attr_default(a)}" for a in self.spec.attrs]
        outs = self.spec.outputs
        ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
        return f"({', '.join(params)}) -> {ret}"

    @property
    def grad_inputs(self) -> tuple[str, ...]:
        """Forward arguments that receive a gradient from some backward step."""
        return tuple(a.name for a in self.spec.args if any(a.name in step.gives for step in self.spec.backward))
