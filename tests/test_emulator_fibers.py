"""The emulator's fibers: its own context switch (x86-64) and ucontext, the portable one, run a
block through barriers alike, and both stop a block that can never meet."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

EMULATOR = REPO / "tests" / "emulator"
SWITCHES = {"own switch": [], "ucontext": ["-DRLK_EMU_UCONTEXT"]}


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: apt-get install -y g++")
    out = tmp_path_factory.mktemp("fibers")
    built = {}
    for name, flags in SWITCHES.items():
        binary = out / name.replace(" ", "_")
        command = ["g++", "-std=c++17", "-O1", "-DRLK_EMULATOR", *flags, "-I", str(EMULATOR), str(EMULATOR / "fiber_driver.cpp"), "-o", str(binary)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        built[name] = binary
    return built


@pytest.mark.parametrize("switch", SWITCHES)
def test_threads_meet_at_barriers_and_see_each_others_writes(drivers: dict[str, Path], switch: str) -> None:
    threads, blocks, rounds = 128, 2, 3
    inputs = [i * 7 + 1 for i in range(threads)]
    want = [inputs[(threads - 1 - t + r) % threads] * (r + 1) + t for _ in range(blocks) for r in range(rounds) for t in range(threads)]
    done = subprocess.run([str(drivers[switch])], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [int(v) for v in done.stdout.split()] == want


@pytest.mark.parametrize("switch", SWITCHES)
def test_a_barrier_one_thread_never_reaches_is_reported(drivers: dict[str, Path], switch: str) -> None:
    done = subprocess.run([str(drivers[switch]), "deadlock"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "deadlock: 31 threads wait in warp-wide instructions, 0 in warpgroup-wide ones, 96 at __syncthreads, 0 on shared-memory barriers, 1 have exited" in done.stderr, done.stderr
