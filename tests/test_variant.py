"""generator/variant.py: one kernel rendered with overridden params through the generator (the tile
sweep of tools/gpu_check.py), refused where a spec with those params would be."""

from __future__ import annotations

import difflib

import pytest

from conftest import REPO, Project
from generator.load import load_catalog
from generator.model import OpSpec
from generator.variant import VariantError, render_kernel

MMA = REPO / "generated/cuda/csrc/kernels/cuda/det_gemm_mma.cu"


def test_the_specs_own_params_give_the_generated_file_byte_for_byte():
    assert render_kernel(REPO, "det_gemm", "mma", "cuda", {}).encode() == MMA.read_bytes()
    assert render_kernel(REPO, "det_gemm", "mma", "cuda", {"block_m": 128, "stages": 3}).encode() == MMA.read_bytes()


def test_other_tile_params_change_the_tile_configuration_and_nothing_else():
    variant = render_kernel(REPO, "det_gemm", "mma", "cuda", {"block_n": 256, "warps_n": 4, "stages": 4, "blocks_per_sm": 1})
    changed = [line for line in difflib.unified_diff(MMA.read_text().splitlines(), variant.splitlines(), n=0, lineterm="") if line[:1] in "+-"]
    assert changed == [
        "--- ",
        "+++ ",
        "-using Tiles = MmaTiles<128, 128, 32, 2, 2, 3, 2, false, false>;",
        "+using Tiles = MmaTiles<128, 256, 32, 2, 4, 4, 1, false, false>;",
    ]


def test_another_ops_kernel_keeps_its_own_layout():
    """det_gemm_tn's mma with det_gemm's params: its operand layout stays its own."""
    variant = render_kernel(REPO, "det_gemm_tn", "mma", "cuda", {"block_k": 64})
    assert "using Tiles = MmaTiles<128, 128, 64, 2, 2, 3, 2, true, false>;" in variant


@pytest.mark.parametrize(
    ("op", "kernel", "platform", "params", "message"),
    [
        ("det_gemm", "mma", "cuda", {"block_x": 64}, "det_gemm's kernel mma has no param block_x (its params: block_m, block_n, block_k, warps_m, warps_n, stages, blocks_per_sm)"),
        ("det_gemm", "mma", "cuda", {"block_m": True}, "param block_m is int, not bool"),
        ("det_gemm", "mma", "cuda", {"block_m": 0}, "with block_m=0 is refused: kernels.mma.params.block_m: an integer param must be between 1 and 65536, got 0"),
        # The contracts, re-checked for the overridden spec: the generated tests could not cross such a tile.
        ("det_gemm", "mma", "cuda", {"block_m": 2048}, "kernels.mma.params.block_m: param block_m = 2048 is the kernel's tiles.rows, which may be at most 1024"),
        ("det_gemm", "mma", "cuda", {"stages": 17}, "param stages = 17 is the kernel's tiles.stages, which may be at most 16"),
        ("det_gemm", "mma", "rocm", {}, "det_gemm's kernel mma is not rendered for rocm: no package carries it there (it renders for cuda)"),
        ("det_gemm", "torch_matmul", "cuda", {}, "det_gemm's kernel torch_matmul is a Python reference (torch.matmul): it has no params to render"),
        ("det_gemm", "tiled", "cuda", {}, "det_gemm has no kernel tiled (its kernels: amx, mma, simt, torch_matmul, torch_reference, wgmma)"),
        ("det_gem", "mma", "cuda", {}, "no op det_gem in"),
        ("det_gemm", "mma", "metal", {}, "no platform metal (platforms: cpu, cuda, musa, rocm)"),
    ],
)
def test_a_bad_override_is_refused_with_a_clear_message(op, kernel, platform, params, message):
    with pytest.raises(VariantError) as refused:
        render_kernel(REPO, op, kernel, platform, params)
    assert message in str(refused.value)


def test_a_variant_writes_nothing(small_project: Project):
    def everything() -> dict[str, tuple[bytes, int]]:
        return {p.relative_to(small_project.root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(small_project.root.rglob("*")) if p.is_file()}

    before = everything()
    with pytest.raises(VariantError):
        render_kernel(small_project.root, "det_gemm", "mma", "cuda", {"block_m": 4096})
    assert "MmaTiles<64, 128," in render_kernel(small_project.root, "det_gemm", "mma", "cuda", {"block_m": 64})
    assert everything() == before


def test_every_op_survives_the_round_trip_a_variant_takes():
    """A variant validates the overridden op from its dump: every spec of the catalog must come back equal."""
    for op in load_catalog(REPO / "specs", REPO).ops:
        assert OpSpec.model_validate(op.model_dump()) == op, op.name
