"""Every CUDA kernel of the catalog, run without a GPU: the CUDA package is built as a CPU
torch extension whose device launchers run in the host emulator (tests/emulator), and each
kernel, called through the CUDA dispatch key, is compared with the package's CPU kernels on
the inputs of the op's generated contract tests -- bit for bit where both declare `portable`
(NaN and infinities included), within the op's tolerance otherwise (the tensor-core kernels).

The package is generated with the CUDA platform's grid limit lowered to 3 blocks, so that
the kernels' grid-striding loops run on these small shapes.  Not shown here: anything about
speed or the hardware's own arithmetic (see tests/emulator/rlk_emu.h and `make gpu-check`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, copy_project
from emulation import EMULATOR, emulated_source

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: the emulated package is compiled with the host C++ compiler"),
]
OPS = sorted(p.stem for p in (REPO / "specs/ops").glob("*.yaml"))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    pytest.importorskip("torch", reason="building the emulated package needs torch")
    root = tmp_path_factory.mktemp("emulated")
    project = copy_project(root / "project", with_generated=False)
    project.edit("specs/platforms/cuda.yaml", "max_grid_blocks: 65535", "max_grid_blocks: 3")
    assert project.run("generate") == 0
    package = root / "package"
    shutil.copytree(project.generated / "cuda", package)
    kernels = package / "csrc/kernels/cuda"
    for source in sorted(kernels.glob("*.cu")):
        # Object files are named by stem; the CPU kernels in kernels/cpu/ have the same stems.
        (kernels / f"{source.stem}_emu.cpp").write_text(emulated_source(source.read_text()))
        source.unlink()
    shutil.copy(EMULATOR / "rlk_tensor_core.h", kernels / "rlk_tensor_core.h")
    script = EMULATOR / "compare_package.py"
    for step, target in (("build", root / "build"), ("compare", root / "results.json")):
        if step == "build":
            target.mkdir()
        done = subprocess.run([sys.executable, str(script), step, str(package), str(target)], capture_output=True, text=True, timeout=1500)
        assert done.returncode == 0, f"{step} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads((root / "results.json").read_text())


def test_every_op_with_a_cuda_kernel_was_run(results):
    assert sorted(results) == OPS
    for op, cases in results.items():
        assert cases, f"{op}: no CUDA kernel was run"


@pytest.mark.parametrize("op", OPS)
def test_emulated_cuda_kernels_match_the_cpu_kernels(results, op: str):
    failures = [case for case in results[op] if case["verdict"] not in ("identical", "accurate")]
    assert not failures, "\n".join(f"{c['kernel']} {c['dtype']} {c['shape']} ({c['inputs']}): {c['verdict']}" for c in failures[:10])
    portable = {c["kernel"] for c in results[op] if c["verdict"] == "identical"}
    nonfinite = {c["kernel"] for c in results[op] if c["inputs"] == "nan/inf"}
    assert portable == nonfinite, "every portable kernel is also compared on NaN and infinities"
