"""YAML spec files → validated models, remembering the line of every value.

The loader refuses what YAML allows but a spec never needs (aliases, which make
billion-laughs bombs possible; duplicate keys; non-string keys) and turns every
pydantic error into ``file:line: field.path: message``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import SpecError, SpecProblem
from .model import OpSpec, PackageSpec, PlatformSpec

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
        return SpecProblem(self.file, self.line(path), ".".join(str(p) for p in path), message)


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(
                problem="aliases (*name) are not allowed in spec files", problem_mark=event.start_mark
            )
        return super().compose_node(parent, index)


def _to_python(node: yaml.Node, path: Path_, lines: dict[Path_, int], src: SourceMap, loader: yaml.SafeLoader) -> Any:
    lines[path] = node.start_mark.line + 1
    if len(path) > MAX_DEPTH:
        raise SpecError([src.problem(path, f"nesting deeper than {MAX_DEPTH} levels")])
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                raise SpecError([SpecProblem(src.file, key_node.start_mark.line + 1, ".".join(map(str, path)), "keys must be plain strings")])
            key = key_node.value
            if key in out:
                raise SpecError([SpecProblem(src.file, key_node.start_mark.line + 1, ".".join(map(str, (*path, key))), "duplicate key")])
            out[key] = _to_python(value_node, (*path, key), lines, src, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(item, (*path, i), lines, src, loader) for i, item in enumerate(node.value)]
    value = loader.construct_object(node, deep=True)
    if not isinstance(value, (str, int, float, bool, type(None))):
        raise SpecError([src.problem(path, f"unsupported YAML value of type {type(value).__name__}")])
    return value


def read_yaml(file: Path, display: str) -> tuple[Any, SourceMap]:
    """Parse one YAML file into plain Python values plus a ``SourceMap``."""
    src = SourceMap(display)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise SpecError([SpecProblem(display, 1, "", f"cannot read file: {exc.strerror}")]) from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError([SpecProblem(display, 1, "", f"file is larger than {MAX_SPEC_BYTES} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError([SpecProblem(display, 1, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]) from None
    loader = _NoAliasLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise SpecError([SpecProblem(display, 1, "", "file is empty; expected a mapping")])
        lines: dict[Path_, int] = {}
        data = _to_python(root, (), lines, src, loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        message = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise SpecError([SpecProblem(display, line, "", f"YAML syntax: {message}")]) from None
    except yaml.YAMLError as exc:
        raise SpecError([SpecProblem(display, 1, "", f"YAML syntax: {exc}")]) from None
    except RecursionError:
        raise SpecError([SpecProblem(display, 1, "", "YAML nested too deeply")]) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError([SpecProblem(display, 1, "", f"expected a mapping at the top level, got {type(data).__name__}")])
    return data, SourceMap(display, lines)


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
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
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


@dataclass(frozen=True)
class Catalog:
    """Everything the specs say, validated one file at a time (cross-file rules: ``contracts``)."""

    package: PackageSpec
    platforms: tuple[PlatformSpec, ...]
    ops: tuple[OpSpec, ...]
    sources: Mapping[str, SourceMap]
    """Key: 'package', 'platform:<name>' or 'op:<name>'."""

    def platform(self, name: str) -> PlatformSpec:
        return next(p for p in self.platforms if p.name == name)

    def op(self, name: str) -> OpSpec:
        return next(o for o in self.ops if o.name == name)

    def spec_file(self, key: str) -> str:
        return self.sources[key].file


def load_catalog(specs_dir: Path, display_root: Path | None = None) -> Catalog:
    """Load ``package.yaml``, ``platforms/*.yaml`` and ``ops/*.yaml``; report every bad file at once."""
    root = display_root or specs_dir.parent

    def shown(p: Path) -> str:
        try:
            return p.relative_to(root).as_posix()
        except ValueError:
            return p.as_posix()

    problems: list[SpecProblem] = []
    sources: dict[str, SourceMap] = {}

    def load_one(path: Path, model: type[M], expect_name: bool) -> M | None:
        try:
            data, src = read_yaml(path, shown(path))
            spec = validate(model, data, src)
        except SpecError as exc:
            problems.extend(exc.problems)
            return None
        if expect_name and getattr(spec, "name") != path.stem:
            problems.append(src.problem(("name",), f"name {getattr(spec, 'name')!r} must match the file name {path.stem!r}"))
            return None
        kind = "package" if model is PackageSpec else ("platform" if model is PlatformSpec else "op")
        sources[kind if kind == "package" else f"{kind}:{getattr(spec, 'name')}"] = src
        return spec

    package_file = specs_dir / "package.yaml"
    if not package_file.is_file():
        raise SpecError([SpecProblem(shown(package_file), 1, "", "missing: every spec tree needs a package.yaml")])
    package = load_one(package_file, PackageSpec, expect_name=False)
    platforms = [p for f in sorted((specs_dir / "platforms").glob("*.yaml")) if (p := load_one(f, PlatformSpec, True))]
    ops = [o for f in sorted((specs_dir / "ops").glob("*.yaml")) if (o := load_one(f, OpSpec, True))]
    for stray in sorted(specs_dir.rglob("*.yml")):
        problems.append(SpecProblem(shown(stray), 1, "", "spec files end in .yaml; rename it or remove it"))
    if not platforms and not problems:
        problems.append(SpecProblem(shown(specs_dir / "platforms"), 1, "", "no platform specs found"))
    if problems:
        raise SpecError(problems)
    assert package is not None
    return Catalog(package, tuple(platforms), tuple(ops), sources)
