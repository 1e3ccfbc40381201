"""specs → validated catalog → contract check → plan → rendered bytes.  Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import contracts
from .load import Catalog, load_catalog
from .plan import make_plan
from .render import render_all


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


def load_checked(layout: Layout) -> Catalog:
    catalog = load_catalog(layout.specs, layout.root)
    contracts.check(catalog)
    return catalog


def produce(layout: Layout) -> dict[str, bytes]:
    """Every output file, rendered in memory after the contracts hold."""
    catalog = load_checked(layout)
    return render_all(make_plan(catalog), layout.templates)
