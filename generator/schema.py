"""JSON Schema of the spec files, for editors that validate YAML as it is typed.

The schemas come from the pydantic models themselves, so they cannot drift from
what the loader accepts; ``check`` keeps the committed copies fresh.  They are a
typing aid only: the loader stays the authority (it also checks identifiers,
cross-file rules and contracts, which a schema cannot express).
"""

from __future__ import annotations

import json

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


def schema_files() -> dict[str, bytes]:
    """Every schema file, relative to the project root, byte-stable."""
    out: dict[str, bytes] = {}
    for kind, model in MODELS.items():
        body = {"$schema": DIALECT, **model.model_json_schema()}
        out[schema_path(kind)] = (json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    return out
