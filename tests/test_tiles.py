"""A kernel's spec ``tiles`` say where its work changes shape; the generated tests take their sizes
from them.  Where a template fixes those extents itself (not from the kernel's params), the
rendered sources must say the same as the spec, or the tests would cross the wrong boundaries."""

from __future__ import annotations

import re

import pytest

from conftest import REPO
from generator.load import load_catalog
from generator.model import NativeKernel

CATALOG = load_catalog(REPO / "specs", REPO)
GENERATED = REPO / "generated" / "cuda" / "csrc" / "kernels"


def constant(path, name: str) -> int:
    found = re.findall(rf"constexpr int(?:64_t)? {name} = (\d+);", path.read_text())
    assert len(set(found)) == 1, f"{path.name}: {name} defined {found}"
    return int(found[0])


def tiles(op: str, kernel: str):
    spec = next(o for o in CATALOG.ops if o.name == op).kernels[kernel]
    assert isinstance(spec, NativeKernel) and spec.tiles is not None
    return spec.tiles


@pytest.mark.parametrize("op", ["det_gemm", "det_gemm_nt", "det_gemm_tn"])
def test_simt_tiles_are_the_templates_tiles(op: str):
    """Device: a kTileM x kTileN output tile, k-tiles of kTileK; host: work items of kStripsPerItem
    strips of kRowsAvx512 (AVX-512), kRowsAvx2 (AVX2) or kRowsGeneric (portable path) rows, K in
    blocks of kDepth."""
    device, host = GENERATED / "cuda" / f"{op}_simt.cu", GENERATED / "cpu" / f"{op}_simt.cpp"
    strips = constant(host, "kStripsPerItem")
    rows = {constant(device, "kTileM")} | {strips * constant(host, name) for name in ("kRowsAvx512", "kRowsAvx2", "kRowsGeneric")}
    assert set(tiles(op, "simt").rows) == rows
    assert set(tiles(op, "simt").reduction) == {constant(device, "kTileK"), constant(host, "kDepth")}


@pytest.mark.parametrize("op, kernel", [(o.name, k) for o in CATALOG.ops for k, spec in o.kernels.items() if o.reduction is not None and o.reduction.lanes is not None and isinstance(spec, NativeKernel)])
def test_row_kernels_reduce_in_steps_of_their_lanes(op: str, kernel: str):
    """lanes_tree kernels consume one element per lane per step, on the device and on the host; a
    device block that computes its terms a batch at a time (kBatch per thread, logp's) steps
    through kThreads x kBatch of them too."""
    device, host = GENERATED / "cuda" / f"{op}_{kernel}.cu", GENERATED / "cpu" / f"{op}_{kernel}.cpp"
    steps = {constant(device, "kLanes"), constant(host, "kLanes")}
    if "kBatch" in device.read_text():
        steps.add(constant(device, "kThreads") * constant(device, "kBatch"))
    assert len(steps) == len(tiles(op, kernel).reduction) and set(tiles(op, kernel).reduction) == steps


def test_embedding_backward_reads_ids_in_steps_of_its_tile():
    """The device kernel reads kIdsPerStep ids per step (the host has no steps: a counting sort)."""
    path = GENERATED / "cuda" / "embedding_backward_rows.cu"
    assert tiles("embedding_backward", "rows").reduction == (constant(path, "kIdsPerStep"),)
