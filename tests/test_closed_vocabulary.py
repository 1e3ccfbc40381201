"""What a spec turns into code, flags, imports or paths comes from a closed vocabulary
(generator/vocabulary.py), or from the project's own files: a platform spec chooses its vendor's
headers, names, flags and Python entry points among those listed; a reference kernel names one of
the package's references or of PyTorch's listed functions; templates are regular files inside the
project.  Anything else is refused at its spec line, with what was expected, and generated/ is
left as it was."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from conftest import Project, copy_project
from generator import model, vocabulary

CUDA = "specs/platforms/cuda.yaml"
CPU = "specs/platforms/cpu.yaml"
MUSA = "specs/platforms/musa.yaml"
OP = "specs/ops/det_gemm.yaml"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return copy_project(tmp_path_factory.mktemp("vocabulary") / "proj", ops=("det_gemm", "det_gemm_nt", "det_gemm_tn", "column_sum"))


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        (CPU, "  host_flags: [-O3, -std=c++17, -ffp-contract=off]", "  host_flags: [-O3, -o, /tmp/out]", "build.host_flags.1", "Unknown host compiler flag '-o'"),
        (CPU, "  host_flags: [-O3, -std=c++17, -ffp-contract=off]", "  host_flags: [-O3, -B.]", "build.host_flags.1", "Unknown host compiler flag '-B.'"),
        (CPU, "  host_flags: [-O3, -std=c++17, -ffp-contract=off]", "  host_flags: [-O3, '-Wl,-rpath,.']", "build.host_flags.1", "Unknown host compiler flag '-Wl,-rpath,.'"),
        (CUDA, "  device_flags: [-O3, -std=c++17, -fmad=false, -Xcompiler=-ffp-contract=off]", "  device_flags: [-O3, -specs=/tmp/evil]", "build.device_flags.1", "Unknown device compiler flag"),
        (CUDA, "  arch_env: TORCH_CUDA_ARCH_LIST", "  arch_env: LD_PRELOAD", "build.arch_env", "Unknown architecture variable 'LD_PRELOAD'. Expected one of PYTORCH_ROCM_ARCH"),
        (CUDA, "  available: torch.cuda.is_available", "  available: os.abort", "detection.available", "Unknown Python name 'os.abort'"),
        (CUDA, "  import_module: null", "  import_module: antigravity", "detection.import_module", "Unknown Python name 'antigravity'"),
        (CUDA, "  runtime: cuda_runtime.h", "  runtime: ../../etc/passwd.h", "headers.runtime", "Unknown vendor header '../../etc/passwd.h'"),
        (CUDA, "  includes: [ATen/cuda/CUDAContext.h, c10/cuda/CUDAGuard.h]", "  includes: [ATen/cuda/CUDAContext.h, ../secret.h]", "torch.includes.1", "Unknown torch header"),
        (CUDA, "  stream_getter: at::cuda::getCurrentCUDAStream", "  stream_getter: std::system", "torch.stream_getter", "Unknown torch binding 'std::system'"),
        (CUDA, "  get_last_error: cudaGetLastError", "  get_last_error: abort", "runtime.get_last_error", "Unknown runtime call or constant 'abort'"),
        (CUDA, "  half: __half", "  half: int", "types.half", "Unknown vendor type 'int'"),
        (CUDA, "  mul_rn: __fmul_rn", "  mul_rn: __fmaf_rn", "intrinsics.mul_rn", "Unknown intrinsic '__fmaf_rn'"),
        (CUDA, "  toolkit_home: torch.utils.cpp_extension.CUDA_HOME", "  toolkit_home: os.environ", "build.toolkit_home", "Unknown Python name 'os.environ'"),
        (MUSA, "  strip_flags: [-march=native]", "  strip_flags: [-O3]", "build.strip_flags.0", "Unknown flag to strip '-O3'"),
        (OP, "    python: torch.matmul", "    python: os.system", "kernels.torch_matmul.python", "Unknown reference callable os.system. Expected one of"),
        (OP, "    python: rlkernels._references.det_gemm", "    python: rlkernels._references.no_such_function", "kernels.torch_reference.python", "Unknown reference callable rlkernels._references.no_such_function"),
    ],
)
def test_what_becomes_code_or_flags_must_be_a_word_of_the_vocabulary(generated, capsys, file, old, new, field, message):
    generated.refuses_edit(capsys, file, old, new, message, field=f"{field}: ")


@pytest.mark.parametrize(
    "file, old, new, message",
    [
        (CUDA, "  half: __half\n  bfloat16: __nv_bfloat16", "  half: __nv_bfloat16\n  bfloat16: __half", "half is __nv_bfloat16, not a half type"),
        (CUDA, "  success: cudaSuccess\n  invalid_value: cudaErrorInvalidValue", "  success: cudaErrorInvalidValue\n  invalid_value: cudaSuccess",
         "success is cudaErrorInvalidValue, which is not what success names. Expected one of cudaSuccess, hipSuccess, musaSuccess"),
        (CUDA, "  success: cudaSuccess", "  success: hipSuccess", "the runtime's words are of one vendor, got several (cuda: invalid_value"),
        (CUDA, "  stream: cudaStream_t", "  stream: hipStream_t", "types.stream is hipStream_t, not of the runtime's vendor cuda"),
    ],
)
def test_a_word_of_the_vocabulary_in_another_field_is_refused(generated: Project, capsys: pytest.CaptureFixture[str], file: str, old: str, new: str, message: str):
    """The vocabulary is closed per field: a float16 type is not a bfloat16 one, success is not an
    error code, and a platform's runtime words and types are one vendor's (swapped, each would
    compile and reinterpret data or invert a launch check)."""
    generated.refuses_edit(capsys, file, old, new, message)


@pytest.mark.parametrize(
    "file, old, new, message",
    [
        (CPU, "  host_flags: [-O3, -std=c++17, -ffp-contract=off]", "  host_flags: [-O3, -std=c++17]", "build.host_flags lacks -ffp-contract=off"),
        (CUDA, "  device_flags: [-O3, -std=c++17, -fmad=false, -Xcompiler=-ffp-contract=off]", "  device_flags: [-O3, -std=c++17, -Xcompiler=-ffp-contract=off]",
         "build.device_flags lacks -fmad=false: without it nvcc may fuse"),
        (CUDA, "  device_flags: [-O3, -std=c++17, -fmad=false, -Xcompiler=-ffp-contract=off]", "  device_flags: [-O3, -std=c++17, -fmad=false]",
         "build.device_flags lacks -Xcompiler=-ffp-contract=off"),
        (MUSA, "  device_flags: [-O3, -std=c++17, -ffp-contract=off]", "  device_flags: [-O3, -std=c++17]", "build.device_flags lacks -ffp-contract=off: without it mcc"),
        (MUSA, "compiler: mcc", "compiler: clang", "Unknown device compiler clang. Expected one of hipcc, mcc, nvcc"),
    ],
)
def test_a_platform_without_contraction_off_is_refused(generated: Project, capsys: pytest.CaptureFixture[str], file: str, old: str, new: str, message: str):
    """The kernels' mul_rn and add_rn may be plain operators only because every build turns the
    compilers' contraction off: a platform whose flags would let them fuse is refused."""
    generated.refuses_edit(capsys, file, old, new, message)


def test_a_second_host_platform_is_refused(generated: Project, capsys: pytest.CaptureFixture[str]):
    """Every package carries the host's kernels: a second host would register two CPU kernels per op."""
    second = generated.root / "specs/platforms/zhost.yaml"
    second.write_text((generated.root / CPU).read_text().replace("name: cpu", "name: zhost").replace("order: 99", "order: 98"))
    for spec in (generated.root / "specs/ops").glob("*.yaml"):
        spec.write_text(spec.read_text().replace("  cpu: [", "  zhost: [simt]\n  cpu: [", 1))
    try:
        assert generated.run("check") == 2
        err = capsys.readouterr().err
        assert "specs/platforms/zhost.yaml:" in err and "kind: a second host platform (the first is cpu); a catalog has exactly one" in err, err
    finally:
        second.unlink()
        for spec in (generated.root / "specs/ops").glob("*.yaml"):
            spec.write_text(spec.read_text().replace("  zhost: [simt]\n", ""))


def _move_outside(path: Path, outside: Path) -> None:
    outside.parent.mkdir(parents=True, exist_ok=True)
    path.rename(outside)
    path.symlink_to(outside)


def test_a_kernel_template_linked_from_outside_the_project_is_refused(project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    before = project.snapshot()
    _move_outside(project.root / "templates/kernels/det_gemm_simt.j2", tmp_path / "elsewhere" / "det_gemm_simt.j2")
    assert project.run("generate", "--full") == 2
    err = capsys.readouterr().err
    assert "templates/kernels/det_gemm_simt.j2: a symbolic link to" in err and "templates must be regular files inside the project" in err, err
    assert "Traceback" not in err
    assert project.snapshot() == before


def test_a_templates_folder_linked_from_outside_the_project_is_refused(project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    before = project.snapshot()
    _move_outside(project.root / "templates", tmp_path / "elsewhere" / "templates")
    assert project.run("generate", "--full") == 2
    err = capsys.readouterr().err
    assert "a symbolic link to" in err and "templates must be regular files inside the project" in err, err
    assert project.snapshot() == before


def test_a_template_linked_inside_the_project_is_followed(project: Project):
    template = project.root / "templates/kernels/det_gemm_simt.j2"
    inside = project.root / "templates_shared" / "det_gemm_simt.j2"
    _move_outside(template, inside)  # "outside" the templates folder, inside the project
    assert project.run("generate", "--full") == 0
    assert project.run("check") == 0
    assert os.path.islink(template)


VOCABULARY_FIELDS: list[tuple[Any, frozenset[str]]] = [
    (model.VendorHeader, vocabulary.HEADERS),
    (model.TorchInclude, vocabulary.TORCH_INCLUDES),
    (model.VendorType, vocabulary.TYPES),
    (model.RuntimeName, vocabulary.RUNTIME_API),
    (model.TorchName, vocabulary.TORCH_NAMES),
    (model.ArchEnv, vocabulary.ARCH_ENVS),
    (model.HostFlag, vocabulary.HOST_FLAGS),
    (model.DeviceFlag, vocabulary.DEVICE_FLAGS),
    (model.PythonName, vocabulary.PYTHON),
]


@pytest.mark.parametrize("field, words", VOCABULARY_FIELDS, ids=["header", "torch-include", "type", "runtime", "torch-name", "arch-env", "host-flag", "device-flag", "python"])
@settings(max_examples=80, deadline=None)
@given(value=st.one_of(st.text(max_size=40), st.from_regex(r"-[A-Za-z0-9_=.,+:/-]{1,20}", fullmatch=True), st.from_regex(r"[a-z_][a-z0-9_.]{0,30}", fullmatch=True)))
def test_every_value_outside_a_vocabulary_is_refused(field: Any, words: frozenset[str], value: str):
    """Whatever a spec writes where a vocabulary word belongs is refused unless it is one of them."""
    adapter = TypeAdapter(field)
    if value in words:
        assert adapter.validate_python(value) == value
    else:
        with pytest.raises(ValidationError):
            adapter.validate_python(value)


def test_every_word_the_four_platforms_use_is_in_the_vocabulary():
    """The vocabulary is the platforms' own: none of their values is refused (they generate)."""
    from conftest import REPO
    from generator.load import load_catalog

    catalog = load_catalog(REPO / "specs", REPO)
    assert {p.name for p in catalog.platforms} == {"cpu", "cuda", "rocm", "musa"}


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=False, allow_infinity=False)))
def test_a_range_bound_becomes_a_cpp_literal_of_its_own_value(value: float):
    """A spec's number reaches C++ as a literal that reads back as the same value: a plain decimal
    in INT64_C(...) or a double's shortest repr; nothing else of the spec's text."""
    import re

    from generator.cabi import number_literal

    literal = number_literal(value)
    if isinstance(value, int):
        assert literal == "INT64_MIN" if value == -(2**63) else re.fullmatch(r"INT64_C\(-?[0-9]+\)", literal) and int(literal[8:-1]) == value
    else:
        assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?(e[-+][0-9]+)?", literal) and float(literal) == value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "1", None])
def test_a_cpp_literal_is_only_made_of_a_finite_number(value: Any):
    from generator.cabi import number_literal

    with pytest.raises((TypeError, ValueError)):
        number_literal(value)
