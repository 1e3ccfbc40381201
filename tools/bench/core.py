"""What every section shares: the interface a section implements, the run's context, and timing.

The machines this runs on are shared and noisy: what is measured and its baseline are timed
alternately, and the speed ratio is the median of the paired ratios, which moves much less than
the absolute numbers.  No section reports a time without the baseline measured beside it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from . import specs

ROOT = specs.ROOT
BUILD = ROOT / ".build" / "bench-cpu"

INVARIANT_ROWS = 8  # rows computed alone and compared with the same rows of the full batch
ROW_BUDGET_S = 2.0  # timing per table row, after at least MIN_REPS pairs
# A baseline call longer than this (bfloat16 autograd through F.linear on a CPU without bfloat16
# instructions takes over a minute) is timed in one pair only.
LONG_BASELINE_S = 10.0
MIN_REPS, MAX_REPS = 5, 25


@dataclass(frozen=True)
class Formatted:
    """A section's rows as docs/performance.md shows them."""

    table: list[str]
    """The Markdown table's lines, the last ones one per row (what a run prints as it measures)."""
    notes: str
    """How the rows were measured and how to read them, from the section's settings."""


class Section(Protocol):
    """One table of docs/performance.md (`make bench <name>`)."""

    @property
    def name(self) -> str:
        """On the command line, and the key of its tables in docs/performance.json."""
        ...

    @property
    def title(self) -> str:
        """Its heading in docs/performance.md."""
        ...

    @property
    def row_type(self) -> type[Any]:
        """A dataclass of JSON values: one row, as the report keeps it."""
        ...

    @property
    def needs_torch(self) -> bool:
        """Whether it runs the CPU package (the machine table then names torch and the code paths)."""
        ...

    def variant(self, facts: Mapping[str, str]) -> str:
        """Which of the section's tables a run on this machine replaces ("" where it has one table)."""
        ...

    def run(self, context: Context) -> list[Any]:
        """Measure; print each row as it is measured (``context.emit``); return the rows."""
        ...

    def format(self, rows: Sequence[Any]) -> Formatted:
        """The rows as a Markdown table, and the notes under it."""
        ...


class OneTable:
    """Defaults for a section with one table that runs the CPU package."""

    needs_torch = True

    def variant(self, facts: Mapping[str, str]) -> str:
        return ""


def yes(ok: bool, no: str = "**no**") -> str:
    return "yes" if ok else no


@dataclass
class Context:
    """What a section's run gets: the options, the machine and (built on first use) the CPU package."""

    root: Path = ROOT
    quick: bool = False
    """Each section at its smallest settings: one case of each kind, one thread, one timed pair."""
    only: frozenset[str] | None = None
    """--op: the model section's rows of these ops only."""
    out: Callable[[str], None] = print
    _package: Any = field(default=None, repr=False)
    _ops: dict[str, specs.OpData] | None = field(default=None, repr=False)

    def package(self) -> Any:
        if self._package is None:
            self._package = build_cpu_package(self.root / "generated" / "cpu", BUILD, self.out)
        return self._package

    def ops(self) -> dict[str, specs.OpData]:
        if self._ops is None:
            self._ops = specs.read_ops(self.root)
        return self._ops

    def cases(self, cases: Sequence[Any], kind: Callable[[Any], Any] | None = None) -> list[Any]:
        """``cases``, or with --quick the first of each kind (the first of all where no kind is given)."""
        if not self.quick:
            return list(cases)
        firsts: dict[Any, Any] = {}
        for case in cases:
            firsts.setdefault(kind(case) if kind else None, case)
        return list(firsts.values())

    def threads(self) -> list[int]:
        return [1] if self.quick else thread_counts()

    def reps(self, min_reps: int, budget_s: float) -> tuple[int, float]:
        return (1, 0.0) if self.quick else (min_reps, budget_s)

    def emit(self, section: Section, row: Any) -> None:
        self.out(section.format([row]).table[-1])

    def each_thread_count(self, section: Section, cases: Iterable[Any], bench: Callable[..., Any]) -> list[Any]:
        """bench(threads, *case) for every case, on one thread and then on all, printing each row."""
        import torch

        cases = list(cases)
        rows = []
        for threads in self.threads():
            torch.set_num_threads(threads)
            os.environ["RLK_NUM_THREADS"] = str(threads)  # the kernels read it on every call
            for case in cases:
                row = bench(threads, *case)
                self.emit(section, row)
                rows.append(row)
        return rows


def thread_counts() -> list[int]:
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return sorted({1, available})


def build_cpu_package(source: Path, build: Path, out: Callable[[str], None] = print) -> Any:
    """The CPU package built in place from ``source`` in ``build`` (copied files keep their mtimes when
    unchanged, so the build is incremental), imported from there."""
    sys.path.insert(0, str(ROOT))
    from tools.build_wheel import sync_tree

    start = time.perf_counter()
    build.mkdir(parents=True, exist_ok=True)
    sync_tree(source, build)
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=build, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        sys.exit(f"bench: building {source.relative_to(ROOT)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    out(f"built {source.relative_to(ROOT)} in {build.relative_to(ROOT)} ({time.perf_counter() - start:.1f} s)")
    sys.path.insert(0, str(build))
    import rlkernels

    if not Path(rlkernels.__file__).resolve().is_relative_to(build):
        sys.exit(f"bench: imported rlkernels from {rlkernels.__file__}, not from {build}")
    if rlkernels.NATIVE_ERROR is not None:
        sys.exit(f"bench: rlkernels._C did not load: {rlkernels.NATIVE_ERROR}")
    return rlkernels


# ---------------------------------------------------------------- timing


def same_bits(x: Any, y: Any) -> bool:
    import torch

    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[x.dtype]
    return bool(x.shape == y.shape and x.dtype == y.dtype and torch.equal(x.view(bits), y.view(bits)))


@dataclass
class Timing:
    kernel_s: list[float]
    baseline_s: list[float]
    first: Any
    """The kernel's first output (the warm-up call's)."""
    differing: int
    """How many later outputs differed from the first in any bit."""

    @property
    def ratio(self) -> float:
        """Median of the paired ratios, baseline time / kernel time: above 1, the kernel was faster."""
        return statistics.median(t / s for s, t in zip(self.kernel_s, self.baseline_s))

    @property
    def kernel_median(self) -> float:
        return statistics.median(self.kernel_s)

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_s)


def time_alternately(kernel: Callable[[], Any], baseline: Callable[[], Any], min_reps: int = MIN_REPS, budget_s: float = ROW_BUDGET_S) -> Timing:
    """Times kernel and baseline in alternating order, at least min_reps pairs, then more until
    budget_s has passed (at most MAX_REPS)."""
    first = kernel()  # also the warm-up: page faults, thread pools, lazy initialisation
    warm_up = time.perf_counter()
    baseline()
    if time.perf_counter() - warm_up > LONG_BASELINE_S:
        min_reps = 1  # a call this long times well on its own; two more pairs would add minutes
    kernel_s: list[float] = []
    baseline_s: list[float] = []
    differing = 0
    start = time.perf_counter()
    while len(kernel_s) < min_reps or (len(kernel_s) < MAX_REPS and time.perf_counter() - start < budget_s):
        order = [(kernel, kernel_s), (baseline, baseline_s)]
        if len(kernel_s) % 2:
            order.reverse()
        for fn, times in order:
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
            if fn is kernel:
                differing += not same_bits(out, first)
    return Timing(kernel_s, baseline_s, first, differing)
