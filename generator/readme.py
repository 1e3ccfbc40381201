"""The generated blocks inside the hand-written README.md: the operator table and the verification table.

Only the lines between a block's two markers belong to the generator; everything
around them stays the author's.  The spliced README is handed to ``write`` as an
extra output, so it is committed together with generated/ or not at all, and
``check`` reports it stale like any generated file.  A README may carry either
block, both or neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import GeneratorError
from .paths import README

BEGIN = "<!-- BEGIN GENERATED: operators -->"
END = "<!-- END GENERATED: operators -->"
TEMPLATE = "review/operators.md.j2"


@dataclass(frozen=True)
class Block:
    name: str
    what: str
    """What the block is, for messages (``the operator table``)."""
    template: str

    @property
    def begin(self) -> str:
        return f"<!-- BEGIN GENERATED: {self.name} -->"

    @property
    def end(self) -> str:
        return f"<!-- END GENERATED: {self.name} -->"


OPERATORS = Block("operators", "the operator table", TEMPLATE)
VERIFICATION = Block("verification", "the verification table", "review/verification.md.j2")
BLOCKS = (OPERATORS, VERIFICATION)


def _marker_lines(lines: list[str], marker: str) -> list[int]:
    return [i for i, line in enumerate(lines) if line.strip() == marker]


def splice(text: str, block: str, which: Block = OPERATORS) -> str | None:
    """``text`` with the lines between ``which``'s markers replaced by ``block``; None when it has no such markers.

    Markers must each appear once, BEGIN before END, each on a line of its own.
    """
    lines = text.split("\n")
    begins, ends = _marker_lines(lines, which.begin), _marker_lines(lines, which.end)
    if not begins and not ends:
        return None
    where = ", ".join(f"{README}:{i + 1}" for i in (*begins, *ends))
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise GeneratorError(f"{where}: {which.what} needs exactly one {which.begin!r} line followed by one {which.end!r} line")
    body = block.rstrip("\n").split("\n") if block.strip() else []
    return "\n".join([*lines[: begins[0] + 1], *body, *lines[ends[0] :]])
