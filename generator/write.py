"""Update the output tree so that it is either fully the old state or fully the new one.

Files are written only when their bytes change (unchanged files keep their mtimes,
so builds stay incremental), files the generator owned but no longer produces are
removed, and ``manifest.json`` lists what it owns.  A few files outside the tree
(``extras``: the README's operator table, the JSON Schemas) ride along in the same
commit; they are rewritten when they differ but never owned, so never removed.

A commit is two-phase: every new file is first written beside its target as
``<name>.rlk-new``; a failure there removes them all and leaves the tree as it was.
Then a journal listing every rename and deletion is written atomically and the
renames happen.  If the process dies after the journal exists, the next run
finishes the commit (``recover``) before doing anything else; if it dies before,
the next run removes the leftover ``.rlk-new`` files.  The manifest is renamed
last, so even a lost journal never orphans a file the old manifest owned: the next
``generate`` still knows to remove it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import LockError, WriteError

MANIFEST = "manifest.json"
JOURNAL = ".rlk-journal.json"
NEW_SUFFIX = ".rlk-new"
# staged files written at once; fsync mostly waits, so more threads than cores help
STAGING_THREADS = 8
LOCK = ".rlk-generate.lock"


@dataclass(frozen=True)
class Changes:
    written: tuple[str, ...]
    """Created or changed files, relative to the output tree."""
    removed: tuple[str, ...]
    """Files the generator owned before and no longer produces."""
    extra: tuple[str, ...] = ()
    """Created or changed extras, relative to the project root (the tree's parent)."""
    manifest: bytes = b""
    """The manifest ``write_tree`` wrote or found in place (empty from ``compute_changes``)."""

    @property
    def empty(self) -> bool:
        return not self.written and not self.removed and not self.extra


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(files: Mapping[str, bytes]) -> bytes:
    body = {
        "_generated": "Files owned by rlkernels' generator; anything listed here may be rewritten or removed by `make generate`.",
        "files": {path: _sha(data) for path, data in sorted(files.items())},
    }
    return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()


def _owned(out_dir: Path, produced: Mapping[str, bytes] | None = None) -> set[str]:
    """What the manifest says the generator owns (a missing or mangled manifest owns nothing),
    less the paths in ``produced``: those are written anyway, so their place in the tree need not
    be resolved (one ``resolve`` per file was most of a no-op's write stage)."""
    try:
        data = json.loads((out_dir / MANIFEST).read_text())
        inside = _Inside(out_dir)
        return {rel for rel in data["files"] if isinstance(rel, str) and (produced is None or rel not in produced) and inside(rel)}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _is_inside(base: Path, rel: str) -> bool:
    if not rel or "\x00" in rel or os.path.isabs(rel):
        return False
    target = (base / rel).resolve()
    return base.resolve() in target.parents


class _Inside:
    """``_is_inside(base, rel)`` for many paths of one tree: each folder is resolved once.

    ``(base / rel).resolve()`` resolves the folders of ``rel`` first and then its last part, so
    the folder's resolved path is reused, and only a last part that is itself a symbolic link
    (or ``.``/``..``, or nothing), or a path with ``..`` in it, is resolved in full."""

    def __init__(self, base: Path) -> None:
        self.base = base
        real = str(base.resolve())
        self.prefix = real if real.endswith(os.sep) else real + os.sep
        self.folders: dict[str, str] = {}

    def __call__(self, rel: str) -> bool:
        if not rel or "\x00" in rel or os.path.isabs(rel):
            return False
        folder, _, name = rel.rpartition("/")
        if name in ("", ".", "..") or ".." in folder.split("/") or os.sep != "/" or (os.altsep and os.altsep in rel):
            return _is_inside(self.base, rel)
        real_folder = self.folders.get(folder)
        if real_folder is None:
            real_folder = self.folders[folder] = str((self.base / folder).resolve()) if folder else self.prefix.rstrip(os.sep) or os.sep
        target = os.path.join(real_folder, name)
        if os.path.islink(target):
            target = str(Path(target).resolve())
        return target.startswith(self.prefix) and target != self.prefix


def _safe_target(out_dir: Path, rel: str, inside: _Inside | None = None) -> Path:
    if not (inside or _Inside(out_dir))(rel):
        raise WriteError(f"refusing to touch {rel}: it lies outside {out_dir}")
    return out_dir / rel


def _safe_extra(out_dir: Path, rel: str) -> Path:
    """An extra lies in the project root (``out_dir``'s parent) but not in the output tree."""
    root = out_dir.parent
    if not _is_inside(root, rel) or out_dir.resolve() in (target := (root / rel).resolve(), *target.parents):
        raise WriteError(f"refusing to touch {rel}: extras must lie in {root} but outside {out_dir}")
    return root / rel


def _differs(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() != data
    except OSError:
        return True


def compute_changes(out_dir: Path, files: Mapping[str, bytes], extras: Mapping[str, bytes] | None = None) -> Changes:
    written = [rel for rel, data in sorted(files.items()) if _differs(out_dir / rel, data)]
    removed = sorted(rel for rel in _owned(out_dir, files) if (out_dir / rel).is_file())
    extra = [rel for rel, data in sorted((extras or {}).items()) if _differs(out_dir.parent / rel, data)]
    return Changes(tuple(written), tuple(removed), tuple(extra))


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _stage_all(writes: list[tuple[Path, bytes]]) -> None:
    """Write and fsync every staged file, several at a time: each fsync waits on the disk, and the
    file system commits concurrent ones together.  Returns once every write has finished; the
    first failure (or Ctrl-C) is raised after the others have stopped, so that the caller's
    rollback finds every file that was started."""
    if len(writes) < 2:
        for path, data in writes:
            _fsync_write(path, data)
        return
    with ThreadPoolExecutor(max_workers=min(STAGING_THREADS, len(writes))) as pool:
        futures = [pool.submit(_fsync_write, path, data) for path, data in writes]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _fsync_dir(path: Path) -> None:
    """Make a rename in ``path`` durable; not every platform or file system allows it, which is fine."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _prune_empty_dirs(start: Path, stop: Path) -> None:
    """Remove ``start`` and its parents below ``stop`` while they are empty."""
    while start != stop and stop in start.parents and start.is_dir() and not any(start.iterdir()):
        start.rmdir()
        start = start.parent


def _paths(value: Any) -> list[str] | None:
    return value if isinstance(value, list) and all(isinstance(rel, str) for rel in value) else None


def _read_journal(journal: Path) -> tuple[list[str], list[str], list[str]]:
    """The journal's rename, delete and extra lists, checked entry by entry: a damaged or hand-edited
    journal must never make ``recover`` rename or delete anything outside the tree."""
    try:
        plan: Any = json.loads(journal.read_bytes())
        problem = "expected an object whose rename, delete and extra are lists of paths"
    except (OSError, ValueError) as exc:
        plan, problem = None, str(exc)
    renames = _paths(plan.get("rename")) if isinstance(plan, dict) else None
    deletes = _paths(plan.get("delete")) if isinstance(plan, dict) else None
    extras = _paths(plan.get("extra", [])) if isinstance(plan, dict) else None
    if renames is None or deletes is None or extras is None:
        raise WriteError(
            f"{journal}: unreadable commit journal ({problem}); remove it and run `make generate` again, which rewrites every file that differs"
        )
    out_dir = journal.parent
    for rel in (*renames, *deletes):
        _safe_target(out_dir, rel)
    for rel in extras:
        _safe_extra(out_dir, rel)
    return renames, deletes, extras


def recover(out_dir: Path, extras: Iterable[str] = (), read_only: bool = False) -> None:
    """Finish a commit that a killed process left half done, or undo one that never started.

    ``extras``: the extras a run may have staged (relative to the project root), whose
    leftover ``.rlk-new`` files are removed too.  ``read_only`` (``check``, ``diff``): leftovers
    that cannot be removed are left where they are, as they change nothing that is compared; an
    interrupted commit must still be finished, or the tree is neither the old state nor the new.
    Nothing is written when there is nothing to recover.
    """
    journal = out_dir / JOURNAL
    if journal.is_file():
        renames, deletes, staged_extras = _read_journal(journal)
        try:
            _apply(out_dir, renames, deletes, staged_extras)
            journal.unlink()
        except OSError as exc:
            raise WriteError(
                f"could not finish the interrupted commit in {out_dir}: {exc.strerror or exc}; fix the cause and run `make generate` again"
            ) from None
    if not out_dir.is_dir():
        return

    def drop(path: Path, prune: bool = True) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not read_only:
                raise WriteError(f"could not remove {path}, left by an earlier run: {exc.strerror or exc}; {out_dir} was left as it was") from None
            return
        if prune:
            with contextlib.suppress(OSError):
                _prune_empty_dirs(path.parent, out_dir)

    # A run killed while staging leaves .rlk-new files (and maybe a half-written journal) but no journal:
    # its commit never started, so the old tree is intact and the leftovers are simply dropped.
    journal_tmp = out_dir / (JOURNAL + ".tmp")
    if os.path.lexists(journal_tmp):
        drop(journal_tmp, prune=False)
    for leftover in sorted(out_dir.rglob(f"*{NEW_SUFFIX}")):
        if leftover.is_file() or leftover.is_symlink():
            drop(leftover)
    for rel in extras:
        staged = out_dir.parent / (rel + NEW_SUFFIX)
        if staged.is_file():
            drop(staged, prune=False)


def _apply(out_dir: Path, renames: list[str], deletes: list[str], extras: list[str]) -> None:
    """Idempotent: safe to run again on a partly applied journal."""

    def rename(staged: Path, target: Path) -> None:
        if staged.exists():  # absent: already renamed before the crash
            os.replace(staged, target)

    root = out_dir.parent
    for rel in extras:
        rename(root / (rel + NEW_SUFFIX), root / rel)
    for rel in renames:
        if rel != MANIFEST:
            rename(out_dir / (rel + NEW_SUFFIX), out_dir / rel)
    for rel in deletes:
        (out_dir / rel).unlink(missing_ok=True)
        _prune_empty_dirs((out_dir / rel).parent, out_dir)
    if MANIFEST in renames:  # last: until here the old manifest still owns every file the commit removes
        rename(out_dir / (MANIFEST + NEW_SUFFIX), out_dir / MANIFEST)


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((what for test, what in kinds if test(mode)), "not a file")


def _open_lock(path: Path, read_only: bool, on_unlocked: Callable[[str], None]) -> int | None:
    """A descriptor of the lock file, or None where a run that only reads goes unlocked.

    Only a regular file will do: anything else at the lock path (a directory, a FIFO, a device,
    a symbolic link, which could lead a created file anywhere) is an error naming it.  An existing
    lock file is opened read-only (flock needs no more), so that a run on a read-only tree can
    still take it; a missing one is created, and where it cannot be, ``check`` and ``diff`` go on
    unlocked (and say so) while a run that writes stops."""

    def not_regular(mode: int) -> LockError:
        return LockError(f"{path}: the generator's lock file is {_kind(mode)}, not a regular file; remove it and run again")

    flags = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    for _ in range(3):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            raise LockError(f"cannot use the lock file {path} ({exc.strerror or exc})") from None
        try:
            if mode is not None:
                if not stat.S_ISREG(mode):
                    raise not_regular(mode)
                fd = os.open(path, os.O_RDONLY | flags)
            else:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | flags, 0o644)
        except (FileNotFoundError, FileExistsError):
            continue  # removed or created by another run meanwhile: look again
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symbolic link put there meanwhile
                raise not_regular(stat.S_IFLNK) from None
            reason = exc.strerror or str(exc)
            if mode is None and read_only and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                on_unlocked(f"note: cannot create the lock file {path} ({reason}); running without it, as this run writes nothing")
                return None
            raise LockError(f"cannot {'create' if mode is None else 'open'} the lock file {path} ({reason})") from None
        opened = os.fstat(fd).st_mode
        if not stat.S_ISREG(opened):
            os.close(fd)
            raise not_regular(opened)
        return fd
    raise LockError(f"cannot use the lock file {path}: it keeps appearing and disappearing")


@contextlib.contextmanager
def exclusive(
    root: Path,
    on_wait: Callable[[], None] = lambda: None,
    read_only: bool = False,
    on_unlocked: Callable[[str], None] = lambda note: None,
) -> Iterator[None]:
    """Holds ``root``'s generator lock, so that two runs never commit to (or recover) the same tree
    at once: the second waits for the first (``on_wait`` says so).  Where there is no flock (not
    POSIX), the run goes unlocked.  ``read_only``: the run writes nothing (``check``, ``diff``), so
    it may go unlocked where the lock file cannot be created (``on_unlocked`` says so)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = _open_lock(root / LOCK, read_only, on_unlocked)
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def write_tree(out_dir: Path, files: Mapping[str, bytes], extras: Mapping[str, bytes] | None = None) -> Changes:
    """Make ``out_dir`` hold exactly ``files`` (plus unowned files it already had), and each extra
    (a path relative to ``out_dir.parent``) hold its bytes, in one all-or-nothing commit."""
    extras = dict(extras or {})
    recover(out_dir, extras)
    files = {**files, MANIFEST: manifest_bytes(files)}
    changes = replace(compute_changes(out_dir, files, extras), manifest=files[MANIFEST])
    if changes.empty:
        return changes
    inside = _Inside(out_dir)
    targets = [_safe_target(out_dir, rel, inside) for rel in (*changes.written, *changes.removed)]
    targets += [_safe_extra(out_dir, rel) for rel in changes.extra]
    for target in targets:
        if target.is_dir() and not target.is_symlink():
            raise WriteError(f"cannot write {target}: a directory is in the way; {out_dir} was left as it was")

    staged: list[Path] = []
    made_dirs: list[Path] = []
    journal_tmp = out_dir / (JOURNAL + ".tmp")
    try:
        jobs = [(out_dir / rel, files[rel]) for rel in changes.written]
        jobs += [(out_dir.parent / rel, extras[rel]) for rel in changes.extra]
        writes: list[tuple[Path, bytes]] = []
        for target, data in jobs:
            missing = [p for p in (target.parent, *target.parent.parents) if not p.exists()]
            for directory in reversed(missing):
                directory.mkdir()
                made_dirs.append(directory)
            staged_path = target.with_name(target.name + NEW_SUFFIX)
            staged.append(staged_path)
            writes.append((staged_path, data))
        _stage_all(writes)
        plan = {"rename": list(changes.written), "delete": list(changes.removed), "extra": list(changes.extra)}
        _fsync_write(journal_tmp, json.dumps(plan).encode())
        os.replace(journal_tmp, out_dir / JOURNAL)
        _fsync_dir(out_dir)
    except BaseException as exc:  # also Ctrl-C while staging: nothing was committed, so roll back
        for path in staged:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            journal_tmp.unlink(missing_ok=True)
        for directory in reversed(made_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()
        if isinstance(exc, OSError):
            raise WriteError(f"could not write {out_dir}: {exc.strerror or exc} ({exc.filename}); it was left as it was") from None
        raise

    try:
        _apply(out_dir, list(changes.written), list(changes.removed), list(changes.extra))
        (out_dir / JOURNAL).unlink()
    except OSError as exc:
        raise WriteError(f"interrupted while committing to {out_dir}: {exc}; the next `make generate` finishes the commit") from None
    return changes


def write_files(root: Path, files: Mapping[str, bytes]) -> list[str]:
    """Write each file (relative to ``root``) whose bytes differ, each atomically; for files
    outside any managed tree that stand on their own (the JSON Schemas)."""
    written = []
    for rel, data in sorted(files.items()):
        if not _is_inside(root, rel):
            raise WriteError(f"refusing to touch {rel}: it lies outside {root}")
        target = root / rel
        if not _differs(target, data):
            continue
        staged = target.with_name(target.name + NEW_SUFFIX)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _fsync_write(staged, data)
            os.replace(staged, target)
        except OSError as exc:
            with contextlib.suppress(OSError):
                staged.unlink(missing_ok=True)
            raise WriteError(f"could not write {target}: {exc.strerror or exc}") from None
        written.append(rel)
    return written
