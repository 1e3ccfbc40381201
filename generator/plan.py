"""What file comes from where: a template with a context, or a hand-written file copied as it is.

The plan is pure data: a sorted list of ``RenderJob``.  The facts templates format are derived
once, in the catalog's views (``views``); the package's hand-written Python lives in
``runtime/`` and reaches every package unchanged (``static``), with what varies by spec given to
it as data (``package_data``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from . import package_data, review, runtime_tree
from .load import Catalog
from .model import NativeKernel, PlatformSpec
from .paths import RUNTIME_DIR
from .views import OpView

REGISTRY_MD = "REGISTRY.md"
PACKAGE_TEMPLATES = {
    # output path (inside generated/<platform>/; {package}: the package's name)   template
    "csrc/bindings.cpp": "package/bindings.cpp.j2",
    "README.md": "package/README.md.j2",
}
DATA_TEMPLATE = "data.json.j2"
HOST_ONLY_HEADERS = frozenset({"rlk_lanes.h", "rlk_parallel.h", "rlk_scratch.h"})
"""Headers of runtime/kernels/ for host kernels only (vector lanes, threads, scratch buffers): not
copied next to a device platform's kernels, and each stops a device compile that includes it."""


@dataclass(frozen=True)
class RenderJob:
    path: str
    """Relative to the output root, POSIX separators."""
    template: str
    """The Jinja template; for a copied file, the source it is copied from (relative to the project root)."""
    context: dict[str, Any] = field(hash=False, compare=False)
    sources: tuple[str, ...]
    """Spec files the output depends on, for the provenance header (none for a copied file)."""
    blame: tuple[str, int, str] | None = None
    """The spec (file, line, field) a failure to render this file is reported against; None: the first op among ``sources``, line 1."""
    copies: tuple[str, ...] = ()
    """Other paths that receive the same bytes (a kernel platform's files in each package that carries them)."""
    static: bool = False
    """``template`` names a hand-written file (under ``runtime/``) that is copied, not rendered."""


def package_targets(catalog: Catalog, platform: PlatformSpec) -> tuple[PlatformSpec, ...]:
    """Platforms whose kernels a package carries: its own, then the host's (every package has CPU kernels)."""
    hosts = [p for p in catalog.platforms if p.kind == "host"]
    return (platform,) + tuple(h for h in hosts if h.name != platform.name)


def _kernel_platform_jobs(
    catalog: Catalog, ops: tuple[OpView, ...], base: dict[str, Any], target: PlatformSpec, kernel_headers: tuple[str, ...]
) -> list[RenderJob]:
    """The files under ``csrc/kernels/<target>/`` of a package (paths relative to the package): the
    shared headers, then a launcher header and a source for each native kernel."""
    tdir = f"csrc/kernels/{target.name}"
    tfile = catalog.platform_file(target.name)
    tctx = {**base, "target": target}
    # rlk_numerics.h is the platform's dialect (its headers, types, intrinsics); the headers of
    # runtime/kernels/ are plain C++, the same for every platform, and copied as they are.
    jobs = [RenderJob(f"{tdir}/rlk_numerics.h", "package/rlk_numerics.h.j2", tctx, (tfile,))]
    for header in kernel_headers:
        name = header.rsplit("/", 1)[-1]
        if target.kind == "host" or name not in HOST_ONLY_HEADERS:
            jobs.append(RenderJob(f"{tdir}/{name}", f"{RUNTIME_DIR}/{header}", {}, (), static=True))
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
        blame = (op.spec_file, catalog.op_source(op.name).line(where), "kernels." + kernel + ".template")
        jobs.append(RenderJob(f"{stem}{target.source_suffix}", spec.template, kctx, (op.spec_file, tfile), blame))
    return jobs


def make_plan(catalog: Catalog, runtime_files: tuple[str, ...] = ()) -> list[RenderJob]:
    """Every file of generated/.  ``runtime_files``: the hand-written files under ``runtime/``
    (relative to it), copied into every package."""
    ops = catalog.views
    package_file = catalog.package_file
    all_platform_files = tuple(catalog.platform_file(p.name) for p in catalog.platforms)
    op_files = tuple(op.spec_file for op in ops)
    base = {"package": catalog.package, "ops": ops, "op_by_name": {op.name: op for op in ops}, "platforms": catalog.platforms}
    jobs: list[RenderJob] = []
    carriers: dict[str, list[str]] = {}  # kernel platform -> the packages that carry its files
    kernel_headers = tuple(rel for rel in runtime_files if rel.startswith(f"{runtime_tree.KERNELS_DIR}/"))
    name = catalog.package.name

    for platform in catalog.platforms:
        targets = package_targets(catalog, platform)
        target_files = tuple(catalog.platform_file(t.name) for t in targets)
        ctx = {**base, "platform": platform, "targets": targets}
        root = platform.name
        for out, template in PACKAGE_TEMPLATES.items():
            jobs.append(RenderJob(f"{root}/{out}", template, ctx, (package_file, *target_files, *op_files)))
        build = {"data": package_data.build_data(catalog, platform, targets)}
        jobs.append(RenderJob(f"{root}/{name}/{package_data.BUILD_FILE}", DATA_TEMPLATE, build, (package_file, *target_files, *op_files)))
        cases = {"data": package_data.contract_cases(catalog, targets)}
        jobs.append(RenderJob(f"{root}/{package_data.CASES_FILE}", DATA_TEMPLATE, cases, (package_file, *target_files, *op_files)))
        for target in targets:
            carriers.setdefault(target.name, []).append(root)

    first, *others = sorted(p.name for p in catalog.platforms)  # a catalog has a platform (load_catalog)

    def everywhere(out: str) -> tuple[str, tuple[str, ...]]:
        return f"{first}/{out}", tuple(f"{package}/{out}" for package in others)

    spec_files = (package_file, *all_platform_files, *op_files)
    path, copies = everywhere(f"{name}/{package_data.CATALOG_FILE}")
    jobs.append(RenderJob(path, DATA_TEMPLATE, {"data": package_data.catalog_data(catalog)}, spec_files, copies=copies))
    for rel in runtime_files:
        destination = runtime_tree.destination(rel, name)
        if destination is not None:
            path, copies = everywhere(destination)
            jobs.append(RenderJob(path, f"{RUNTIME_DIR}/{rel}", {}, (), copies=copies, static=True))

    # A kernel platform's files are the same in every package that carries them (their templates see
    # the kernel platform, never the package's): each is rendered once and written into each package,
    # the kernel platform's own package first.
    for target in catalog.platforms:
        roots = sorted(carriers.get(target.name, []), key=lambda package: (package != target.name, package))
        if roots:
            for job in _kernel_platform_jobs(catalog, ops, base, target, kernel_headers):
                jobs.append(replace(job, path=f"{roots[0]}/{job.path}", copies=tuple(f"{package}/{job.path}" for package in roots[1:])))

    # The pipeline renders REGISTRY.md last, with the evidence ledger judged against the other files.
    jobs.append(RenderJob(REGISTRY_MD, "review/REGISTRY.md.j2", {**base, "evidence": None}, spec_files))
    jobs.append(RenderJob(review.REGISTRY_JSON, DATA_TEMPLATE, {"data": review.registry_data(catalog)}, spec_files))
    jobs.sort(key=lambda j: j.path)
    paths = [path for j in jobs for path in (j.path, *j.copies)]
    assert len(paths) == len(set(paths)), "two render jobs write the same file"
    return jobs
