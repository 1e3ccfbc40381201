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

Each file is one object of the package's own declaration (``runtime/rlkernels/_interchange.py``,
loaded as ``interchange``), encoded: the package decodes it against the same classes.

Spec names appear here only as strings (keys and values), never as identifiers of generated
code, so no spec name can collide with the package's own.
"""

from __future__ import annotations

from typing import Any

from .interchange import interchange as I
from .load import Catalog
from .model import Attr, Output, PlatformSpec, ReferenceKernel, TensorArg
from .signature import Signature
from .views import OpView

CATALOG_FILE = I.CATALOG_FILE
BUILD_FILE = I.BUILD_FILE
CASES_FILE = f"tests/{I.CASES_FILE}"


def _tensor(sig: Signature, tensor: TensorArg | Output) -> I.Tensor:
    optional = isinstance(tensor, TensorArg) and tensor.optional
    differentiable = not isinstance(tensor, Output) or tensor.differentiable
    float32_if = tensor.float32_if if isinstance(tensor, Output) else None
    return I.Tensor(
        tensor.name, tensor.dtype, tensor.shape, sig.allowed_dtypes(tensor), tensor.doc or "", optional, differentiable, float32_if
    )


def _attr(attr: Attr) -> I.Attr:
    default: bool | int | float = attr.default if attr.type != "float" else float(attr.default)
    return I.Attr(attr.name, attr.type, default, attr.doc or "")


def _check(check: I.Check) -> I.Check:
    """A check with only the fields its kind uses (the others at their defaults)."""
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
    return I.Check(check.kind, check.arg, check.message, check.optional, **{name: getattr(check, name) for name in used})


def _op(view: OpView, catalog: Catalog) -> I.Op:
    spec, sig = view.spec, view.signature
    kernels: dict[str, I.Kernel] = {}
    for name, kernel in sorted(spec.kernels.items()):
        guarantees = tuple(sorted(g.value for g in kernel.guarantees))
        if isinstance(kernel, ReferenceKernel):
            kernels[name] = I.Kernel(kernel.kind, guarantees, kernel.python, dict(kernel.kwargs), kernel.doc or "")
        else:
            kernels[name] = I.Kernel(kernel.kind, guarantees, doc=kernel.doc or "")
    steps = []
    own = {a.name for a in spec.attrs}
    for step in spec.backward:
        step_op = catalog.op(step.op)
        attrs = step.attrs if step.attrs is not None else tuple(a.name for a in step_op.attrs if a.name in own)
        steps.append(I.BackwardStep(step.op, step.args, step.gives, attrs))
    reduction = I.decode(I.Reduction, spec.reduction.model_dump(mode="json")) if spec.reduction is not None else None
    return I.Op(
        name=spec.name,
        summary=spec.summary,
        aliases=spec.aliases,
        dtype_vars=tuple((var, tuple(d.value for d in dtypes)) for var, dtypes in spec.dtype_vars.items()),
        args=tuple(_tensor(sig, a) for a in spec.args),
        attrs=tuple(_attr(a) for a in spec.attrs),
        outputs=tuple(_tensor(sig, o) for o in spec.outputs),
        dims=sig.dims,
        dynamic_dims={dim: d.count_nonzero for dim, d in sorted(spec.dynamic_dims.items())},
        derived_dims={dim: I.DerivedDim(d.dim, d.plus) for dim, d in sorted(spec.derived_dims.items())},
        leading_dim=spec.leading_dim,
        checks=tuple(_check(c) for c in view.checks),
        requires=tuple(g.value for g in spec.requires),
        kernels=kernels,
        reference=spec.reference,
        tolerance=spec.tolerance,
        dtypes=sig.dtypes,
        autocast=spec.autocast,
        autocast_args=tuple(a.name for a in sig.autocast_args),
        backward=tuple(steps),
        reduction=reduction,
    )


def _platform(p: PlatformSpec) -> I.Platform:
    return I.Platform(
        name=p.name,
        display_name=p.display_name,
        kind=p.kind,
        device_type=p.torch.device_type,
        dispatch_key=p.torch.dispatch_key,
        import_module=p.detection.import_module,
        available=p.detection.available,
        version_attr=p.detection.version_attr,
        version_attr_set=p.detection.version_attr_set,
        wheel_label=p.wheel.label,
        toolkit_version_from=p.wheel.version_from,
    )


def catalog_data(catalog: Catalog) -> dict[str, Any]:
    """``_catalog.json``: the same in every package."""
    package = catalog.package
    data = I.CatalogFile(
        package=I.Package(package.name, package.version, package.description),
        tolerances={
            name: {dtype.value: (tol.atol, tol.rtol) for dtype, tol in sorted(table.items(), key=lambda item: item[0].value)}
            for name, table in sorted(package.tolerances.items())
        },
        # Checked in the order the platform specs give (detection.order): a plugin platform that
        # can sit beside another build of torch comes before it.
        platforms=tuple(_platform(p) for p in sorted(catalog.platforms, key=lambda p: p.detection.order)),
        ops=tuple(_op(view, catalog) for view in catalog.views),
    )
    encoded: dict[str, Any] = I.encode(data)
    return encoded


def build_data(catalog: Catalog, platform: PlatformSpec, targets: tuple[PlatformSpec, ...]) -> dict[str, Any]:
    """``_build.json``: the platform one package is built for, the platforms whose kernels it
    carries (its own, then the host's), and per op the backends each of them admits, in order
    (``admission``: the rule the contracts hold every listed backend to)."""
    data = I.BuildFile(
        platform=platform.name,
        carried=tuple(t.name for t in targets),
        backends={view.name: {t.name: view.backends(t.name) for t in targets} for view in catalog.views},
        setup=_setup(catalog, platform, targets),
    )
    encoded: dict[str, Any] = I.encode(data)
    return encoded


def _setup(catalog: Catalog, platform: PlatformSpec, targets: tuple[PlatformSpec, ...]) -> I.Setup:
    """What the package's setup.py builds: the extension builder, sources, flags, target
    architectures and wheel label of ``platform``."""
    build, wheel = platform.build, platform.wheel
    sources = ("csrc/bindings.cpp",) + tuple(
        f"csrc/kernels/{t.name}/{view.name}_{kernel}{t.source_suffix}"
        for t in targets
        for view in catalog.views
        for kernel in view.native_kernels(t.name)
    )
    floor = build.arch_floor
    return I.Setup(
        platform=platform.name,
        display_name=platform.display_name,
        kind=platform.kind,
        compiler=platform.compiler,
        import_module=platform.detection.import_module,
        extension_module=build.extension_module,
        extension=build.extension,
        compiler_key=build.compiler_key,
        arch_env=build.arch_env,
        archs=tuple(build.archs),
        arch_floor=I.ArchFloor(floor.entry, floor.reason) if floor is not None else None,
        device_available=platform.detection.available,
        strip_flags=tuple(build.strip_flags),
        pins=tuple(wheel.pins),
        sources=sources,
        host_flags=tuple(build.host_flags),
        device_flags=tuple(build.device_flags),
        version_attr=platform.detection.version_attr,
        version_attr_set=platform.detection.version_attr_set,
        version_from=wheel.version_from,
        version_parts=wheel.version_parts,
        version_separator=wheel.version_separator,
        wheel_label=wheel.label,
        toolkit_home=build.toolkit_home,
        toolkit_hint=build.toolkit_hint,
    )


def _cases(view: OpView, targets: tuple[PlatformSpec, ...]) -> I.OpCases:
    spec = view.spec
    tests = spec.tests
    values = {a.name: I.decode(I.Values, a.values.model_dump(mode="json")) for a in spec.args if a.values is not None}
    sequences = None
    if tests.sequences is not None:
        # Offsets as a list of pairs: the first packed dimension is the queries' (JSON objects are
        # written with sorted keys).
        offsets = tuple((dim, arg) for dim, arg in tests.sequences.offsets.items())
        sequences = I.Sequences(offsets, tests.sequences.prefix, tests.sequences.prefix_if)
    paged = None
    if tests.paged is not None:
        p = tests.paged
        packed = I.PackedOp(p.packed.op, tuple(p.packed.args)) if p.packed is not None else None
        paged = I.Paged(p.queries, p.query_offsets, p.lengths, p.block_table, tuple(p.caches), p.prefix, p.prefix_if, packed)
    return I.OpCases(
        shapes=tuple(dict(shape) for shape in tests.shapes),
        batch_dim=tests.batch_dim,
        sequences=sequences,
        paged=paged,
        variants=tuple(dict(v) for v in tests.variants),
        values=values,
        counted={c.dim: c.count_nonzero_of for c in spec.constraints if c.count_nonzero_of is not None},
        divides={c.multiple_of_dim: c.dim for c in spec.constraints if c.multiple_of_dim is not None},
        follows={c.dim: (c.equals_dim, c.plus) for c in spec.constraints if c.equals_dim is not None},
        dtype_cases=tuple(view.signature.dtype_cases),
        kernels={t.name: dict(sorted(view.kernel_sizes(t.name).items())) for t in targets},
    )


def contract_cases(catalog: Catalog, targets: tuple[PlatformSpec, ...]) -> dict[str, Any]:
    """``tests/contract_cases.json`` of a package carrying the kernels of ``targets``."""
    encoded: dict[str, Any] = I.encode(I.ContractCases(catalog.package.name, {view.name: _cases(view, targets) for view in catalog.views}))
    return encoded
