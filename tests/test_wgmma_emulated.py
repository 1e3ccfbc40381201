"""The warpgroup (wgmma) kernels run here, without a GPU, in the SIMT emulator of tests/emulator.

The generated CUDA sources of det_gemm, det_gemm_nt and det_gemm_tn's wgmma kernel (with the mma
and simt kernels it hands other devices and float32 to) are compiled with g++ against the
emulator, with the arch-specific target's macro defined as the sm_90a compilation defines it, and
run on integer-valued operands whose products sum exactly: every element must match the exact
product bit for bit.  The emulator models what the kernel relies on (rlk_emu.h,
rlk_tensor_core.h there): shared-memory barriers with phases and arrivals made when copies land,
the warpgroup mma reading both operands through 128-byte-swizzled shared-memory descriptors
(transposed or not), its commit and wait groups, and warpgroup-wide instructions that every
thread of a warpgroup must reach.  Deferred copies land, and deferred mmas run, as late as the
hardware may, so a missing wait reads stale data; the last tests show that the emulator catches
such kernels.

What this does not show: speed; that the hardware's rounding inside one mma step matches (the
values here make every order exact); the proxy fence between the copies and the mma's reads
(the emulator has one memory); setmaxnreg's register budget (ptxas reports it:
tools/compile_check.py); and that the descriptor and swizzle formats are the hardware's rather
than the emulator's reading of the PTX ISA.  The kernel has not run on a GPU: `make gpu-check`
on an H200 covers those.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from test_mma_emulated import GXX, LAYOUTS, MODES, _replace_once, build_driver, emulate

from conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.skipif(GXX is None, reason="g++ not found: the emulator is compiled with the host C++ compiler")]

KERNELS = ("wgmma", "mma", "simt")
ARCH = "9.0a"
# The macro the platform spec names for the target (defined by nvcc -arch sm_90a alone).
FEATURE = yaml.safe_load((REPO / "specs/platforms/cuda.yaml").read_text())["build"]["arch_macros"][ARCH]
HOPPER = {"RLK_EMU_ARCH": "9.0", "RLK_EMU_MULTIPROCESSORS": "2"}

# (M, K, N, offset in elements off 16-byte alignment)
LONG = (136, 520, 264, 0)  # 2 x 3 tiles of 128 x 128 on 2 blocks; 9 k-blocks of 64 wrap the ring of 6 stages
SHAPES = [
    LONG,
    (130, 64, 129, 0),  # partial tiles; contiguous dims not multiples of 8: the element loader
    (33, 37, 41, 0),  # nothing a multiple of 8 or of a tile
    (1, 7, 5, 0),  # one row, one k step
    (64, 96, 72, 1),  # multiples of 8, but the operands misaligned: the element loader
    (200, 0, 24, 0),  # K = 0: zeros (or the bias)
]


def build(generated: Path, op: str, work: Path, mutate: Callable[[str], str] | None = None, built: bool = True) -> Path:
    return build_driver(generated, op, work, mutate, kernels=KERNELS, defines=(FEATURE,) if built else ())


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The committed generated package's kernels, as the sm_90a compilation builds them."""
    return {op: build(REPO / "generated", op, tmp_path_factory.mktemp(op)) for op in LAYOUTS}


def passes(result) -> bool:
    return result.returncode == 0 and result.stdout.startswith("ok:")


CASES = (
    [pytest.param("bfloat16", shape, False, MODES[0], id=f"bfloat16-{'x'.join(map(str, shape))}") for shape in SHAPES]
    + [pytest.param("bfloat16", LONG, False, mode, id=f"bfloat16-{'-'.join(mode)}") for mode in MODES[1:]]
    + [
        pytest.param("float16", LONG, False, MODES[1], id="float16"),
        pytest.param("bfloat16", LONG, True, MODES[3], id="bfloat16-out_fp32"),
        pytest.param("float16", (130, 64, 129, 0), True, MODES[1], id="float16-out_fp32-elementwise"),
        pytest.param("float32", (33, 37, 41, 0), False, MODES[1], id="float32-runs-simt"),
    ]
)


@pytest.mark.parametrize("op", sorted(LAYOUTS))
@pytest.mark.parametrize(("dtype", "shape", "out_fp32", "mode"), CASES)
def test_emulated_wgmma_kernel_is_exact(drivers: dict[str, Path], op: str, dtype: str, shape, out_fp32: bool, mode):
    result = emulate(drivers[op], dtype, shape, out_fp32, mode, device=HOPPER)
    assert passes(result), f"{op} {dtype} {shape} {mode}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize(("dtype", "shape", "out_fp32"), [("bfloat16", LONG, False), ("bfloat16", LONG, True), ("float16", (33, 37, 41, 0), True), ("bfloat16", (200, 0, 24, 0), False)])
def test_emulated_linear_with_bias_is_exact(drivers: dict[str, Path], dtype: str, shape, out_fp32: bool):
    """det_linear's bias is added in the wgmma epilogue before the one rounding, into either output dtype."""
    result = emulate(drivers["det_gemm_nt"], dtype, shape, out_fp32, MODES[1], bias=True, device=HOPPER)
    assert passes(result), result.stdout + result.stderr


@pytest.mark.parametrize("multiprocessors", ["1", "5"])
def test_the_persistent_grid_size_changes_nothing(drivers: dict[str, Path], multiprocessors: str):
    """One block walking all six tiles (its ring running on from tile to tile), or five blocks."""
    for op in sorted(LAYOUTS):
        result = emulate(drivers[op], "bfloat16", LONG, mode=MODES[3], device={**HOPPER, "RLK_EMU_MULTIPROCESSORS": multiprocessors})
        assert passes(result), f"{op}: {result.stdout}{result.stderr}"


def test_other_devices_and_builds_without_the_target_run_the_next_kernel(drivers: dict[str, Path], tmp_path: Path):
    """On an 8.0 device, and where the code was compiled without the sm_90a body, the launcher hands
    the call to mma; a mutant whose body would be wrong shows that the body is not run."""
    broken = _replace_once("          float sum_lo = acc[4 * j + 2 * half];\n", "          float sum_lo = -acc[4 * j + 2 * half];\n")
    without = build(REPO / "generated", "det_gemm", tmp_path / "without", broken, built=False)
    assert passes(emulate(without, "bfloat16", LONG, device=HOPPER)), "the body is not there: mma runs"
    mutant = build(REPO / "generated", "det_gemm", tmp_path / "mutant", broken)
    assert passes(emulate(mutant, "bfloat16", LONG, device={**HOPPER, "RLK_EMU_ARCH": "8.0"})), "an 8.0 device runs mma"
    assert not passes(emulate(mutant, "bfloat16", LONG, device=HOPPER)), "a 9.0 device runs the (broken) body"


# ---------------------------------------------------------------- the emulator can fail

MUTANTS = {
    # The consumers read a stage before its copies have landed.
    "missing-full-wait": ("        barrier_wait(full + 8 * stage, phase);\n", ""),
    # A stage is given back to the producer while the mma reading it may still run.
    "stage-released-early": ("        warpgroup_wait<1>();\n", ""),
    # The epilogue reads accumulators the last mma group may still be writing.
    "missing-epilogue-wait": ("      warpgroup_wait<0>();\n", ""),
    # The accumulator fragment mapped to the wrong columns.
    "wrong-fragment-mapping": (
        "          float sum_lo = acc[4 * j + 2 * half];\n          float sum_hi = acc[4 * j + 2 * half + 1];",
        "          float sum_lo = acc[4 * j + 2 * half + 1];\n          float sum_hi = acc[4 * j + 2 * half];",
    ),
    # B read as if it were stored the other way round.
    "wrong-transpose": ("WarpgroupMma<T, C::kBlockN, C::kLhsT, !C::kRhsT>", "WarpgroupMma<T, C::kBlockN, C::kLhsT, C::kRhsT>"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_a_broken_wgmma_kernel_is_caught(tmp_path: Path, name: str):
    old, new = MUTANTS[name]
    binary = build(REPO / "generated", "det_gemm", tmp_path, _replace_once(old, new))
    results = [emulate(binary, "bfloat16", LONG, mode=mode, device=HOPPER) for mode in MODES]
    assert not any(passes(r) for r in results[1::2]), "deferred copies and mmas expose it in every thread order"
    for r in results:
        assert passes(r) or "elements wrong" in r.stdout or "rlk_emu:" in r.stderr, r.stdout + r.stderr


def test_threads_of_a_warpgroup_in_different_instructions_are_caught(tmp_path: Path):
    mutate = _replace_once("        warpgroup_commit();\n", "        if (t < 64) warpgroup_commit(); else warpgroup_fence();\n")
    result = emulate(build(REPO / "generated", "det_gemm", tmp_path, mutate), "bfloat16", LONG, device=HOPPER)
    assert result.returncode == 3 and "different warpgroup-wide instructions" in result.stderr, result.stdout + result.stderr
