"""specs → validated catalog → contract check → plan → rendered bytes.  Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import contracts, evidence, readme
from .errors import GeneratorError
from .files import FileProblem, read_bounded
from .load import Catalog, load_catalog
from .paths import README, Layout
from .plan import REGISTRY_MD, make_plan
from .render import render_all, render_text
from .runtime_tree import package_names, runtime_files
from .schema import schema_files
from .spec_doc import spec_doc_files

__all__ = ["Layout", "Output", "load_checked", "produce_all", "runtime_files"]
"""Layout (paths.py) and runtime_files (runtime_tree.py) too: what a caller of the pipeline needs."""


@dataclass(frozen=True)
class Output:
    files: dict[str, bytes]
    """Everything under generated/ (the manifest is added by ``write``)."""
    extras: dict[str, bytes]
    """Files outside generated/, relative to the root: the JSON Schemas, the spec-language page and,
    where README.md carries the markers, the README with its operator table and verification table spliced in."""
    evidence: evidence.Evidence | None = None
    """The ledger under evidence/ judged against the sources rendered here."""


def load_checked(layout: Layout, workers: int | None = None) -> Catalog:
    """``workers``: processes to read op specs in (None: as many as the CPUs, for a large catalog)."""
    catalog = load_catalog(layout.specs, layout.root, workers)
    contracts.check(catalog, layout.templates, package_names(layout.runtime))
    return catalog


MAX_README_BYTES = 1024 * 1024


def produce_all(layout: Layout, workers: int | None = None) -> Output:
    """Every output, generated/ and extras, rendered in memory after the contracts hold.
    ``workers``: processes to read and render in (None: as many as the CPUs, for a large
    catalog); the bytes never depend on it.

    REGISTRY.md and the README's blocks show the evidence ledger judged against the sources
    rendered in this same run, so they are rendered last."""
    catalog = load_checked(layout, workers)
    jobs = make_plan(catalog, runtime_files(layout.runtime))
    files = render_all([j for j in jobs if j.path != REGISTRY_MD], layout.templates, layout.template_cache, workers)
    judged = evidence.assess(catalog, files, evidence.read_ledger(layout.root))
    late = [replace(j, context={**j.context, "evidence": judged}) for j in jobs if j.path == REGISTRY_MD]
    files.update(render_all(late, layout.templates, layout.template_cache, 1))
    files = dict(sorted(files.items()))
    extras = {**schema_files(), **spec_doc_files()}
    readme_path = layout.root / README
    # A README that is absent has no blocks to splice; any other (a FIFO, a link out of the
    # project, one too large) is read through the one bounded reader, which refuses it.
    if readme_path.exists() or readme_path.is_symlink():
        try:
            text = read_bounded(readme_path, MAX_README_BYTES, inside=layout.root).decode("utf-8")
        except (FileProblem, UnicodeDecodeError) as exc:
            raise GeneratorError(f"{README}: cannot read it ({exc})") from None
        context = {"package": catalog.package, "ops": catalog.views, "platforms": catalog.platforms, "evidence": judged, "writers": evidence.WRITERS}
        spliced_any = False
        for block in readme.BLOCKS:
            rendered = render_text(layout.templates, block.template, context, f"{block.what} of {README}", layout.template_cache)
            spliced = readme.splice(text, rendered, block)
            if spliced is not None:
                text, spliced_any = spliced, True
        if spliced_any:
            extras[README] = text.encode("utf-8")
    return Output(files, extras, judged)
