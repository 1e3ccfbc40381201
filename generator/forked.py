"""Work shared among forked worker processes, for a large catalog; the results never depend on it.

Each worker inherits the work (a closure over everything it needs) through the fork, so nothing
but a share's index goes to it and nothing but that share's results comes back.  Where workers
cannot run, or one fails, ``map_shares`` answers None and the caller does the work itself, so
that an error reads as it always does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# What forked workers run: set just before they start, inherited by them, never pickled.
_WORK: tuple[Callable[[int, int], list[Any]], int] | None = None


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a container's)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    with contextlib.suppress(OSError, ValueError, ZeroDivisionError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, -(-int(quota) // int(period))))
    return max(1, cpus)


def can_fork() -> bool:
    """POSIX but macOS (whose system libraries are not fork-safe), with fork available."""
    return sys.platform != "darwin" and "fork" in multiprocessing.get_all_start_methods()


def default_workers(items: int, at_least: int) -> int:
    """Workers for ``items`` pieces of work: the usable CPUs where there are ``at_least`` of them
    (below that, starting processes costs more than it saves) and this system can fork; else 1."""
    return usable_cpus() if items >= at_least and can_fork() else 1


def _run_share(index: int) -> list[Any] | None:
    assert _WORK is not None
    work, shares = _WORK
    try:
        return work(index, shares)
    except Exception:  # noqa: BLE001 -- reported by the caller's own run that follows
        return None


def map_shares(work: Callable[[int, int], list[T]], shares: int, workers: int) -> list[list[T]] | None:
    """``[work(i, shares) for i in range(shares)]``, computed by ``workers`` forked processes; None
    where they could not run or a share failed.  Only a process with no other thread forks: a lock
    another thread held at the fork would stay locked in the workers forever (Jinja's template
    cache has one)."""
    global _WORK
    if threading.active_count() > 1 or not can_fork():
        return None
    _WORK = (work, shares)
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = list(pool.map(_run_share, range(shares)))
    except Exception:  # noqa: BLE001 -- no processes (limits, a dead worker, a refused fork): the caller works alone
        return None
    finally:
        _WORK = None
    if any(part is None for part in parts):
        return None
    return [part for part in parts if part is not None]


def interleaved(parts: list[list[T]], total: int) -> list[T]:
    """The results of shares that each took every ``len(parts)``-th item, back in item order."""
    out: list[Any] = [None] * total
    for index, part in enumerate(parts):
        out[index :: len(parts)] = part
    return out
