"""The operator table inside the hand-written README.md.

Only the lines between the two markers belong to the generator; everything
around them stays the author's.  The spliced README is handed to ``write`` as an
extra output, so it is committed together with generated/ or not at all, and
``check`` reports it stale like any generated file.
"""

from __future__ import annotations

from .errors import GeneratorError

README = "README.md"
BEGIN = "<!-- BEGIN GENERATED: operators -->"
END = "<!-- END GENERATED: operators -->"
TEMPLATE = "review/operators.md.j2"


def _marker_lines(lines: list[str], marker: str) -> list[int]:
    return [i for i, line in enumerate(lines) if line.strip() == marker]


def splice(text: str, block: str) -> str | None:
    """``text`` with the lines between the markers replaced by ``block``; None when it has no markers.

    Markers must each appear once, BEGIN before END, each on a line of its own.
    """
    lines = text.split("\n")
    begins, ends = _marker_lines(lines, BEGIN), _marker_lines(lines, END)
    if not begins and not ends:
        return None
    where = ", ".join(f"{README}:{i + 1}" for i in (*begins, *ends))
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise GeneratorError(f"{where}: the operator table needs exactly one {BEGIN!r} line followed by one {END!r} line")
    body = block.rstrip("\n").split("\n") if block.strip() else []
    return "\n".join([*lines[: begins[0] + 1], *body, *lines[ends[0] :]])
