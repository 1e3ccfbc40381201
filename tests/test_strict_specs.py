"""A value in a spec means what it reads as, or it is refused: no lax coercion ("no" for false, 7.0
for 7, true for 1.0), no YAML 1.1 reading that changes a number (1:40 for 100, 017 for 15) or a
boolean (yes, on), no NaN or infinity, numbers within what consumes them; and a backward that does
what it says (no step calling its own op, each gradient given once, arguments and results that fit
the step op).  Each refusal names file, line and field and leaves generated/ as it was."""

from __future__ import annotations

import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic_core import core_schema

from conftest import Project, copy_project
from generator import model

OP = "specs/ops/det_gemm.yaml"
LOGP = "specs/ops/logp.yaml"
ATTN = "specs/ops/attention.yaml"
NT = "specs/ops/det_gemm_nt.yaml"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Project:
    ops = ("det_gemm", "det_gemm_nt", "det_gemm_tn", "column_sum", "logp", "logp_backward", "attention", "attention_backward")
    return copy_project(tmp_path_factory.mktemp("strict") / "proj", ops=ops)


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        (NT, "  - {name: bias, dtype: T, shape: [N], optional: true", '  - {name: bias, dtype: T, shape: [N], optional: "no"', "args.2.optional", "valid boolean"),
        (OP, "    - {M: 33, K: 64, N: 40}", "    - {M: 33.0, K: 64, N: 40}", "tests.shapes.0.M", "valid integer"),
        (OP, "    - {M: 33, K: 64, N: 40}", "    - {M: 1:40, K: 64, N: 40}", "tests.shapes.0.M", "reads as a int in YAML 1.1"),
        (OP, "    - {M: 33, K: 64, N: 40}", "    - {M: 033, K: 64, N: 40}", "tests.shapes.0.M", "reads as a int in YAML 1.1"),
        (OP, "    - {M: 33, K: 64, N: 40}", "    - {M: 0x21, K: 64, N: 40}", "tests.shapes.0.M", "reads as a int in YAML 1.1"),
        (NT, "  - {name: bias, dtype: T, shape: [N], optional: true", "  - {name: bias, dtype: T, shape: [N], optional: yes", "args.2.optional", "reads as a bool in YAML 1.1"),
        (LOGP, "values: {low: 0, high: V, include: [-100, -1, 1000000], every: 5}", "values: {low: 0, high: V, include: [-100, -1, 1000000], every: true}", "args.1.values.every", "valid integer"),
        (ATTN, "  - {window: 70}", "  - {window: .nan}", "tests.variants.0.window", "reads as a float in YAML 1.1"),
        (ATTN, "  - {window: 70}", "  - {window: 1180591620717411303424}", "", "tests.variants[0]: window = 1180591620717411303424 does not fit int64"),
    ],
)
def test_lax_values_are_refused(generated, capsys, file, old, new, field, message):
    generated.refuses_edit(capsys, file, old, new, message, field=field or None)


def test_a_tolerance_of_true_is_refused(project, capsys):
    project.refuses_edit(capsys, "specs/package.yaml", "float32: {atol: 1.0e-5, rtol: 1.0e-5}", "float32: {atol: true, rtol: 1.0e-5}", "valid number", field="tolerances.elementwise.float32.atol")


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        (OP, "  - {op: det_gemm_nt,", "  - {op: det_gemm,", "backward.0.op", "calls det_gemm itself"),
        (OP, 'args: ["grad(c)", b], gives: [a]', 'args: [b, "grad(c)"], gives: [a]', "backward.0.gives.0", "has shape [K, M], not a's [M, K]"),
        (OP, 'args: ["grad(c)", b], gives: [a]', 'args: ["grad(c)", a], gives: [a]', "backward.0.args.1", "(arguments swapped?)"),
        (OP, 'args: [a, "grad(c)"], gives: [b]', 'args: [a, "grad(c)"], gives: [a]', "backward.1.gives.0", "given by step 0 already"),
    ],
)
def test_a_backward_that_does_not_fit_is_refused(generated, capsys, file, old, new, field, message):
    generated.refuses_edit(capsys, file, old, new, message, field=field or None)


@pytest.fixture(scope="module")
def roles(tmp_path_factory) -> Project:
    """Ops whose arguments share a dtype and a shape with others, and test values of every kind of dtype."""
    ops = ("attention", "attention_backward", "paged_attention", "gelu_tanh", "gelu_tanh_backward", "ratio_kl", "ratio_kl_backward", "rms_norm", "rms_norm_backward")
    return copy_project(tmp_path_factory.mktemp("roles") / "proj", ops=ops)


GELU = "specs/ops/gelu_tanh.yaml"
GELU_STEP = '  - {op: gelu_tanh_backward, args: ["grad(y)", x], gives: [x]}'
ATTN_STEP = '  - {op: attention_backward, args: ["grad(o)", q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k], gives: [q, k, v]}'


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        # (grad_y, x) given [x, grad(y)]: the same dtype and shape, the roles swapped.
        (GELU, GELU_STEP, GELU_STEP.replace('["grad(y)", x]', '[x, "grad(y)"]'), "backward.0.args.0", "its grad_y, takes an incoming gradient, and x is a forward tensor"),
        (GELU, GELU_STEP, GELU_STEP.replace('["grad(y)", x]', '[x, "grad(y)"]'), "backward.0.args.1", "its x, takes a forward tensor; grad(y) goes to its parameter grad_y"),
        (ATTN, ATTN_STEP, ATTN_STEP.replace('["grad(o)", q, k, v, o,', '[o, q, k, v, "grad(o)",'), "backward.0.args.0", "its grad_o, takes an incoming gradient, and o is a forward tensor"),
        # k and v: one dtype, one shape [TK, HK, D].
        (ATTN, ATTN_STEP, ATTN_STEP.replace("q, k, v, o", "q, v, k, o"), "backward.0.args.2", "its k, takes a forward tensor of another name; v goes to its parameter v"),
        (ATTN, ATTN_STEP, ATTN_STEP.replace("q, k, v, o", "o, k, v, q"), "backward.0.args.1", "its q, takes a forward tensor of another name; o goes to its parameter o"),
    ],
    ids=["forward-at-gradient", "gradient-at-forward", "output-at-gradient", "same-shape-swapped", "output-at-input"],
)
def test_a_backward_step_argument_in_another_role_is_refused(roles, capsys, file, old, new, field, message):
    roles.refuses_edit(capsys, file, old, new, message, field=field or None)


PAGED = "specs/ops/paged_attention.yaml"
TABLE_VALUES = "values: {low: 0, high: NB, include: [0, -1, 1000000], every: 50}"
MASK = "  - {name: mask, dtype: bool, shape: [B, T], values: {low: 0, high: 2}, doc: true for tokens that count}"
RSTD = "  - {name: rstd, dtype: float32, shape: [T], doc: rstd returned by the forward pass}"
GELU_X = "  - {name: x, dtype: T, shape: [R, C], doc: input}"


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        # int32 would wrap 2^31 to -2^31: the tests would plant another id than the spec says.
        (PAGED, TABLE_VALUES, TABLE_VALUES.replace("1000000", "2147483648"), "args.3.values.include.2", "include value 2147483648 is not an integer that int32 holds exactly: argument block_table stores only [-2147483648, 2147483647]"),
        ("specs/ops/ratio_kl.yaml", MASK, MASK.replace("high: 2}", "high: 3}"), "args.3.values.high", "high - 1 (the greatest value of [low, high)) 2 is not an integer that bool holds exactly"),
        ("specs/ops/ratio_kl.yaml", MASK, MASK.replace("high: 2}", "high: 2, include: [-1]}"), "args.3.values.include.0", "include value -1 is not an integer that bool holds exactly"),
        ("specs/ops/ratio_kl.yaml", MASK, MASK.replace("low: 0,", "low: -1,"), "args.3.values.low", "low -1 is not an integer that bool holds exactly"),
        # A float argument stores the integers too: 2^24 + 1 rounds in float32, 257 in bfloat16.
        ("specs/ops/rms_norm_backward.yaml", RSTD, RSTD.replace("shape: [T],", "shape: [T], values: {low: 0, high: 16777218},"), "args.3.values.high", "16777217 is not an integer that float32 holds exactly"),
        (GELU, GELU_X, GELU_X.replace("shape: [R, C],", "shape: [R, C], values: {low: 0, high: 4, include: [257]},"), "args.0.values.include.0", "include value 257 is not an integer that bfloat16 (a dtype of T) holds exactly: argument x stores only [-256, 256]"),
    ],
    ids=["int32-include", "bool-high", "bool-include", "bool-low", "float32-high", "bfloat16-of-a-variable"],
)
def test_test_values_outside_what_the_dtype_holds_are_refused(roles, capsys, file, old, new, field, message):
    roles.refuses_edit(capsys, file, old, new, message, field=field or None)


def test_test_values_a_dtype_holds_are_accepted(roles):
    """The edges themselves: int32's least and greatest, a bool's 0 and 1, bfloat16's 256."""
    edits = [
        (PAGED, TABLE_VALUES, TABLE_VALUES.replace("include: [0, -1, 1000000]", "include: [0, -2147483648, 2147483647]")),
        (GELU, GELU_X, GELU_X.replace("shape: [R, C],", "shape: [R, C], values: {low: -256, high: 257, include: [256]},")),
    ]
    originals = {file: (roles.root / file).read_text() for file, _, _ in edits}
    try:
        for file, old, new in edits:
            roles.edit(file, old, new)
        assert roles.run("check") in (0, 1)  # checked (1: generated/ differs), not refused (2)
    finally:
        for file, text in originals.items():
            (roles.root / file).write_text(text)


def _lax_fields(model_type: type[BaseModel], seen: set[type[BaseModel]]) -> list[str]:
    """The int, float and bool fields (anywhere below ``model_type``) whose validation is not strict."""
    if model_type in seen:
        return []
    seen.add(model_type)
    found: list[str] = []

    def walk(schema: typing.Any, where: str) -> None:
        if isinstance(schema, dict):
            if schema.get("type") in ("int", "float", "bool") and not schema.get("strict"):
                found.append(where)
            for value in schema.values():
                walk(value, where)
        elif isinstance(schema, list):
            for item in schema:
                walk(item, where)

    walk(model_type.__pydantic_core_schema__, model_type.__name__)
    return found


@pytest.mark.parametrize("spec_model", [model.PackageSpec, model.PlatformSpec, model.OpSpec])
def test_every_number_and_boolean_of_the_spec_models_is_strict(spec_model):
    """The root cause, not the cases: no int, float or bool anywhere in the models is validated laxly."""
    assert _lax_fields(spec_model, set()) == []
    assert core_schema  # the schemas walked are pydantic-core's


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.text(min_size=1, max_size=6), st.booleans(), st.floats(allow_nan=True, allow_infinity=True)))
def test_a_test_shape_size_that_is_not_an_int_is_refused(value):
    """Whatever else stands where a size belongs -- text, a boolean, a float (even a whole one) -- is refused."""
    from pydantic import TypeAdapter, ValidationError

    sizes = TypeAdapter(model.TestPlan)
    with pytest.raises(ValidationError):
        sizes.validate_python({"shapes": [{"M": value, "K": 4}]})


SCALE = '  - {name: scale, type: float, default: 0.0, doc: "multiplies q . k; 0 means 1/sqrt(D)"}'
WINDOW = "  - {name: window, type: int, default: -1, doc:"
CAUSAL = "  - {name: causal, type: bool, default: true, doc:"


@pytest.mark.parametrize(
    "old, new, field, message",
    [
        (SCALE, SCALE.replace("default: 0.0,", "default: 0.0, range: {above: 0.0},"), "attrs.0", "default 0.0 is outside the attribute's range (> 0.0)"),
        (SCALE, SCALE.replace("default: 0.0,", "default: 0.0, range: {above: -1.0, at_least: 0.0},"), "attrs.0.range", "give one lower bound"),
        (SCALE, SCALE.replace("default: 0.0,", "default: 0.0, range: {at_most: 1.0e+39},"), "attrs.0", "range bound 1e+39 overflows float32"),
        (SCALE, SCALE.replace("default: 0.0,", "default: 0.0, range: {at_most: .inf},"), "attrs.0.range.at_most", "write a finite decimal number"),
        (SCALE, SCALE.replace("default: 0.0,", "default: 0.0, range: {},"), "attrs.0.range", "give at least one bound"),
        (WINDOW, WINDOW.replace("default: -1,", "default: -1, range: {at_least: -1.5},"), "attrs.2", "range bound -1.5 of an int attribute is not an int"),
        (CAUSAL, CAUSAL.replace("default: true,", "default: true, range: {at_least: 0},"), "attrs.1", "a bool attribute has no range"),
    ],
)
def test_an_attribute_range_that_does_not_hold_is_refused(generated, capsys, old, new, field, message):
    generated.refuses_edit(capsys, ATTN, old, new, message, field=field or None)


@pytest.mark.parametrize("plus", [64, -3, 0])
def test_a_derived_dimension_the_kernel_does_not_write_is_refused(tmp_path, capsys, plus: int):
    """pack's kernels write B + 1 offsets: a spec deriving cu_seqlens' size otherwise (B + 64 would
    leave 63 entries unwritten, B - 3 would be written past its end) is refused by the template's
    own requirement, naming the kernel, the template line and what it implements."""
    project = copy_project(tmp_path / "proj", ops=("pack", "unpack"))
    before = project.snapshot()
    project.edit("specs/ops/pack.yaml", "B1: {dim: B, plus: 1}", f"B1: {{dim: B, plus: {plus}}}")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = next(n for n, text in enumerate((project.root / "specs/ops/pack.yaml").read_text().splitlines(), 1) if text.strip().startswith("template: kernels/pack_rows.j2"))
    assert f"specs/ops/pack.yaml:{line}: kernels.rows.template: cannot render" in err
    assert "templates/kernels/pack_rows.j2:" in err and "implements only offsets of one entry more than x's first dimension, derived_dims: {B1: {dim: B, plus: 1}}" in err
    assert project.snapshot() == before


def test_offsets_of_another_dtype_than_the_kernel_writes_are_refused(tmp_path, capsys):
    """pack's kernels write int64 offsets: an int32 cu_seqlens (half the bytes the kernel writes)
    is refused by the template's requirement, nothing written."""
    project = copy_project(tmp_path / "proj", ops=("pack", "unpack"))
    before = project.snapshot()
    project.edit("specs/ops/pack.yaml", "{name: cu_seqlens, dtype: int64,", "{name: cu_seqlens, dtype: int32,")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "implements only int64 offsets (cu_seqlens: dtype: int64)" in err
    assert project.snapshot() == before
