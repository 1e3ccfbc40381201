"""YAML spec files → validated models, remembering the line of every value.

The loader refuses what YAML allows but a spec never needs (aliases, which make
billion-laughs bombs possible; duplicate keys; non-string keys) and turns every
pydantic error into ``file:line: field.path: message``.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from . import forked
from .errors import SpecError, SpecProblem
from .files import FileProblem, read_regular
from .model import OpSpec, PackageSpec, PlatformSpec
from .views import OpView

Path_ = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)

MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 32


@dataclass(frozen=True)
class SourceMap:
    """Where each value of one spec file came from."""

    file: str
    lines: Mapping[Path_, int] = field(default_factory=dict)

    def line(self, path: Path_) -> int:
        """Line of ``path``, or of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)

    def problem(self, path: Path_, message: str) -> SpecProblem:
        return SpecProblem(self.file, self.line(path), field_path(path), message)


def field_path(path: Path_) -> str:
    """``args.0.name``; a key that is not a plain word (a spec may use any string as a key) is quoted."""
    return ".".join(str(p) if isinstance(p, int) or re.fullmatch(r"[A-Za-z0-9_]+", p) else repr(p) for p in path)


_NEWLINE = re.compile("\n")


class _LineCounter:
    """Line numbers as editors and grep count them (only "\n" ends a line); PyYAML's own marks also
    break lines at \r, U+0085, U+2028 and U+2029, which would point past the real line."""

    newlines: list[int]

    def _count_lines(self, text: str) -> None:
        self.newlines = [m.start() for m in _NEWLINE.finditer(text)]

    def line_of(self, mark: yaml.Mark | None) -> int:
        return bisect.bisect_left(self.newlines, mark.index) + 1 if mark is not None else 1


class _SpecComposer(_LineCounter, Composer):
    """Composes a spec's nodes, refusing aliases, with lines as editors count them."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):  # type: ignore[attr-defined]
            event = self.peek_event()  # type: ignore[attr-defined]
            raise yaml.MarkedYAMLError(problem="aliases (*name) are not allowed in spec files", problem_mark=event.start_mark)
        node: yaml.Node | None = super().compose_node(parent, index)
        return node


class _NoAliasLoader(_SpecComposer, yaml.SafeLoader):
    """The reference reader: PyYAML's own scanner and parser, whose errors are the ones reported."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._count_lines(text)


# libyaml's scanner, parser and composer, with PyYAML's resolver and constructor: many times faster
# on a spec.  It is given only text made of the characters specs are written in (no tab, carriage
# return, byte-order mark or U+0085 / U+2028 / U+2029 line break, nothing YAML forbids), where the
# two readers agree; other text, and any text this reading finds fault with, goes to the reference
# reader, so that errors and edge cases read exactly as they always have.
_FAST_TEXT = re.compile("[\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]*")
# libyaml's composer recurses in C, beyond Python's recursion limit, so it only reads text whose
# nesting is shallow by construction: a block collection nested in another starts at a greater
# column, right after its line's indentation and any "- ", "? " or ": " indicators (so no further right
# than the longest such run on any line), and each flow collection at its own [ or {.
_FAST_NESTING = 256
_LEADING = re.compile("^[ ?:-]*", re.MULTILINE)

try:
    from yaml._yaml import CParser

    _HAVE_LIBYAML = True
except ImportError:  # PyYAML built without libyaml: the reference reader reads everything
    _HAVE_LIBYAML = False


if _HAVE_LIBYAML:

    class _FastLoader(_LineCounter, CParser, SafeConstructor, Resolver):
        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self._count_lines(text)


class _Alias(Exception):
    """libyaml's composer met an alias: one node reached twice."""


def _shallow(text: str) -> bool:
    deepest = max(map(len, _LEADING.findall(text)))
    return deepest + text.count("[") + text.count("{") < _FAST_NESTING


def _read_fast(text: str, src: SourceMap) -> tuple[Any, dict[Path_, int]] | None:
    """The values and lines of ``text`` read by libyaml, or None where the reference reader must
    read it (libyaml absent, unusual characters, deep nesting, an alias, or any problem, which that
    reader reports)."""
    if not _HAVE_LIBYAML or _FAST_TEXT.fullmatch(text) is None or not _shallow(text):
        return None
    try:
        loader = _FastLoader(text)
        root = CParser.get_single_node(loader)
        if root is None:
            return None
        lines: dict[Path_, int] = {}
        return _to_python(root, (), lines, src, loader, set()), lines
    except Exception:  # noqa: BLE001 -- the reference reader reads it again and reports the problem
        return None


_YAML = "tag:yaml.org,2002:"
# Plain data only.  Other standard tags (timestamps, binary, sets, ordered maps) and local
# tags have no meaning in a spec, and some make PyYAML's constructors raise plain Python errors.
_SCALAR_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null")}


def _meet(node: yaml.Node, seen: set[int] | None) -> None:
    """Note ``node`` as met; meeting it again is an alias (the node it names, reached twice)."""
    if seen is not None:
        if id(node) in seen:
            raise _Alias
        seen.add(id(node))


_MAP, _SEQ, _STR = f"{_YAML}map", f"{_YAML}seq", f"{_YAML}str"
# The one spelling of each kind of plain scalar a spec may use.  YAML 1.1, which PyYAML reads,
# also takes 1:40 for 100 (base 60), 017 and 0o17 for 15, 0x10, 1_000, yes/no/on/off for booleans
# and .nan or .inf for numbers: a value written so would mean something other than it reads.
_PLAIN = {
    f"{_YAML}int": (re.compile(r"[-+]?(0|[1-9][0-9]*)"), "a plain decimal integer (YAML reads 1:40 as 100, 017 as 15, 0x10 as 16)"),
    f"{_YAML}float": (
        re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"),
        "a finite decimal number such as 1.0e-5 (not .nan, .inf or a base-60 1:40.5)",
    ),
    f"{_YAML}bool": (re.compile(r"true|false"), "true or false (YAML also reads yes, no, on, off as booleans)"),
    f"{_YAML}null": (re.compile(r"null|~|"), "null"),
}


def _to_python(node: yaml.Node, path: Path_, lines: dict[Path_, int], src: SourceMap, loader: Any, seen: set[int] | None = None) -> Any:
    """``seen``: the nodes met so far, where a composer that resolves aliases built the tree (an
    alias is the node it names, met again), so that none is followed.  Called for every node of
    every spec: the common cases come first, and a plain string is taken as it stands (what
    PyYAML's constructor returns for one)."""
    _meet(node, seen)
    lines[path] = loader.line_of(node.start_mark)

    def here(message: str) -> SpecProblem:
        """A problem at this node's own line (the source map is not complete until the whole file is read)."""
        return SpecProblem(src.file, lines[path], field_path(path), message)

    if len(path) > MAX_DEPTH:
        raise SpecError([here(f"nesting deeper than {MAX_DEPTH} levels")])
    if isinstance(node, yaml.ScalarNode) and node.tag == _STR:
        return node.value
    if isinstance(node, yaml.MappingNode):
        if node.tag != _MAP:
            raise SpecError([here(f"YAML tag {node.tag.removeprefix(_YAML)} is not allowed here; write a plain mapping")])
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR:
                raise SpecError([SpecProblem(src.file, loader.line_of(key_node.start_mark), field_path(path), "keys must be plain strings")])
            _meet(key_node, seen)
            key = key_node.value
            if key in out:
                raise SpecError([SpecProblem(src.file, loader.line_of(key_node.start_mark), field_path((*path, key)), "duplicate key")])
            out[key] = _to_python(value_node, (*path, key), lines, src, loader, seen)
            # the key's line, not the value's: a block value starts on the line below its key
            lines[path + (key,)] = loader.line_of(key_node.start_mark)
        return out
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ:
            raise SpecError([here(f"YAML tag {node.tag.removeprefix(_YAML)} is not allowed here; write a plain list")])
        return [_to_python(item, (*path, i), lines, src, loader, seen) for i, item in enumerate(node.value)]
    if node.tag not in _SCALAR_TAGS:
        what = "a date or time" if node.tag == f"{_YAML}timestamp" else f"YAML tag {node.tag.removeprefix(_YAML)}"
        raise SpecError([here(f"{what} is not allowed in spec files; write a string, number, boolean or null (quote it to keep it as text)")])
    plain = _PLAIN.get(node.tag)
    if plain is not None and not plain[0].fullmatch(node.value):
        kind = node.tag.removeprefix(_YAML)
        raise SpecError([here(f"{node.value[:40]!r} reads as a {kind} in YAML 1.1; write {plain[1]}, or quote it to keep it as text")])
    try:
        value = loader.construct_object(node, deep=True)
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        # e.g. `!!int abc`, `!!bool maybe`, or an integer beyond Python's digit limit
        raise SpecError([here(f"cannot read {node.value[:40]!r} as {node.tag.removeprefix(_YAML)}: {exc}")]) from None
    if not isinstance(value, (str, int, float, bool, type(None))):
        raise SpecError([here(f"unsupported YAML value of type {type(value).__name__}")])
    return value


def read_spec_bytes(file: Path, display: str, inside: Path | None = None) -> bytes:
    """The bytes of one spec file, at most ``MAX_SPEC_BYTES`` + 1 of them (enough to tell that it is
    too large), read through the generator's one bounded reader (``files.read_regular``): only a
    regular file, never blocking.  ``inside``: a directory the file must resolve into (through any
    symbolic link)."""
    try:
        return read_regular(file, MAX_SPEC_BYTES, inside)
    except FileProblem as problem:
        why = {"special": "; spec files must be regular files", "outside": "; spec files must lie inside it"}.get(problem.kind, "")
        raise SpecError([SpecProblem(display, 1, "", f"{problem}{why}")]) from None


def read_yaml(file: Path, display: str, inside: Path | None = None) -> tuple[Any, SourceMap]:
    """Parse one YAML file into plain Python values plus a ``SourceMap``."""
    return parse_yaml(read_spec_bytes(file, display, inside), display)


def parse_yaml(raw: bytes, display: str) -> tuple[dict[str, Any], SourceMap]:
    """Parse the bytes of one spec file; any problem is a ``SpecError`` naming ``display`` and a line."""
    src = SourceMap(display)
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError([SpecProblem(display, 1, "", f"file is larger than {MAX_SPEC_BYTES} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError([SpecProblem(display, line, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    fast = _read_fast(text, src)
    if fast is not None:
        data, lines = fast
    else:
        data, lines = _read_reference(text, display, src)
    if not isinstance(data, dict):
        raise SpecError([SpecProblem(display, 1, "", f"expected a mapping at the top level, got {type(data).__name__}")])
    return data, SourceMap(display, lines)


def _read_reference(text: str, display: str, src: SourceMap) -> tuple[Any, dict[Path_, int]]:
    """The values and lines of ``text`` read by PyYAML itself; any problem is a ``SpecError``."""
    loader: _NoAliasLoader | None = None
    try:
        loader = _NoAliasLoader(text)  # its reader already rejects characters YAML does not allow
        root = loader.get_single_node()
        if root is None:
            raise SpecError([SpecProblem(display, 1, "", "file is empty; expected a mapping")])
        lines: dict[Path_, int] = {}
        data = _to_python(root, (), lines, src, loader)
    except yaml.MarkedYAMLError as exc:
        line = loader.line_of(exc.problem_mark or exc.context_mark) if loader is not None else 1
        message = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise SpecError([SpecProblem(display, line, "", f"YAML syntax: {message}")]) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow, e.g. NUL or a lone surrogate
        line = text[: max(exc.position, 0)].count("\n") + 1
        code = ord(exc.character) if isinstance(exc.character, str) else int(exc.character)
        raise SpecError([SpecProblem(display, line, "", f"YAML syntax: character U+{code:04X} is not allowed in YAML text")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([SpecProblem(display, 1, "", f"YAML syntax: {exc}")]) from None
    except RecursionError:
        raise SpecError([SpecProblem(display, 1, "", f"YAML nested too deeply (at most {MAX_DEPTH} levels)")]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def _describe(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        owner = _owner_model(model, error["loc"][:-1])
        allowed = ", ".join(owner.model_fields) if owner is not None else ""
        return f"unknown key {error['loc'][-1]!r}" + (f"; expected one of {allowed}" if allowed else "")
    if kind == "missing":
        return "required key is missing"
    message = str(error["msg"])
    if kind in {"value_error", "assertion_error"}:
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return message


def _owner_model(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the mapping at ``loc`` (for 'expected one of …' hints)."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        if isinstance(part, str) and part in current.model_fields:
            annotation = current.model_fields[part].annotation
            current = _first_model(annotation)
        else:
            # dict key or list index, or a discriminated-union tag: keep the value model
            continue
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _first_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def _data_path(data: Any, loc: tuple[Any, ...]) -> Path_:
    """``loc`` without the parts pydantic adds that are not keys of the data (union tags)."""
    node, out = data, []
    for i, part in enumerate(loc):
        if (isinstance(node, dict) and part in node) or (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
            node = node[part]
        elif i < len(loc) - 1:
            continue
        out.append(part)
    return tuple(out)


def validate(model: type[M], data: Any, src: SourceMap) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(
            [src.problem(_data_path(data, e["loc"]), _describe(e, model)) for e in exc.errors(include_url=False)]
        ) from None


class SpecKey(NamedTuple):
    """Which spec file a source map belongs to: the package spec, or a platform's or an op's by name."""

    kind: Literal["package", "platform", "op"]
    name: str = ""

    @classmethod
    def op(cls, name: str) -> SpecKey:
        return cls("op", name)

    @classmethod
    def platform(cls, name: str) -> SpecKey:
        return cls("platform", name)


PACKAGE_KEY = SpecKey("package")


@dataclass(frozen=True)
class Catalog:
    """Everything the specs say, validated one file at a time (cross-file rules: ``contracts``),
    with the facts derived from each op spec (``views``) worked out once, here."""

    package: PackageSpec
    platforms: tuple[PlatformSpec, ...]
    ops: tuple[OpSpec, ...]
    sources: Mapping[SpecKey, SourceMap]

    def platform(self, name: str) -> PlatformSpec:
        return next(p for p in self.platforms if p.name == name)

    def op(self, name: str) -> OpSpec:
        return next(o for o in self.ops if o.name == name)

    def source(self, key: SpecKey) -> SourceMap:
        return self.sources[key]

    def op_source(self, name: str) -> SourceMap:
        return self.sources[SpecKey.op(name)]

    def platform_source(self, name: str) -> SourceMap:
        return self.sources[SpecKey.platform(name)]

    @property
    def package_file(self) -> str:
        return self.sources[PACKAGE_KEY].file

    def op_file(self, name: str) -> str:
        return self.op_source(name).file

    def platform_file(self, name: str) -> str:
        return self.platform_source(name).file

    @functools.cached_property
    def views(self) -> tuple[OpView, ...]:
        """Every op with its derived facts, in the catalog's order."""
        return tuple(OpView(op, self.op_file(op.name)) for op in self.ops)

    def view(self, name: str) -> OpView:
        return next(v for v in self.views if v.name == name)


SPEC_DIRS = ("ops", "platforms")


def _looks_like_spec(name: str) -> bool:
    return name.lower().endswith((".yaml", ".yml"))


def _discover(specs_dir: Path, shown: Callable[[Path], str]) -> tuple[dict[str, list[Path]], list[SpecProblem]]:
    """The files to load from ``specs/ops`` and ``specs/platforms`` (every ``*.yaml`` directly in
    them, whatever its type: the reader refuses what is not a regular file), and a problem for
    every other file under ``specs/`` that looks like a spec but would not be loaded (another
    case of ``.yaml``, ``.yml``, a sub-folder, a folder other than those two)."""
    found: dict[str, list[Path]] = {kind: [] for kind in SPEC_DIRS}
    problems: list[SpecProblem] = []

    def stray(path: Path, message: str) -> None:
        problems.append(SpecProblem(shown(path), 1, "", message))

    def strays_below(directory: Path, message: str) -> None:
        # not following symbolic links: a link loop cannot make this walk forever
        for parent, dirs, files in os.walk(directory, onerror=lambda exc: None):
            dirs.sort()
            for name in sorted((*dirs, *files)):
                if _looks_like_spec(name):
                    stray(Path(parent) / name, message)

    try:
        top = sorted(os.scandir(specs_dir), key=lambda e: e.name)
    except OSError as exc:
        raise SpecError([SpecProblem(shown(specs_dir), 1, "", f"cannot read the spec folder: {exc.strerror or exc}")]) from None
    nested = "not loaded: spec files lie directly in specs/ops/ or specs/platforms/, not in a sub-folder"
    elsewhere = "not loaded: op specs lie in specs/ops/, platform specs in specs/platforms/"
    for entry in top:
        path = Path(entry.path)
        if entry.name in SPEC_DIRS:
            if not entry.is_dir():
                stray(path, "not a directory: spec files lie in the folders specs/ops/ and specs/platforms/")
                continue
            try:
                entries = sorted(os.scandir(path), key=lambda e: e.name)
            except OSError as exc:
                stray(path, f"cannot read the folder: {exc.strerror or exc}")
                continue
            for item in entries:
                item_path = Path(item.path)
                if item.name.endswith(".yaml"):
                    found[entry.name].append(item_path)
                elif _looks_like_spec(item.name):
                    stray(item_path, "spec files end in .yaml (lower case); rename it or remove it")
                elif item.is_dir(follow_symlinks=False):
                    strays_below(item_path, nested)
        elif entry.name == "package.yaml":
            continue
        elif _looks_like_spec(entry.name):
            stray(path, elsewhere)
        elif entry.is_dir(follow_symlinks=False):
            strays_below(path, elsewhere)
    return found, problems


def _read_spec(path: Path, model: type[M], display: str, root: Path) -> tuple[M, SourceMap] | list[SpecProblem]:
    """One spec file read and validated, or its problems."""
    try:
        data, src = read_yaml(path, display, inside=root)
        return validate(model, data, src), src
    except SpecError as exc:
        return list(exc.problems)


# Reading op specs in worker processes: below this many files starting them costs more than it
# saves (a file takes a couple of milliseconds to read and validate).
PARALLEL_MIN_OPS = 300


def load_catalog(specs_dir: Path, display_root: Path | None = None, workers: int | None = None) -> Catalog:
    """Load ``package.yaml``, ``platforms/*.yaml`` and ``ops/*.yaml``; report every bad file at once.
    ``workers``: at most this many processes read the op specs (None: no limit), one per CPU
    from ``PARALLEL_MIN_OPS`` of them; the catalog and the errors never depend on it.

    Spec files must be regular files inside the project: a symbolic link is followed when it
    resolves to a regular file inside the project root, and refused when it leads outside (the
    output would then depend on a file the project does not hold)."""
    root = display_root or specs_dir.parent

    def shown(p: Path) -> str:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            return p.as_posix()

    problems: list[SpecProblem] = []
    sources: dict[SpecKey, SourceMap] = {}

    def load_one(path: Path, model: type[M], expect_name: bool, read: tuple[M, SourceMap] | list[SpecProblem] | None = None) -> M | None:
        """``read``: what ``_read_spec`` gave for ``path`` in a worker (None: read it here)."""
        if read is None:
            read = _read_spec(path, model, shown(path), root)
        if isinstance(read, list):
            problems.extend(read)
            return None
        spec, src = read
        name = str(getattr(spec, "name", ""))
        if expect_name and name != path.stem:
            problems.append(src.problem(("name",), f"name {name!r} must match the file name {path.stem!r}"))
            return None
        key = PACKAGE_KEY if model is PackageSpec else SpecKey.platform(name) if model is PlatformSpec else SpecKey.op(name)
        sources[key] = src
        return spec

    package_file = specs_dir / "package.yaml"
    if not os.path.lexists(package_file):
        raise SpecError([SpecProblem(shown(package_file), 1, "", "missing: every spec tree needs a package.yaml")])
    package = load_one(package_file, PackageSpec, expect_name=False)
    found, strays = _discover(specs_dir, shown)
    platforms = [p for f in found["platforms"] if (p := load_one(f, PlatformSpec, True))]
    reads: list[tuple[OpSpec, SourceMap] | list[SpecProblem] | None] = [None] * len(found["ops"])
    most = forked.default_workers(len(found["ops"]), PARALLEL_MIN_OPS)
    workers = most if workers is None else min(workers, most)
    if workers > 1:
        files = found["ops"]
        parts = forked.map_shares(lambda index, shares: [_read_spec(f, OpSpec, shown(f), root) for f in files[index::shares]], workers, workers)
        if parts is not None:
            reads = [*forked.interleaved(parts, len(files))]
    ops = [o for f, read in zip(found["ops"], reads, strict=True) if (o := load_one(f, OpSpec, True, read))]
    problems += strays
    if not platforms and not problems:
        problems.append(SpecProblem(shown(specs_dir / "platforms"), 1, "", "no platform specs found"))
    if not found["ops"] and not problems:
        problems.append(SpecProblem(shown(specs_dir / "ops"), 1, "", "no op specs found in specs/ops; a catalog needs at least one op"))
    if problems:
        raise SpecError(problems)
    assert package is not None
    return Catalog(package, tuple(platforms), tuple(ops), sources)
