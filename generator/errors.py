"""Errors the generator reports to users.  Each one renders as a single readable line."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Characters that would break "one problem, one line" (or hide text) when a spec's own
# bytes end up in a message: controls, line/paragraph separators, bidi overrides.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """``text`` with every character that could break or disguise a one-line message escaped."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1] if m.group() not in "\n\t" else " ", text)


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that ``one_line`` would escape, if any."""
    found = _UNPRINTABLE.search(text)
    return found.group() if found else None


class GeneratorError(Exception):
    """Base of every error the CLI prints without a traceback."""


@dataclass(frozen=True)
class SpecProblem:
    file: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{one_line(self.file)}:{self.line}"
        message = one_line(self.message)
        return f"{where}: {one_line(self.field)}: {message}" if self.field else f"{where}: {message}"


class SpecError(GeneratorError):
    """One or more problems in the spec files, each with file, line and field path."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.field, p.message))
        super().__init__("\n".join(str(p) for p in self.problems))


class ContractError(SpecError):
    """A backend mapping that breaks the op's declared contract."""


class RenderError(GeneratorError):
    """A template failed to render; nothing was written."""


class WriteError(GeneratorError):
    """The output directory could not be updated; it was left as it was."""


class LockError(GeneratorError):
    """The generator's lock file cannot be used: something other than a regular file is in its place,
    or a run that writes cannot create it."""
