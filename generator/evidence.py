"""The evidence ledger: where each (op, kernel, platform, dtype) contract was last exercised, and how.

A contract is one dtype of one native kernel that an op lists as a backend on a platform.  The
checks that exercise contracts write records into ``evidence/<platform>/<level>.json``:

- ``executed``: the generated contract tests ran the kernel (CI on the CPU package; ``make
  gpu-check`` on a device, naming the device, toolkit and torch);
- ``emulated``: the kernel ran in the host emulator (``tests/test_device_emulated.py``);
- ``compiled``: the platform's compiler accepted it (``make compile-check``);
- ``none``: no record covers the source as it is rendered now.

Every record carries the hash of the rendered source it exercised (``source_hash``) and the
commit.  The generator compares the hashes with what it renders now: a record counts only while
they match; a stronger record whose hash no longer matches is shown as *stale*, never as
evidence.  Stale evidence is shown, never an error: CI has no GPU to refresh device records.

This module holds the record model, reading and writing the ledger, and the judgement of the
ledger against the current sources, with the texts the registry, the README and ``explain``
show.  It writes no generated file; ``generator.record`` adds records and re-renders.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from . import markdown
from .errors import GeneratorError, one_line, unprintable
from .files import MAX_JSON_BYTES, MAX_JSON_DEPTH, FileProblem, json_depth, loads_json, read_regular
from .load import Catalog
from .model import NativeKernel
from .paths import EVIDENCE_DIR
from .source_hash import Memo, source_sha256
from .views import OpView

DIR = EVIDENCE_DIR
Level = Literal["executed", "emulated", "compiled"]
LEVELS: tuple[Level, ...] = ("executed", "emulated", "compiled")
"""Strongest first."""
NONE = "none"
ABOUT = (
    "Evidence records written by the checks that ran (see README.md, 'Where each platform is verified'). "
    "Machine-written: a check adds or replaces the records of what it exercised; `make generate` renders them."
)
WRITERS: dict[Level, str] = {
    "executed": "the generated contract tests, by `make test` for the CPU package (`tests/test_cpu_package.py`) and by `make gpu-check` on a device",
    "emulated": "`tests/test_device_emulated.py`, part of `make test`",
    "compiled": "`make compile-check` (`tools/compile_check.py`)",
}

_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
COMMIT = r"^[0-9a-f]{40}(\+dirty)?$"
"""A full commit hash, ``+dirty`` when the tree had uncommitted changes."""


def _printable(text: str) -> str:
    found = unprintable(text)
    if found is not None:
        raise ValueError(f"holds the unprintable character {found!r}")
    return text


# A record's free texts: each one printable line with a length limit, since records are rendered
# into README.md and REGISTRY.md (a device name is no place for a megabyte).
Check = Annotated[str, Field(min_length=1, max_length=400), AfterValidator(_printable)]
Where = Annotated[str, Field(min_length=1, max_length=120), AfterValidator(_printable)]
Toolchain = Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_printable)]
TorchVersion = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_printable)]
Note = Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_printable)]


class How(BaseModel):
    """What ran, where and with which tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    check: Check = Field(description="the command and the tests or tool that ran")
    where: Where | None = Field(default=None, description="the machine or device it ran on")
    toolchain: Toolchain | None = Field(default=None, description="compiler or toolkit, with version and targets")
    torch: TorchVersion | None = Field(default=None, description="torch version, where torch was involved")
    note: Note | None = Field(default=None, description="anything that qualifies the evidence")

    def describe(self) -> str:
        parts = [self.check]
        if self.where:
            parts.append(f"on {self.where}")
        if self.toolchain:
            parts.append(self.toolchain)
        if self.torch:
            parts.append(f"torch {self.torch}")
        return one_line(", ".join(parts))


class Record(BaseModel):
    """One contract, exercised at one level, on the source whose hash it carries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str = Field(pattern=_NAME)
    kernel: str = Field(pattern=_NAME)
    platform: str = Field(pattern=_NAME)
    dtype: str = Field(pattern=_NAME)
    level: Level
    source_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    commit: str = Field(pattern=COMMIT)
    how: How

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.op, self.kernel, self.platform, self.dtype, self.level)

    @property
    def contract(self) -> Contract:
        return Contract(self.op, self.kernel, self.platform, self.dtype)

    def shown(self) -> str:
        return f"{self.platform} {self.op}/{self.kernel} {self.dtype} {self.level}"


@dataclass(frozen=True, order=True)
class Contract:
    op: str
    kernel: str
    platform: str
    dtype: str


# --------------------------------------------------------------------------- the ledger on disk


def ledger_file(platform: str, level: str) -> str:
    """Relative to the project root."""
    return f"{DIR}/{platform}/{level}.json"


def ledger_bytes(records: Iterable[Record]) -> bytes:
    """One ledger file's bytes: sorted keys, records sorted by op, kernel, dtype; LF; a final newline."""
    ordered = sorted(records, key=lambda r: r.key)
    body = {"_about": ABOUT, "records": [r.model_dump(mode="json", exclude_none=True) for r in ordered]}
    return (json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _read_ledger_bytes(path: Path, shown: str) -> bytes:
    """A ledger file's bytes through the generator's bounded reader: a regular file of at most
    ``MAX_JSON_BYTES``, never a FIFO read forever or a device read without end."""
    try:
        data = read_regular(path, MAX_JSON_BYTES)
    except FileProblem as problem:
        raise GeneratorError(f"{shown}: {problem}; ledger files must be regular files") from None
    if len(data) > MAX_JSON_BYTES:
        raise GeneratorError(f"{shown}: larger than {MAX_JSON_BYTES} bytes; fix the file or remove it and rerun the check that wrote it")
    return data


def parse_ledger_file(data: bytes, shown: str) -> list[Record]:
    """The records of one ledger file; ``GeneratorError`` naming the file (and record) when it is malformed."""
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise GeneratorError(
            f"{shown}: nested {depth} levels deep, more than the {MAX_JSON_DEPTH} a ledger file may be; fix the file or remove it and rerun the check that wrote it"
        )
    try:
        body = loads_json(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise GeneratorError(f"{shown}: not UTF-8 ({exc.reason}); fix the file or remove it and rerun the check that wrote it") from None
    except json.JSONDecodeError as exc:
        raise GeneratorError(
            f"{shown}:{exc.lineno}: not valid JSON (column {exc.colno}: {exc.msg}); fix the file or remove it and rerun the check that wrote it"
        ) from None
    except ValueError as exc:  # a repeated key (loads_json)
        raise GeneratorError(f"{shown}: not valid JSON ({exc}); fix the file or remove it and rerun the check that wrote it") from None
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise GeneratorError(f'{shown}: expected an object with a "records" list')
    unknown = sorted(set(body) - {"_about", "records"})
    if unknown:
        raise GeneratorError(f"{shown}: unknown key {unknown[0]!r}; expected _about and records")
    records = []
    for index, item in enumerate(body["records"]):
        try:
            records.append(Record.model_validate(item))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in error["loc"])
            raise GeneratorError(one_line(f"{shown}: records[{index}]{'.' + where if where else ''}: {error['msg']}")) from None
    return records


@dataclass(frozen=True)
class Ledger:
    records: tuple[Record, ...] = ()
    files: tuple[str, ...] = ()
    """The ledger files read, relative to the root."""


def read_ledger(root: Path) -> Ledger:
    """Every record under ``root/evidence``; no folder, no records.  Malformed files are errors."""
    base = root / DIR
    if not base.is_dir():
        return Ledger()
    records: list[Record] = []
    files: list[str] = []
    for path in sorted(base.glob("*/*.json")):
        shown = path.relative_to(root).as_posix()
        platform, level = path.parent.name, path.stem
        if level not in LEVELS:
            raise GeneratorError(f"{shown}: not a ledger file; ledger files are named {', '.join(f'{lv}.json' for lv in LEVELS)}")
        data = _read_ledger_bytes(path, shown)
        seen: set[tuple[str, ...]] = set()
        for index, record in enumerate(parse_ledger_file(data, shown)):
            if (record.platform, record.level) != (platform, level):
                raise GeneratorError(
                    f"{shown}: records[{index}] ({record.op}/{record.kernel} {record.dtype}) is a {record.platform} {record.level} "
                    f"record; this file holds {platform} {level} records only"
                )
            if record.key in seen:
                raise GeneratorError(f"{shown}: records[{index}]: a second record for {record.shown()}")
            seen.add(record.key)
            records.append(record)
        files.append(shown)
    return Ledger(tuple(records), tuple(files))


def merge(existing: Iterable[Record], new: Iterable[Record]) -> tuple[list[Record], list[Record]]:
    """(the merged records, the new records that changed something).

    A new record replaces the one with the same (op, kernel, platform, dtype, level) unless that
    one covers the same source hash: then the old record stays as it is, so rerunning a check on
    unchanged sources changes no byte of the ledger."""
    merged = {r.key: r for r in existing}
    changed = []
    for record in new:
        old = merged.get(record.key)
        if old is not None and old.source_sha256 == record.source_sha256:
            continue
        merged[record.key] = record
        changed.append(record)
    return sorted(merged.values(), key=lambda r: r.key), changed


def write_ledger(root: Path, new: Sequence[Record]) -> list[Record]:
    """Merge ``new`` into the ledger files under ``root``; return the records that changed something.

    Each file is replaced atomically and only when its bytes change."""
    changed: list[Record] = []
    groups: dict[tuple[str, str], list[Record]] = {}
    for record in new:
        groups.setdefault((record.platform, record.level), []).append(record)
    for (platform, level), records in sorted(groups.items()):
        rel = ledger_file(platform, level)
        path = root / rel
        existing = parse_ledger_file(_read_ledger_bytes(path, rel), rel) if os.path.lexists(path) else []
        merged, added = merge(existing, records)
        if not added:
            continue
        data = ledger_bytes(merged)
        staged = path.with_name(path.name + ".rlk-new")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            staged.write_bytes(data)
            os.replace(staged, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
            raise GeneratorError(f"could not write {rel}: {exc.strerror or exc}") from None
        changed += added
    return changed


# --------------------------------------------------------------------------- the ledger against the current sources


def _rank(level: str) -> int:
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)


def short_commit(commit: str) -> str:
    """A commit as records show it: 12 hex digits, keeping ``+dirty``."""
    head, plus, rest = commit.partition("+")
    return head[:12] + plus + rest


@dataclass(frozen=True)
class Status:
    contract: Contract
    source_sha256: str | None
    """The hash of the source as rendered now."""
    current: Record | None
    """The strongest record that covers the current source."""
    stale: tuple[Record, ...]
    """Records of stronger levels than ``current`` that covered an older source, strongest first."""

    @property
    def level(self) -> str:
        return self.current.level if self.current is not None else NONE

    def text(self, where: bool = True) -> str:
        """e.g. ``emulated; executed on NVIDIA H200: stale``."""
        parts = [self.level]
        for record in self.stale:
            place = f" on {record.how.where}" if where and record.how.where and record.level == "executed" else ""
            parts.append(f"{record.level}{place}: stale")
        return "; ".join(parts)


def _grouped(texts: Sequence[tuple[str, str]]) -> str:
    """``[(dtype, text)]`` as one text, or ``text for dtypes; text for dtypes`` when they differ."""
    distinct = list(dict.fromkeys(text for _, text in texts))
    if len(distinct) <= 1:
        return distinct[0] if distinct else NONE
    return "; ".join(f"{text} for {', '.join(d for d, t in texts if t == text)}" for text in distinct)


@dataclass(frozen=True)
class Evidence:
    """The ledger judged against the sources as rendered now."""

    statuses: Mapping[Contract, Status]
    ledger: Ledger
    orphans: tuple[Record, ...]
    """Records that name no current contract (an op, kernel, backend, platform or dtype that is gone)."""
    platforms: tuple[str, ...]
    ops: tuple[OpView, ...] = field(default=())

    # -- indexes, built on first use: the templates ask per op, kernel and platform, and a scan of
    # every status or record per question grows with the square of the catalog.  Built from the
    # frozen fields only, so they are never out of date.

    @functools.cached_property
    def _sorted(self) -> list[Status]:
        """Every status, in contract order (op, kernel, platform, dtype)."""
        return [self.statuses[c] for c in sorted(self.statuses, key=lambda c: (c.op, c.kernel, c.platform, c.dtype))]

    @functools.cached_property
    def _by_kernel(self) -> dict[tuple[str, str, str], list[Status]]:
        index: dict[tuple[str, str, str], list[Status]] = {}
        for s in self._sorted:
            index.setdefault((s.contract.op, s.contract.platform, s.contract.kernel), []).append(s)
        return index

    @functools.cached_property
    def _by_platform(self) -> dict[str, list[Status]]:
        index: dict[str, list[Status]] = {}
        for s in self._sorted:
            index.setdefault(s.contract.platform, []).append(s)
        return index

    @functools.cached_property
    def _records_by_contract(self) -> dict[Contract, list[Record]]:
        index: dict[Contract, list[Record]] = {}
        for r in self.ledger.records:
            index.setdefault(r.contract, []).append(r)
        return index

    @functools.cached_property
    def _op_views(self) -> dict[str, OpView]:
        index: dict[str, OpView] = {}
        for v in self.ops:
            index.setdefault(v.name, v)  # the first of a name, as a scan would find
        return index

    # -- single contracts and kernels

    def status(self, op: str, kernel: str, platform: str, dtype: str) -> Status:
        return self.statuses[Contract(op, kernel, platform, dtype)]

    def kernel_statuses(self, op: str, platform: str, kernel: str) -> list[Status]:
        return list(self._by_kernel.get((op, platform, kernel), ()))

    def kernel_text(self, op: str, platform: str, kernel: str, where: bool = False) -> str:
        return _grouped([(s.contract.dtype, s.text(where)) for s in self._in_dtype_order(op, platform, kernel)])

    def _in_dtype_order(self, op: str, platform: str, kernel: str) -> list[Status]:
        view = self._op_views.get(op)
        order = list(view.dtypes) if view is not None else []
        found = self.kernel_statuses(op, platform, kernel)
        return sorted(found, key=lambda s: order.index(s.contract.dtype) if s.contract.dtype in order else len(order))

    # -- what the templates show

    def cell(self, op: OpView, platform: str) -> str:
        """The README's compact cell: each listed backend in order, a native one with its evidence level."""
        shown = []
        for kernel in op.backends(platform):
            if isinstance(op.spec.kernels[kernel], NativeKernel):
                shown.append(f"{kernel} ({markdown.cell(self.kernel_text(op.name, platform, kernel))})")
            else:
                shown.append(kernel)
        return " → ".join(shown) or "—"

    def dtype_cell(self, op: str, platform: str, kernel: str, dtype: str) -> str:
        key = Contract(op, kernel, platform, dtype)
        return markdown.cell(self.statuses[key].text(where=True)) if key in self.statuses else "—"

    def recorded_by(self, op: str, platform: str, kernel: str) -> str:
        """The checks behind a kernel's current records, each once, with the commits they ran at."""
        by: dict[str, list[str]] = {}
        for status in self.kernel_statuses(op, platform, kernel):
            if status.current is not None:
                commits = by.setdefault(f"{status.current.level}: {status.current.how.describe()}", [])
                if short_commit(status.current.commit) not in commits:
                    commits.append(short_commit(status.current.commit))
        return markdown.cell("; ".join(f"{what} (commit {', '.join(commits)})" for what, commits in by.items())) or "—"

    def contracts(self, platform: str) -> list[Status]:
        return list(self._by_platform.get(platform, ()))

    def summary(self, platform: str, level: Level) -> str:
        """The verification table's cell: how many of the platform's contracts a current record of
        ``level`` covers, how many records are stale, and what ran."""
        statuses = self.contracts(platform)
        current = [s for s in statuses if self._record(s, level, current=True) is not None]
        stale = [s for s in statuses if self._record(s, level, current=False) is not None]
        if not statuses:
            return "—"
        if not current and not stale:
            return "none recorded"
        records = [r for s in statuses for r in (self._record(s, level, True), self._record(s, level, False)) if r is not None]
        hows = list(dict.fromkeys(r.how.describe() for r in records))
        # Each clause of the notes once: kernels of one check share most of theirs.
        notes = list(dict.fromkeys(clause.strip().rstrip(".") for r in records if r.how.note for clause in r.how.note.split("; ")))
        text = f"{len(current)} of {len(statuses)}" + (f" ({len(stale)} stale)" if stale else "")
        text += ": " + "; ".join(hows)
        if notes:
            text += ". " + "; ".join(notes)[:1].upper() + "; ".join(notes)[1:] + "."
        return markdown.cell(text)

    def _record(self, status: Status, level: Level, current: bool) -> Record | None:
        """The record of ``level`` for a contract: one that covers the current source, or (``current``
        false) one that covered an older source."""
        for record in self._records_of(status.contract):
            if record.level == level and (record.source_sha256 == status.source_sha256) == current:
                return record
        return None

    def _records_of(self, contract: Contract) -> list[Record]:
        return list(self._records_by_contract.get(contract, ()))

    @property
    def stale_contracts(self) -> list[Status]:
        return [s for s in self._sorted if s.stale]

    def explain_lines(self, op: str, platform: str) -> list[str]:
        """``explain``'s evidence lines for one op on one platform: per kernel, the dtypes that share a verdict together."""
        lines = []
        kernels = list(dict.fromkeys(s.contract.kernel for s in self._sorted if (s.contract.op, s.contract.platform) == (op, platform)))
        for kernel in kernels:
            verdicts: dict[str, list[str]] = {}
            for status in self._in_dtype_order(op, platform, kernel):
                verdicts.setdefault(self._explained(status), []).append(status.contract.dtype)
            for text, dtypes in verdicts.items():
                lines.append(one_line(f"    {kernel} {', '.join(dtypes)}: {text}"))
        return lines

    def _explained(self, status: Status) -> str:
        text = status.level
        if status.current is not None:
            how = status.current.how
            text += f" ({how.describe()}; commit {short_commit(status.current.commit)}" + (f"; {how.note})" if how.note else ")")
            weaker = [
                r.level
                for r in self._records_of(status.contract)
                if _rank(r.level) > _rank(status.level) and r.source_sha256 == status.source_sha256
            ]
            if weaker:
                text += f"; also {', '.join(sorted(set(weaker), key=_rank))}"
        for record in status.stale:
            text += (
                f"; {record.level}: stale ({record.how.describe()}; commit {short_commit(record.commit)}; "
                f"recorded for source {record.source_sha256[:12]}, now {(status.source_sha256 or 'absent')[:12]})"
            )
        return text


def assess(catalog: Catalog, files: Mapping[str, bytes], ledger: Ledger) -> Evidence:
    """Judge every record against ``files`` (everything under generated/, as rendered now)."""
    ops = catalog.views
    by_contract: dict[Contract, list[Record]] = {}
    for record in ledger.records:
        by_contract.setdefault(record.contract, []).append(record)
    statuses: dict[Contract, Status] = {}
    memo = Memo()
    for view in ops:
        for platform in catalog.platforms:
            for kernel in view.native_kernels(platform.name):
                sha = source_sha256(files, platform.name, view.name, kernel, platform.source_suffix, memo)
                for dtype in view.dtypes:
                    contract = Contract(view.name, kernel, platform.name, dtype)
                    records = sorted(by_contract.get(contract, []), key=lambda r: _rank(r.level))
                    current = next((r for r in records if sha is not None and r.source_sha256 == sha), None)
                    rank = _rank(current.level) if current is not None else len(LEVELS)
                    stale = tuple(r for r in records if _rank(r.level) < rank and r.source_sha256 != sha)
                    statuses[contract] = Status(contract, sha, current, stale)
    orphans = tuple(r for r in ledger.records if r.contract not in statuses)
    return Evidence(statuses, ledger, orphans, tuple(p.name for p in catalog.platforms), ops)


def report_lines(evidence: Evidence, command: str) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) that ``generate`` and ``check`` print about the ledger."""
    out: list[str] = []
    err: list[str] = []
    stale = evidence.stale_contracts
    if stale:
        shown = ", ".join(f"{s.contract.platform} {s.contract.op}/{s.contract.kernel} {s.contract.dtype} ({s.text()})" for s in stale[:6])
        more = f" and {len(stale) - 6} more" if len(stale) > 6 else ""
        out.append(
            f"{command}: evidence: {len(stale)} contracts have stale records (a check ran on a source that has changed since): "
            f"{shown}{more}; rerun the check that wrote them. Stale evidence is shown, not an error."
        )
    for record in evidence.orphans:
        err.append(
            f"{command}: warning: {ledger_file(record.platform, record.level)}: the record for {record.shown()} names no current "
            f"contract (op, kernel, backend, platform or dtype gone); it is ignored"
        )
    return out, err


# --------------------------------------------------------------------------- what a change does to the ledger


@dataclass(frozen=True)
class Consequences:
    """What rendering other sources does to the ledger's records (``diff``'s summary)."""

    staled: tuple[Record, ...]
    """Records that cover the sources as they were and not as they would be rendered."""
    renewed: tuple[Record, ...]
    """Records that did not cover the sources as they were and cover them as rendered: a change put back."""
    dropped: tuple[Record, ...] = ()
    """Records that covered the sources as they were, of kernels no longer rendered on their platform."""


def consequences(ledger: Ledger, before: Mapping[str, bytes], after: Mapping[str, bytes]) -> Consequences:
    """Each record judged against two renderings of generated/ (keyed as under it; only the
    packages' ``csrc/`` files matter): its kernel's hash is recomputed on each side, as the check
    that wrote it computed it."""
    memos = (Memo(), Memo())
    hashes: dict[tuple[str, str, str], tuple[str | None, str | None]] = {}
    staled: list[Record] = []
    renewed: list[Record] = []
    dropped: list[Record] = []
    for record in sorted(ledger.records, key=lambda r: (r.op, r.platform, r.kernel, r.level, r.dtype)):
        key = (record.platform, record.op, record.kernel)
        if key not in hashes:
            hashes[key] = (source_sha256(before, *key, memo=memos[0]), source_sha256(after, *key, memo=memos[1]))
        old, new = hashes[key]
        if old == new:
            continue
        if record.source_sha256 == old:
            (staled if new is not None else dropped).append(record)
        elif record.source_sha256 == new:
            renewed.append(record)
    return Consequences(tuple(staled), tuple(renewed), tuple(dropped))


def _kernel_lines(records: Sequence[Record]) -> list[str]:
    """One line per kernel on a platform: its levels, and its dtypes where they are not all alike."""
    by_kernel: dict[tuple[str, str, str], dict[str, list[str]]] = {}
    for r in records:
        by_kernel.setdefault((r.op, r.kernel, r.platform), {}).setdefault(r.level, []).append(r.dtype)
    lines = []
    for (op, kernel, platform), levels in by_kernel.items():
        ordered = sorted(levels.items(), key=lambda item: _rank(item[0]))
        if len({tuple(dtypes) for _, dtypes in ordered}) == 1:
            shown = f"{', '.join(level for level, _ in ordered)} ({', '.join(ordered[0][1])})"
        else:
            shown = "; ".join(f"{level} ({', '.join(dtypes)})" for level, dtypes in ordered)
        lines.append(f"  {op}/{platform} {kernel}: {shown}")
    return lines


def consequence_lines(found: Consequences) -> list[str]:
    """``diff``'s lines about the ledger: every record the change makes stale, per kernel, and the
    checks that wrote them, which must run on the new sources to renew them."""
    lines: list[str] = []
    if found.staled:
        n = len(found.staled)
        lines.append(f"evidence the change makes stale ({n} record{'s' if n > 1 else ''}: the sources they were checked on change):")
        lines += _kernel_lines(found.staled)
        checks: dict[str, dict[str, list[str]]] = {}
        for r in found.staled:
            platforms = checks.setdefault(r.how.check, {}).setdefault(r.level, [])
            if r.platform not in platforms:
                platforms.append(r.platform)
        lines.append("renewed only by running again on the new sources the checks that wrote them:")
        for check, levels in checks.items():
            what = "; ".join(f"{level} on {', '.join(sorted(platforms))}" for level, platforms in sorted(levels.items(), key=lambda i: _rank(i[0])))
            lines.append(one_line(f"  {check} ({what})"))
    if found.dropped:
        n = len(found.dropped)
        lines.append(f"evidence of kernels the change stops rendering ({n} record{'s' if n > 1 else ''}: they will name no contract):")
        lines += _kernel_lines(found.dropped)
    if found.renewed:
        n = len(found.renewed)
        lines.append(f"evidence the change makes current again ({n} record{'s' if n > 1 else ''}: the sources they were checked on return):")
        lines += _kernel_lines(found.renewed)
    return lines
