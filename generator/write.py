"""Update the output tree so that it is either fully the old state or fully the new one.

Files are written only when their bytes change (unchanged files keep their mtimes,
so builds stay incremental), files the generator owned but no longer produces are
removed, and ``manifest.json`` lists what it owns.

A commit is two-phase: every new file is first written beside its target as
``<name>.rlk-new``; a failure there removes them all and leaves the tree as it was.
Then a journal listing every rename and deletion is written atomically and the
renames happen.  If the process dies after the journal exists, the next run
finishes the commit (``recover``) before doing anything else; if it dies before,
the next run removes the leftover ``.rlk-new`` files.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import WriteError

MANIFEST = "manifest.json"
JOURNAL = ".rlk-journal.json"
NEW_SUFFIX = ".rlk-new"


@dataclass(frozen=True)
class Changes:
    written: tuple[str, ...]
    """Created or changed files."""
    removed: tuple[str, ...]
    """Files the generator owned before and no longer produces."""

    @property
    def empty(self) -> bool:
        return not self.written and not self.removed


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(files: dict[str, bytes]) -> bytes:
    body = {
        "_generated": "Files owned by rlkernels' generator; anything listed here may be rewritten or removed by `make generate`.",
        "files": {path: _sha(data) for path, data in sorted(files.items())},
    }
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()


def owned_files(out_dir: Path) -> set[str]:
    try:
        data = json.loads((out_dir / MANIFEST).read_text())
        return set(data["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _safe_target(out_dir: Path, rel: str) -> Path:
    target = (out_dir / rel).resolve()
    if out_dir.resolve() not in target.parents:
        raise WriteError(f"refusing to touch {rel}: it lies outside {out_dir}")
    return target


def compute_changes(out_dir: Path, files: dict[str, bytes]) -> Changes:
    written = []
    for rel, data in sorted(files.items()):
        path = out_dir / rel
        try:
            if path.read_bytes() == data:
                continue
        except OSError:
            pass
        written.append(rel)
    removed = sorted(rel for rel in owned_files(out_dir) - set(files) if (out_dir / rel).exists())
    return Changes(tuple(written), tuple(removed))


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def recover(out_dir: Path) -> None:
    """Finish a commit that a killed process left half done, or undo one that never started."""
    journal = out_dir / JOURNAL
    if journal.exists():
        try:
            plan = json.loads(journal.read_text())
            renames, deletes = plan["rename"], plan["delete"]
        except (OSError, ValueError, KeyError) as exc:
            raise WriteError(f"{journal}: unreadable commit journal ({exc}); remove it and run `make generate` again") from None
        _apply(out_dir, renames, deletes)
        journal.unlink()
    for leftover in out_dir.rglob(f"*{NEW_SUFFIX}") if out_dir.exists() else ():
        leftover.unlink()


def _apply(out_dir: Path, renames: list[str], deletes: list[str]) -> None:
    for rel in renames:
        staged = out_dir / (rel + NEW_SUFFIX)
        if staged.exists():  # absent: already renamed before the crash
            os.replace(staged, out_dir / rel)
    for rel in deletes:
        try:
            (out_dir / rel).unlink()
        except FileNotFoundError:
            pass
        parent = (out_dir / rel).parent
        while parent != out_dir and parent.exists() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent


def write_tree(out_dir: Path, files: dict[str, bytes]) -> Changes:
    """Make ``out_dir`` hold exactly ``files`` (plus unowned files it already had)."""
    recover(out_dir)
    files = {**files, MANIFEST: manifest_bytes(files)}
    changes = compute_changes(out_dir, files)
    if changes.empty:
        return changes
    for rel in (*changes.written, *changes.removed):
        _safe_target(out_dir, rel)

    staged: list[Path] = []
    made_dirs: list[Path] = []
    try:
        for rel in changes.written:
            target = out_dir / rel
            missing = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
            for directory in reversed(missing):
                directory.mkdir()
                made_dirs.append(directory)
            staged_path = target.with_name(target.name + NEW_SUFFIX)
            staged.append(staged_path)
            _fsync_write(staged_path, files[rel])
        journal_tmp = out_dir / (JOURNAL + ".tmp")
        _fsync_write(journal_tmp, json.dumps({"rename": list(changes.written), "delete": list(changes.removed)}).encode())
        os.replace(journal_tmp, out_dir / JOURNAL)
    except OSError as exc:
        for path in staged:
            path.unlink(missing_ok=True)
        (out_dir / (JOURNAL + ".tmp")).unlink(missing_ok=True)
        for directory in reversed(made_dirs):
            try:
                directory.rmdir()
            except OSError:
                pass
        raise WriteError(f"could not write {out_dir}: {exc.strerror or exc} ({exc.filename}); it was left as it was") from None

    try:
        _apply(out_dir, list(changes.written), list(changes.removed))
        (out_dir / JOURNAL).unlink()
    except OSError as exc:
        raise WriteError(
            f"interrupted while committing to {out_dir}: {exc}; the next `make generate` finishes the commit"
        ) from None
    return changes
