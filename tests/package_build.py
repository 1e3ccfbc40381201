"""Build a generated package in place, in a cache directory, incrementally.

Only files whose bytes changed are copied (mtimes of the others stay), so ninja
recompiles only the translation units that changed.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
from build_wheel import sync_tree  # the project's one copy-if-changed

# RLKERNELS_TEST_BUILDS names another folder beside .build (one per concurrent test run).
CACHE = REPO / os.environ.get("RLKERNELS_TEST_BUILDS", ".build")


def build_inplace(platform: str = "cpu", generated: Path = REPO / "generated", python: str = sys.executable) -> Path:
    """Build ``generated/<platform>`` into ``.build/inplace-<platform>``; return the package root."""
    dest = CACHE / f"inplace-{platform}"
    dest.mkdir(parents=True, exist_ok=True)
    sync_tree(generated / platform, dest)
    result = subprocess.run(
        [python, "setup.py", "build_ext", "--inplace"], cwd=dest, capture_output=True, text=True
    )
    if result.returncode != 0:
        raise RuntimeError(f"building {platform} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return dest


def contract_cases(root: Path) -> dict[str, Any]:
    """The contract suite's cases (``tests/cases.py``'s ``CASES``: op name -> test data and helpers) of
    the package built in ``root``, whose ``rlkernels`` this process has imported."""
    spec = importlib.util.spec_from_file_location(f"contract_cases_{abs(hash(root))}", root / "tests" / "cases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.CASES)


def import_built(platform: str, request) -> ModuleType:  # type: ignore[no-untyped-def]
    """Build ``generated/<platform>`` and import its ``rlkernels`` for one test module."""
    root = build_inplace(platform)
    sys.path.insert(0, str(root))
    request.addfinalizer(lambda: sys.path.remove(str(root)))
    for name in [m for m in sys.modules if m == "rlkernels" or m.startswith("rlkernels.")]:
        del sys.modules[name]
    module = importlib.import_module("rlkernels")
    assert module.NATIVE_ERROR is None, module.NATIVE_ERROR
    return module
