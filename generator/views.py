"""An op spec with the facts derived from it, one concern per module: its signature
(``signature``), its input checks (``checks``), the sizes its kernels are tested at
(``testplan``) and the backends each platform admits (``admission``).  The catalog holds one view
per op (``Catalog.views``); templates and writers read these facts, never work them out again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import checks, testplan
from .admission import admitted_backends
from .model import Dtype, NativeKernel, OpSpec, Output, PlatformSpec
from .signature import DimBinding, Signature

_ATTR_CPP = {"float": "float", "int": "int64_t", "bool": "bool"}


@dataclass(frozen=True)
class OpView:
    spec: OpSpec
    spec_file: str

    @property
    def name(self) -> str:
        return self.spec.name

    @functools.cached_property
    def signature(self) -> Signature:
        return Signature(self.spec)

    @functools.cached_property
    def checks(self) -> tuple[checks.Check, ...]:
        return checks.input_checks(self.signature)

    # The signature facts kernel templates and the bindings use most, by their short names.
    @property
    def dims(self) -> tuple[DimBinding, ...]:
        return self.signature.dims

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.signature.dtypes

    @property
    def schema(self) -> str:
        return self.signature.torch_schema

    @property
    def variable_outputs(self) -> tuple[Output, ...]:
        return self.signature.variable_outputs

    def dtype_combinations(self, names: list[str] | tuple[str, ...]) -> tuple[tuple[tuple[str, Dtype], ...], ...]:
        return self.signature.dtype_combinations(names)

    def output_dtype_source(self, out: Output) -> tuple[str, str | None]:
        return self.signature.output_dtype_source(out)

    def backends(self, platform: str) -> tuple[str, ...]:
        """The backends ``platform`` runs the op on, in order: the listed ones the admission rule admits."""
        return admitted_backends(self.spec, platform)

    def native_kernels(self, platform: str) -> tuple[str, ...]:
        return tuple(k for k in self.backends(platform) if isinstance(self.spec.kernels[k], NativeKernel))

    # The launcher ABI (C++ parameter and argument lists).
    def launcher_params(self, target: PlatformSpec) -> str:
        sig = self.signature
        params = [f"const void* {a.name}" for a in self.spec.args]
        params += [f"void* {o.name}" for o in self.spec.outputs]
        params += [f"Dtype dtype_{v}" for v in sig.dtype_vars]
        params += [f"Dtype dtype_{o.name}" for o in sig.variable_outputs]
        params += [f"int64_t {d.dim}" for d in sig.dims]
        params += [f"int64_t {d}" for d in self.spec.dynamic_dims]
        params += [f"int64_t {d}" for d in self.spec.derived_dims]
        params += [f"{_ATTR_CPP[a.type]} {a.name}" for a in self.spec.attrs]
        if target.types.stream is not None:
            params.append(f"{target.types.stream} stream")
        else:
            params.append("int64_t num_threads")  # the host's stream: how many threads it may use
        return ", ".join(params)

    def launcher_args(self, target: PlatformSpec) -> str:
        sig = self.signature
        args = [f"{a.name}.has_value() ? {a.name}->data_ptr() : nullptr" if a.optional else f"{a.name}.data_ptr()" for a in self.spec.args]
        args += [f"{o.name}.data_ptr()" for o in self.spec.outputs]
        args += [f"to_rlk_dtype({sig.dtype_leader(v).name})" for v in sig.dtype_vars]
        args += [f"to_rlk_dtype({o.name})" for o in sig.variable_outputs]
        args += [d.dim for d in sig.dims]
        args += list(self.spec.dynamic_dims)
        args += list(self.spec.derived_dims)
        args += [f"static_cast<{_ATTR_CPP[a.type]}>({a.name})" for a in self.spec.attrs]
        if target.types.stream is not None:
            args.append("stream")
        else:
            args.append("at::get_num_threads()")
        return ", ".join(args)

    def kernel_sizes(self, platform: str) -> dict[str, testplan.KernelSizes]:
        """Per native kernel of ``platform``: the sizes its contract tests use."""
        out: dict[str, testplan.KernelSizes] = {}
        for name in self.native_kernels(platform):
            kernel = self.spec.kernels[name]
            assert isinstance(kernel, NativeKernel)
            out[name] = testplan.kernel_sizes(self.spec, kernel)
        return out
