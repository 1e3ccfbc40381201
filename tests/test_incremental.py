"""Regeneration and rebuilds are incremental: editing one op touches only what depends on it,
and a rebuild recompiles only the translation units whose sources changed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import Project
from package_build import build_inplace

# Files every op contributes to: the package's data (registry, test cases), bindings, review tables.
SHARED = {"csrc/bindings.cpp", "rlkernels/_catalog.json", "tests/contract_cases.json", "README.md", "setup.py"}


def test_editing_one_op_rewrites_only_its_files_and_the_shared_tables(project: Project):
    before = project.snapshot()
    project.edit("specs/ops/silu.yaml", "summary: SiLU activation", "summary: The SiLU activation")
    assert project.run("generate") == 0
    after = project.snapshot()
    changed = {path for path in before if before[path] != after.get(path)} | (after.keys() - before.keys())
    assert changed, "the edit changed nothing"
    for path in changed:
        name = Path(path).name
        inside = path.split("/", 1)[1] if "/" in path else path
        assert "silu" in name or inside in SHARED or "/" not in path, f"{path} changed, but it does not depend on silu"
    untouched = [p for p in before if "rms_norm" in p or "det_gemm" in p]
    assert untouched and all(before[p] == after[p] for p in untouched), "other ops' files keep their bytes and mtimes"


@pytest.mark.slow
def test_rebuild_recompiles_only_changed_translation_units():
    pytest.importorskip("torch", reason="building the package needs torch")
    root = build_inplace("cpu")
    objects = {p: p.stat().st_mtime_ns for p in (root / "build").rglob("*.o")}
    assert objects, "the build left no object files"
    kernel = root / "csrc/kernels/cpu/silu_elementwise.cpp"
    time.sleep(0.05)
    kernel.write_text(kernel.read_text() + "// touched\n")
    try:
        result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        rebuilt = sorted(p.name for p, mtime in objects.items() if p.stat().st_mtime_ns != mtime)
        assert rebuilt == ["silu_elementwise.o"], rebuilt
    finally:
        build_inplace("cpu")  # puts the generated source back and rebuilds that one unit
