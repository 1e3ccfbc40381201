"""The data a generated package's hand-written Python reads: what the specs say, as JSON.

The package's Python (``runtime/``) is written once and copied into every package; what varies
with the specs reaches it only as data:

- ``<package>/_catalog.json``: the ops (signature, input checks, kernels, backward steps,
  autocast policy), the platforms and the tolerance table.  The same in every package.
- ``<package>/_build.json``: which platform this package is built for, whose kernels it
  carries, and per op the backends each of those platforms admits.
- ``tests/contract_cases.json``: what the generic contract suite runs per op: test shapes, the
  batch dimension, packed sequences, attribute variants, how to fill integer arguments, and per
  native kernel of the platforms the package carries the sizes its tiles call for.

What depends on one platform's specs lies only in the packages that carry that platform, so an
edit of one platform's backends rewrites only those packages' files.

Spec names appear here only as strings (keys and values), never as identifiers of generated
code, so no spec name can collide with the package's own.
"""

from __future__ import annotations

from typing import Any

from .load import Catalog
from .model import Attr, Output, PlatformSpec, ReferenceKernel, TensorArg
from .signature import Signature
from .views import OpView

CATALOG_FILE = "_catalog.json"
BUILD_FILE = "_build.json"
CASES_FILE = "tests/contract_cases.json"


def _tensor(sig: Signature, tensor: TensorArg | Output) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": tensor.name, "dtype": tensor.dtype, "shape": list(tensor.shape), "dtypes": list(sig.allowed_dtypes(tensor))}
    if tensor.doc:
        entry["doc"] = tensor.doc
    return entry


def _arg(sig: Signature, arg: TensorArg) -> dict[str, Any]:
    entry = _tensor(sig, arg)
    if arg.optional:
        entry["optional"] = True
    return entry


def _output(sig: Signature, out: Output) -> dict[str, Any]:
    entry = _tensor(sig, out)
    if not out.differentiable:
        entry["differentiable"] = False
    if out.float32_if is not None:
        entry["float32_if"] = out.float32_if
    return entry


def _attr(attr: Attr) -> dict[str, Any]:
    default: bool | int | float = attr.default if attr.type != "float" else float(attr.default)
    entry: dict[str, Any] = {"name": attr.name, "type": attr.type, "default": default}
    if attr.doc:
        entry["doc"] = attr.doc
    return entry


def _check(check: Any) -> dict[str, Any]:
    """A check with the fields its kind uses (the others keep their defaults)."""
    entry: dict[str, Any] = {"kind": check.kind, "arg": check.arg, "message": check.message}
    if check.optional:
        entry["optional"] = True
    used = {
        "layout": (),
        "rank": ("rank",),
        "dtype": ("dtypes",),
        "same_dtype": ("other",),
        "same_device": ("other",),
        "dim": ("axis", "other", "other_axis", "dim"),
        "multiple_of": ("axis", "multiple_of", "dim"),
        "multiple_of_dim": ("axis", "other", "other_axis", "dim"),
        "equals_dim": ("axis", "other", "other_axis", "dim", "plus"),
        "count_nonzero": ("axis", "other", "dim"),
        "contiguous": ("rank",),
        "finite": (),
        "bound": ("relation", "bound"),
    }[check.kind]
    for name in used:
        value = getattr(check, name)
        entry[name] = list(value) if isinstance(value, tuple) else value
    return entry


def _op(view: OpView, catalog: Catalog) -> dict[str, Any]:
    spec, sig = view.spec, view.signature
    kernels: dict[str, Any] = {}
    for name, kernel in sorted(spec.kernels.items()):
        entry: dict[str, Any] = {"kind": kernel.kind, "guarantees": sorted(g.value for g in kernel.guarantees)}
        if isinstance(kernel, ReferenceKernel):
            entry["python"] = kernel.python
            if kernel.kwargs:
                entry["kwargs"] = dict(kernel.kwargs)
        if kernel.doc:
            entry["doc"] = kernel.doc
        kernels[name] = entry
    steps = []
    for step in spec.backward:
        step_op = catalog.op(step.op)
        own = {a.name for a in spec.attrs}
        attrs = step.attrs if step.attrs is not None else tuple(a.name for a in step_op.attrs if a.name in own)
        steps.append({"op": step.op, "args": list(step.args), "gives": list(step.gives), "attrs": list(attrs)})
    return {
        "name": spec.name,
        "summary": spec.summary,
        "aliases": list(spec.aliases),
        # A list, not a mapping: the variables' order is the spec's (a case of several dtypes is
        # spelled in it), and JSON objects are written with sorted keys.
        "dtype_vars": [[var, [d.value for d in dtypes]] for var, dtypes in spec.dtype_vars.items()],
        "args": [_arg(sig, a) for a in spec.args],
        "attrs": [_attr(a) for a in spec.attrs],
        "outputs": [_output(sig, o) for o in spec.outputs],
        "dims": [{"dim": d.dim, "arg": d.arg, "axis": d.axis} for d in sig.dims],
        "dynamic_dims": {dim: d.count_nonzero for dim, d in sorted(spec.dynamic_dims.items())},
        "derived_dims": {dim: {"dim": d.dim, "plus": d.plus} for dim, d in sorted(spec.derived_dims.items())},
        "leading_dim": spec.leading_dim,
        "checks": [_check(c) for c in view.checks],
        "requires": [g.value for g in spec.requires],
        "kernels": kernels,
        "reference": spec.reference,
        "tolerance": spec.tolerance,
        "dtypes": list(sig.dtypes),
        "autocast": spec.autocast,
        "autocast_args": [a.name for a in sig.autocast_args],
        "backward": steps,
        "reduction": spec.reduction.model_dump(mode="json", exclude_none=True) if spec.reduction is not None else None,
    }


def _platform(p: PlatformSpec) -> dict[str, Any]:
    return {
        "name": p.name,
        "display_name": p.display_name,
        "kind": p.kind,
        "device_type": p.torch.device_type,
        "dispatch_key": p.torch.dispatch_key,
        "import_module": p.detection.import_module,
        "available": p.detection.available,
        "version_attr": p.detection.version_attr,
        "version_attr_set": p.detection.version_attr_set,
        "wheel_label": p.wheel.label,
        "toolkit_version_from": p.wheel.version_from,
    }


def catalog_data(catalog: Catalog) -> dict[str, Any]:
    """``_catalog.json``: the same in every package."""
    package = catalog.package
    return {
        "package": {"name": package.name, "version": package.version, "description": package.description},
        "tolerances": {
            name: {dtype.value: [tol.atol, tol.rtol] for dtype, tol in sorted(table.items(), key=lambda item: item[0].value)}
            for name, table in sorted(package.tolerances.items())
        },
        # Checked in the order the platform specs give (detection.order): a plugin platform that
        # can sit beside another build of torch comes before it.
        "platforms": [_platform(p) for p in sorted(catalog.platforms, key=lambda p: p.detection.order)],
        "ops": [_op(view, catalog) for view in catalog.views],
    }


def build_data(catalog: Catalog, platform: PlatformSpec, targets: tuple[PlatformSpec, ...]) -> dict[str, Any]:
    """``_build.json``: the platform one package is built for, the platforms whose kernels it
    carries (its own, then the host's), and per op the backends each of them admits, in order
    (``admission``: the rule the contracts hold every listed backend to)."""
    return {
        "platform": platform.name,
        "carried": [t.name for t in targets],
        "backends": {view.name: {t.name: list(view.backends(t.name)) for t in targets} for view in catalog.views},
        "setup": _setup(catalog, platform, targets),
    }


def _setup(catalog: Catalog, platform: PlatformSpec, targets: tuple[PlatformSpec, ...]) -> dict[str, Any]:
    """What the package's setup.py builds: the extension builder, sources, flags, target
    architectures and wheel label of ``platform``."""
    build, wheel = platform.build, platform.wheel
    sources = ["csrc/bindings.cpp"] + [
        f"csrc/kernels/{t.name}/{view.name}_{kernel}{t.source_suffix}" for t in targets for view in catalog.views for kernel in view.native_kernels(t.name)
    ]
    floor = build.arch_floor
    return {
        "platform": platform.name,
        "display_name": platform.display_name,
        "kind": platform.kind,
        "compiler": platform.compiler,
        "import_module": platform.detection.import_module,
        "extension_module": build.extension_module,
        "extension": build.extension,
        "compiler_key": build.compiler_key,
        "arch_env": build.arch_env,
        "archs": list(build.archs),
        "arch_floor": {"entry": floor.entry, "reason": floor.reason} if floor is not None else None,
        "device_available": platform.detection.available,
        "strip_flags": list(build.strip_flags),
        "pins": list(wheel.pins),
        "sources": sources,
        "host_flags": list(build.host_flags),
        "device_flags": list(build.device_flags),
        "version_attr": platform.detection.version_attr,
        "version_attr_set": platform.detection.version_attr_set,
        "version_from": wheel.version_from,
        "version_parts": wheel.version_parts,
        "version_separator": wheel.version_separator,
        "wheel_label": wheel.label,
        "toolkit_home": build.toolkit_home,
        "toolkit_hint": build.toolkit_hint,
    }


def _sizes(view: OpView, platform: str) -> dict[str, Any]:
    return {
        name: {
            "guarantees": list(s.guarantees),
            "batch_sizes": list(s.batch_sizes),
            "chunks": list(s.chunks),
            "pad_by": s.pad_by,
            "extents": dict(sorted(s.extents.items())),
            "lengths": list(s.lengths),
            "block_sizes": list(s.block_sizes),
        }
        for name, s in sorted(view.kernel_sizes(platform).items())
    }


def _cases(view: OpView, targets: tuple[PlatformSpec, ...]) -> dict[str, Any]:
    spec = view.spec
    tests = spec.tests
    values = {a.name: a.values.model_dump(mode="json") for a in spec.args if a.values is not None}
    sequences = None
    if tests.sequences is not None:
        # Offsets as a list of pairs: the first packed dimension is the queries' (JSON objects are
        # written with sorted keys).
        offsets = [[dim, arg] for dim, arg in tests.sequences.offsets.items()]
        sequences = {"offsets": offsets, "prefix": tests.sequences.prefix, "prefix_if": tests.sequences.prefix_if}
    paged = None
    if tests.paged is not None:
        p = tests.paged
        packed = {"op": p.packed.op, "args": list(p.packed.args)} if p.packed is not None else None
        paged = {
            "queries": p.queries,
            "query_offsets": p.query_offsets,
            "lengths": p.lengths,
            "block_table": p.block_table,
            "caches": list(p.caches),
            "prefix": p.prefix,
            "prefix_if": p.prefix_if,
            "packed": packed,
        }
    return {
        "shapes": [dict(shape) for shape in tests.shapes],
        "batch_dim": tests.batch_dim,
        "sequences": sequences,
        "paged": paged,
        "variants": [dict(v) for v in tests.variants],
        "values": values,
        "counted": {c.dim: c.count_nonzero_of for c in spec.constraints if c.count_nonzero_of is not None},
        "divides": {c.multiple_of_dim: c.dim for c in spec.constraints if c.multiple_of_dim is not None},
        # Dimensions another one's size gives (B1 = B + 1): dimension -> [that one, what is added].
        "follows": {c.dim: [c.equals_dim, c.plus] for c in spec.constraints if c.equals_dim is not None},
        "dtype_cases": list(view.signature.dtype_cases),
        "kernels": {t.name: _sizes(view, t.name) for t in targets},
    }


def contract_cases(catalog: Catalog, targets: tuple[PlatformSpec, ...]) -> dict[str, Any]:
    """``tests/contract_cases.json`` of a package carrying the kernels of ``targets``."""
    return {"package": catalog.package.name, "ops": {view.name: _cases(view, targets) for view in catalog.views}}
