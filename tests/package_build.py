"""Build a generated package in place, in a cache directory, incrementally.

Only files whose bytes changed are copied (mtimes of the others stay), so ninja
recompiles only the translation units that changed.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".build"


def sync_tree(src: Path, dest: Path) -> list[str]:
    """Make ``dest`` mirror ``src`` (build outputs aside); return the files that were copied."""
    copied = []
    wanted = {p.relative_to(src) for p in src.rglob("*") if p.is_file()}
    for rel in sorted(wanted):
        target = dest / rel
        if target.exists() and target.read_bytes() == (src / rel).read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, target)
        copied.append(rel.as_posix())
    for old in dest.rglob("*"):
        rel = old.relative_to(dest)
        if old.is_file() and rel.parts[0] in {"csrc", "rlkernels", "tests"} and rel not in wanted and old.suffix != ".so":
            old.unlink()
    return copied


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
