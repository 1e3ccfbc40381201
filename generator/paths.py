"""Where the generator reads and writes, relative to the project root or to generated/.

Names only, and nothing of the generator imported: the no-op check of ``generate`` (``noop``) needs every place
without loading the models, the loader or the renderer, and each module that owns one of these
files takes its name from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SPECS_DIR = "specs"
TEMPLATES_DIR = "templates"
EVIDENCE_DIR = "evidence"
RUNTIME_DIR = "runtime"
GENERATED_DIR = "generated"
BUILD_DIR = ".build"

README = "README.md"
SPEC_DOC = "docs/spec-language.md"
SCHEMA_DIR = "schema"
SCHEMA_KINDS = ("package", "platform", "op")
"""The spec kinds with a JSON Schema of their own (``schema.MODELS`` maps each to its model)."""

MANIFEST = "manifest.json"
"""In generated/: every file the generator wrote there, with its hash."""
JOURNAL = ".rlk-journal.json"
"""In generated/: the list of a commit in progress, until every staged file is in place."""
NEW_SUFFIX = ".rlk-new"
"""A staged file's suffix, beside the file it replaces."""
LOCK = ".rlk-generate.lock"
"""In the project root: held by the one generate, check or record that may run at a time."""


def schema_path(kind: str) -> str:
    """Where the schema of ``kind`` lives, relative to the project root."""
    return f"{SCHEMA_DIR}/{kind}.schema.json"


def extra_paths() -> tuple[str, ...]:
    """The files outside generated/ that a ``generate`` writes."""
    return (README, *(schema_path(kind) for kind in SCHEMA_KINDS), SPEC_DOC)


@dataclass(frozen=True)
class Layout:
    """Where a project keeps its specs, templates and output."""

    root: Path

    @property
    def specs(self) -> Path:
        return self.root / SPECS_DIR

    @property
    def templates(self) -> Path:
        return self.root / TEMPLATES_DIR

    @property
    def generated(self) -> Path:
        return self.root / GENERATED_DIR

    @property
    def runtime(self) -> Path:
        """The package's hand-written Python, copied into every package."""
        return self.root / RUNTIME_DIR

    @property
    def template_cache(self) -> Path:
        """Compiled templates, kept between runs (ignored by git, like the rest of .build/)."""
        return self.root / BUILD_DIR / "jinja"

    @property
    def evidence(self) -> Path:
        return self.root / EVIDENCE_DIR

    @property
    def extras(self) -> tuple[str, ...]:
        """Every file outside generated/ that a run may write (relative to the root)."""
        return extra_paths()
