"""The tensor-core kernels run here, without a GPU, in the SIMT emulator of tests/emulator.

The generated CUDA sources of det_gemm, det_gemm_nt and det_gemm_tn (mma and the simt kernel
it hands float32 to) are compiled with g++ against the emulator's runtime and instruction
models and run on integer-valued operands whose products sum exactly, so every element must
match the exact product bit for bit.  Each copy mode and thread order of the emulator is used
(see rlk_emu.h); the last tests show that the emulator does catch a missing wait, a wrong
fragment layout and a missing shared-memory opt-in, and that a larger tile configuration
computes the same bits.

What this does not show: speed, and that the hardware's own rounding inside one mma step
matches (the values here make every order exact).  `make gpu-check` covers those on a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, Project, copy_project
from emulation import EMULATOR, emulated_source

GXX = shutil.which("g++")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(GXX is None, reason="g++ not found: the emulator is compiled with the host C++ compiler")]
FLAGS = ("-std=c++17", "-O1", "-DRLK_EMULATOR", "-ffp-contract=off", "-Wno-unknown-pragmas", f"-I{EMULATOR / 'include'}", f"-I{EMULATOR}")
MODES = [("eager", "forward"), ("deferred", "forward"), ("eager", "reverse"), ("deferred", "reverse")]


@dataclass(frozen=True)
class Layout:
    lhs_t: bool
    rhs_t: bool
    dims: str  # the launcher's dimension arguments, in its order
    bias: bool = False  # the launcher takes an optional bias [N] after b


LAYOUTS = {
    "det_gemm": Layout(False, False, "M, K, N"),
    "det_gemm_nt": Layout(False, True, "M, K, N", bias=True),
    "det_gemm_tn": Layout(True, False, "K, M, N"),
}

# (M, K, N, offset in elements off 16-byte alignment)
VECTOR = (136, 200, 264, 0)  # several tiles, K over more k-blocks than stages, every chunk by cp.async
SHAPES = [
    VECTOR,
    (130, 64, 129, 0),  # partial tiles; contiguous dims not multiples of 8: the element loader
    (33, 37, 41, 0),  # nothing a multiple of 8 or of a tile
    (1, 7, 5, 0),  # one row, one k step
    (64, 96, 72, 1),  # multiples of 8, but the operands misaligned: the element loader
]


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)


def build_driver(
    generated: Path, op: str, work: Path, mutate: Callable[[str], str] | None = None, kernels: tuple[str, ...] = ("mma", "simt"),
    defines: tuple[str, ...] = (),
) -> Path:
    """Compiles `op`'s launchers of `kernels` (the first one driven, and mutated by `mutate`) from a
    generated CUDA package into an emulated driver; `defines` are extra -D flags."""
    csrc = work / "csrc"
    shutil.copytree(generated / "cuda/csrc", csrc)
    names, folder = kernels, csrc / "kernels/cuda"
    shutil.copy(EMULATOR / "rlk_tensor_core.h", folder / "rlk_tensor_core.h")
    flags = (*FLAGS, *(f"-D{d}" for d in defines))
    objects = []
    for kernel in names:
        source = folder / f"{op}_{kernel}.cu"
        text = source.read_text()
        if kernel == names[0] and mutate is not None:
            text = mutate(text)
        source.write_text(emulated_source(text))
        objects.append(work / f"{op}_{kernel}.o")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda o: _run([GXX, *flags, "-x", "c++", "-c", str(folder / f"{o.stem}.cu"), "-o", str(o)]), objects))
    for result in results:
        assert result.returncode == 0, result.stderr[-4000:]
    main = work / "main.cpp"
    main.write_text(
        f'#include "csrc/kernels/cuda/rlk_numerics.h"\n#include "csrc/kernels/cuda/{op}_{names[0]}.h"\n#include "{EMULATOR / "gemm_driver.cpp"}"\n'
    )
    layout = LAYOUTS[op]
    binary = work / f"{op}_driver"
    result = _run(
        [GXX, *flags, f"-DRLK_EMU_LAUNCHER={op}_{names[0]}", f"-DRLK_EMU_LHS_T={int(layout.lhs_t)}", f"-DRLK_EMU_RHS_T={int(layout.rhs_t)}",
         f"-DRLK_EMU_DIMS={layout.dims}", f"-DRLK_EMU_BIAS={int(layout.bias)}", str(main), *map(str, objects), "-o", str(binary)]
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return binary


def emulate(
    binary: Path, dtype: str, shape: tuple[int, int, int, int], out_fp32: bool = False, mode: tuple[str, str] = MODES[0], random: bool = False,
    bias: bool = False, device: dict[str, str] | None = None,
):
    """Runs a driver; `device` sets the emulated device (RLK_EMU_ARCH, RLK_EMU_MULTIPROCESSORS)."""
    m, k, n, offset = shape
    env = {**os.environ, "RLK_EMU_COPIES": mode[0], "RLK_EMU_ORDER": mode[1], "RLK_EMU_USE_BIAS": str(int(bias)), **(device or {})}
    return _run([str(binary), dtype, str(m), str(k), str(n), str(offset), str(int(out_fp32)), *(["random"] if random else [])], env=env)


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The committed generated package's kernels, as the wheel builds them."""
    return {op: build_driver(REPO / "generated", op, tmp_path_factory.mktemp(op)) for op in LAYOUTS}


CASES = (
    [pytest.param("bfloat16", shape, False, MODES[0], id=f"bfloat16-{'x'.join(map(str, shape))}") for shape in SHAPES]
    + [pytest.param("bfloat16", VECTOR, False, mode, id=f"bfloat16-{'-'.join(mode)}") for mode in MODES[1:]]
    + [
        pytest.param("float16", VECTOR, False, MODES[1], id="float16"),
        pytest.param("float32", (33, 37, 41, 0), False, MODES[1], id="float32-runs-simt"),
        pytest.param("bfloat16", (40, 48, 24, 0), True, MODES[1], id="out_fp32-runs-simt"),
    ]
)


@pytest.mark.parametrize("op", sorted(LAYOUTS))
@pytest.mark.parametrize(("dtype", "shape", "out_fp32", "mode"), CASES)
def test_emulated_kernel_is_exact(drivers: dict[str, Path], op: str, dtype: str, shape, out_fp32: bool, mode):
    result = emulate(drivers[op], dtype, shape, out_fp32, mode)
    assert result.returncode == 0, f"{op} {dtype} {shape} {mode}:\n{result.stdout}{result.stderr}"
    assert result.stdout.startswith("ok:"), result.stdout


@pytest.mark.parametrize(("dtype", "shape", "out_fp32", "mode"), CASES)
def test_emulated_linear_with_bias_is_exact(drivers: dict[str, Path], dtype: str, shape, out_fp32: bool, mode):
    """det_linear's bias is added in the epilogue of every path (mma, and simt for float32 and out_fp32)."""
    result = emulate(drivers["det_gemm_nt"], dtype, shape, out_fp32, mode, bias=True)
    assert result.returncode == 0, f"{dtype} {shape} {mode}:\n{result.stdout}{result.stderr}"
    assert result.stdout.startswith("ok:"), result.stdout


def test_a_dropped_bias_is_caught(tmp_path: Path):
    mutate = _replace_once("        if (bias != nullptr) {\n", "        if (false) {\n")
    binary = build_driver(REPO / "generated", "det_gemm_nt", tmp_path, mutate)
    assert emulate(binary, "bfloat16", VECTOR).stdout.startswith("ok:"), "without a bias the mutant is the kernel"
    result = emulate(binary, "bfloat16", VECTOR, bias=True)
    assert result.returncode == 1 and "elements wrong" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------- the emulator can fail

IN_LOOP_WAIT = "        copy_async_wait<C::kStages - 2>();\n        __syncthreads();"


def _replace_once(old: str, new: str) -> Callable[[str], str]:
    def mutate(text: str) -> str:
        assert text.count(old) == 1, f"the kernel no longer contains {old!r}"
        return text.replace(old, new)

    return mutate


def test_a_missing_copy_wait_is_caught_when_copies_land_late(tmp_path: Path):
    binary = build_driver(REPO / "generated", "det_gemm", tmp_path, _replace_once(IN_LOOP_WAIT, "        __syncthreads();"))
    assert emulate(binary, "bfloat16", VECTOR, mode=("eager", "forward")).returncode == 0, "eager copies hide the bug"
    late = emulate(binary, "bfloat16", VECTOR, mode=("deferred", "forward"))
    assert late.returncode == 1 and "elements wrong" in late.stdout, late.stdout + late.stderr


def test_a_wrong_fragment_layout_is_caught(tmp_path: Path):
    # B [K, N] must be read transposed; read as stored, the products pair the wrong values.
    mutate = _replace_once("        load_matrix_x4_trans(r0[0], r0[1], r1[0], r1[1], address);", "        load_matrix_x4(r0[0], r0[1], r1[0], r1[1], address);")
    result = emulate(build_driver(REPO / "generated", "det_gemm", tmp_path, mutate), "bfloat16", VECTOR)
    assert result.returncode == 1 and "elements wrong" in result.stdout, result.stdout + result.stderr


def test_a_barrier_not_every_thread_reaches_is_a_deadlock(tmp_path: Path):
    mutate = _replace_once(IN_LOOP_WAIT, "        copy_async_wait<C::kStages - 2>();\n        if (lane < 16) __syncthreads();")
    result = emulate(build_driver(REPO / "generated", "det_gemm", tmp_path, mutate), "bfloat16", VECTOR)
    assert result.returncode == 3 and "deadlock" in result.stderr, result.stdout + result.stderr


def test_lanes_in_different_warp_instructions_are_caught(tmp_path: Path):
    mutate = _replace_once(
        "        load_matrix_x4_trans(r0[0], r0[1], r1[0], r1[1], address);",
        "        if (lane < 16) load_matrix_x4_trans(r0[0], r0[1], r1[0], r1[1], address); else load_matrix_x4(r0[0], r0[1], r1[0], r1[1], address);",
    )
    result = emulate(build_driver(REPO / "generated", "det_gemm", tmp_path, mutate), "bfloat16", VECTOR)
    assert result.returncode == 3 and "meet in different warp-wide instructions" in result.stderr, result.stdout + result.stderr


def test_an_out_of_bounds_shared_access_stops_the_run_with_a_message(tmp_path: Path):
    mutate = _replace_once("const int a_mask = swizzle_mask<TileA::kChunks>(a_lane_row);", "const int a_mask = swizzle_mask<TileA::kChunks>(a_lane_row) + 1000;")
    result = emulate(build_driver(REPO / "generated", "det_gemm", tmp_path, mutate), "bfloat16", VECTOR)
    assert result.returncode == 3 and "dynamic shared memory" in result.stderr, result.stdout + result.stderr


# ---------------------------------------------------------------- another tile configuration

WIDE = "block_m: 128, block_n: 256, block_k: 32, warps_m: 2, warps_n: 4, stages: 4, blocks_per_sm: 1"
DEFAULT = "block_m: 128, block_n: 128, block_k: 32, warps_m: 2, warps_n: 2, stages: 3, blocks_per_sm: 2"


@pytest.fixture(scope="module")
def wide_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """det_gemm, det_gemm_nt and det_gemm_tn with 128 x 256 tiles of 8 warps in 4 stages (96 KiB)."""
    project = copy_project(tmp_path_factory.mktemp("wide"), with_generated=False, ops=(*LAYOUTS, "column_sum"))
    for op in LAYOUTS:
        project.edit(f"specs/ops/{op}.yaml", DEFAULT, WIDE)
    assert project.run("generate") == 0
    return project


@pytest.mark.parametrize("op", sorted(LAYOUTS))
def test_a_wider_tile_configuration_is_exact_and_opts_in_to_its_shared_memory(wide_project: Project, tmp_path: Path, op: str):
    source = (wide_project.generated / f"cuda/csrc/kernels/cuda/{op}_mma.cu").read_text()
    assert "using Tiles = MmaTiles<128, 256, 32, 2, 4, 4, 1," in source
    binary = build_driver(wide_project.generated, op, tmp_path)
    for shape in (VECTOR, (130, 64, 129, 0)):
        for mode in MODES:
            result = emulate(binary, "bfloat16", shape, mode=mode)
            assert result.returncode == 0 and result.stdout.startswith("ok:"), f"{shape} {mode}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("op", sorted(LAYOUTS))
def test_tile_configurations_give_the_same_bits_on_values_that_round(wide_project: Project, drivers: dict[str, Path], tmp_path: Path, op: str):
    """Exact operands cannot tell summation orders apart; these round, so a configuration that
    changed the order in which a k16 step reaches an accumulator would change the digest."""
    wide = build_driver(wide_project.generated, op, tmp_path)
    for shape in (VECTOR, (130, 64, 129, 0)):
        digests = {emulate(binary, "bfloat16", shape, random=True).stdout for binary in (drivers[op], wide)}
        assert len(digests) == 1 and next(iter(digests)).startswith("bits "), digests


def test_without_the_opt_in_the_wider_configuration_fails_to_launch(wide_project: Project, tmp_path: Path):
    mutate = _replace_once("  if constexpr (C::kSmemBytes > kSharedBytesWithoutOptIn) {", "  if constexpr (false) {")
    result = emulate(build_driver(wide_project.generated, "det_gemm", tmp_path, mutate), "bfloat16", VECTOR)
    assert result.returncode == 1 and "launcher returned error" in result.stdout, result.stdout + result.stderr
