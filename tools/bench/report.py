"""docs/performance.md, rendered from rows: docs/performance.json keeps, for each section (and each of
its variants: det_gemm's code paths), the rows of the last run that measured it, the notes written
with them and the machine facts of that run.  The Markdown is a function of that file alone, so a
run of some sections keeps the others' tables, each marked with the run that measured it, and
nothing is ever parsed back out of printed text.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core import ROOT, Section
from .machine import run_of

DOC = ROOT / "docs" / "performance.md"
STORE = ROOT / "docs" / "performance.json"

INTRO = [
    "# Performance",
    "",
    "Written by `make bench` (`tools/bench/`, which keeps the rows in `docs/performance.json`); rerun it rather than editing this file.",
    "Read the ratios: each baseline is measured in the same process, alternating with what it",
    "is compared to; absolute numbers move with the machine's load.",
    "",
]


@dataclass
class Table:
    """What one run measured for one section (one variant of it)."""

    section: str
    variant: str
    run: str
    """The key of its run in ``Store.runs``."""
    rows: list[dict[str, Any]]
    notes: str


@dataclass
class Store:
    runs: dict[str, dict[str, str]] = field(default_factory=dict)
    """Run -> its machine facts (CPU, torch, code paths, command, date, ...), in the order shown."""
    last_run: str | None = None
    tables: list[Table] = field(default_factory=list)
    """Newest first within each section."""


def load(path: Path | None = None) -> Store:
    path = path or STORE
    if not path.is_file():
        return Store()
    data = json.loads(path.read_text())
    return Store(runs=data["runs"], last_run=data["last_run"], tables=[Table(**t) for t in data["tables"]])


def dumps(store: Store) -> str:
    """The store as JSON, one row a line (a rerun's diff shows the rows that changed)."""

    def one(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    tables = []
    for t in store.tables:
        rows = ",\n".join(f"    {one(row)}" for row in t.rows)
        fields = ", ".join(f"{one(k)}: {one(v)}" for k, v in dataclasses.asdict(t).items() if k != "rows")
        tables.append(f"  {{{fields}, \"rows\": [\n{rows}\n  ]}}")
    runs = json.dumps(store.runs, indent=2, ensure_ascii=False).replace("\n", "\n ")
    return f'{{\n "last_run": {one(store.last_run)},\n "runs": {runs},\n "tables": [\n' + ",\n".join(tables) + "\n ]\n}\n"


def row_to_json(row: Any) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(row).items()}


def row_from_json(cls: type[Any], data: Mapping[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    return cls(**{k: tuple(v) if typing.get_origin(hints[k]) is tuple else v for k, v in data.items()})


def record(store: Store, facts: Mapping[str, str], measured: Sequence[tuple[Section, Sequence[Any]]]) -> Store:
    """``store`` with this run's tables in place of the ones they replace (same section and variant)."""
    run = facts.get("Date (UTC)", "run")
    key, n = run, 1
    while key in store.runs:
        n += 1
        key = f"{run} ({n})"
    tables = list(store.tables)
    for section, rows in measured:
        if not rows:
            continue
        variant = section.variant(facts)
        tables = [t for t in tables if (t.section, t.variant) != (section.name, variant)]
        tables.insert(0, Table(section.name, variant, key, [row_to_json(r) for r in rows], section.format(rows).notes))
    runs = {**store.runs, key: dict(facts)}
    kept = {t.run for t in tables} | {key}
    return Store(runs={k: v for k, v in runs.items() if k in kept}, last_run=key, tables=tables)


def render(store: Store, sections: Sequence[Section]) -> str:
    """docs/performance.md for ``store``: the last run's machine, then each section's tables."""
    facts = store.runs.get(store.last_run or "", {})
    lines = [*INTRO, "| Machine | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in facts.items())]
    for section in sections:
        tables = [t for t in store.tables if t.section == section.name]
        if not tables:
            continue
        lines += ["", f"## {section.title}", ""]
        if any(t.variant for t in tables):
            heading = getattr(section, "variant_heading", "Variant")
            for index, table in enumerate(tables):
                if index:
                    lines.append("")
                lines += [f"### {heading}: {table.variant}", "", f"*Run of {run_of(store.runs[table.run])}.*", ""]
                lines += section.format([row_from_json(section.row_type, r) for r in table.rows]).table
        else:
            (table,) = tables
            if table.run != store.last_run:
                lines += [f"*Not measured by this run: the table of the run of {run_of(store.runs[table.run])}.*", ""]
            lines += section.format([row_from_json(section.row_type, r) for r in table.rows]).table
        lines += ["", tables[0].notes]
    return "\n".join(lines) + "\n"


def write(
    facts: Mapping[str, str], measured: Sequence[tuple[Section, Sequence[Any]]], sections: Sequence[Section], doc: Path | None = None, store_path: Path | None = None
) -> Store:
    """Record this run's rows in ``store_path`` (docs/performance.json) and render ``doc`` (docs/performance.md) from it."""
    doc, store_path = doc or DOC, store_path or STORE
    store = record(load(store_path), facts, measured)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    store_path.write_text(dumps(store))
    doc.write_text(render(store, sections))
    return store
