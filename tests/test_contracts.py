"""The determinism guard: no op is ever mapped to a backend that breaks its contract."""

from __future__ import annotations

import json

import pytest

from conftest import Project

OP = "specs/ops/det_gemm.yaml"
PLATFORMS = ["cpu", "cuda", "rocm", "musa"]


def backends_line(project: Project, platform: str) -> str:
    text = project.spec("ops/det_gemm.yaml").read_text()
    return next(line for line in text.splitlines() if line.startswith(f"  {platform}: ["))


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("position", ["only", "fallback"])
def test_refuses_nondeterministic_backend_and_writes_nothing(project: Project, capsys, platform, position):
    before = project.snapshot()
    old = backends_line(project, platform)
    listed = "[torch_matmul]" if position == "only" else old.split(": ", 1)[1].replace("]", ", torch_matmul]")
    line = project.edit(OP, old, f"  {platform}: {listed}")
    index = 0 if position == "only" else listed.count(",")

    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    expected = f"{OP}:{line}: backends.{platform}.{index}: refusing to map op det_gemm on platform {platform} to backend torch_matmul"
    assert expected in err, err
    assert "lacks the guarantee 'deterministic'" in err
    assert "lacks the guarantee 'batch_invariant'" in err
    assert "contract violation" in err
    assert project.snapshot() == before, "a refused generate must not create, change or delete any file"


def test_refusal_is_general_for_every_guarantee(project: Project, capsys):
    """Requiring 'portable' refuses a kernel that lacks it; nothing is special about det_gemm or determinism."""
    text = project.spec("ops/det_gemm.yaml").read_text()
    project.spec("ops/det_gemm.yaml").write_text(text.replace("guarantees: [deterministic, batch_invariant, portable]", "guarantees: [deterministic, batch_invariant]"))
    project.edit(OP, "requires: [deterministic, batch_invariant]", "requires: [deterministic, batch_invariant, portable]")
    assert project.run("check") == 2
    err = capsys.readouterr().err
    assert "lacks the guarantee 'portable'" in err


def test_native_kernel_restricted_to_other_platforms_is_refused(project: Project, capsys):
    project.edit(OP, "    template: kernels/det_gemm_simt.j2", "    template: kernels/det_gemm_simt.j2\n    platforms: [cuda, cpu]")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "backends.rocm.0: kernel simt cannot run on rocm" in err
    assert "backends.musa.0: kernel simt cannot run on musa" in err


def test_missing_platform_entry_is_an_error(project: Project, capsys):
    project.edit(OP, "  musa: [simt]\n", "")
    assert project.run("generate") == 2
    assert "backends: no entry for platform musa; list its backends, or [] to mark the op unsupported there" in capsys.readouterr().err


def test_empty_list_means_explicitly_unsupported(project: Project):
    project.edit(OP, "  musa: [simt]", "  musa: []")
    assert project.run("generate") == 0
    musa = project.generated / "musa"
    assert not (musa / "csrc/kernels/musa/det_gemm_simt.mu").exists(), "no kernel is rendered where the op is unsupported"
    bindings = (musa / "csrc/bindings.cpp").read_text()
    assert 'det_gemm_unsupported_musa' in bindings
    assert "rlkernels.det_gemm is not supported on musa: the spec maps it to no native backend there" in bindings
    build = json.loads((musa / "rlkernels/_build.json").read_text())
    assert build["backends"]["det_gemm"]["musa"] == []
    assert "| `det_gemm` |" in (project.generated / "REGISTRY.md").read_text()
    assert "unsupported" in (project.generated / "REGISTRY.md").read_text()


def test_runtime_refuses_unsupported_platform_without_fallback(project: Project, tmp_path, monkeypatch):
    """The generated runtime raises a clear error for an op mapped to no backend; it never falls back."""
    import importlib
    import sys

    project.edit(OP, "  cpu: [simt, amx]", "  cpu: []")
    spec = project.root / OP  # and without amx, a CPU-only kernel, which a platform without backends cannot keep
    text = spec.read_text()
    spec.write_text(text[: text.index("  amx:\n")] + text[text.index("  simt:\n") :])
    project.edit(OP, "    guarantees: [deterministic, batch_invariant, portable]\n    doc: Shared", "    guarantees: [deterministic, batch_invariant, portable]\n    platforms: [cuda, rocm, musa]\n    doc: Shared")
    assert project.run("generate") == 0
    torch = pytest.importorskip("torch", reason="the generated runtime needs torch")
    monkeypatch.syspath_prepend(str(project.generated / "cpu"))
    for name in [m for m in sys.modules if m == "rlkernels" or m.startswith("rlkernels.")]:
        monkeypatch.delitem(sys.modules, name)
    rlkernels = importlib.import_module("rlkernels")
    assert rlkernels.NATIVE_ERROR is not None  # not built: only the Python side is exercised
    with pytest.raises(rlkernels.UnsupportedError, match="det_gemm is not supported on cpu: the spec maps it to no backend"):
        rlkernels.det_gemm(torch.ones(2, 2), torch.ones(2, 2))
    with pytest.raises(rlkernels.UnsupportedError, match="carries kernels for cpu, not for cuda tensors"):
        rlkernels.select_backend("det_gemm", "cuda")


def test_batch_invariance_without_a_batch_dimension_is_refused(bare_project, capsys):
    """A guarantee nothing defines cannot be proved or tested: batch_invariant needs a batch axis on an output."""
    line = bare_project.edit("specs/ops/grpo_loss.yaml", "requires: [deterministic]", "requires: [deterministic, batch_invariant]")
    assert bare_project.run("generate") == 2
    err = capsys.readouterr().err
    assert f"specs/ops/grpo_loss.yaml:{line}: requires.1: batch_invariant is required, but the op names no batch dimension (tests.batch_dim)" in err, err


def test_batch_invariance_needs_an_output_with_the_batch_dimension(bare_project, capsys):
    # T is a dimension of grpo_loss's inputs, but its outputs (a scalar loss, [G, S] advantages) have none.
    bare_project.edit("specs/ops/grpo_loss.yaml", "requires: [deterministic]", "requires: [deterministic, batch_invariant]")
    bare_project.edit("specs/ops/grpo_loss.yaml", "  batch_dim: null", "  batch_dim: T")
    assert bare_project.run("generate") == 2
    err = capsys.readouterr().err
    assert "requires.1: batch_invariant is required, but no output has the batch dimension T, so nothing defines or tests it" in err, err


def test_reference_backend_declaring_guarantees_is_refused(project: Project, capsys):
    """A Python backend cannot buy its way past the guard by declaring guarantees: it keeps none."""
    before = project.snapshot()
    line = project.edit(OP, "    python: torch.matmul\n    guarantees: []", "    python: torch.matmul\n    guarantees: [deterministic, batch_invariant]")
    old = backends_line(project, "musa")
    backend_line = project.edit(OP, old, "  musa: [torch_matmul]")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{OP}:{line + 1}: kernels.torch_matmul.guarantees: kernel torch_matmul is a Python reference (torch.matmul): it cannot carry a guarantee" in err, err
    expected = f"{OP}:{backend_line}: backends.musa.0: refusing to map op det_gemm on platform musa to backend torch_matmul: it lacks the guarantee 'deterministic'"
    assert expected in err, err
    assert "torch_matmul guarantees: none: a Python reference (torch.matmul) keeps none, whatever it declares)" in err
    assert project.snapshot() == before


def test_reference_kernel_may_not_declare_a_guarantee_even_unmapped(project: Project, capsys):
    line = project.edit(OP, "    python: torch.matmul\n    guarantees: []", "    python: torch.matmul\n    guarantees: [deterministic]")
    assert project.run("check") == 2
    assert f"{OP}:{line + 1}: kernels.torch_matmul.guarantees: kernel torch_matmul is a Python reference" in capsys.readouterr().err


def test_batch_invariant_kernel_without_tiles_is_refused(project: Project, capsys):
    """The generated tests take their batch sizes from tiles.rows: a claim without it could not be tested."""
    line = project.edit(OP, "    tiles: {rows: [128, 96, 48, 24], reduction: [8, 256]}\n", "")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "kernels.simt.guarantees.1: kernel simt claims batch_invariant but declares no tiles.rows" in err, err
    assert "kernels.simt: kernel simt reduces over K and claims batch_invariant, deterministic, portable, but declares no tiles.reduction" in err, err
    assert f"{OP}:" in err and line > 0


def test_tile_naming_a_missing_param_is_refused(project: Project, capsys):
    # mma's tiles (wgmma's read the same, followed by its archs)
    mma = "tiles: {rows: [block_m], reduction: [block_k], stages: stages}\n    platforms: [cuda]\n    support_headers"
    project.edit(OP, mma, mma.replace("[block_m]", "[block_rows]"))
    assert project.run("check") == 2
    err = capsys.readouterr().err
    assert "kernels.mma.tiles.rows.0: Unknown integer param block_rows. Expected one of block_k, block_m, block_n, blocks_per_sm, stages, warps_m, warps_n" in err, err


def test_tiles_without_a_batch_dimension_are_refused(project: Project, capsys):
    project.edit("specs/ops/pack.yaml", "    params: {scatter: false}", "    params: {scatter: false}\n    tiles: {rows: [1]}")
    assert project.run("check") == 2
    assert "kernels.rows.tiles.rows: tiles.rows means nothing for pack: no output has a batch dimension" in capsys.readouterr().err


def test_kernel_tests_cross_each_tile(project: Project):
    """The generated tests' sizes come from the kernel's tiles: around each row tile, past two of them, and a
    reduction through more than stages + 1 steps with a ragged tail."""
    from generator.load import load_catalog

    catalog = load_catalog(project.root / "specs", project.root)
    op = catalog.view("det_gemm")
    mma = op.kernel_sizes("cuda")["mma"]
    assert mma.batch_sizes == (1, 127, 128, 129, 259)
    assert mma.chunks == (127, 129) and mma.pad_by == 129
    assert mma.extents == {"K": 5 * 32 + 17}  # stages 3: five k-blocks of 32, then a tail of 17
    assert op.kernel_sizes("cpu")["simt"].batch_sizes[-1] == 2 * 128 + 3  # past two of the device's 128-row tiles
    ktree = catalog.view("det_gemm_ktree")
    # K is a multiple of the 32-wide leaf: three host k-blocks of 256 and a tail of 160, five leaves
    assert ktree.kernel_sizes("cpu")["tree"].extents == {"K": 3 * 256 + 160}
