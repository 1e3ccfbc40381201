"""One kernel of the catalog rendered with other params, for a tile sweep (tools/gpu_check.py).

The catalog is loaded as ``generate`` loads it; the kernel's params are overridden (``model_copy``),
the op is validated again as a whole and the contracts are checked again on the catalog that holds
it, so a variant is refused for the reasons a spec with those params would be.  Then the kernel's
source for one platform is rendered from the same plan and template as ``generate`` uses.  Nothing
is written: the caller decides where the source goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from . import contracts
from .errors import GeneratorError, SpecError
from .load import Catalog, load_catalog, validate
from .model import NativeKernel, OpSpec
from .plan import make_plan
from .render import render_all


class VariantError(GeneratorError):
    """An override the generator refuses, or a kernel it cannot render for the platform asked."""


Params = Mapping[str, int | bool]


def _override(op: OpSpec, kernel: str, params: Params) -> OpSpec:
    """``op`` with ``params`` replacing those of ``kernel`` (not validated: ``model_copy`` does not)."""
    spec = op.kernels.get(kernel)
    if spec is None:
        raise VariantError(f"{op.name} has no kernel {kernel} (its kernels: {', '.join(sorted(op.kernels))})")
    if not isinstance(spec, NativeKernel):
        raise VariantError(f"{op.name}'s kernel {kernel} is a Python reference ({spec.python}): it has no params to render")
    shown = ", ".join(f"{name}={value!r}" for name, value in params.items())
    unknown = sorted(set(params) - set(spec.params))
    if unknown:
        known = ", ".join(spec.params) or "none"
        raise VariantError(f"{op.name}'s kernel {kernel} has no param {', '.join(unknown)} (its params: {known}); an override only changes existing ones")
    retyped = [name for name, value in params.items() if isinstance(value, bool) != isinstance(spec.params[name], bool)]
    if retyped:
        name = retyped[0]
        raise VariantError(f"{op.name}'s kernel {kernel}: param {name} is {type(spec.params[name]).__name__}, not {type(params[name]).__name__} ({shown})")
    return op.model_copy(update={"kernels": {**op.kernels, kernel: spec.model_copy(update={"params": {**spec.params, **params}})}})


def variant_catalog(root: Path, op: str, kernel: str, params: Params) -> Catalog:
    """The catalog under ``root`` with ``op``'s ``kernel`` given ``params``, checked like a spec."""
    catalog = load_catalog(root / "specs", root)
    names = [o.name for o in catalog.ops]
    if op not in names:
        raise VariantError(f"no op {op} in {root / 'specs'} (ops: {', '.join(sorted(names))})")
    copied = _override(catalog.op(op), kernel, params)
    try:
        # The overridden op through every rule of the model, then the contracts on the catalog that holds it.
        changed = validate(OpSpec, copied.model_dump(), catalog.op_source(op))
        variant = replace(catalog, ops=tuple(changed if o.name == op else o for o in catalog.ops))
        contracts.check(variant, root / "templates")
    except SpecError as exc:
        shown = ", ".join(f"{name}={value!r}" for name, value in params.items())
        reasons = "; ".join(f"{p.field}: {p.message}" if p.field else p.message for p in exc.problems)
        raise VariantError(f"{op}'s kernel {kernel} with {shown} is refused: {reasons}") from None
    return variant


def render_kernel(root: Path, op: str, kernel: str, platform: str, params: Params) -> str:
    """The source ``generate`` would write for ``op``'s ``kernel`` on ``platform`` (e.g. det_gemm_mma.cu)
    if the spec gave the kernel ``params``; raises ``VariantError`` where it would be refused."""
    catalog = variant_catalog(root, op, kernel, params)
    platforms = [p for p in catalog.platforms if p.name == platform]
    if not platforms:
        raise VariantError(f"no platform {platform} (platforms: {', '.join(sorted(p.name for p in catalog.platforms))})")
    wanted = f"csrc/kernels/{platform}/{op}_{kernel}{platforms[0].source_suffix}"
    jobs = [job for job in make_plan(catalog) if any(path.endswith(f"/{wanted}") for path in (job.path, *job.copies))]
    if not jobs:
        spec = catalog.op(op).kernels[kernel]
        where = ", ".join(spec.platforms) if isinstance(spec, NativeKernel) and spec.platforms else "every platform"
        raise VariantError(f"{op}'s kernel {kernel} is not rendered for {platform}: no package carries it there (it renders for {where})")
    rendered = render_all(jobs[:1], root / "templates", None, 1)
    return rendered[jobs[0].path].decode("utf-8")
