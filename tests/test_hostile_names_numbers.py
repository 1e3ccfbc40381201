"""Names that clash with what generated code uses, numbers past what consumes them, text that hides
or breaks tables, and failures while rendering: each ends in exit 2 with `specs/…:LINE: field: message`,
no traceback, and generated/ left byte-identical."""

from __future__ import annotations

import pytest

from conftest import Project, copy_project
from generator import reserved

OP = "specs/ops/det_gemm.yaml"
NT = "specs/ops/det_gemm_nt.yaml"
ARG = "  - {name: a, dtype: T"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Project:
    return copy_project(tmp_path_factory.mktemp("hostile") / "proj", ops=("det_gemm", "det_gemm_nt", "det_gemm_tn", "column_sum", "logp", "logp_backward", "ratio_kl", "ratio_kl_backward", "rms_norm", "rms_norm_backward"))


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        (NT, "aliases: [det_linear]", "aliases: [det_linear, aten]", "aliases.1", "is already the package's module aten"),
        (NT, "aliases: [det_linear]", "aliases: [det_linear, select_backend]", "aliases.1", "is already the package's own select_backend"),
        (OP, ARG, "  - {name: int64_t, dtype: T", "args.0.name", "C/C++ type"),
        (OP, ARG, "  - {name: errno, dtype: T", "args.0.name", "C/C++ macro"),
        # torch's op objects answer these before an op or overload of the name: a kernel named op
        # would never run through its own overload
        (OP, ARG, "  - {name: overloads, dtype: T", "args.0.name", "reserved in C++, Python or generated code"),
        (OP, "name: det_gemm\n", "name: name\n", "name", "reserved in C++, Python or generated code"),
        (OP, ARG, "  - {name: stdin, dtype: T", "args.0.name", "C/C++ macro"),
        (OP, "  - {name: a, dtype: T, shape: [M, K]", "  - {name: a, dtype: T, shape: [EINTR, K]", "args.0.shape.0", "C/C++ macro"),
        (OP, "  - {name: a, dtype: T, shape: [M, K]", "  - {name: a, dtype: T, shape: [SIGINT, K]", "args.0.shape.0", "C/C++ macro"),
        (OP, "  - {name: a, dtype: T, shape: [M, K]", "  - {name: a, dtype: T, shape: [FILE, K]", "args.0.shape.0", "C/C++ type"),
    ],
)
def test_names_that_clash_with_generated_code_are_refused(generated, capsys, file, old, new, field, message):
    generated.refuses_edit(capsys, file, old, new, message, field=f"{field}: ", absent=("jinja",))


def test_an_op_and_kernel_whose_joined_name_is_a_macro_are_refused(generated, capsys):
    """Launchers, headers and sources are named {op}_{kernel}, and the bindings' functions
    {op}_{kernel}_{platform}: st + atime is <sys/stat.h>'s st_atime, which Python.h brings in."""
    spec = generated.root / "specs/ops/st.yaml"
    text = (generated.root / "specs/ops/column_sum.yaml").read_text()
    text = text.replace("name: column_sum", "name: st").replace("  columns:\n", "  atime:\n").replace("[columns]", "[atime]")
    before = generated.snapshot()
    spec.write_text(text)
    try:
        assert generated.run("generate") == 2
        err = capsys.readouterr().err
        line = text.splitlines().index("  atime:") + 1
        prefix = f"specs/ops/st.yaml:{line}: kernels.atime: "
        message = "op st kernel atime generates the name st_atime, which clashes with a C/C++ macro"
        assert any(l.startswith(prefix) and message in l for l in err.splitlines()), err
        assert generated.snapshot() == before
    finally:
        spec.unlink()


def test_the_reserved_lists_cover_every_namespace():
    assert {"lambda", "match"} <= set(reserved.names("python_keywords"))
    assert {"errno", "EINTR", "E2BIG", "SIGINT", "NULL", "EOF"} <= set(reserved.names("cpp_macros"))
    assert {"int64_t", "size_t", "FILE"} <= set(reserved.names("cpp_types"))
    assert "threadIdx" in reserved.names("device_builtins")


LOGP = "specs/ops/logp.yaml"
RMS = "specs/ops/rms_norm.yaml"
RKL = "specs/ops/ratio_kl.yaml"
IGNORE = "  - {name: ignore_index, type: int, default: -100"
EPS = "{name: eps, type: float, default: 1.0e-6"


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        (LOGP, IGNORE, "  - {name: ignore_index, type: int, default: 9223372036854775808", "attrs.0", "does not fit int64"),
        (LOGP, IGNORE, "  - {name: ignore_index, type: int, default: -9223372036854775809", "attrs.0", "does not fit int64"),
        (RMS, EPS, "{name: eps, type: float, default: 1.0e+39", "attrs.0", "overflows float32"),
        (RMS, EPS, "{name: eps, type: float, default: 1.0e-46", "attrs.0", "default 1e-46 is 0 in float32, which the kernels receive"),
        (OP, "block_k: 32,", "block_k: 0,", "kernels.mma.params.block_k", "must be between 1 and 65536, got 0"),
        (OP, "block_k: 32,", "block_k: 1000000,", "kernels.mma.params.block_k", "must be between 1 and 65536"),
        (OP, "block_m: 128, block_n: 128, block_k: 32,", "block_m: 4096, block_n: 128, block_k: 32,", "kernels.mma.params.block_m", "may be at most 1024"),
        (OP, "rows: [128, 96, 48, 24]", "rows: [4096, 96, 48, 24]", "kernels.simt.tiles.rows.0", "must be between 1 and 1024"),
        (OP, "    - {M: 33, K: 64, N: 40}", "    - {M: 65536, K: 65536, N: 40}", "tests.shapes.0", "a CPU test run can afford"),
        (RKL, "values: {low: 0, high: 2}", "values: {low: 3, high: 2}", "args.3.values", "must be below high"),
    ],
)
def test_numbers_past_their_consumers_bounds_are_refused(generated, capsys, file, old, new, field, message):
    generated.refuses_edit(capsys, file, old, new, message, field=f"{field}: ", absent=("jinja",))


SUMMARY = "summary: Deterministic batch-invariant matrix product C = A @ B"


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u2069", "\u200b", "\u2028", "\u200e", "\ufeff"])
def test_control_and_bidi_characters_in_text_are_refused(generated, capsys, char):
    generated.refuses_edit(capsys, OP, SUMMARY, f"summary: 'matrix {char}product'", "control, format or separator character", field="summary: ", absent=("jinja",))


def test_table_breakers_in_text_are_escaped(generated):
    original = (generated.root / OP).read_text()
    generated.edit(OP, SUMMARY, "summary: C = A | B <!-- x")
    try:
        assert generated.run("generate") == 0
        registry = (generated.generated / "REGISTRY.md").read_text()
        assert "C = A \\| B &lt;!-- x" in registry and "A | B" not in registry
    finally:
        (generated.root / OP).write_text(original)
        assert generated.run("generate") == 0


def test_a_kernel_template_that_does_not_exist_is_a_spec_error(generated, capsys):
    generated.refuses_edit(capsys, OP, "template: kernels/det_gemm_simt.j2", "template: kernels/nowhere.j2", "does not exist under templates/", field="kernels.simt.template: ", absent=("jinja",))


def test_an_empty_dtype_variable_is_refused(generated, capsys):
    text = (generated.root / OP).read_text()
    old = next(l for l in text.splitlines() if l.startswith("  T: "))
    generated.refuses_edit(capsys, OP, old, "  T: []", "at least 1 item", field="dtype_vars.T: ", absent=("jinja",))


def test_a_render_failure_is_reported_against_the_spec(generated, capsys):
    """A template that asks for what the spec does not give: the spec's kernel, not a Jinja error."""
    before = generated.snapshot()
    template = generated.root / "templates/kernels/det_gemm_simt.j2"
    original = template.read_text()
    template.write_text("{{ op.spec.no_such_field }}\n" + original)
    try:
        assert generated.run("generate") == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and "undefined" not in err.lower() and "jinja" not in err.lower()
        assert "specs/ops/det_gemm" in err and "kernels.simt.template: cannot render" in err, err
        assert generated.snapshot() == before
    finally:
        template.write_text(original)
