"""docs/spec-language.md: the spec files' fields, rendered from the spec models.

The page is built from the same JSON Schema as ``schema/*.json`` (``schema.MODELS``): each
model's fields with their types, defaults and descriptions, and each type the fields refer to.
A field's description is the schema's, else the docstring written under the field in the model's
source (pydantic leaves those out of the schema unless told to read every class's source on
import).  The written forms of names and values (the schema's patterns) are listed once, with the
label and example the model gives them.  ``generate`` writes the page beside ``schema/`` and
``check`` fails when it is stale, so it cannot drift from what the loader accepts.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from . import model
from .paths import SPEC_DOC, schema_path
from .schema import MODELS, json_schema

FILES = {"package": "specs/package.yaml", "platform": "specs/platforms/<name>.yaml", "op": "specs/ops/<op>.yaml"}
"""Schema kind → where such spec files live."""

# The name rules that carry their regex to the schema without a label of their own.
_NAMED_PATTERNS = {
    model.IDENTIFIER: ("name", "det_gemm"),
    model.DIM_NAME: ("dimension name", "K"),
    model.DOTTED_NAME: ("Python dotted name", "torch.matmul"),
}

INTRO = """\
Every file under `specs/` is YAML read into these models (`generator/model.py`). This page is
rendered from the models' JSON Schema, like [`schema/`](../schema/), by `make generate`, and
`make check` fails when it is stale: edit the models, not this page.

- A field not listed is an error, and so is a missing required field.
- Each spec file starts with `# yaml-language-server: $schema=…` naming its schema, so an editor
  with the YAML language server checks the file as it is typed.
- An error names the file, the line, the field path and what was expected, and nothing is written.
- The loader also applies rules a schema cannot express: rules across fields (a dimension used in
  no argument, a dtype variable nobody uses) in the models' validators, and rules across files (a
  backend that lacks a required guarantee, a claim without the `tiles` to test it) in
  `generator/contracts.py`; see [guarantees.md](guarantees.md).
"""


def _code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds."""
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if run or text.startswith(" ") or text.endswith(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    """One table cell: one line, with the column separator escaped (also inside code spans)."""
    return " ".join(text.split()).replace("|", "\\|")


def _regex(pattern: str) -> str:
    """The schema's anchored pattern as the model writes it."""
    match = re.fullmatch(r"\^\(\?:(.*)\)\$", pattern, re.DOTALL)
    return match.group(1) if match else pattern


def _walk_annotation(annotation: Any) -> Iterator[Any]:
    """Every piece of metadata inside a field's annotation (Annotated, unions, containers)."""
    yield from getattr(annotation, "__metadata__", ())
    for arg in typing.get_args(annotation):
        yield from _walk_annotation(arg)


def _models() -> list[type[BaseModel]]:
    """Every model class the spec models reach through their fields, each once."""
    seen: list[type[BaseModel]] = []

    def visit(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.append(cls)
        for info in cls.model_fields.values():
            for inner in _classes(info.annotation):
                visit(inner)

    for root in MODELS.values():
        visit(root)
    return seen


def _labelled_patterns(classes: list[type[BaseModel]]) -> dict[str, tuple[str, str]]:
    """Regex → (what it is, an example), from the name rules' own metadata in the models."""
    found = dict(_NAMED_PATTERNS)
    for cls in classes:
        for info in cls.model_fields.values():
            for meta in [*info.metadata, *_walk_annotation(info.annotation)]:
                what, example = getattr(meta, "what", None), getattr(meta, "example", None)
                if isinstance(what, str) and isinstance(example, str):
                    found.setdefault(meta.regex, (what, example))
    return found


def _classes(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _classes(arg)


def _field_docstrings(classes: list[type[BaseModel]]) -> dict[str, dict[str, str]]:
    """Class name → field → the docstring under the field in the source of the class's module
    (each module read once)."""
    out: dict[str, dict[str, str]] = {}
    names = {cls.__name__ for cls in classes}
    modules = {cls.__module__: sys.modules[cls.__module__] for cls in classes}
    for _, module in sorted(modules.items()):
        for node in ast.parse(inspect.getsource(module)).body:
            if isinstance(node, ast.ClassDef) and node.name in names:
                out[node.name] = _docstrings_in(node)
    return out


def _docstrings_in(node: ast.ClassDef) -> dict[str, str]:
    fields: dict[str, str] = {}
    for first, second in zip(node.body, node.body[1:]):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            fields[first.target.id] = inspect.cleandoc(second.value.value)
    return fields


class _Page:
    """One rendering: the models' metadata, and the written forms the tables have used."""

    def __init__(self) -> None:
        classes = _models()
        self.patterns = _labelled_patterns(classes)
        self.used_patterns: dict[str, tuple[str, str]] = {}
        self.docstrings = _field_docstrings(classes)

    # ------------------------------------------------------------------ types

    def pattern(self, pattern: str) -> str:
        regex = _regex(pattern)
        label = self.patterns.get(regex)
        if label is None:
            return f"string matching {_code(regex)}"
        self.used_patterns[regex] = label
        return f"[{label[0].split(' (')[0]}](#written-forms)"

    def type_of(self, schema: dict[str, Any]) -> str:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            return f"[{name}](#{_anchor(name)})"
        for key in ("anyOf", "oneOf"):
            if key in schema:
                text = " or ".join(self.type_of(s) for s in schema[key])
                by = schema.get("discriminator", {}).get("propertyName")
                return f"{text} (by `{by}`)" if by else text
        if "const" in schema:
            return _code(json.dumps(schema["const"]))
        if "enum" in schema:
            return "one of " + ", ".join(_code(json.dumps(v)) for v in schema["enum"])
        kind = schema.get("type")
        if kind == "string" and "pattern" in schema:
            return self.pattern(schema["pattern"])
        if kind == "array" and "items" in schema:
            return f"list of {self.type_of(schema['items'])}{_count(schema, 'Items')}"
        if kind == "object":
            return self.mapping(schema)
        if kind in ("integer", "number"):
            word = "integer" if kind == "integer" else "number"
            low, high = schema.get("minimum"), schema.get("maximum")
            if low is not None and high is not None:
                return f"{word}, {_number(low)} to {_number(high)}"
            if low is not None:
                return f"{word}, at least {_number(low)}"
            if high is not None:
                return f"{word}, at most {_number(high)}"
            return word
        if kind in ("string", "boolean", "null"):
            return str(kind)
        return _code(json.dumps(schema, sort_keys=True))

    def mapping(self, schema: dict[str, Any]) -> str:
        if "patternProperties" in schema:
            (key, value), *_ = schema["patternProperties"].items()
            keys = self.pattern(key)
        else:
            names = schema.get("propertyNames")
            keys = self.type_of(names) if names else "string"
            value = schema.get("additionalProperties", {})
        values = self.type_of(value) if isinstance(value, dict) and value else "any value"
        return f"map of {keys} to {values}{_count(schema, 'Properties')}"

    # ------------------------------------------------------------------ sections

    def fields(self, name: str, schema: dict[str, Any]) -> list[str]:
        required = set(schema.get("required", ()))
        docs = self.docstrings.get(name, {})
        lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        for field, spec in schema.get("properties", {}).items():
            default = "required" if field in required else _code(json.dumps(spec.get("default"), sort_keys=True))
            description = spec.get("description") or docs.get(field, "")
            lines.append(f"| `{field}` | {_cell(self.type_of(spec))} | {_cell(default)} | {_cell(description)} |")
        return lines

    def model(self, heading: str, name: str, schema: dict[str, Any]) -> list[str]:
        lines = [f"{heading} {name}", ""]
        if schema.get("description"):
            lines += [*_prose(schema["description"]), ""]
        if "enum" in schema:
            lines.append("One of " + ", ".join(_code(str(v)) for v in schema["enum"]) + ".")
        else:
            lines += self.fields(name, schema)
        return [*lines, ""]


def _count(schema: dict[str, Any], what: str) -> str:
    """How many items (``what``: Items) or entries (Properties) a list or map may hold."""
    low, high = schema.get(f"min{what}"), schema.get(f"max{what}")
    one, many = ("entry", "entries") if what == "Properties" else ("item", "items")
    if low is not None and high is not None:
        return f" ({low} to {high} {many})"
    if low is not None:
        return f" (at least {low} {one if low == 1 else many})"
    if high is not None:
        return f" (at most {high} {one if high == 1 else many})"
    return ""


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else repr(value)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _prose(text: str) -> list[str]:
    """A docstring as Markdown: paragraphs kept, a line that starts ``word:`` after a line that
    also did (or after a paragraph break) starts an item of a definition list."""
    out: list[str] = []
    in_list = False
    for line in inspect.cleandoc(text).split("\n"):
        item = re.match(r"([a-z_]+):\s+(.*)", line)
        if not line.strip():
            out.append("")
            in_list = False
        elif item and (in_list or not out or not out[-1]):
            out.append(f"- `{item.group(1)}`: {item.group(2)}")
            in_list = True
        else:
            out.append(f"  {line.strip()}" if in_list else line.strip())
    return out


def render() -> str:
    page = _Page()
    schemas = {kind: json_schema(cls) for kind, cls in MODELS.items()}
    lines = [
        "# Spec language",
        "",
        "<!-- Rendered from the spec models (generator/model.py) by `make generate` (generator/spec_doc.py); do not edit. -->",
        "",
        INTRO,
        "| file | model | JSON Schema |",
        "| --- | --- | --- |",
    ]
    for kind, cls in MODELS.items():
        lines.append(f"| `{FILES[kind]}` | [{cls.__name__}](#{_anchor(cls.__name__)}) | [{schema_path(kind)}](../{schema_path(kind)}) |")
    lines.append("")
    definitions: dict[str, dict[str, Any]] = {}
    for kind, cls in MODELS.items():
        schema = schemas[kind]
        lines += page.model("##", cls.__name__, schema)
        for name, definition in schema.get("$defs", {}).items():
            if definitions.setdefault(name, definition) != definition:
                raise AssertionError(f"two spec models define {name} differently")
    lines += ["## Types", "", "The models the fields above refer to, in alphabetical order.", ""]
    for name in sorted(definitions):
        lines += page.model("###", name, definitions[name])
    lines += [
        "## Written forms",
        "",
        "Names and values that must match a pattern (the regex must match the whole value). A name is",
        "also refused where it is a C++ or Python keyword, contains `__` or ends with `_`; a name or a",
        "dimension name, where it clashes with a name the generated code uses (`generator/model.py`,",
        "`generator/reserved_names.json`).",
        "",
        "| form | pattern | example |",
        "| --- | --- | --- |",
    ]
    for regex, (what, example) in sorted(page.used_patterns.items(), key=lambda item: item[1][0].lower()):
        lines.append(f"| {_cell(what)} | {_cell(_code(regex))} | {_cell(_code(example))} |")
    return "\n".join(lines).rstrip("\n") + "\n"


def spec_doc_files() -> dict[str, bytes]:
    """The page, relative to the project root."""
    return {SPEC_DOC: render().encode("utf-8")}

