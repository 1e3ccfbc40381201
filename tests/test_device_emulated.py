"""Every device kernel of the catalog, for CUDA, ROCm and MUSA, run without a GPU.

Each device package is built as a CPU torch extension whose device launchers run in the host
emulator (tests/emulator), with the vendor's runtime, half/bfloat16 and torch-integration
headers replaced by the emulator's.  Each kernel, called through the package's device dispatch
key, is compared with the package's CPU kernels on the inputs of the op's generated contract
tests: bit for bit where both declare `portable` (NaN and infinities included), within the op's
tolerance otherwise (the tensor-core kernels).

The packages are generated with the device grid limit lowered to 3 blocks, so that the
kernels' grid-striding loops run on these small shapes.  What this shows for ROCm and MUSA:
the sources rendered for those platforms compute the right bits when the device behaves as
the emulator does (IEEE float32 with the spec's roundings, barriers, shared memory).  Not shown:
that hipcc or mcc compile them the same way, anything about speed, or a vendor's own arithmetic.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, copy_project
from emulation import EMULATOR, emulated_source

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: the emulated packages are compiled with the host C++ compiler"),
]
OPS = sorted(p.stem for p in (REPO / "specs/ops").glob("*.yaml"))
DEVICES = ("cuda", "rocm", "musa")
SUFFIXES = {"cuda": ".cu", "rocm": ".hip", "musa": ".mu"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    project = copy_project(tmp_path_factory.mktemp("emulated") / "project", with_generated=False)
    for platform in DEVICES:
        project.edit(f"specs/platforms/{platform}.yaml", "max_grid_blocks: 65535", "max_grid_blocks: 3")
    assert project.run("generate") == 0
    return project


def emulate_package(generated: Path, platform: str, root: Path, mutate=None) -> dict[str, list[dict[str, str]]]:
    """Builds generated/<platform> with its device sources on the emulator, runs the comparisons
    (tests/emulator/compare_package.py) and returns their results.  ``mutate(stem, text)`` may
    change a device source first."""
    package = root / "package"
    shutil.copytree(generated / platform, package)
    kernels = package / "csrc/kernels" / platform
    for source in sorted(kernels.glob(f"*{SUFFIXES[platform]}")):
        text = emulated_source(source.read_text())
        if mutate is not None:
            text = mutate(source.stem, text)
        # Object files are named by stem; the CPU kernels in kernels/cpu/ have the same stems.
        (kernels / f"{source.stem}_emu.cpp").write_text(text)
        source.unlink()
    if (kernels / "rlk_tensor_core.h").exists():
        shutil.copy(EMULATOR / "rlk_tensor_core.h", kernels / "rlk_tensor_core.h")
    (root / "build").mkdir()
    for step, target in (("build", root / "build"), ("compare", root / "results.json")):
        done = subprocess.run([sys.executable, str(EMULATOR / "compare_package.py"), step, str(package), str(target)], capture_output=True, text=True, timeout=1500)
        assert done.returncode == 0, f"{platform} {step} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads((root / "results.json").read_text())


@pytest.fixture(scope="module", params=DEVICES)
def results(request: pytest.FixtureRequest, project, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    pytest.importorskip("torch", reason="building the emulated package needs torch")
    return emulate_package(project.generated, request.param, tmp_path_factory.mktemp(request.param))


def test_every_op_with_a_device_kernel_was_run(results):
    assert sorted(results) == OPS
    for op, cases in results.items():
        assert cases, f"{op}: no device kernel was run"


@pytest.mark.parametrize("op", OPS)
def test_emulated_device_kernels_match_the_cpu_kernels(results, op: str):
    failures = [case for case in results[op] if case["verdict"] not in ("identical", "accurate")]
    assert not failures, "\n".join(f"{c['kernel']} {c['dtype']} {c['shape']} ({c['inputs']}): {c['verdict']}" for c in failures[:10])
    portable = {c["kernel"] for c in results[op] if c["verdict"] == "identical"}
    nonfinite = {c["kernel"] for c in results[op] if c["inputs"] == "nan/inf"}
    assert portable == nonfinite, "every portable kernel is also compared on NaN and infinities"


def test_a_kernel_that_skips_elements_is_caught(project, tmp_path: Path):
    """The comparison can fail: a silu whose grid-stride loop skips an element differs from the CPU's."""

    def skip_elements(stem: str, text: str) -> str:
        if stem != "silu_elementwise":
            return text
        assert text.count("i += index_stride())") == 1
        return text.replace("i += index_stride())", "i += index_stride() + 1)")

    silu = emulate_package(project.generated, "cuda", tmp_path, skip_elements)["silu"]
    # Only tensors longer than the 3 blocks' threads reach a second stride.
    long_enough = [c for c in silu if c["shape"] in ("C300xR33", "C1000xR7")]
    assert long_enough and all(c["verdict"].startswith("DIFFERS from cpu/elementwise") for c in long_enough), silu
