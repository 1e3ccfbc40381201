"""What file comes from which template with which context.

The plan is pure data: a sorted list of ``RenderJob``.  Derived facts about an
op (which argument binds each dimension, the launcher ABI, the torch schema)
are computed here once, so templates only format them.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .cabi import CAbi
from .load import Catalog
from .model import Attr, BackwardStep, Dtype, NativeKernel, OpSpec, Output, PlatformSpec, TensorArg

REGISTRY_MD = "REGISTRY.md"
PACKAGE_TEMPLATES = {
    # output path (inside generated/<platform>/)   template
    "csrc/bindings.cpp": "package/bindings.cpp.j2",
    "rlkernels/__init__.py": "package/__init__.py.j2",
    "rlkernels/_registry.py": "package/_registry.py.j2",
    "rlkernels/_runtime.py": "package/_runtime.py.j2",
    "setup.py": "package/setup.py.j2",
    "README.md": "package/README.md.j2",
    "tests/conftest.py": "package/tests/conftest.py.j2",
}
# Files that are the same in every package: their templates see the ops and the package spec,
# never the platform (rendered without one, so that a template that starts to use it fails to
# render instead of silently giving every package the first one's file; it then moves above).
# Each is rendered once and written into every package.
SHARED_PACKAGE_TEMPLATES = {
    "csrc/rlk_abi.h": "package/rlk_abi.h.j2",
    "rlkernels/_checks.py": "package/_checks.py.j2",
    "rlkernels/_ops.py": "package/_ops.py.j2",
    "rlkernels/_references.py": "package/_references.py.j2",
    "rlkernels/transformers.py": "package/transformers.py.j2",
    "rlkernels/aten.py": "package/aten.py.j2",
    "rlkernels/distributed.py": "package/distributed.py.j2",
    "pyproject.toml": "package/pyproject.toml.j2",
}


@dataclass(frozen=True)
class DimBinding:
    """The first argument axis that carries a dimension; every later use must equal it."""

    dim: str
    arg: str
    axis: int


@dataclass(frozen=True)
class DimCheck:
    arg: str
    axis: int
    dim: str
    bound: DimBinding


@dataclass(frozen=True)
class Check:
    """One input check, rendered both into the C++ bindings and the Python fake kernels.

    ``message`` is the fixed part, shared by both languages; each appends ", got …".
    """

    kind: Literal["rank", "dtype", "same_dtype", "same_device", "dim", "multiple_of", "multiple_of_dim", "count_nonzero", "contiguous"]
    arg: str
    message: str
    optional: bool = False
    """The argument may be None; the check applies only when it is given."""
    rank: int = 0
    dtypes: tuple[str, ...] = ()
    other: str = ""
    axis: int = 0
    other_axis: int = 0
    multiple_of: int = 1
    dim: str = ""


def _words(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


@dataclass(frozen=True)
class OpView:
    """An op spec plus the facts every template derives from it.  The spec is frozen, so the facts
    templates ask for many times (dimensions, checks, dtypes) are worked out once per view."""

    spec: OpSpec
    spec_file: str

    @property
    def name(self) -> str:
        return self.spec.name

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

    @functools.cached_property
    def checks(self) -> tuple[Check, ...]:
        op = self.spec.name
        first = self.spec.args[0].name
        optional = {a.name for a in self.spec.args if a.optional}
        out: list[Check] = []
        for a in self.spec.args:
            dims = ", ".join(a.shape)
            out.append(Check("rank", a.name, f"{op}: argument '{a.name}' must be {len(a.shape)}-D with shape [{dims}]", rank=len(a.shape)))
        for a in self.spec.args:
            leader = self.dtype_leader(a.dtype) if a.dtype in self.spec.dtype_vars else a
            if leader.name == a.name:
                allowed = self.allowed_dtypes(a)
                out.append(Check("dtype", a.name, f"{op}: argument '{a.name}' must have dtype {_words(allowed)}", dtypes=allowed))
            else:
                out.append(
                    Check("same_dtype", a.name, f"{op}: argument '{a.name}' must have the same dtype as argument '{leader.name}' ({a.dtype})", other=leader.name)
                )
        for a in self.spec.args[1:]:
            out.append(Check("same_device", a.name, f"{op}: argument '{a.name}' must be on the same device as argument '{first}'", other=first))
        for c in self.dim_checks:
            out.append(
                Check(
                    "dim",
                    c.arg,
                    f"{op}: dimension {c.dim} of argument '{c.arg}' (axis {c.axis}) must equal dimension {c.dim} of argument '{c.bound.arg}' (axis {c.bound.axis})",
                    axis=c.axis,
                    other=c.bound.arg,
                    other_axis=c.bound.axis,
                    dim=c.dim,
                )
            )
        bound = {d.dim: d for d in self.dims}
        for constraint in self.spec.constraints:
            b = bound[constraint.dim]
            if constraint.count_nonzero_of is not None:
                out.append(
                    Check(
                        "count_nonzero",
                        b.arg,
                        f"{op}: dimension {constraint.dim} (axis {b.axis} of argument '{b.arg}') must equal the number of "
                        f"nonzero entries of argument '{constraint.count_nonzero_of}'",
                        axis=b.axis,
                        other=constraint.count_nonzero_of,
                        dim=constraint.dim,
                    )
                )
                continue
            if constraint.multiple_of_dim is not None:
                d = bound[constraint.multiple_of_dim]
                out.append(
                    Check(
                        "multiple_of_dim",
                        b.arg,
                        f"{op}: dimension {constraint.dim} (axis {b.axis} of argument '{b.arg}') must be a multiple of dimension "
                        f"{d.dim} (axis {d.axis} of argument '{d.arg}')",
                        axis=b.axis,
                        other=d.arg,
                        other_axis=d.axis,
                        dim=constraint.dim,
                    )
                )
                continue
            out.append(
                Check(
                    "multiple_of",
                    b.arg,
                    f"{op}: dimension {constraint.dim} (axis {b.axis} of argument '{b.arg}') must be a multiple of {constraint.multiple_of}",
                    axis=b.axis,
                    multiple_of=constraint.multiple_of or 1,
                    dim=constraint.dim,
                )
            )
        for a in self.spec.args:
            out.append(Check("contiguous", a.name, f"{op}: argument '{a.name}' must be contiguous (call .contiguous() on it)", rank=len(a.shape)))
        return tuple(
            Check(**{**c.__dict__, "optional": c.arg in optional}) for c in out
        )

    @property
    def float_args(self) -> tuple[TensorArg, ...]:
        return tuple(a for a in self.spec.args if self.allowed_dtypes(a)[0] in _FLOATS)

    @property
    def autocast_args(self) -> tuple[TensorArg, ...]:
        """The arguments torch.autocast casts under the op's policy: those whose dtype is a dtype variable."""
        if self.spec.autocast == "none":
            return ()
        return tuple(a for a in self.spec.args if a.dtype in self.spec.dtype_vars)

    @property
    def autocast_positions(self) -> tuple[int, ...]:
        """Where the ``autocast_args`` sit in the op's schema."""
        return tuple(i for i, a in enumerate(self.spec.args) if a in self.autocast_args)

    @property
    def variable_outputs(self) -> tuple[Output, ...]:
        """Outputs whose dtype is only known at run time (a dtype variable, or float32_if)."""
        return tuple(o for o in self.spec.outputs if o.float32_if is not None)

    def attr_default(self, attr: Attr) -> str:
        """The default as torch schema and Python write it."""
        if attr.type == "bool":
            return "True" if attr.default else "False"
        if attr.type == "float":
            return repr(float(attr.default))
        return str(int(attr.default))

    @property
    def review_data(self) -> dict[str, Any]:
        """The op's registry entry as plain data (registry.json; semantic diffs read it back)."""
        spec = self.spec
        return {
            "spec": self.spec_file,
            "summary": spec.summary,
            "requires": sorted(g.value for g in spec.requires),
            "dtypes": list(self.dtypes),
            "signature": {
                "args": {a.name: {"dtype": list(self.allowed_dtypes(a)), "shape": list(a.shape)} for a in spec.args},
                "outputs": {o.name: {"dtype": list(self.allowed_dtypes(o)), "shape": list(o.shape)} for o in spec.outputs},
            },
            "tolerance": spec.tolerance,
            "reduction": spec.reduction.model_dump(mode="json", exclude_none=True) if spec.reduction is not None else None,
            "kernels": {name: {"kind": k.kind, "guarantees": sorted(g.value for g in k.guarantees)} for name, k in spec.kernels.items()},
            "backends": {platform: list(names) for platform, names in spec.backends.items()},
        }

    def output_dtype_source(self, out: Output) -> tuple[str, str | None]:
        """(argument whose options the output copies, fixed dtype or None)."""
        if out.dtype in self.spec.dtype_vars:
            return self.dtype_leader(out.dtype).name, None
        return self.spec.args[0].name, out.dtype

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
        found |= {a.dtype for a in self.spec.args if a.dtype in _FLOATS}
        return tuple(d.value for d in Dtype if d.value in found and d.value in _FLOATS) or ("float32",)

    @property
    def dtype_cases(self) -> tuple[str, ...]:
        """The dtype settings the generated tests run.  With at most one dtype variable, one dtype
        per case (``dtypes``); with several, every combination, each spelled with its dtypes joined
        by "/" in the spec's order of the variables (e.g. "bfloat16/float32" for D, W)."""
        if len(self.spec.dtype_vars) < 2:
            return self.dtypes
        choices = [[d.value for d in dtypes] for dtypes in self.spec.dtype_vars.values()]
        return tuple("/".join(case) for case in itertools.product(*choices))

    def dtype_combinations(self, names: list[str] | tuple[str, ...]) -> tuple[tuple[tuple[str, Dtype], ...], ...]:
        """Every assignment of a dtype to each of the variables ``names``, as (variable, dtype) pairs."""
        choices = [self.spec.dtype_vars[name] for name in names]
        return tuple(tuple(zip(names, case)) for case in itertools.product(*choices))

    @property
    def schema(self) -> str:
        params = [f"Tensor{'?' if a.optional else ''} {a.name}" for a in self.spec.args]
        params += [f"{a.type} {a.name}={self.attr_default(a)}" for a in self.spec.attrs]
        outs = self.spec.outputs
        ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
        return f"({', '.join(params)}) -> {ret}"

    def backends(self, platform: str) -> tuple[str, ...]:
        return self.spec.backends.get(platform, ())

    def native_kernels(self, platform: str) -> tuple[str, ...]:
        return tuple(k for k in self.backends(platform) if isinstance(self.spec.kernels[k], NativeKernel))

    @functools.cached_property
    def abi(self) -> CAbi:
        """The C ABI of the op's launchers and the names kernel templates reach the spec's through (``cabi``)."""
        return CAbi(self)

    @property
    def saved_for_backward(self) -> tuple[str, ...]:
        """Forward tensors the backward steps read (outputs too, for zero-filled missing grads)."""
        wanted = set()
        for step in self.spec.backward:
            for source in step.args:
                wanted.add(source[5:-1] if source.startswith("grad(") else source)
        order = [a.name for a in self.spec.args] + [o.name for o in self.spec.outputs]
        return tuple(name for name in order if name in wanted)

    def backward_arg(self, source: str) -> str:
        """Python expression for a backward step argument inside ``Function.backward``."""
        if source.startswith("grad("):
            name = source[5:-1]
            if name in {o.name for o in self.variable_outputs}:
                # a float32 output on request: its gradient goes back in the inputs' dtype
                return f"_grad_or_zeros(grad_{name}, {name}).to(ctx.{name}_dtype)"
            return f"_grad_or_zeros(grad_{name}, {name})"
        return source

    def backward_attrs(self, step: BackwardStep, step_op: OpView) -> tuple[str, ...]:
        if step.attrs is not None:
            return step.attrs
        own = {a.name for a in self.spec.attrs}
        return tuple(a.name for a in step_op.spec.attrs if a.name in own)

    def leads_with(self, tensor: TensorArg | Output) -> bool:
        """Whether ``tensor``'s first dimension is the op's leading_dim (flattened by the public function)."""
        return self.spec.leading_dim is not None and tensor.shape[:1] == (self.spec.leading_dim,)

    @property
    def output_dims(self) -> tuple[DimBinding, ...]:
        """Argument-bound dimensions that some output's shape needs (directly or through a derived one)."""
        needed = {d for o in self.spec.outputs for d in o.shape}
        needed |= {derived.dim for name, derived in self.spec.derived_dims.items() if name in needed}
        return tuple(d for d in self.dims if d.dim in needed)

    @property
    def output_leads(self) -> tuple[bool, ...]:
        return tuple(self.leads_with(o) for o in self.spec.outputs)

    @property
    def leading_arg(self) -> TensorArg | None:
        return next((a for a in self.spec.args if not a.optional and self.leads_with(a)), None)

    @property
    def grad_inputs(self) -> tuple[str, ...]:
        """Forward arguments that receive a gradient from some backward step."""
        return tuple(a.name for a in self.spec.args if any(a.name in step.gives for step in self.spec.backward))


    def kernel_tests(self, platform: str) -> dict[str, dict[str, Any]]:
        """Per native kernel of ``platform``: its guarantees and the sizes its generated tests use.

        Batch sizes 1, t-1, t and t+1 for each row tile t, then at least 2*t+3 and 256 rows; chunk
        splits on either side of a tile boundary; padding past the next boundary; a reduction extent
        that runs more than stages + 1 steps with a ragged tail.
        """
        out: dict[str, dict[str, Any]] = {}
        for name in self.native_kernels(platform):
            kernel = self.spec.kernels[name]
            assert isinstance(kernel, NativeKernel)
            rows = _tile_values(kernel, kernel.tiles.rows if kernel.tiles else ())
            sizes = {1} | {size for t in rows for size in (t - 1, t, t + 1) if size >= 1}
            total = max(2 * max(rows, default=1) + 3, 256)
            chunks = sorted({c for t in rows for c in (t - 1, t + 1) if 1 <= c < total})
            extents: dict[str, int] = {}
            steps = _tile_values(kernel, kernel.tiles.reduction if kernel.tiles else ())
            if self.spec.reduction is not None and steps and kernel.tiles is not None:
                extents[self.spec.reduction.dim] = self._ragged_extent(max(steps), _tile_values(kernel, (kernel.tiles.stages,))[0])
            lengths: list[int] = []
            if self.spec.tests.sequences is not None:
                # Packed sequences cross the reduction's block: the extents go into the sequences'
                # lengths (their offsets must add up), not into the packed dimension.
                block = max(steps, default=1)
                lengths = sorted({1, 2 * block + 3} | {n for n in (block - 1, block, block + 1) if n >= 1})
                extents = {}
            out[name] = {
                "guarantees": sorted(g.value for g in kernel.guarantees),
                "batch_sizes": sorted(sizes | {total}) if rows else [],
                "chunks": chunks,
                "pad_by": max(rows, default=1) + 1,
                "extents": extents,
                "lengths": lengths,
            }
        return out

    def _ragged_extent(self, step: int, stages: int) -> int:
        """stages + 2 whole steps and a tail shorter than a step, where the dimension's constraints allow one."""
        assert self.spec.reduction is not None
        multiple = max((c.multiple_of or 1 for c in self.spec.constraints if c.dim == self.spec.reduction.dim), default=1)
        # About half a step, so a vectorised body and a scalar tail both run.
        start = -(-(step // 2 + 1) // multiple) * multiple
        tail = next((t for t in range(start, step, multiple) if t % step), 0)
        return step * (stages + 2) + tail


def _tile_values(kernel: NativeKernel, values: tuple[int | str, ...]) -> list[int]:
    """Tile extents with param names resolved (``contracts`` has checked that each names an int param)."""
    return [int(kernel.params[v]) if isinstance(v, str) else v for v in values]


_FLOATS = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class RenderJob:
    path: str
    """Relative to the output root, POSIX separators."""
    template: str
    context: dict[str, Any] = field(hash=False, compare=False)
    sources: tuple[str, ...]
    """Spec files the output depends on, for the provenance header."""
    blame: tuple[str, int, str] | None = None
    """The spec (file, line, field) a failure to render this file is reported against; None: the first op among ``sources``, line 1."""
    copies: tuple[str, ...] = ()
    """Other paths that receive the same bytes (a kernel platform's files in each package that carries them)."""


def package_targets(catalog: Catalog, platform: PlatformSpec) -> tuple[PlatformSpec, ...]:
    """Platforms whose kernels a package carries: its own, then the host's (every package has CPU kernels)."""
    hosts = [p for p in catalog.platforms if p.kind == "host"]
    return (platform,) + tuple(h for h in hosts if h.name != platform.name)


def _kernel_platform_jobs(catalog: Catalog, ops: tuple[OpView, ...], base: dict[str, Any], target: PlatformSpec) -> list[RenderJob]:
    """The files under ``csrc/kernels/<target>/`` of a package (paths relative to the package): the
    shared headers, then a launcher header and a source for each native kernel."""
    tdir = f"csrc/kernels/{target.name}"
    tfile = catalog.spec_file(f"platform:{target.name}")
    tctx = {**base, "target": target}
    jobs = [
        RenderJob(f"{tdir}/rlk_numerics.h", "package/rlk_numerics.h.j2", tctx, (tfile,)),
        RenderJob(f"{tdir}/rlk_math.h", "package/rlk_math.h.j2", tctx, (tfile,)),
        RenderJob(f"{tdir}/rlk_reduce.h", "package/rlk_reduce.h.j2", tctx, (tfile,)),
    ]
    if target.kind == "host":
        jobs.append(RenderJob(f"{tdir}/rlk_parallel.h", "package/rlk_parallel.h.j2", tctx, (tfile,)))
        jobs.append(RenderJob(f"{tdir}/rlk_lanes.h", "package/rlk_lanes.h.j2", tctx, (tfile,)))
        jobs.append(RenderJob(f"{tdir}/rlk_scratch.h", "package/rlk_scratch.h.j2", tctx, (tfile,)))
    native = [(op, kernel, op.spec.kernels[kernel]) for op in ops for kernel in op.native_kernels(target.name)]
    wanted: dict[str, list[str]] = {}
    for op, _, spec in native:
        assert isinstance(spec, NativeKernel)
        for wanted_header in spec.support_headers:
            wanted.setdefault(wanted_header, []).append(op.spec_file)
    # Support headers: only next to kernels that include them, citing the specs that ask.
    for name, users in sorted(wanted.items()):
        jobs.append(RenderJob(f"{tdir}/{name}", f"package/{name}.j2", tctx, (*sorted(set(users)), tfile)))
    for op, kernel, spec in native:
        assert isinstance(spec, NativeKernel)
        kctx = {**tctx, "op": op, "kernel": kernel}
        stem = f"{tdir}/{op.name}_{kernel}"
        jobs.append(RenderJob(f"{stem}.h", "package/launcher.h.j2", kctx, (op.spec_file, tfile)))
        where = ("kernels", kernel, "template")
        blame = (op.spec_file, catalog.sources[f"op:{op.name}"].line(where), "kernels." + kernel + ".template")
        jobs.append(RenderJob(f"{stem}{target.source_suffix}", spec.template, kctx, (op.spec_file, tfile), blame))
    return jobs


def make_plan(catalog: Catalog) -> list[RenderJob]:
    ops = tuple(OpView(op, catalog.spec_file(f"op:{op.name}")) for op in catalog.ops)
    package_file = catalog.spec_file("package")
    all_platform_files = tuple(catalog.spec_file(f"platform:{p.name}") for p in catalog.platforms)
    op_files = tuple(op.spec_file for op in ops)
    base = {"package": catalog.package, "ops": ops, "op_by_name": {op.name: op for op in ops}, "platforms": catalog.platforms}
    jobs: list[RenderJob] = []
    carriers: dict[str, list[str]] = {}  # kernel platform -> the packages that carry its files

    for platform in catalog.platforms:
        targets = package_targets(catalog, platform)
        target_files = tuple(catalog.spec_file(f"platform:{t.name}") for t in targets)
        ctx = {**base, "platform": platform, "targets": targets}
        root = platform.name
        for out, template in PACKAGE_TEMPLATES.items():
            jobs.append(RenderJob(f"{root}/{out}", template, ctx, (package_file, *target_files, *op_files)))
        for op in ops:
            jobs.append(
                RenderJob(f"{root}/tests/test_{op.name}.py", "package/tests/test_op.py.j2", {**ctx, "op": op}, (package_file, op.spec_file))
            )
        for target in targets:
            carriers.setdefault(target.name, []).append(root)

    first, *others = sorted(p.name for p in catalog.platforms)  # a catalog has a platform (load_catalog)
    for out, template in SHARED_PACKAGE_TEMPLATES.items():
        copies = tuple(f"{package}/{out}" for package in others)
        jobs.append(RenderJob(f"{first}/{out}", template, base, (package_file, *op_files), copies=copies))

    # A kernel platform's files are the same in every package that carries them (their templates see
    # the kernel platform, never the package's): each is rendered once and written into each package,
    # the kernel platform's own package first.
    for target in catalog.platforms:
        roots = sorted(carriers.get(target.name, []), key=lambda package: (package != target.name, package))
        if roots:
            for job in _kernel_platform_jobs(catalog, ops, base, target):
                jobs.append(replace(job, path=f"{roots[0]}/{job.path}", copies=tuple(f"{package}/{job.path}" for package in roots[1:])))

    # The pipeline renders REGISTRY.md last, with the evidence ledger judged against the other files.
    jobs.append(RenderJob(REGISTRY_MD, "review/REGISTRY.md.j2", {**base, "evidence": None}, (package_file, *all_platform_files, *op_files)))
    jobs.append(RenderJob("registry.json", "review/registry.json.j2", base, (package_file, *all_platform_files, *op_files)))
    jobs.sort(key=lambda j: j.path)
    paths = [path for j in jobs for path in (j.path, *j.copies)]
    assert len(paths) == len(set(paths)), "two render jobs write the same file"
    return jobs
