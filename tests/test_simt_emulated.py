"""The register-tiled simt kernels of det_gemm, det_gemm_nt and det_gemm_tn, run in the host
emulator (tests/emulator) and compared bit for bit with the CPU package's kernels.

The emulated device launcher and the CPU launcher of the same op are linked into one driver
(tests/emulator/simt_driver.cpp) that runs both on the same operands: values whose products and
sums round, so any change in the order in which an accumulator takes its products (or in the
values it takes) changes bits.  The shapes cross every boundary of the device kernel: M and N
around its output tiles, K around its k-tiles and the four-element groups of its vector loads,
contiguous extents that do not allow vector loads, operands whose start is off 16-byte alignment,
and an empty K.  Misaligned vector loads stop the run (the device source is compiled with the
alignment sanitizer), and so does any read past an operand (each ends at an inaccessible page).

The last tests show that these comparisons fail for a kernel that takes a register tile's k steps
out of order, or that fills a group it loads element by element with the wrong elements, or that
loads vectors where the row stride does not allow them.

What this does not show: speed, or anything a device compiler does differently from g++.
`make gpu-check` measures the kernel on a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO
from emulation import EMULATOR, emulated_source

GXX = shutil.which("g++")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(GXX is None, reason="g++ not found: the emulator is compiled with the host C++ compiler")]
FLAGS = ("-std=c++17", "-O1", "-DRLK_EMULATOR", "-ffp-contract=off", "-Wno-unknown-pragmas")
# A vector load from an address its type's alignment does not divide is an error on a GPU.
SANITIZE = ("-fsanitize=alignment", "-fno-sanitize-recover=alignment")
SUFFIXES = {"cuda": ".cu", "rocm": ".hip", "musa": ".mu"}
# Each op's launcher dimension arguments, in its order, and whether it takes a bias [N].
LAUNCHERS = {"det_gemm": ("M, K, N", False), "det_gemm_nt": ("M, K, N", True), "det_gemm_tn": ("K, M, N", False)}

# (M, K, N, A offset, B offset) in elements.  The device tiles are 128 x 128 outputs, k-tiles
# of 8, and groups of 4 elements loaded as one vector where the row stride and the operand's
# start allow it.
SHAPES = [
    (128, 64, 128, 0, 0),  # whole tiles, every group a vector
    (300, 77, 260, 0, 0),  # partial output tiles, a ragged last k-tile, strides of 77 and 260 (and 300 for tn's A)
    (131, 36, 132, 0, 0),  # strides divisible by 4: vectors, and groups wholly past the tile's edge
    (129, 21, 133, 1, 3),  # operands off 16-byte alignment: element by element
    (257, 40, 256, 2, 0),  # A misaligned, B aligned: one operand by vectors, the other not
    (1, 7, 5, 0, 0),  # one row, one k-tile shorter than a vector group
    (5, 0, 7, 0, 0),  # no k at all: zeros
]


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)


def build_driver(generated: Path, op: str, platform: str, work: Path, mutate: Callable[[str], str] | None = None) -> Path:
    """The emulated device simt launcher of ``op`` and its CPU launcher (every package carries the
    CPU kernels), linked into one driver.  ``mutate`` may change the device source first."""
    csrc = work / "csrc"
    shutil.copytree(generated / platform / "csrc", csrc)
    device = csrc / "kernels" / platform / f"{op}_simt{SUFFIXES[platform]}"
    text = device.read_text()
    if mutate is not None:
        text = mutate(text)
    device.with_suffix(".cpp").write_text(emulated_source(text))
    include = (f"-I{EMULATOR / 'include'}", f"-I{EMULATOR}")
    compiles = [
        [GXX, *FLAGS, *SANITIZE, *include, "-c", str(device.with_suffix(".cpp")), "-o", str(work / "device.o")],
        [GXX, *FLAGS, "-c", str(csrc / f"kernels/cpu/{op}_simt.cpp"), "-o", str(work / "cpu.o")],
    ]
    with ThreadPoolExecutor(2) as pool:
        for result in pool.map(_run, compiles):
            assert result.returncode == 0, result.stderr[-4000:]
    main = work / "main.cpp"
    main.write_text(
        f'#include "csrc/kernels/{platform}/rlk_numerics.h"\n#include "csrc/kernels/{platform}/{op}_simt.h"\n'
        f'#include "csrc/kernels/cpu/{op}_simt.h"\n#include "{EMULATOR / "simt_driver.cpp"}"\n'
    )
    dims, bias = LAUNCHERS[op]
    binary = work / "driver"
    result = _run(
        [GXX, *FLAGS, *SANITIZE, *include, f"-DRLK_EMU_NS={platform}", f"-DRLK_EMU_LAUNCHER={op}_simt", f"-DRLK_EMU_DIMS={dims}",
         f"-DRLK_EMU_BIAS={int(bias)}", str(main), str(work / "device.o"), str(work / "cpu.o"), "-o", str(binary)],
        cwd=work,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return binary


def compare(binary: Path, dtype: str, shape: tuple[int, ...], out_fp32: bool = False, bias: bool = False, order: str = "forward"):
    m, k, n, a_offset, b_offset = shape
    env = {**os.environ, "RLK_EMU_ORDER": order}
    args = [str(binary), dtype, str(int(out_fp32)), str(m), str(k), str(n), str(a_offset), str(b_offset), *(["bias"] if bias else [])]
    return _run(args, env=env)


def assert_identical(result: subprocess.CompletedProcess[str], what: str) -> None:
    assert result.returncode == 0 and result.stdout.startswith("identical:"), f"{what}:\n{result.stdout}{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The committed generated CUDA package's simt kernels, as the wheel builds them."""
    return {op: build_driver(REPO / "generated", op, "cuda", tmp_path_factory.mktemp(op)) for op in LAUNCHERS}


@pytest.mark.parametrize("op", sorted(LAUNCHERS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_float32_matches_the_cpu_kernel_bit_for_bit(drivers: dict[str, Path], op: str, shape):
    assert_identical(compare(drivers[op], "float32", shape), f"{op} {shape}")


@pytest.mark.parametrize("op", sorted(LAUNCHERS))
def test_16_bit_inputs_match_the_cpu_kernel(drivers: dict[str, Path], op: str):
    """The same kernel with bfloat16 and float16 storage: groups of four 16-bit elements, rounded
    once to the storage type or, on request, stored as float32."""
    for dtype, shape, out_fp32 in (("bfloat16", SHAPES[1], False), ("float16", SHAPES[3], False), ("bfloat16", SHAPES[4], True)):
        assert_identical(compare(drivers[op], dtype, shape, out_fp32), f"{op} {dtype} {shape} out_fp32={out_fp32}")


def test_bias_matches_the_cpu_kernel(drivers: dict[str, Path]):
    for dtype, shape in (("float32", SHAPES[1]), ("float32", SHAPES[3]), ("bfloat16", SHAPES[2])):
        assert_identical(compare(drivers["det_gemm_nt"], dtype, shape, bias=True), f"det_gemm_nt {dtype} {shape} with bias")


@pytest.mark.parametrize("op", sorted(LAUNCHERS))
def test_threads_racing_ahead_do_not_change_bits(drivers: dict[str, Path], op: str):
    """The highest-numbered thread runs first up to each barrier: a write into the shared buffer
    the other threads are still reading would show up here."""
    for shape in SHAPES[1:4]:
        assert_identical(compare(drivers[op], "float32", shape, order="reverse"), f"{op} {shape} reverse order")


@pytest.mark.parametrize("platform", ["rocm", "musa"])
def test_the_other_device_platforms_match_the_cpu_kernel(platform: str, tmp_path: Path):
    """The ROCm and MUSA sources of the same template, for the layout that transposes B."""
    binary = build_driver(REPO / "generated", "det_gemm_nt", platform, tmp_path)
    for dtype, shape in (("float32", SHAPES[1]), ("float32", SHAPES[3]), ("bfloat16", SHAPES[2]), ("float16", SHAPES[4])):
        assert_identical(compare(binary, dtype, shape), f"{platform} det_gemm_nt {dtype} {shape}")


# ---------------------------------------------------------------- the comparison can fail


def _replace_once(old: str, new: str) -> Callable[[str], str]:
    def mutate(text: str) -> str:
        assert text.count(old) == 1, f"the kernel no longer contains {old!r}"
        return text.replace(old, new)

    return mutate


def test_k_steps_out_of_order_within_a_register_tile_are_caught(tmp_path: Path):
    """A kernel that takes the k steps of each whole k-tile last to first: the same products,
    summed in another order."""
    mutate = _replace_once(
        "for (int kk = 0; kk < kTileK; ++kk) multiply_step(a_tiles[buffer][kk], b_tiles[buffer][kk], tx, ty, acc);",
        "for (int kk = kTileK - 1; kk >= 0; --kk) multiply_step(a_tiles[buffer][kk], b_tiles[buffer][kk], tx, ty, acc);",
    )
    binary = build_driver(REPO / "generated", "det_gemm", "cuda", tmp_path, mutate)
    result = compare(binary, "float32", SHAPES[1])
    assert result.returncode == 1 and "elements differ" in result.stdout, result.stdout + result.stderr


def test_a_wrong_element_by_element_tail_is_caught(tmp_path: Path):
    """A kernel that fills a group it cannot load as one vector with the group's first element
    in every place.  Where every group is a vector the mutant is the kernel; the shapes with
    other strides or misaligned operands catch it."""
    mutate = _replace_once("g.v[j] = inside ? p_[at + j] : from_float<T>(0.0f);", "g.v[j] = inside ? p_[at] : from_float<T>(0.0f);")
    binary = build_driver(REPO / "generated", "det_gemm", "cuda", tmp_path, mutate)
    assert_identical(compare(binary, "float32", SHAPES[0]), "every group a vector: the mutant is the kernel")
    for shape in (SHAPES[1], SHAPES[3]):
        result = compare(binary, "float32", shape)
        assert result.returncode == 1 and "elements differ" in result.stdout, f"{shape}: {result.stdout}{result.stderr}"


def test_vector_loads_without_the_stride_check_are_caught(tmp_path: Path):
    """A kernel that loads vectors wherever the operand's start is aligned, whatever its row
    stride: rows at odd offsets are misaligned, and the sanitizer stops the run."""
    mutate = _replace_once(" && (ContiguousK ? K : L) % kVec == 0", "")
    binary = build_driver(REPO / "generated", "det_gemm", "cuda", tmp_path, mutate)
    result = compare(binary, "float32", SHAPES[1])
    assert result.returncode != 0 and "misaligned address" in result.stderr, result.stdout + result.stderr[-2000:]

