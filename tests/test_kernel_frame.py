"""Spec names reach generated C++ only through the generator (generator/cabi.py).

Every spec-derived identifier of the glue has a prefix per kind (arg_x, out_y, dim_K, attr_eps,
dtype_T), so a spec may name an argument `stream` or a dimension `NDEBUG`; kernel templates reach
spec names through the op's name maps, so renaming an elementwise op's tensors renames them
everywhere, and a template that needs a name the spec no longer declares is refused at the spec's
line, naming the template, the name and what the op declares, with generated/ left as it was.
The elementwise kernels' functors are a closed vocabulary: the files the project has.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, Project, copy_project
from generator.cabi import AbiNameError, NameMap

sys.path.insert(0, str(REPO / "tools"))


def _rename(project: Project, rel: str, renames: dict[str, str]) -> None:
    """Rename whole words in a spec, comments included."""
    path = project.root / rel
    text = path.read_text()
    for old, new in renames.items():
        text = re.sub(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])", new, text)
    path.write_text(text)


def _syntax_check(source: Path) -> None:
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found")
    # -DNDEBUG: a dimension named NDEBUG must not meet the macro.
    result = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", "-DNDEBUG", f"-I{source.parent}", str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_an_elementwise_ops_tensors_and_dims_may_take_any_name(tmp_path: Path) -> None:
    """silu's x renamed `run` (the kernel's own function), y `dtype_name` (a helper of the bindings)
    and R `NDEBUG` (a macro): the generated C++ names them arg_run, out_dtype_name and dim_NDEBUG
    everywhere, and the CPU kernel compiles with NDEBUG defined (bare, `run` would shadow the
    function its launcher calls, and NDEBUG would expand to 1)."""
    project = copy_project(tmp_path / "proj", with_generated=False, ops=("silu", "silu_backward"))
    _rename(project, "specs/ops/silu.yaml", {"x": "run", "y": "dtype_name", "R": "NDEBUG"})
    assert project.run("generate") == 0
    kernels = project.generated / "cpu" / "csrc" / "kernels" / "cpu"
    source = (kernels / "silu_elementwise.cpp").read_text()
    header = (kernels / "silu_elementwise.h").read_text()
    bindings = (project.generated / "cuda" / "csrc" / "bindings.cpp").read_text()
    signature = "const void* arg_run, void* out_dtype_name, Dtype dtype_T, int64_t dim_NDEBUG, int64_t dim_C, int64_t num_threads"
    assert signature in source and signature in header
    assert "run<T>(arg_run, out_dtype_name, dim_NDEBUG * dim_C, num_threads);" in source
    assert "at::Tensor silu_elementwise_cuda(const at::Tensor& arg_run) {" in bindings
    assert "const int64_t dim_NDEBUG = arg_run.size(0);" in bindings
    assert "at::Tensor out_dtype_name = at::empty({dim_NDEBUG, dim_C}, arg_run.options());" in bindings
    assert "rlk::cuda::silu_elementwise(arg_run.data_ptr(), out_dtype_name.data_ptr(), to_rlk_dtype(arg_run), dim_NDEBUG, dim_C, stream);" in bindings
    _syntax_check(kernels / "silu_elementwise.cpp")


def test_a_template_that_needs_a_name_the_spec_drops_is_refused_at_the_spec_line(small_project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """det_gemm's `a` renamed: its kernel templates name it (abi.arg.a), so the generator refuses,
    at the line of the kernel's template in the spec, naming the template and its line, the
    missing name and the op's arguments; nothing is written."""
    before = small_project.snapshot()
    _rename(small_project, "specs/ops/det_gemm.yaml", {"a": "lhs"})
    capsys.readouterr()
    assert small_project.run("generate") != 0
    err = capsys.readouterr().err
    lines = (small_project.root / "specs" / "ops" / "det_gemm.yaml").read_text().splitlines()
    match = re.search(
        r"specs/ops/det_gemm\.yaml:(\d+): kernels\.(\w+)\.template: cannot render \S+: "
        r"templates/kernels/(det_gemm_\w+\.j2):(\d+) names argument 'a', which op det_gemm does not declare \(its arguments: lhs, b\)"
        r", so the generated C\+\+ would not compile; nothing was written",
        err,
    )
    assert match, err
    line, kernel, template, template_line = int(match[1]), match[2], match[3], int(match[4])
    assert lines[line - 1].strip() == f"template: kernels/{template}", (lines[line - 1], kernel)
    assert "abi.arg.a" in (small_project.root / "templates" / "kernels" / template).read_text().splitlines()[template_line - 1]
    assert small_project.snapshot() == before


def test_a_name_map_has_no_attribute_a_spec_name_could_reach() -> None:
    names = NameMap("op", "argument", "arg_", ("items", "get", "keys"))
    assert (names.items, names["get"], names.keys) == ("arg_items", "arg_get", "arg_keys")
    assert list(names) == ["items", "get", "keys"] and "get" in names and "x" not in names
    with pytest.raises(AbiNameError, match=r"argument 'x', which op op does not declare \(its arguments: items, get, keys\)"):
        names.x  # noqa: B018


# ---------------------------------------------------------------------------- functors


def test_an_unknown_functor_is_refused_naming_the_ones_there_are(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "proj", with_generated=False, ops=("silu", "silu_backward"))
    line = project.edit("specs/ops/silu.yaml", "functor: silu\n", "functor: no_such_functor\n")
    assert project.run("generate") != 0
    err = capsys.readouterr().err
    expected = ", ".join(sorted(p.stem for p in (project.root / "templates/kernels/functors").glob("*.j2") if not p.stem.startswith("_")))
    assert "silu, silu_backward" in expected
    assert f"specs/ops/silu.yaml:{line}: kernels.elementwise.functor: Unknown functor no_such_functor. Expected one of {expected}" in err, err
    assert not project.generated.exists()


def test_an_op_the_functor_does_not_fit_is_refused_at_generation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A template's assumptions about its spec are require()s, refused when generating, naming the
    spec's kernel -- not an #error that only the compiler meets."""
    project = copy_project(tmp_path / "proj", with_generated=False, ops=("silu", "silu_backward"))
    output = "  - {name: y, dtype: T, shape: [R, C], doc: x * sigmoid(x) in x's dtype}\n"
    project.edit("specs/ops/silu.yaml", output, output + "  - {name: z, dtype: T, shape: [R, C], doc: another output}\n")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert ": kernels.elementwise.template: cannot render " in err, err
    assert "functor silu takes 1 inputs (x) and gives 1 outputs (y); op silu has 1 arguments and 2 outputs" in err, err
    assert not project.generated.exists()


def test_a_functor_file_linked_from_outside_the_project_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = copy_project(tmp_path / "proj", with_generated=False, ops=("silu", "silu_backward"))
    outside = tmp_path / "elsewhere.j2"
    shutil.copy(project.root / "templates" / "kernels" / "functors" / "silu.j2", outside)
    functor = project.root / "templates" / "kernels" / "functors" / "silu.j2"
    functor.unlink()
    os.symlink(outside, functor)
    line = project.edit("specs/ops/silu.yaml", "functor: silu\n", "functor: silu\n")
    assert project.run("generate") != 0
    err = capsys.readouterr().err
    assert f"specs/ops/silu.yaml:{line}: kernels.elementwise.functor: functor file templates/kernels/functors/silu.j2 is a symbolic link leading outside the project" in err, err
    # A link inside the project is a functor like any other.
    functor.unlink()
    os.symlink(project.root / "templates" / "kernels" / "functors" / "swiglu.j2", project.root / "templates" / "kernels" / "functors" / "gate.j2")
    shutil.copy(outside, functor)
    assert project.run("generate") == 0


def test_adding_an_elementwise_op_takes_its_spec_and_one_functor_file(tmp_path: Path) -> None:
    """A new op `square` (y = x * x): a spec and templates/kernels/functors/square.j2, nothing else."""
    project = copy_project(tmp_path / "proj", with_generated=False, ops=("silu", "silu_backward"))
    spec = (project.root / "specs" / "ops" / "silu.yaml").read_text()
    spec = spec.replace("name: silu\n", "name: square\n").replace("functor: silu\n", "functor: square\n")
    spec = spec.replace("python: rlkernels._references.silu", "python: torch.square")
    spec = re.sub(r"\nbackward:\n.*", "\n", spec, flags=re.DOTALL)
    (project.root / "specs" / "ops" / "square.yaml").write_text(spec)
    (project.root / "templates" / "kernels" / "functors" / "square.j2").write_text(
        '{% set inputs = ["x"] %}\n{% set outputs = ["y"] %}\n'
        "{% macro about() %}// y = x * x, rounded once in float32.{% endmacro %}\n"
        "{% macro helpers() %}{% endmacro %}\n"
        "{% macro element() %}y = mul_rn(x, x);{% endmacro %}\n"
    )
    assert project.run("generate") == 0
    source = project.generated / "cpu" / "csrc" / "kernels" / "cpu" / "square_elementwise.cpp"
    assert "RLK_ARITH void element(float x, float& y) {\n  y = mul_rn(x, x);\n}" in source.read_text()
    _syntax_check(source)
