"""Writing evidence records: what the checks call once they have run.

Nothing here invents evidence: each function turns the result of a check that ran into records
for exactly what passed, and ``record`` merges them into the ledger.  When generated/ and the
README were current before, ``record`` renders them again, so the tree stays what ``make check``
expects; when they were not, it leaves them to ``make generate`` and says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import evidence
from .errors import GeneratorError, one_line
from .evidence import How, Record
from .load import Catalog
from .pipeline import Layout, produce_all
from .source_hash import COMMIT_ENV, UNKNOWN_COMMIT, commit_of, read_source, source_sha256
from .write import compute_changes, exclusive, manifest_bytes, write_tree

__all__ = ["Recorded", "checked_commit", "commit_of", "executed_records", "record", "records_for_kernels", "tree_files"]


@dataclass(frozen=True)
class Recorded:
    changed: tuple[Record, ...]
    """Records that were added or replaced (a record of an unchanged source is kept as it was)."""
    rendered: tuple[str, ...]
    """Files re-rendered from the new ledger (relative to the root)."""
    note: str
    """What happened to generated/ and the README, for the user."""


def _current(layout: Layout) -> bool:
    """Whether generated/, the README and schema/ are what ``make check`` expects right now."""
    try:
        output = produce_all(layout)
    except GeneratorError:
        return False
    files = {**output.files, "manifest.json": manifest_bytes(output.files)}
    return compute_changes(layout.generated, files, output.extras).empty


def record(root: Path, records: Sequence[Record], refresh: bool = True) -> Recorded:
    """Merge ``records`` into ``root``'s ledger; re-render generated/ and the README when they
    were current before (and ``refresh``)."""
    layout = Layout(root)
    with exclusive(root):
        if not records:
            return Recorded((), (), "no outcome could be recorded; nothing changed")
        was_current = refresh and _current(layout)
        changed = evidence.write_ledger(root, records)
        if not changed:
            return Recorded((), (), "the ledger already held these records; nothing changed")
        if not refresh:
            return Recorded(tuple(changed), (), "run `make generate` to render the new records")
        if not was_current:
            return Recorded(
                tuple(changed), (), "generated/ was not current before these records, so it was left alone: run `make generate`"
            )
        output = produce_all(layout)
        changes = write_tree(layout.generated, output.files, output.extras)
        rendered = tuple(f"generated/{rel}" for rel in (*changes.written, *changes.removed)) + changes.extra
        return Recorded(tuple(changed), rendered, f"re-rendered {', '.join(rendered) or 'nothing'}")


# --------------------------------------------------------------------------- executed: the generated tests' results


def _contracts(catalog: Catalog) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """(op, kernel, platform) → dtypes, for every native backend."""
    found: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for view in catalog.views:
        for platform in catalog.platforms:
            for kernel in view.native_kernels(platform.name):
                found[(view.name, kernel, platform.name)] = view.dtypes
    return found


def _count(outcome: Mapping[str, Any], key: str, shown: str) -> int:
    value = outcome.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise GeneratorError(f"{shown}: {key} must be a count, got {value!r}")
    return value


def _text(data: Mapping[str, Any], key: str, shown: str, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise GeneratorError(f"{shown}: {key} must be a non-empty string, got {value!r}")
    return value


def default_check(package_platform: str) -> str:
    if package_platform == "cpu":
        return "make test: the CPU package's generated contract tests (tests/test_cpu_package.py)"
    return f"make gpu-check: the {package_platform} package's generated contract tests (tools/gpu_check.py)"


def checked_commit(commit: str, shown: str) -> str:
    """``commit`` when it is a full commit hash (a record names the commit it ran at), else a
    ``GeneratorError`` that says what is wrong with it."""
    if commit == UNKNOWN_COMMIT:
        raise GeneratorError(
            f"{shown}: the commit these sources came from is unknown (not a git checkout); set ${COMMIT_ENV} to it"
        )
    if not re.fullmatch(evidence.COMMIT, commit):
        raise GeneratorError(f"{shown}: commit must be a full commit hash (40 hex digits, optionally +dirty), got {commit[:60]!r}")
    return commit


def _names(items: Iterable[str]) -> str:
    return ", ".join(sorted(items)) or "none"


def _not_a_contract(catalog: Catalog, known: Mapping[tuple[str, str, str], tuple[str, ...]], op: str, kernel: str, platform: str, dtype: str) -> str | None:
    """Why (op, kernel, platform, dtype) is not a contract of the current specs, naming the first
    unknown name and the known ones in its place; None when it is one.  A results file that names
    something else came from other specs (or was edited): recording the rest of it, or nothing
    while saying all is well, would hide that."""
    ops = {view.name for view in catalog.views}
    if op not in ops:
        return f"unknown op {op!r}; the ops are {_names(ops)}"
    platforms = {p.name for p in catalog.platforms}
    if platform not in platforms:
        return f"unknown platform {platform!r}; the platforms are {_names(platforms)}"
    kernels = {k for (o, k, _) in known if o == op}
    if kernel not in kernels:
        return f"unknown kernel {kernel!r} of op {op}; its native kernels are {_names(kernels)}"
    there = {k for (o, k, p) in known if o == op and p == platform}
    if (op, kernel, platform) not in known:
        return f"kernel {kernel} of op {op} is not a backend of it on {platform}; its native kernels there are {_names(there)}"
    dtypes = known[(op, kernel, platform)]
    if dtype not in dtypes:
        return f"unknown dtype {dtype!r} of op {op}; its dtypes are {', '.join(dtypes)}"
    return None


def executed_records(
    results: Any,
    catalog: Catalog,
    files: Mapping[str, bytes],
    commit: str,
    shown: str = "the results",
    check: str | None = None,
) -> tuple[list[Record], list[str]]:
    """``executed`` records for the outcomes of a generated-tests run (the file ``$RLK_EVIDENCE_OUT``
    names) that ran on their package's own platform with passed > 0 and failed == 0, and the
    reasons each other outcome was not recorded.  A file whose package or outcomes name an op,
    kernel, platform or dtype that is not a contract of the current specs is a ``GeneratorError``
    (``_not_a_contract``), as is a malformed one: nothing of it is recorded.

    ``files``: the package's sources as the tests built them (``source_hash.package_files``);
    an outcome may carry its own ``source_sha256`` (hashed where it ran) instead."""
    if not isinstance(results, dict):
        raise GeneratorError(f"{shown}: expected an object with package_platform and outcomes")
    package = _text(results, "package_platform", shown, required=True)
    assert package is not None
    platforms = {p.name for p in catalog.platforms}
    if package not in platforms:
        raise GeneratorError(one_line(f"{shown}: package_platform: unknown platform {package!r}; the platforms are {_names(platforms)}"))
    outcomes = results.get("outcomes")
    if not isinstance(outcomes, list):
        raise GeneratorError(f"{shown}: outcomes must be a list")
    try:
        how = How(
            check=check or _text(results, "check", shown) or default_check(package),
            where=_text(results, "device_name", shown),
            toolchain=_text(results, "toolkit", shown),
            torch=_text(results, "torch", shown),
        )
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = {"where": "device_name", "toolchain": "toolkit"}.get(str(error["loc"][0]), str(error["loc"][0]))
        raise GeneratorError(f"{shown}: {field} ({error['loc'][0]}): {error['msg']}") from None
    # A results file that could not tell its commit (a copy without .git where the check ran) takes
    # this checkout's: its records still count only for the sources whose hashes they carry.
    given = _text(results, "commit", shown)
    commit = checked_commit(given if given and given != UNKNOWN_COMMIT else commit, shown)
    known = _contracts(catalog)
    records: list[Record] = []
    skipped: list[str] = []
    for index, outcome in enumerate(outcomes):
        where = f"{shown}: outcomes[{index}]"
        if not isinstance(outcome, dict):
            raise GeneratorError(f"{where}: expected an object")
        op, kernel, platform, dtype = (_text(outcome, k, where, required=True) or "" for k in ("op", "kernel", "platform", "dtype"))
        unknown = _not_a_contract(catalog, known, op, kernel, platform, dtype)
        if unknown is not None:
            raise GeneratorError(one_line(f"{where}: {unknown}; these results are not of the current specs, so nothing was recorded"))
        name = f"{platform} {op}/{kernel} {dtype}"
        passed, failed = _count(outcome, "passed", where), _count(outcome, "failed", where) + _count(outcome, "errors", where)
        if failed:
            skipped.append(f"{name}: {failed} failed: not recorded")
            continue
        if not passed:
            skipped.append(f"{name}: no test passed (all skipped or deselected): not recorded")
            continue
        if platform != package:
            skipped.append(
                f"{name}: ran in the {package} package, whose {platform} sources are not the ones the ledger hashes: not recorded"
            )
            continue
        sha = _text(outcome, "source_sha256", where) or source_sha256(files, platform, op, kernel, catalog.platform(platform).source_suffix)
        if sha is None:
            skipped.append(f"{name}: its source is not in the package that ran: not recorded")
            continue
        try:
            records.append(
                Record(op=op, kernel=kernel, platform=platform, dtype=dtype, level="executed", source_sha256=sha, commit=commit, how=how)
            )
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            raise GeneratorError(f"{where}: {'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None
    return records, skipped


def records_for_kernels(
    catalog: Catalog,
    files: Mapping[str, bytes],
    passed: Callable[[str, str, str, tuple[str, ...]], Sequence[str]],
    level: evidence.Level,
    how: Callable[[str, str, str], How],
    commit: str,
) -> list[Record]:
    """Records of ``level`` for the dtypes that ``passed(op, kernel, platform, dtypes of the op)``
    returns for each native backend (none: no record), hashed from ``files``; ``how(op, kernel,
    platform)`` says what ran."""
    checked_commit(commit, f"{level} records")
    records = []
    for (op, kernel, platform), dtypes in sorted(_contracts(catalog).items()):
        ok = [d for d in passed(op, kernel, platform, dtypes) if d in dtypes]
        if not ok:
            continue
        sha = source_sha256(files, platform, op, kernel, catalog.platform(platform).source_suffix)
        if sha is None:
            continue
        records += [
            Record(
                op=op,
                kernel=kernel,
                platform=platform,
                dtype=d,
                level=level,
                source_sha256=sha,
                commit=commit,
                how=how(op, kernel, platform),
            )
            for d in ok
        ]
    return records


def tree_files(generated: Path) -> dict[str, bytes]:
    """The C++ sources of every package under a generated/ tree, keyed relative to it."""
    return {path.relative_to(generated).as_posix(): read_source(path, generated) for path in sorted(generated.glob("*/csrc/**/*")) if path.is_file()}
