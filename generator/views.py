"""An op spec with the facts derived from it, one concern per module: its signature
(``signature``), its input checks (``checks``), its C ABI and the C++ names of its spec names
(``cabi``), the sizes its kernels are tested at (``testplan``) and the backends each platform
admits (``admission``).  The catalog holds one view
per op (``Catalog.views``); templates and writers read these facts, never work them out again.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import checks, testplan
from .admission import admitted_backends
from .cabi import CAbi
from .model import Dtype, NativeKernel, OpSpec, Output
from .signature import DimBinding, Signature


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

    @functools.cached_property
    def abi(self) -> CAbi:
        """The C ABI of the op's launchers and the names kernel templates reach the spec's through (``cabi``)."""
        return CAbi(self)

    def kernel_sizes(self, platform: str) -> dict[str, testplan.KernelSizes]:
        """Per native kernel of ``platform``: the sizes its contract tests use."""
        out: dict[str, testplan.KernelSizes] = {}
        for name in self.native_kernels(platform):
            kernel = self.spec.kernels[name]
            assert isinstance(kernel, NativeKernel)
            out[name] = testplan.kernel_sizes(self.spec, kernel)
        return out
