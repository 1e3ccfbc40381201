"""The one way the generator reads a file it did not write: a regular file, bounded in size.

A FIFO, a device, a socket or a directory is refused before it is opened; the file is opened
non-blocking, so that one swapped in meanwhile is refused too instead of blocking or being read
forever; at most ``limit`` + 1 bytes are read (enough to tell that it is too large); a file that
must lie inside a folder is refused when it resolves (through any symbolic link) outside it.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any


class FileProblem(Exception):
    """Why a file was not read, in words for a message (``not a regular file (a FIFO)``).
    ``kind``: "special" (not a regular file), "outside" (resolves outside ``inside``) or "unreadable"."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def kind_of(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symbolic link"),
    ]
    return next((what for test, what in kinds if test(mode)), "not a file")


def read_regular(file: Path, limit: int, inside: Path | None = None, follow_links: bool = True) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``file``; ``FileProblem`` otherwise.
    ``inside``: a folder the file must resolve into.  ``follow_links``: False refuses a symbolic
    link itself."""
    try:
        info = os.stat(file) if follow_links else os.lstat(file)
        if not stat.S_ISREG(info.st_mode):
            raise FileProblem(f"not a regular file ({kind_of(info.st_mode)})", "special")
        if inside is not None:
            real, real_inside = file.resolve(), inside.resolve()
            if real_inside not in real.parents:
                raise FileProblem(f"a symbolic link to {real}, outside the project", "outside")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow_links else getattr(os, "O_NOFOLLOW", 0))
        fd = os.open(file, flags)
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (resolve)
        raise FileProblem(f"cannot read file: {getattr(exc, 'strerror', None) or exc}", "unreadable") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileProblem(f"not a regular file ({kind_of(mode)})", "special")
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise FileProblem(f"cannot read file: {exc.strerror or exc}", "unreadable") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_bounded(file: Path, limit: int, inside: Path | None = None) -> bytes:
    """``read_regular``, refusing a file past ``limit`` bytes too (``FileProblem``, kind "unreadable")."""
    data = read_regular(file, limit, inside)
    if len(data) > limit:
        raise FileProblem(f"larger than {limit} bytes", "unreadable")
    return data


MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(data: bytes) -> int:
    """How deeply ``data``'s arrays and objects nest (strings skipped), without parsing it: the
    JSON parser recurses, so a document nested past Python's recursion limit must be refused
    before it is parsed."""
    depth = deepest = 0
    for match in _JSON_BRACKET.finditer(_JSON_STRING.sub(b'""', data)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are each given once.  ``json`` keeps the last of a repeated key, so
    ``{"passed": 5, "failed": 1, "failed": 0}`` would read as a clean run; the file says two
    things and neither is taken."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"duplicate key {key!r} in one object")
        found[key] = value
    return found


def loads_json(text: str | bytes) -> Any:
    """The one way the tools decode JSON they did not just write: an object may not repeat a key
    (``ValueError``, as for any other malformed JSON).  Bytes are read as UTF-8."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def read_json(file: Path, limit: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH, inside: Path | None = None) -> Any:
    """A JSON file the generator did not write (or that may have changed since): read through
    ``read_regular`` (a regular file, at most ``limit`` bytes), nested at most ``max_depth`` deep,
    UTF-8; ``FileProblem`` otherwise, never a RecursionError, a hang or a MemoryError."""
    data = read_regular(file, limit, inside)
    return parse_json(data, limit, max_depth)


def parse_json(data: bytes, limit: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``read_json`` for bytes already in hand (e.g. a file as git shows it); an object that
    repeats a key is not valid JSON here (``loads_json``)."""
    if len(data) > limit:
        raise FileProblem(f"larger than {limit} bytes", "unreadable")
    depth = json_depth(data)
    if depth > max_depth:
        raise FileProblem(f"nested {depth} levels deep, more than the {max_depth} a JSON file here may be", "unreadable")
    try:
        return loads_json(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FileProblem(f"not valid JSON ({exc})", "unreadable") from None
