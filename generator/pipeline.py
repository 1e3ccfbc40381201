"""specs → validated catalog → contract check → plan → rendered bytes.  Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import contracts, readme
from .errors import GeneratorError
from .load import Catalog, load_catalog
from .plan import OpView, make_plan
from .render import render_all, render_text
from .schema import schema_files


@dataclass(frozen=True)
class Layout:
    """Where a project keeps its specs, templates and output."""

    root: Path

    @property
    def specs(self) -> Path:
        return self.root / "specs"

    @property
    def templates(self) -> Path:
        return self.root / "templates"

    @property
    def generated(self) -> Path:
        return self.root / "generated"

    @property
    def extras(self) -> tuple[str, ...]:
        """Every file outside generated/ that a run may write (relative to the root)."""
        return (readme.README, *schema_files())


@dataclass(frozen=True)
class Output:
    files: dict[str, bytes]
    """Everything under generated/ (the manifest is added by ``write``)."""
    extras: dict[str, bytes]
    """Files outside generated/, relative to the root: the JSON Schemas and, where README.md
    carries the markers, the README with its operator table spliced in."""


def load_checked(layout: Layout) -> Catalog:
    catalog = load_catalog(layout.specs, layout.root)
    contracts.check(catalog)
    return catalog


def produce(layout: Layout) -> dict[str, bytes]:
    """Every file under generated/, rendered in memory after the contracts hold."""
    return produce_all(layout).files


def produce_all(layout: Layout) -> Output:
    """Every output, generated/ and extras, rendered in memory after the contracts hold."""
    catalog = load_checked(layout)
    files = render_all(make_plan(catalog), layout.templates)
    extras = schema_files()
    readme_path = layout.root / readme.README
    if readme_path.is_file():
        try:
            text = readme_path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise GeneratorError(f"{readme.README}: cannot read it ({exc})") from None
        ops = tuple(OpView(op, catalog.spec_file(f"op:{op.name}")) for op in catalog.ops)
        context = {"package": catalog.package, "ops": ops, "platforms": catalog.platforms}
        block = render_text(layout.templates, readme.TEMPLATE, context, f"the operator table of {readme.README}")
        spliced = readme.splice(text, block)
        if spliced is not None:
            extras[readme.README] = spliced.encode("utf-8")
    return Output(files, extras)
