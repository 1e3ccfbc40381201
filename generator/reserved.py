"""Every namespace a spec name lands in, loaded once from ``reserved_names.json``.

The data file is derived from the sources (``tools/reserved_names.py``): the macros, types and
called functions of every header the generated C/C++ includes, the device languages' built-in
variables, and Python's keywords (spec names reach the package's Python only as data).  ``model``
refuses a spec name found here, naming what it would clash with.
"""

from __future__ import annotations

import functools
from pathlib import Path

from .files import loads_json

DATA_FILE = Path(__file__).with_name("reserved_names.json")

# What each list is, as a refusal names it.
KINDS = {
    "python_keywords": "a Python keyword",
    "cpp_macros": "a C/C++ macro of a header the generated sources include",
    "cpp_types": "a C/C++ type, enumerator or global of a header the generated sources include",
    "cpp_functions": "a C/C++ function the generated sources call",
    "device_builtins": "a CUDA/HIP/MUSA built-in variable",
}


@functools.cache
def _table() -> dict[str, str]:
    data = loads_json(DATA_FILE.read_text(encoding="utf-8"))
    table: dict[str, str] = {}
    for kind, what in KINDS.items():
        for name in data[kind]:
            table.setdefault(name, what)
    return table


def clash(name: str) -> str | None:
    """What ``name`` would clash with in generated code, or None."""
    return _table().get(name)


def names(kind: str) -> tuple[str, ...]:
    """One list of the data file (for tests)."""
    return tuple(sorted(name for name, what in _table().items() if what == KINDS[kind]))
