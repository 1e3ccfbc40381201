"""The package's data-file declarations (``runtime/rlkernels/_interchange.py``), for the generator.

One declaration serves both sides: the generator builds these objects, the package decodes them.
The file lives in the package's sources (it ships in every wheel), and the package's
``__init__`` needs torch, so it is loaded here by path, as a module of its own name, rather than
through the package; to the type checker it is ``rlkernels._interchange`` (runtime/ is on its path).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

SOURCE = Path(__file__).resolve().parent.parent / "runtime" / "rlkernels" / "_interchange.py"
_NAME = "rlkernels_interchange"

if TYPE_CHECKING:
    from rlkernels import _interchange as interchange
else:
    interchange = sys.modules.get(_NAME)
    if interchange is None:
        if not SOURCE.is_file():
            raise ImportError(f"{SOURCE}: missing; the generator runs from its source tree (pip install -e .), beside runtime/")
        _spec = importlib.util.spec_from_file_location(_NAME, SOURCE)
        assert _spec is not None and _spec.loader is not None, SOURCE
        interchange = importlib.util.module_from_spec(_spec)
        sys.modules[_NAME] = interchange  # dataclasses and get_type_hints look the module up by name
        _spec.loader.exec_module(interchange)

__all__ = ["interchange"]
