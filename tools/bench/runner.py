"""The command line: which sections to run, what the run used, each row as it is measured, and the
report (docs/performance.md and docs/performance.json) written from the rows."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import report
from .core import ROOT, Context, Section
from .machine import load_average, machine_facts
from .sections import all_sections

DEFAULT = ["kernel", "model", "transformers", "transformers-moe", "tp", "vllm", "generator"]
"""What a run without section names measures: every section but transformers-large, whose rows take
minutes each on a 2-core machine (name it to measure it)."""
GROUPS = {"kernel": ["gemm", "ops"]}
"""A name on the command line that stands for several sections."""
NOT_WITH_OP = {"transformers", "transformers-large", "tp"}
"""Sections --op leaves out (it selects rows of the model table)."""


def selected(names: Sequence[str], sections: Sequence[Section]) -> list[Section]:
    wanted = {part for name in names for part in GROUPS.get(name, [name])}
    return [s for s in sections if s.name in wanted]


def unstable(rows: Sequence[Any]) -> list[Any]:
    """The rows whose kernel was not bitwise deterministic and batch-invariant in the run."""
    return [r for r in rows if hasattr(r, "deterministic") and not (r.deterministic and r.invariant)]


def main(argv: list[str] | None = None) -> int:
    sections = all_sections()
    names = [s.name for s in sections]
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=(sys.modules[__package__].__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "sections", nargs="*", metavar="|".join(["kernel", *names]), help=f"what to run (default: {' '.join(DEFAULT)}; kernel: gemm and ops)"
    )
    parser.add_argument("--op", action="append", metavar="NAME", help="model section only, this op only (repeatable); writes no report")
    parser.add_argument("--quick", action="store_true", help="each section at its smallest settings (one case, one thread, one pair); writes no report")
    args = parser.parse_args(argv)
    chosen = args.sections or DEFAULT
    unknown = [n for n in chosen if n not in names and n not in GROUPS]
    if unknown:
        parser.error(f"unknown section {', '.join(unknown)}; expected {', '.join(['kernel', *names])}")
    run = [s for s in selected(chosen, sections) if not (args.op and s.name in NOT_WITH_OP)]
    command = " ".join([os.path.relpath(sys.executable, ROOT), "-m", "tools.bench", *(argv if argv is not None else sys.argv[1:])])
    facts = machine_facts(command, with_torch=any(s.needs_torch for s in run))
    print("\n".join(f"| {k} | {v} |" for k, v in facts.items()))
    context = Context(quick=args.quick, only=frozenset(args.op) if args.op else None)
    if any(s.needs_torch for s in run):
        context.package()
    measured: list[tuple[Section, list[Any]]] = []
    for section in run:
        print(f"\n## {section.title}\n")
        print("\n".join(section.format([]).table))
        measured.append((section, section.run(context)))
    print(f"\nload average at the end: {load_average() or 'unknown'}")
    if args.op or args.quick:
        print(f"({'--op: a partial model table' if args.op else '--quick'}; {report.DOC.relative_to(ROOT)} left as it was)")
    else:
        report.write(facts, measured, sections)
        print(f"wrote {report.DOC.relative_to(ROOT)} and {report.STORE.relative_to(ROOT)}")
    failed = unstable([row for _, rows in measured for row in rows])
    for row in failed:
        threads = f" on {row.threads} threads" if hasattr(row, "threads") else ""
        print(f"bench: {row.what}{threads} was not bitwise stable", file=sys.stderr)
    return 1 if failed else 0
