"""Errors the generator reports to users.  Each one renders as a single readable line."""

from __future__ import annotations

from dataclasses import dataclass


class GeneratorError(Exception):
    """Base of every error the CLI prints without a traceback."""


@dataclass(frozen=True)
class SpecProblem:
    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class SpecError(GeneratorError):
    """One or more problems in the spec files, each with file, line and field path."""

    def __init__(self, problems: list[SpecProblem]):
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.field, p.message))
        super().__init__("\n".join(str(p) for p in self.problems))


class ContractError(SpecError):
    """A backend mapping that breaks the op's declared contract."""


class RenderError(GeneratorError):
    """A template failed to render; nothing was written."""


class WriteError(GeneratorError):
    """The output directory could not be updated; it was left as it was."""
