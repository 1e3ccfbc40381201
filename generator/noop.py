"""Knowing, without rendering, that ``generate`` would change nothing.

A ``generate`` is a function of its inputs: the spec files, the templates, the package's hand-written
Python (``runtime/``), the evidence ledger, the generator's own sources and the versions of Python and of the libraries it renders with.
After a successful run, ``generate`` stores two digests outside the output tree, in
``.build/generate-state.json``: one over all of those inputs as they were read, and one over
every file it leaves behind (every file under generated/, README.md, schema/ and
docs/spec-language.md) as written.
The next ``generate`` computes both again; when both match, the outputs are exactly what
rendering would produce, and it stops there.

Never a wrong skip: anything this module cannot read plainly makes it answer "unknown", and the
caller then renders as it always did.  That covers a symbolic link, a FIFO or other special file
anywhere among the inputs or outputs (the loader and Jinja follow links, so their targets would
be inputs this digest does not see), an unreadable file, a half-finished commit (its journal and
staged files lie in the tree), and a state file that is missing, damaged, not a regular file, a
link, or written by another version of this module.  A run stores a state only after checking
that every file it rendered is on disk, a regular file of the length it rendered, and it
digests the bytes it rendered, not what it reads back: a file edited while it ran then no longer
matches the stored digest, and the next run renders.  And it stores one only when the inputs
digest after the run as they did before it: an input edited while it ran may have been read in
its edited form, even if it is put back before the next run.  A file larger than
``MAX_FILE_BYTES`` is unknown too, so that a huge (or sparse) file is never read whole.  README.md
is both an input (its hand-written text) and an output (its generated tables); any change to it
renders.

The state is trusted as far as the working tree it lies in: one forged to match edited outputs
makes ``generate`` skip.  ``check`` and ``diff``, which CI and reviewers rely on, never read it:
they always render and compare.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import loads_json
from .paths import BUILD_DIR, EVIDENCE_DIR, GENERATED_DIR, JOURNAL, NEW_SUFFIX, RUNTIME_DIR, SPECS_DIR, TEMPLATES_DIR, extra_paths

STATE_DIR = BUILD_DIR
STATE = f"{STATE_DIR}/generate-state.json"
FORMAT = 2
MAX_STATE_BYTES = 4 * 1024 * 1024
MAX_FILE_BYTES = 16 * 1024 * 1024
INPUT_DIRS = (SPECS_DIR, TEMPLATES_DIR, EVIDENCE_DIR)
PACKAGE_DIR = Path(__file__).resolve().parent
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class _Unknown(Exception):
    """Something the digest cannot vouch for: the caller renders."""


def _read(path: str) -> bytes:
    """A regular file's bytes, never through a symbolic link and never blocking on a FIFO; a file
    larger than ``MAX_FILE_BYTES`` is unknown (the loader refuses a huge spec without reading it
    whole, and so does this)."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        raise _Unknown(path) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
            raise _Unknown(path)
        chunks = []
        size = 0
        while chunk := os.read(fd, MAX_FILE_BYTES + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise _Unknown(path)  # grew while read
        return b"".join(chunks)
    except OSError:
        raise _Unknown(path) from None
    finally:
        os.close(fd)


def _entry(digest: Any, kind: bytes, rel: str, data: bytes = b"") -> None:
    name = rel.encode("utf-8", "surrogateescape")
    digest.update(b"%s\0%d\0%s\0%d\0" % (kind, len(name), name, len(data)))
    digest.update(data)


def _walk(
    digest: Any,
    base: str,
    rel: str,
    skip: frozenset[str] = frozenset(),
    files: dict[str, bytes] | None = None,
    rendered: Mapping[str, bytes] | None = None,
) -> None:
    """Every directory and regular file below ``base`` in a fixed order, with its path and bytes;
    ``files`` also collects the bytes by path.  Anything else (a link, a FIFO, a socket, a device,
    an unreadable folder) is unknown.  ``rendered``: bytes a run has just written, by path; such a
    file is digested from them, not read back, and is unknown unless it has their length."""
    try:
        entries = sorted(os.scandir(base), key=lambda e: e.name)
    except OSError:
        raise _Unknown(base) from None
    for item in entries:
        if item.name in skip:
            continue
        shown = f"{rel}/{item.name}" if rel else item.name
        try:
            info = item.stat(follow_symlinks=False)
        except OSError:
            raise _Unknown(item.path) from None
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            _entry(digest, b"dir", shown)
            _walk(digest, item.path, shown, skip, files, rendered)
        elif stat.S_ISREG(mode):
            data = rendered.get(shown) if rendered is not None else None
            if data is None:
                data = _read(item.path)
            elif info.st_size != len(data) or len(data) > MAX_FILE_BYTES:
                raise _Unknown(item.path)  # not what was written (changed since), or too large to vouch for
            _entry(digest, b"file", shown, data)
            if files is not None:
                files[shown] = data
        else:
            raise _Unknown(item.path)


def _tree(
    digest: Any,
    root: Path,
    rel: str,
    skip: frozenset[str] = frozenset(),
    files: dict[str, bytes] | None = None,
    rendered: Mapping[str, bytes] | None = None,
) -> None:
    """``root/rel`` as a whole: absent, or a real directory walked by ``_walk``."""
    path = root / rel
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        _entry(digest, b"absent", rel)
        return
    except OSError:
        raise _Unknown(str(path)) from None
    if not stat.S_ISDIR(mode):
        raise _Unknown(str(path))
    _entry(digest, b"top", rel)
    _walk(digest, str(path), rel, skip, files, rendered)


# The distributions whose code renders or validates (pyproject.toml pins the first three).
DISTRIBUTIONS = ("jinja2", "pydantic", "pyyaml", "markupsafe", "pydantic_core")


def _installed_versions() -> dict[str, str]:
    """Distribution (normalised name) → version, from the ``<name>-<version>.dist-info`` folders
    on sys.path (the wheel format's naming), the first found winning as it does for imports.
    importlib.metadata would parse every METADATA file with the email package: a third of a
    no-op generate's time, for five version strings."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name.removesuffix(".dist-info").partition("-")
                found.setdefault(dist.lower().replace("-", "_").replace(".", "_"), version)
    return found


def _has_libyaml() -> bool:
    """Whether PyYAML's C extension is installed (the loader reads with CSafeLoader when it
    imports), found without importing PyYAML."""
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("yaml")
    folders = (spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(name.startswith("_yaml.") and name.endswith(suffix) for name in names for suffix in importlib.machinery.EXTENSION_SUFFIXES):
            return True
    return False


@functools.lru_cache(maxsize=1)
def _versions() -> bytes:
    """What besides the sources decides the rendered bytes: the interpreter and the libraries
    (installed versions, as a different version may render or validate differently)."""
    parts = {"format": str(FORMAT), "python": sys.version, "implementation": sys.implementation.name, "libyaml": str(_has_libyaml())}
    installed = _installed_versions()
    for name in DISTRIBUTIONS:
        parts[name] = installed.get(name, "not installed")
    return json.dumps(parts, sort_keys=True).encode()


def inputs_digest(root: Path, generator_dir: Path | None = None) -> str | None:
    """sha256 over everything a ``generate`` in ``root`` reads, or None where it cannot be known.
    ``generator_dir``: the generator's package (default: the one running)."""
    generator_dir = generator_dir or PACKAGE_DIR
    digest = hashlib.sha256(b"rlkernels generate inputs\0")
    try:
        _entry(digest, b"versions", "", _versions())
        for rel in INPUT_DIRS:
            _tree(digest, root, rel)
        _tree(digest, root, RUNTIME_DIR, skip=frozenset({"__pycache__"}))
        _tree(digest, generator_dir.parent, generator_dir.name, skip=frozenset({"__pycache__"}))
    except _Unknown:
        return None
    return digest.hexdigest()


def _outputs(root: Path, files: dict[str, bytes] | None = None, rendered: Mapping[str, bytes] | None = None) -> str:
    """sha256 over generated/ and the extras as they are on disk; raises ``_Unknown``.
    ``rendered``: as for ``_walk`` (paths relative to the root)."""
    digest = hashlib.sha256(b"rlkernels generate outputs\0")
    _tree(digest, root, GENERATED_DIR, files=files, rendered=rendered)
    for rel in extra_paths():
        if os.path.lexists(root / (rel + NEW_SUFFIX)):
            raise _Unknown(rel + NEW_SUFFIX)  # a killed staging's leftover, which a full run removes
        path = root / rel
        if os.path.lexists(path):
            data = _read(str(path))  # a few small files: read even where rendered
            _entry(digest, b"file", rel, data)
            if files is not None:
                files[rel] = data
        else:
            _entry(digest, b"absent", rel)
    return digest.hexdigest()


def outputs_digest(root: Path) -> str | None:
    try:
        return _outputs(root)
    except _Unknown:
        return None


@dataclass(frozen=True)
class State:
    """What the last successful ``generate`` left: the digests, and what it said about them."""

    inputs: str
    outputs: str
    files: int
    """Files under generated/ that the run produced, the manifest included."""
    extras: int
    """Files outside generated/ that it produced."""
    report_out: tuple[str, ...] = ()
    report_err: tuple[str, ...] = ()
    """The evidence report it printed, which depends on the inputs only."""

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "files": self.files,
            "extras": self.extras,
            "report_out": list(self.report_out),
            "report_err": list(self.report_err),
        }

    def to_bytes(self) -> bytes:
        body = self.body()
        body["sha256"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()

    @staticmethod
    def from_bytes(data: bytes) -> State | None:
        """The state in ``data``, or None unless it is exactly what ``to_bytes`` writes."""
        try:
            body = loads_json(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        if not isinstance(body, dict) or set(body) != {"format", "inputs", "outputs", "files", "extras", "report_out", "report_err", "sha256"}:
            return None
        if body["format"] != FORMAT or not all(_is_hex(body[k]) for k in ("inputs", "outputs", "sha256")):
            return None
        if not all(type(body[k]) is int and body[k] >= 0 for k in ("files", "extras")):
            return None
        if not all(isinstance(body[k], list) and all(isinstance(line, str) for line in body[k]) for k in ("report_out", "report_err")):
            return None
        state = State(body["inputs"], body["outputs"], body["files"], body["extras"], tuple(body["report_out"]), tuple(body["report_err"]))
        return state if state.to_bytes() == data else None


def _is_hex(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _state_dir(root: Path) -> Path | None:
    """``root/.build`` when it is a real directory (never a link that could lead elsewhere)."""
    path = root / STATE_DIR
    try:
        return path if stat.S_ISDIR(os.lstat(path).st_mode) else None
    except OSError:
        return None


def read_state(root: Path) -> State | None:
    if _state_dir(root) is None:
        return None
    try:
        fd = os.open(root / STATE, _OPEN)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_STATE_BYTES:
            return None
        data = os.read(fd, MAX_STATE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return State.from_bytes(data)


def unchanged(root: Path, inputs: str) -> State | None:
    """The stored state when the inputs digest to ``inputs`` and every output is as that run left it."""
    state = read_state(root)
    if state is None or state.inputs != inputs:
        return None
    return state if outputs_digest(root) == state.outputs else None


def record(
    root: Path,
    inputs: str,
    files: Mapping[str, bytes],
    extras: Mapping[str, bytes],
    report: tuple[Sequence[str], Sequence[str]],
) -> bool:
    """Store the state of a run that has just written ``files`` (relative to generated/, the
    manifest included) and ``extras`` (relative to the root).  Stores nothing, and returns False,
    unless every one of them is on disk, a regular file of its length (the extras holding exactly
    their bytes); a state that cannot be written (no room, a read-only tree, something other than
    a directory at .build) is simply not stored.

    The outputs digest is taken over the bytes rendered, not over those files read back (they
    are most of a large generate's data, and reading them again cost as much as comparing them):
    a file that was edited since it was written, even to the same length, then does not match it,
    and the next run renders and repairs it, as it would with no state at all."""
    rendered = {f"generated/{rel}": data for rel, data in files.items()}
    expected = {**rendered, **extras}
    on_disk: dict[str, bytes] = {}
    try:
        outputs = _outputs(root, on_disk, rendered)
    except _Unknown:
        forget(root)
        return False
    if any(on_disk.get(rel) != data for rel, data in expected.items()) or os.path.lexists(root / GENERATED_DIR / JOURNAL):
        forget(root)
        return False
    state = State(inputs, outputs, len(files), len(extras), tuple(report[0]), tuple(report[1]))
    return _store(root, state.to_bytes())


def forget(root: Path) -> None:
    """Remove the stored state (where it is a plain file), so that the next run renders."""
    if _state_dir(root) is None:
        return
    path = root / STATE
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            path.unlink()
    except OSError:
        pass


def _store(root: Path, data: bytes) -> bool:
    directory = root / STATE_DIR
    try:
        os.mkdir(directory)
    except FileExistsError:
        pass
    except OSError:
        return False
    if _state_dir(root) is None:
        return False
    target = root / STATE
    try:
        if _read(str(target)) == data:
            return True  # already stored: a file rewritten with the same bytes would only change its mtime
    except _Unknown:
        pass
    staged = directory / f"generate-state.json.{os.getpid()}.tmp"
    try:
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        return False
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(staged, target)  # replaces a link itself, never what it points at; fails on a directory
    except OSError:
        try:
            staged.unlink()
        except OSError:
            pass
        return False
    return True
