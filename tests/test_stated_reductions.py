"""A spec's reduction is a claim about the order its kernels add in, and each kernel template states
the reduction it renders (`reduces`, checked by kernels/_frame.j2): a spec whose reduction is not
that one -- another order, dimension, step or tree -- is refused at generation, naming the spec's
kernel, and generated/ is left as it was.  Otherwise the registry and the docs would state an order
that no kernel computes, and the contract tests would be drawn for it."""

from __future__ import annotations

import pytest

from conftest import Project, copy_project


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Project:
    ops = ("det_gemm", "det_gemm_nt", "det_gemm_tn", "det_gemm_ktree", "column_sum", "rms_norm", "rms_norm_backward")
    return copy_project(tmp_path_factory.mktemp("reductions") / "proj", ops=ops)


@pytest.mark.parametrize(
    "op, old, new, kernel, message",
    [
        ("column_sum", "order: ascending, accumulator: float32}", "order: lanes_tree, lanes: 4, accumulator: float32}", "columns",
         "the reduction {dim: M, order: ascending} that templates/kernels/column_sum_columns.j2 renders"),
        ("det_gemm", "order: ascending, accumulator: float32, step: fma}", "order: k_tree, leaf: 32, accumulator: float32, step: fma}", "amx",
         "the reduction {dim: K, order: ascending, step: fma} that templates/kernels/det_gemm_amx.j2 renders"),
        ("rms_norm", "order: lanes_tree, lanes: 256,", "order: ascending,", "rows", "that templates/kernels/rms_norm_rows.j2 renders"),
        ("det_gemm_ktree", "T: [bfloat16]", "T: [bfloat16, float32]", "tree", "bfloat16 operands (T: [bfloat16]): it rounds every leaf and node to bfloat16"),
    ],
)
def test_a_reduction_no_kernel_renders_is_refused(generated: Project, capsys: pytest.CaptureFixture[str], op: str, old: str, new: str, kernel: str, message: str):
    generated.refuses_edit(capsys, f"specs/ops/{op}.yaml", old, new, f": kernels.{kernel}.template: cannot render ", message)


def test_an_op_reduction_over_another_dimension_than_a_kernels_own_order_is_refused(generated: Project, capsys: pytest.CaptureFixture[str]):
    generated.refuses_edit(capsys, "specs/ops/det_gemm.yaml", "reduction: {dim: K,", "reduction: {dim: M,",
                           ": kernels.amx.reduction_for.bfloat16: ", "kernel amx reduces bfloat16 over K, but det_gemm reduces over M")


def test_a_kernel_order_by_dtype_its_template_does_not_render_is_refused(generated: Project, capsys: pytest.CaptureFixture[str]):
    generated.refuses_edit(capsys, "specs/ops/det_gemm_nt.yaml", "order: pair_chunks, chunk: 32,", "order: pair_chunks, chunk: 64,",
                           ": kernels.amx.template: cannot render ", "the orders by dtype", "templates/kernels/det_gemm_amx.j2 renders")


def test_a_kernel_with_its_own_order_cannot_claim_portable(generated: Project, capsys: pytest.CaptureFixture[str]):
    generated.refuses_edit(capsys, "specs/ops/det_gemm_tn.yaml", "    guarantees: [deterministic, batch_invariant]\n    doc: bfloat16 on AMX",
                           "    guarantees: [deterministic, batch_invariant, portable]\n    doc: bfloat16 on AMX",
                           ": kernels.amx.guarantees.2: ", "kernel amx declares portable, but reduces bfloat16 in its own order")


def test_every_reduction_of_the_catalog_is_one_its_kernels_render(generated: Project):
    """The real catalog generates: every op's reduction is the one its templates state."""
    assert generated.run("generate") == 0
