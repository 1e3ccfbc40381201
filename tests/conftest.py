"""Shared fixtures: a throw-away copy of the project to mutate and regenerate."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from generator.cli import main

REPO = Path(__file__).resolve().parent.parent
# Where the packages the tests build live; every build there sits at the same depth.
BUILDS = REPO / os.environ.get("RLKERNELS_TEST_BUILDS", ".build")


def _use_ccache() -> None:
    """The suite builds the same C++ sources several times over -- in place, as a wheel, as a
    mutant's unchanged files, in gpu_check's dry run, in each emulated package.  Where ccache is
    installed, every compiler the builds find on PATH goes through it (its masquerade directory),
    with paths under the repository hashed relative to the build, so a translation unit seen
    once is not compiled again.  ccache keys on the preprocessed source and the flags: a changed
    source or flag is always compiled afresh."""
    ccache = shutil.which("ccache")
    if ccache is None or os.environ.get("RLK_NO_CCACHE"):
        return
    for masquerade in (Path("/usr/lib/ccache"), Path("/usr/lib64/ccache"), Path("/usr/local/lib/ccache")):
        if (masquerade / "g++").exists():
            os.environ["PATH"] = f"{masquerade}{os.pathsep}{os.environ.get('PATH', '')}"
            os.environ.setdefault("CCACHE_BASEDIR", str(REPO))
            os.environ.setdefault("CCACHE_NOHASHDIR", "1")
            return


_use_ccache()


# A module marked slow as a whole: `pytestmark = pytest.mark.slow`, or a list that starts with it.
_SLOW_MODULE = re.compile(r"^pytestmark = \[?\s*pytest\.mark\.slow\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under `-m "not slow"` (make test-fast), a module marked slow as a whole is not imported:
    each of its tests would be deselected, and importing it needs what only `make test` installs
    (transformers, vLLM, TRL), so in make test-fast's environment it would show as skipped for a
    missing module instead of deselected by its marker."""
    if " ".join(str(config.getoption("markexpr", "")).split()) != "not slow":
        return None
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_") and _SLOW_MODULE.search(collection_path.read_text()):
        return True
    return None


F = TypeVar("F", bound=Callable[..., Any])


def compiles(test: F) -> F:
    """Marks a test that runs a device compiler (nvcc, hipcc): `compiles`, and `slow`, so that
    `make test` runs it and `make test-fast` (-m "not slow") does not.  Where the compilers are
    installed such tests take minutes; where they are not, they skip naming the compiler."""
    return pytest.mark.slow(pytest.mark.compiles(test))


@dataclass
class Project:
    root: Path

    @property
    def generated(self) -> Path:
        return self.root / "generated"

    def spec(self, rel: str) -> Path:
        return self.root / "specs" / rel

    def edit(self, rel: str, old: str, new: str) -> int:
        """Replace ``old`` (which must occur once) in a spec or template file; return the 1-based line of the edit."""
        path = self.root / rel
        text = path.read_text()
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {rel}"
        path.write_text(text.replace(old, new))
        return text[: text.index(old)].count("\n") + 1

    def run(self, *args: str) -> int:
        return main(["--root", str(self.root), *args])

    def refuses_edit(self, errors: Any, rel: str, old: str, new: str, *needles: str, field: str | None = None, absent: tuple[str, ...] = ()) -> str:
        """Edit ``rel``, run generate, and restore the file: the run exits 2 without a traceback
        (nor any word of ``absent``, in any case), leaves generated/ as it was, and one line of its
        errors names ``rel`` -- with ``field``, starts ``rel:LINE: field``, LINE the edit's first
        line -- and holds every needle.  ``errors`` gives the errors written (pytest's capsys).
        Returns that line."""
        before = self.snapshot()
        original = (self.root / rel).read_text()
        line = self.edit(rel, old, new)
        try:
            assert self.run("generate") == 2
            err = errors.readouterr().err
            assert "Traceback" not in err
            for word in absent:
                assert word.lower() not in err.lower(), f"{word!r} in:\n{err}"
            prefix = f"{rel}:" if field is None else f"{rel}:{line}: {field}"
            found = [text for text in err.splitlines() if text.startswith(prefix) and all(n in text for n in needles)]
            assert found, f"no line starting {prefix!r} with {needles!r} in:\n{err}"
            assert self.snapshot() == before
            return found[0]
        finally:
            (self.root / rel).write_text(original)

    def snapshot(self) -> dict[str, tuple[str, int]]:
        """Every file under generated/: content hash and mtime (ns)."""
        return {
            p.relative_to(self.generated).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(self.generated.rglob("*"))
            if p.is_file()
        }


def _keep_integrations_of(package_spec: Path, ops: tuple[str, ...]) -> None:
    """A catalog of some ops declares only the integrations those ops serve (the package's
    modules that call another op would be refused)."""
    import yaml

    text = package_spec.read_text()
    header = text.splitlines()[0]
    data = yaml.safe_load(text)
    names = set(ops)
    for op in ops:
        spec = yaml.safe_load((package_spec.parent / "ops" / f"{op}.yaml").read_text())
        names.update(spec.get("aliases", []))
    data["integrations"] = {module: calls for module, calls in data.get("integrations", {}).items() if set(calls) <= names}
    package_spec.write_text(header + "\n" + yaml.safe_dump(data, sort_keys=False))


def copy_project(dest: Path, with_generated: bool = True, ops: tuple[str, ...] | None = None) -> Project:
    """``ops``: copy only these op specs (None: all), for tests that need a valid catalog but not every op."""

    def skipped(directory: str, names: list[str]) -> list[str]:
        if ops is None or Path(directory).name != "ops" or Path(directory).parent.name != "specs":
            return []
        return [n for n in names if n.endswith(".yaml") and n.removesuffix(".yaml") not in ops]

    shutil.copytree(REPO / "specs", dest / "specs", ignore=skipped)
    if ops is not None:
        _keep_integrations_of(dest / "specs" / "package.yaml", ops)
    shutil.copytree(REPO / "templates", dest / "templates")
    shutil.copytree(REPO / "runtime", dest / "runtime", ignore=shutil.ignore_patterns("__pycache__"))
    if (REPO / "evidence").is_dir():  # the ledger: REGISTRY.md renders it
        shutil.copytree(REPO / "evidence", dest / "evidence")
    project = Project(dest)
    if with_generated:
        assert project.run("generate") == 0
    return project


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """specs/, templates/, runtime/ and evidence/ copied, generated/ produced from them."""
    return copy_project(tmp_path / "proj")


@pytest.fixture
def bare_project(tmp_path: Path) -> Project:
    """specs/, templates/ and runtime/ copied, nothing generated yet."""
    return copy_project(tmp_path / "proj", with_generated=False)


@pytest.fixture
def small_project(tmp_path: Path) -> Project:
    """Like ``project`` with only the det_gemm family (det_gemm differentiates with nt and tn, det_linear's bias with column_sum): fast,
    and independent of the other ops' specs."""
    return copy_project(tmp_path / "proj", ops=("det_gemm", "det_gemm_nt", "det_gemm_tn", "column_sum"))
