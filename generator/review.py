"""generated/registry.json: the review state of the whole catalog as plain data.

``python -m generator diff`` compares two of these (the committed one and the one the specs now
produce) and summarises what changed for a reviewer (``semantic_diff``).
"""

from __future__ import annotations

from typing import Any

from .load import Catalog
from .model import Kernel, NativeKernel
from .views import OpView

REGISTRY_JSON = "registry.json"


def _kernel(kernel: Kernel) -> dict[str, Any]:
    """A native kernel's entry names what its source is rendered from (template, functor, params),
    so that a change to any of them is named in ``diff``'s summary, not only in its unified diff."""
    entry: dict[str, Any] = {"kind": kernel.kind, "guarantees": sorted(g.value for g in kernel.guarantees)}
    if isinstance(kernel, NativeKernel):
        entry |= {"template": kernel.template, "functor": kernel.functor, "params": dict(sorted(kernel.params.items()))}
    return entry


def _op(view: OpView, platforms: list[str]) -> dict[str, Any]:
    spec, sig = view.spec, view.signature
    return {
        "spec": view.spec_file,
        "summary": spec.summary,
        "requires": sorted(g.value for g in spec.requires),
        "dtypes": list(sig.dtypes),
        "signature": {
            "args": {a.name: {"dtype": list(sig.allowed_dtypes(a)), "shape": list(a.shape)} for a in spec.args},
            "outputs": {o.name: {"dtype": list(sig.allowed_dtypes(o)), "shape": list(o.shape)} for o in spec.outputs},
        },
        "tolerance": spec.tolerance,
        "reduction": spec.reduction.model_dump(mode="json", exclude_none=True) if spec.reduction is not None else None,
        "kernels": {name: _kernel(k) for name, k in spec.kernels.items()},
        "backends": {platform: list(view.backends(platform)) for platform in platforms},
        "torch_schema": sig.torch_schema,
    }


def registry_data(catalog: Catalog) -> dict[str, Any]:
    platforms = [p.name for p in catalog.platforms]
    return {
        "package": catalog.package.name,
        "version": catalog.package.version,
        "tolerances": catalog.package.model_dump(mode="json")["tolerances"],
        "platforms": {p.name: {"display_name": p.display_name, "kind": p.kind} for p in catalog.platforms},
        "ops": {view.name: _op(view, platforms) for view in catalog.views},
    }
