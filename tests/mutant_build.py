"""Mutants of the CPU package, each rebuilt by recompiling a translation unit or two.

Every mutant is built in one workspace, .build/mutant-cpu: the generated CPU package synced
into it (tools/build_wheel.py's copy-if-changed, which also puts back the source the previous
mutant changed), then one kernel source changed by exact-text replacements, then
``setup.py build_ext --inplace``.  ninja recompiles only the restored and the mutated sources
and relinks: seconds, after the workspace's first full build.  Mutants therefore run one at a
time, in the order the tests ask for them.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from package_build import CACHE, REPO, sync_tree

WORKSPACE = CACHE / "mutant-cpu"


@dataclass
class Mutant:
    root: Path
    compiled: list[str]  # sources ninja compiled for it


def build_mutant(source: str, edits: list[tuple[str, str]]) -> Mutant:
    """The CPU package with ``edits`` (each old text must occur exactly once) applied to
    ``source`` (a kernel under csrc/kernels/cpu/, or a path inside the package), built in the
    mutant workspace."""
    WORKSPACE.mkdir(parents=True, exist_ok=True)
    sync_tree(REPO / "generated" / "cpu", WORKSPACE)
    path = WORKSPACE / (source if "/" in source else f"csrc/kernels/cpu/{source}")
    text = path.read_text()
    for old, new in edits:
        count = text.count(old)
        assert count == 1, f"mutant of {source}: {old[:80]!r}... occurs {count} times, not once (did the template change?)"
        text = text.replace(old, new)
    path.write_text(text)

    done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=WORKSPACE, capture_output=True, text=True, timeout=1800)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"the mutant of {source} did not build:\n{log[-6000:]}"
    compiled = re.findall(r"^\[\d+/\d+\] .* -c (\S+) -o ", log, flags=re.MULTILINE)
    return Mutant(WORKSPACE, [Path(c).name for c in compiled])


@dataclass
class Outcomes:
    returncode: int
    tests: dict[str, str]  # "<test function>[<op>-<case>]" -> passed / failed / error / skipped
    output: str

    def of(self, function: str, op: str | None = None) -> dict[str, str]:
        """The outcomes of one contract test function's cases (of one op, if given)."""
        return {test: outcome for test, outcome in self.tests.items() if _function(test) == function and (op is None or f"[{op}-" in test)}

    @property
    def failing(self) -> set[str]:
        """The test functions with a failed or erroring case."""
        return {_function(test) for test, outcome in self.tests.items() if outcome in ("failed", "error")}


def _function(test: str) -> str:
    return test.split("[", 1)[0]


def run_generated_tests(root: Path, ops: list[str], select: tuple[str, ...], junit: Path) -> Outcomes:
    """Run the package's contract test functions whose names start with one of ``select`` (for
    ``ops``) inside ``root``, in one process; every test's outcome.

    Selected by node id, not ``-k``: ``-k`` also matches module names, so ``test_accuracy``
    would take in every test of tests/test_accuracy.py."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selected_tests(root, select), *(f"--op={op}" for op in ops), f"--junitxml={junit}"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=1800)
    tests: dict[str, str] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = "failed" if "failure" in kinds else "error" if "error" in kinds else "skipped" if "skipped" in kinds else "passed"
        tests[case.get("name", "")] = outcome
    return Outcomes(done.returncode, tests, done.stdout[-6000:] + done.stderr[-3000:])


def selected_tests(root: Path, select: tuple[str, ...]) -> list[str]:
    """The node ids (tests/<module>.py::<function>) of the test functions in ``root``'s tests
    whose names start with one of ``select``; each prefix must name at least one."""
    found = [(module, name) for module in sorted((root / "tests").glob("test_*.py")) for name in re.findall(r"^def (test_\w+)\(", module.read_text(), flags=re.MULTILINE)]
    ids = []
    for prefix in select:
        named = [f"tests/{module.name}::{name}" for module, name in found if name.startswith(prefix)]
        assert named, f"no contract test function starts with {prefix!r} (was it renamed?)"
        ids += named
    return list(dict.fromkeys(ids))


# Runs in a package root: calls torch.ops.rlkernels.<op>.<kernel> on saved inputs, saves the outputs.
_CALL_KERNELS = """
import sys
import torch
sys.path.insert(0, sys.argv[1])
import rlkernels
assert rlkernels.NATIVE_ERROR is None, rlkernels.NATIVE_ERROR
calls = torch.load(sys.argv[2])
outputs = []
for op, kernel, args in calls:
    out = getattr(getattr(torch.ops.rlkernels, op), kernel)(*args)
    outputs.append(list(out) if isinstance(out, tuple) else [out])
torch.save(outputs, sys.argv[3])
"""


def call_kernels(root: Path, calls: list, scratch: Path) -> list:  # type: ignore[type-arg]
    """[(op, kernel, args)] -> each call's outputs (a list), computed by the package in ``root``
    in a process of its own (a process registers torch.ops.rlkernels once)."""
    import torch

    scratch.mkdir(parents=True, exist_ok=True)
    given, taken = scratch / "calls.pt", scratch / "outputs.pt"
    torch.save(calls, given)
    done = subprocess.run([sys.executable, "-c", _CALL_KERNELS, str(root), str(given), str(taken)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(taken)
