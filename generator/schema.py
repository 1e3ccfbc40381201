"""JSON Schema of the spec files, for editors that validate YAML as it is typed.

The schemas come from the pydantic models themselves, so they cannot drift from
what the loader accepts; ``check`` keeps the committed copies fresh.  They are a
typing aid only: the loader stays the authority (it also checks identifiers,
cross-file rules and contracts, which a schema cannot express).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel

from .model import OpSpec, PackageSpec, PlatformSpec
from .paths import schema_path

DIALECT = "https://json-schema.org/draft/2020-12/schema"

MODELS: dict[str, type[BaseModel]] = {"package": PackageSpec, "platform": PlatformSpec, "op": OpSpec}
"""Schema kind → model; ``schema/<kind>.schema.json``."""


def spec_kind(spec_rel: str) -> str:
    """The schema kind of a spec file given relative to ``specs/``: package, platform or op."""
    return {"package.yaml": "package"}.get(spec_rel) or ("platform" if spec_rel.startswith("platforms/") else "op")


def schema_header(spec_rel: str) -> str:
    """The first line every spec file carries, pointing YAML editors at its schema (relative path)."""
    depth = spec_rel.count("/") + 1  # specs/ itself, plus one per sub-folder
    return f"# yaml-language-server: $schema={'../' * depth}{schema_path(spec_kind(spec_rel))}"


@functools.cache
def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of a spec model, computed once per process (the schema files and the
    spec-language page both read it; read it, never change it)."""
    return model.model_json_schema()


def schema_files() -> dict[str, bytes]:
    """Every schema file, relative to the project root, byte-stable."""
    out: dict[str, bytes] = {}
    for kind, model in MODELS.items():
        body = {"$schema": DIALECT, **json_schema(model)}
        out[schema_path(kind)] = (json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    return out
