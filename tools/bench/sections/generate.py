"""The generator: from the command line, as `make generate` runs it (a fresh interpreter each
time), the catalog's full generate and its no-op generate; in-process, a full generate, a no-op
generate (which must write nothing) recognised as such and one rendered all the same (--full), for
the catalog and synthetic catalogs of 100, 300 and 1,000 copies of det_gemm; then the goals (from
the command line a full generate of the catalog under 1 s and a no-op under 0.3 s; in-process
under 2 ms per op and platform at 1,000 ops) against what it measured."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import ROOT, Context, Formatted
from ..machine import load_average, where

GENERATE_REPS = 5
SYNTHETIC_OPS = [100, 300, 1000]
NOOP_GOAL_S = 0.3
FULL_GOAL_S = 1.0
INPUTS = ("specs", "templates", "runtime", "evidence")
"""What a project holds besides outputs: copied into each bench project, kept by clear_outputs."""
PER_OP_GOAL_MS = 2.0
RECOGNISED = "so nothing was rendered"

HEADER = [
    ("| catalog | ops | platforms | files | runs | full generate | ms / op / platform | the same files, plain writes | ms / op / platform | "
    "no-op generate, rendered (`--full`) | ms / op / platform | no-op generate | ms / op / platform |"),
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
]

NOTES = """\
* Each synthetic catalog is specs/ plus N copies of det_gemm.yaml under other names; ops
  counts the original too.  ms / op / platform = time / (ops × platforms).
* Full generate: into an empty output tree.  The same files, plain writes: the files that full
  generate wrote, written again into an empty folder beside it with one open and write each (no
  fsync, no staging, no rename): what the file system charges for them, measured in the same run.
  No-op generate: again, unchanged, alternating the
  two kinds; the bench fails unless every file outside the inputs keeps its bytes and
  its mtime.  `generate` recognises the unchanged inputs and outputs from the digests the last
  run stored in .build/generate-state.json and renders nothing (generator/noop.py,
  tests/test_noop_generate.py); `generate --full` renders everything and compares, which is also
  what any change to an input or an output costs.
* From the command line: `python -m generator generate` in a fresh interpreter each time, as
  `make generate` runs it, interpreter start-up included.  Fresh clone: no outputs and no
  .build/ (no compiled templates), what a first `make generate` does.  Full: `generate --full`,
  every output rendered and compared (what a change to a shared template costs), compiled
  templates kept from the run before.  No-op: nothing changed since the last run.
* In-process rows: timed through `generator.cli.main`, so interpreter start-up is not included.  Catalogs
  of 1,500 files to render or more are rendered in one worker process per CPU, and 300 op specs
  or more are read in one per CPU (`--jobs`)."""


@dataclass
class GenRow:
    what: str
    ops: int
    platforms: int
    files: int
    full_s: float
    """Into an empty output tree."""
    render_s: float
    """Again, unchanged, rendering everything (`generate --full`)."""
    noop_s: float
    """Again, unchanged: recognised as such, nothing rendered (`generate`)."""
    reps: int
    plain_write_s: float = 0.0
    """The same files written into an empty folder beside it with plain open/write: what this
    file system itself charges for creating them, the floor of a full generate."""
    measured_on: str = ""
    """The machine and its load average when the row was measured (the goals' line names the last row's)."""
    cli_cold_s: float = 0.0
    """From the command line, into a fresh clone (no outputs, no .build/); 0: not measured."""
    cli_full_s: float = 0.0
    """From the command line, `generate --full` with the compiled templates of the run before."""
    cli_noop_s: float = 0.0
    """From the command line, nothing changed."""

    def per_op_platform_ms(self, seconds: float) -> float:
        return seconds * 1000 / (self.ops * self.platforms)


def make_project(dest: Path, copies: int) -> None:
    for name in INPUTS:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    source = (dest / "specs" / "ops" / "det_gemm.yaml").read_text()
    assert source.count("\nname: det_gemm\n") == 1, "det_gemm.yaml no longer has a top-level `name: det_gemm` line"
    for i in range(copies):
        name = f"det_gemm_copy{i:04d}"
        (dest / "specs" / "ops" / f"{name}.yaml").write_text(source.replace("\nname: det_gemm\n", f"\nname: {name}\n"))


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file outside the inputs: content hash and mtime."""
    return {
        p.relative_to(root).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in INPUTS
    }


def plain_write(root: Path) -> float:
    """Seconds to write every file under generated/ into an empty folder beside it, each with one
    open and write (no fsync, no rename, no check): the file system's own cost of the files."""
    files = {p.relative_to(root / "generated"): p.read_bytes() for p in sorted((root / "generated").rglob("*")) if p.is_file()}
    dest = root / "plain-write"
    start = time.perf_counter()
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            handle.write(data)
    seconds = time.perf_counter() - start
    shutil.rmtree(dest)
    return seconds


def clear_outputs(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name not in INPUTS:
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()


def generate(root: Path, *args: str) -> tuple[float, str]:
    """Seconds one in-process `generate` took, and what it printed."""
    from generator.cli import main

    quiet = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        code = main(["--root", str(root), "generate", *args])
    seconds = time.perf_counter() - start
    if code != 0:
        sys.exit(f"bench: generate failed in {root} (exit {code}):\n{quiet.getvalue()[-3000:]}")
    return seconds, quiet.getvalue()


def cli_generate(root: Path, *args: str) -> float:
    """Seconds `python -m generator generate` took in a fresh interpreter, start-up included."""
    command = [sys.executable, "-m", "generator", "--root", str(root), "generate", *args]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(command)} failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}")
    return seconds


def bench_cli(root: Path, reps: int) -> tuple[float, float, float]:
    """Medians of (fresh clone, --full, no-op) from the command line, alternated so that all
    three see the same load."""
    cold, full, noop = [], [], []
    for _ in range(reps):
        clear_outputs(root)
        cold.append(cli_generate(root))
        full.append(cli_generate(root, "--full"))
        noop.append(cli_generate(root))
    return statistics.median(cold), statistics.median(full), statistics.median(noop)


def bench_generator(what: str, copies: int, reps: int, command_line: bool = False) -> GenRow:
    with tempfile.TemporaryDirectory(prefix="rlk-bench-") as tmp:
        root = Path(tmp)
        make_project(root, copies)
        cli = bench_cli(root, reps) if command_line else (0.0, 0.0, 0.0)
        full, plain = [], []
        for _ in range(reps):
            clear_outputs(root)
            full.append(generate(root)[0])
            plain.append(plain_write(root))
        before = snapshot(root)
        rendered, noop = [], []
        for _ in range(reps):  # alternately, so that both see the same load
            for args, times in ((("--full",), rendered), ((), noop)):
                seconds, out = generate(root, *args)
                times.append(seconds)
                assert (RECOGNISED in out) == (not args), f"generate {' '.join(args)}: {out[-500:]}"
                after = snapshot(root)
                touched = sorted(rel for rel in before.keys() | after.keys() if before.get(rel) != after.get(rel))
                assert not touched, f"a no-op generate {' '.join(args)} wrote {len(touched)} files, e.g. {touched[:5]}"
        load = load_average()
        return GenRow(
            what=what,
            ops=len(list((root / "specs" / "ops").glob("*.yaml"))),
            platforms=len(list((root / "specs" / "platforms").glob("*.yaml"))),
            files=sum(1 for p in (root / "generated").rglob("*") if p.is_file()),
            full_s=statistics.median(full),
            render_s=statistics.median(rendered),
            noop_s=statistics.median(noop),
            reps=reps,
            plain_write_s=statistics.median(plain),
            measured_on=where() + (f", load average {load} at the end" if load else ""),
            cli_cold_s=cli[0],
            cli_full_s=cli[1],
            cli_noop_s=cli[2],
        )


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def measured(label: str, seconds: float, goal_s: float | None) -> str:
    """A goal's row: 0 s is a time this run did not measure (a row stored before it was), never "met"."""
    target = "(reported)" if goal_s is None else f"< {goal_s * 1000:.0f} ms"
    if not seconds:
        return f"| {label} | {target} | not measured | |"
    shown = "" if goal_s is None else verdict(seconds < goal_s)
    return f"| {label} | {target} | {seconds * 1000:,.0f} ms | {shown} |"


def goals(rows: Sequence[GenRow]) -> list[str]:
    """The generator's two goals, as measured in the run of ``rows``, on its machine."""
    if not rows:
        return []
    catalog, largest = rows[0], rows[-1]
    lines = [
        "| goal | target | measured | |",
        "| --- | ---: | ---: | --- |",
        measured(f"full generate of the catalog ({catalog.ops} ops), command line (`generate --full`)", catalog.cli_full_s, FULL_GOAL_S),
        measured("no-op generate of the catalog, command line", catalog.cli_noop_s, NOOP_GOAL_S),
        measured("first generate of a fresh clone (no .build/), command line", catalog.cli_cold_s, None),
        measured(f"no-op generate of the catalog ({catalog.ops} ops), in-process", catalog.noop_s, NOOP_GOAL_S),
    ]
    for label, seconds in (("no-op generate", largest.noop_s), ("no-op generate, rendered (`--full`)", largest.render_s), ("full generate", largest.full_s)):
        ms = largest.per_op_platform_ms(seconds)
        lines.append(f"| {label}, {largest.ops:,} ops | < {PER_OP_GOAL_MS:.0f} ms / op / platform | {ms:.3f} ms | {verdict(ms < PER_OP_GOAL_MS)} |")
    floor = largest.per_op_platform_ms(largest.plain_write_s)
    return [
        *lines,
        "",
        (
            f"Measured on {largest.measured_on} (the catalog's rows: {catalog.measured_on}).  Writing the {largest.files:,} files of the largest catalog with plain open/write took "
            f"{floor:.3f} ms / op / platform on this file system, in the same run: the floor under a full generate's time."
        ),
    ]


class GeneratorSection:
    name = "generator"
    title = "Generator"
    row_type = GenRow
    needs_torch = False

    def variant(self, facts: Mapping[str, str]) -> str:
        return ""

    def run(self, context: Context) -> list[GenRow]:
        sys.path.insert(0, str(ROOT))
        reps, synthetic = (1, [10]) if context.quick else (GENERATE_REPS, SYNTHETIC_OPS)
        rows = [bench_generator("catalog (specs/)", 0, reps, command_line=True)]
        context.emit(self, rows[-1])
        for copies in synthetic:
            # One run each: a 1,000-op catalog takes tens of seconds, and growth is what these rows show.
            rows.append(bench_generator(f"catalog + {copies:,} copies of det_gemm", copies, 1))
            context.emit(self, rows[-1])
        context.out("\n" + "\n".join(goals(rows)))
        return rows

    def format(self, rows: Sequence[GenRow]) -> Formatted:
        lines = [
            f"| {r.what} | {r.ops:,} | {r.platforms} | {r.files:,} | {r.reps} | {r.full_s * 1000:,.0f} ms | "
            f"{r.per_op_platform_ms(r.full_s):.2f} | {r.plain_write_s * 1000:,.0f} ms | {r.per_op_platform_ms(r.plain_write_s):.2f} | "
            f"{r.render_s * 1000:,.0f} ms | {r.per_op_platform_ms(r.render_s):.2f} | "
            f"{r.noop_s * 1000:,.0f} ms | {r.per_op_platform_ms(r.noop_s):.3f} |"
            for r in rows
        ]
        return Formatted([*goals(rows), "", *HEADER, *lines] if rows else HEADER, NOTES)
