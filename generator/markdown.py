"""Text from outside the specs (evidence records: a device name, a check, a note) placed in the
Markdown the generator writes, as literal text.

Every character that CommonMark or GitHub's extensions could read as markup is escaped: HTML and
comment openers become entities, emphasis, code, link, strikethrough and table delimiters get a
backslash.  An underscore between two letters or digits stays as it is (it can neither open nor
close emphasis there, and record texts are full of file names like ``test_cpu_package.py``).
"""

from __future__ import annotations

import re

from .errors import one_line

_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_BACKSLASHED = frozenset("\\`*[]|~!#")
_UNDERSCORE_INSIDE_A_WORD = re.compile(r"(?<=[A-Za-z0-9])_(?=[A-Za-z0-9])")


def cell(text: str) -> str:
    """``text`` as literal text on one line of a Markdown table cell."""
    line = one_line(text)
    inside = {m.start() for m in _UNDERSCORE_INSIDE_A_WORD.finditer(line)}
    out = []
    for index, char in enumerate(line):
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char in _BACKSLASHED or (char == "_" and index not in inside):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)
