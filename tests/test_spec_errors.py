"""Bad specs fail with `file:line: field.path: message`, exit code 2 and no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, Project

OP = "specs/ops/det_gemm.yaml"
CUDA = "specs/platforms/cuda.yaml"
NT = "specs/ops/det_gemm_nt.yaml"
KTREE = "specs/ops/det_gemm_ktree.yaml"


def errors_of(project: Project, capsys) -> str:
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "file, old, new, field, message",
    [
        (OP, "tolerance: reduction", "tolerance: reduction\ncolour: red", "colour", "unknown key 'colour'; expected one of name, summary"),
        (OP, "  - {name: b, dtype: T", "  - {name: b, dtype: T, layout: row", "args.1.layout", "unknown key 'layout'"),
        (OP, "tolerance: reduction", "tolerance: [reduction]", "tolerance", "Input should be a valid string"),
        (OP, "  - {name: a, dtype: T", '  - {name: "a); system(\\"rm -rf /\\")", dtype: T', "args.0.name", "is not a valid name"),
        (OP, "  - {name: a, dtype: T", "  - {name: class, dtype: T", "args.0.name", "reserved in C++"),
        (OP, "requires: [deterministic, batch_invariant]", "requires: [deterministic, fast]", "requires.1", "Input should be 'deterministic', 'batch_invariant', 'portable' or 'layout_invariant'"),
        (OP, "  musa: [simt]", "  musa: [simt]\n  metal: [simt]", "backends.metal", "Unknown platform metal. Expected one of cpu, cuda, musa, rocm"),
        (OP, "  cuda: [wgmma, mma, simt]", "  cuda: [tiled]", "backends.cuda.0", "Unknown backend tiled. Expected one of amx, mma, simt, torch_matmul, torch_reference, wgmma"),
        (OP, "  cuda: [wgmma, mma, simt]", "  cuda: [simt, simt]", "backends.cuda.1", "backend simt is listed twice for cuda"),
        # A kernel's archs: one arch-specific target, which every platform running it builds and names a macro for.
        (OP, '    archs: ["9.0a"]', '    archs: ["9.0a", "10.0a"]', "kernels.wgmma.archs", "at most 1 item"),
        (OP, '    archs: ["9.0a"]', '    archs: ["sm_90a"]', "kernels.wgmma.archs.0", "is not a valid arch list entry"),
        (OP, '    archs: ["9.0a"]', '    archs: ["10.0a"]', "kernels.wgmma.archs.0", "kernel wgmma needs arch 10.0a, which platform cuda does not build (build.archs: 8.0, 9.0a, 10.0, 12.0+PTX)"),
        (CUDA, '  arch_macros: {"9.0a": __CUDA_ARCH_FEAT_SM90_ALL}', '  arch_macros: {"9.0a": "defined(X) || 1"}', "build.arch_macros.'9.0a'", "Unknown architecture macro 'defined(X) || 1'. Expected one of"),

        (OP, "tolerance: reduction", "tolerance: exact", "tolerance", "Unknown tolerance class exact. Expected one of elementwise, logprob, reduction"),
        (OP, "autocast: lower_precision", "autocast: bfloat16", "autocast", "Input should be 'lower_precision', 'float32' or 'none'"),
        (OP, "autocast: lower_precision", "autocast: [float32]", "autocast", "Input should be 'lower_precision', 'float32' or 'none'"),
        ("specs/ops/det_gemm_ktree.yaml", "requires: [deterministic, batch_invariant, layout_invariant]", "requires: [deterministic, batch_invariant, layout_invariant]\nautocast: lower_precision", "autocast", "autocast: lower_precision casts argument a to float16, which its dtype variable T (bfloat16) does not allow"),
        # layout_invariant is defined on a k_tree reduction alone: elsewhere it is refused where it is declared.
        (OP, "requires: [deterministic, batch_invariant]", "requires: [deterministic, batch_invariant, layout_invariant]", "requires.2", "layout_invariant is required, but det_gemm reduces over K in order ascending; only a k_tree reduction's parts combine into the whole"),
        (OP, "    guarantees: [deterministic, batch_invariant, portable]", "    guarantees: [deterministic, batch_invariant, portable, layout_invariant]", "kernels.simt.guarantees.3", "kernel simt declares layout_invariant, but det_gemm reduces over K in order ascending"),
        ("specs/ops/swiglu.yaml", "requires: [deterministic, batch_invariant, portable]", "requires: [deterministic, batch_invariant, portable, layout_invariant]", "requires.3", "layout_invariant is required, but swiglu declares no reduction; only a k_tree reduction's parts combine into the whole"),
        (OP, "name: det_gemm", "name: det_gemm2", "name", "must match the file name"),
        # A reduction's step and the reduction inside it.
        (OP, "order: ascending, accumulator: float32, step: fma}", "order: ascending, accumulator: float32, step: fused}", "reduction.step", "Input should be 'add' or 'fma'"),
        (OP, "order: ascending, accumulator: float32, step: fma}", "order: ascending, accumulator: float32, step: fma, inner: {dim: K, order: ascending, accumulator: float32}}", "reduction", "inner reduces over K, the dimension of the reduction it computes terms for"),
        (OP, "order: ascending, accumulator: float32, step: fma}", "order: ascending, accumulator: float32, step: fma, inner: {dim: H, order: ascending, accumulator: float32}}", "", "reduction over H: no argument has that dimension"),
        (OP, "order: ascending, accumulator: float32, step: fma}", "order: ascending, accumulator: float32, step: fma, inner: {dim: N, order: ascending, accumulator: float32, lanes: 4}}", "reduction.inner", "lanes is required for order lanes_tree, and only for it"),
        (OP, "  - {name: b, dtype: T, shape: [K, N]", "  - {name: b, dtype: U, shape: [K, N]", "", "dtype variable U is not declared"),
        (OP, "  - {name: c, dtype: T, shape: [M, N]", "  - {name: c, dtype: T, shape: [M, Q]", "", "dimension Q does not appear"),
        (CUDA, "  compiler_key: nvcc", "  compiler_key: 42", "build.compiler_key", "Input should be a valid string"),
        # bench: what tools/bench times an op against; a baseline is a name from a closed vocabulary or a reference kernel.
        (OP, "  baseline: {kernel: torch_matmul}", "  baseline: {kernel: simt}", "bench.baseline.kernel", "simt is not a kernel of kind reference of this op (its reference kernels: torch_matmul, torch_reference)"),
        (NT, "  baseline: {torch: linear}", "  baseline: {torch: os.system}", "bench.baseline.torch", "Input should be 'linear', 'matmul_tn'"),
        (NT, "  baseline: {torch: linear}", "  baseline: {torch: linear, kernel: torch_reference}", "bench.baseline", "give exactly one of torch"),
        (OP, "    - {M: 256, K: 1024, N: 1024}", "    - {M: 256, K: 1024}", "bench.shapes.0", "gives the dimensions K, M; it must give exactly K, M, N"),
        (OP, "    - {M: 256, K: 1024, N: 1024}", "    - {M: 256, K: 1024, N: 0}", "bench.shapes.0.N", "greater than or equal to 1"),
        (NT, "sizes: {M: tokens, K: hidden, N: hidden}}", "sizes: {M: tokens, K: hidden, N: hiden}}", "bench.layer.0.sizes.N", "'hiden' is not a size of the layer (tokens, hidden"),
        (NT, "sizes: {M: tokens, K: hidden, N: hidden}}", "sizes: {M: tokens, K: hidden, N: 2000000}}", "bench.layer.0.sizes.N", "a size must be between 1 and 1048576"),
        (NT, "  - {label: det_linear q/k/v/o,", "  - {label: \"det_linear `q`\",", "bench.layer.0.label", "is not a valid single line of text"),
        ("specs/ops/det_gemm_tn.yaml", "  dtypes: [bfloat16]", "  dtypes: [int64]", "bench.dtypes.0", "Input should be 'float32', 'float16' or 'bfloat16'"),
        (KTREE, "  baseline: {kernel: torch_matmul}\n  dtypes: [bfloat16]", "  baseline: {kernel: torch_matmul}\n  dtypes: [float32]", "bench.dtypes.0", "float32 is not a dtype that dtype variable T allows"),
        (KTREE, "  baseline: {kernel: torch_matmul}", "  baseline: {kernel: torch_matmul}\n  layer: [{sizes: {M: 1, K: 2, N: 3}, backward: true}]", "bench.layer.0.backward", "the op declares no backward to time"),
        (CUDA, "  stream: cudaStream_t", "  stream: cudaStream_t; system()", "types.stream", "Unknown vendor type 'cudaStream_t; system()'. Expected one of"),
        (CUDA, "  device_flags: [-O3, -std=c++17, -fmad=false, -Xcompiler=-ffp-contract=off]", "  device_flags: [-O3, '$(rm -rf /)']", "build.device_flags.1", "Unknown device compiler flag '$(rm -rf /)'. Expected one of"),
    ],
)
def test_field_errors_name_file_line_and_field(bare_project: Project, capsys, file, old, new, field, message):
    line = bare_project.edit(file, old, new)
    if "\n" in new and not old.startswith("  -"):
        line += 1  # the added key sits on the line after the edited one
    err = errors_of(bare_project, capsys)
    prefix = f"{file}:{line}: {field}: " if field else f"{file}:"
    matching = [l for l in err.splitlines() if l.startswith(prefix) and message in l]
    assert matching, f"no line starting {prefix!r} containing {message!r} in:\n{err}"


def test_duplicate_key(bare_project: Project, capsys):
    line = bare_project.edit(OP, "tolerance: reduction", "tolerance: reduction\ntolerance: logprob")
    assert f"{OP}:{line + 1}: tolerance: duplicate key" in errors_of(bare_project, capsys)


def test_yaml_syntax_error(bare_project: Project, capsys):
    line = bare_project.edit(OP, "tolerance: reduction", "tolerance: [reduction")
    err = errors_of(bare_project, capsys)
    assert f"{OP}:" in err and "YAML syntax" in err
    reported = int(err.split(f"{OP}:")[1].split(":")[0])
    assert line <= reported <= line + 3


def test_missing_required_key(bare_project: Project, capsys):
    bare_project.edit(OP, "tolerance: reduction\n", "")
    top = bare_project.spec("ops/det_gemm.yaml").read_text().splitlines().index("name: det_gemm") + 1
    assert f"{OP}:{top}: tolerance: required key is missing" in errors_of(bare_project, capsys)


def test_aliases_are_refused(bare_project: Project, capsys):
    line = bare_project.edit(OP, "  rocm: [simt]", "  rocm: &x [simt]\n  musa2: *x")
    err = errors_of(bare_project, capsys)
    assert f"{OP}:{line + 1}:" in err and "aliases" in err


def test_empty_file(bare_project: Project, capsys):
    bare_project.spec("ops/det_gemm.yaml").write_text("")
    assert f"{OP}:1: file is empty" in errors_of(bare_project, capsys)


def test_every_bad_file_is_reported_at_once(bare_project: Project, capsys):
    bare_project.edit(OP, "tolerance: reduction", "tolerance: reduction\ncolour: red")
    bare_project.edit(CUDA, "  compiler_key: nvcc", "  compiler_key: 42")
    err = errors_of(bare_project, capsys)
    assert OP in err and CUDA in err


def test_cli_prints_no_traceback(bare_project: Project):
    bare_project.edit(OP, "tolerance: reduction", "tolerance: reduction\ncolour: red")
    result = subprocess.run(
        [sys.executable, "-m", "generator", "--root", str(bare_project.root), "generate"],
        capture_output=True, text=True, cwd=REPO,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "specs/ops/det_gemm.yaml:" in result.stderr and "colour" in result.stderr
    assert not bare_project.generated.exists()


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("  - {name: a, dtype: T", "  - {name: kernel, dtype: T", "reserved in C++, Python or generated code"),
        ("  - {name: a, dtype: T, shape: [M, K]", "  - {name: a, dtype: T, shape: [EOF, K]", "clashes with a C/C++ macro"),
    ],
)
def test_names_that_generated_code_uses_are_refused(bare_project: Project, capsys, old, new, message):
    bare_project.edit(OP, old, new)
    assert message in errors_of(bare_project, capsys)


def test_a_constraint_that_every_size_meets_is_refused(bare_project: Project, capsys):
    line = bare_project.edit(OP, "tolerance: reduction", "constraints:\n  - {dim: K, multiple_of: 1}\ntolerance: reduction")
    assert f"{OP}:{line + 1}: constraints.0.multiple_of: Input should be greater than or equal to 2" in errors_of(bare_project, capsys)


def test_a_dynamic_dimension_no_output_uses_is_refused(bare_project: Project, capsys):
    bare_project.edit("specs/ops/pack.yaml", "  TOTAL: {count_nonzero: mask}", "  TOTAL: {count_nonzero: mask}\n  EXTRA: {count_nonzero: mask}")
    assert "dynamic dimension EXTRA appears in no output's shape; use it or remove it" in errors_of(bare_project, capsys)


def test_a_derived_dimension_no_output_uses_is_refused(bare_project: Project, capsys):
    bare_project.edit("specs/ops/pack.yaml", "  B1: {dim: B, plus: 1}", "  B1: {dim: B, plus: 1}\n  B2: {dim: B, plus: 2}")
    assert "derived dimension B2 appears in no output's shape; use it or remove it" in errors_of(bare_project, capsys)


def test_the_first_test_shape_needs_every_dimension_at_least_two(bare_project: Project, capsys):
    bare_project.edit(OP, "    - {M: 33, K: 64, N: 40}", "    - {M: 1, K: 64, N: 40}")
    assert "the first shape must have every dimension at least 2 (it builds the bad-input cases); M is 1" in errors_of(bare_project, capsys)


# ---------------------------------------------------------------- names that generated code would repeat


def test_an_alias_that_is_another_ops_name_is_refused(bare_project: Project, capsys):
    line = bare_project.edit("specs/ops/det_gemm_nt.yaml", "aliases: [det_linear]", "aliases: [det_gemm]")
    err = errors_of(bare_project, capsys)
    assert f"specs/ops/det_gemm_nt.yaml:{line}: aliases.0: det_gemm is already exported by op det_gemm; the package would export it twice" in err, err


def test_an_alias_that_is_a_package_export_is_refused(bare_project: Project, capsys):
    bare_project.edit("specs/ops/det_gemm_nt.yaml", "aliases: [det_linear]", "aliases: [select_backend]")
    assert "aliases.0: select_backend is already the package's own select_backend (runtime/rlkernels/__init__.py)" in errors_of(bare_project, capsys)


def test_kernels_whose_generated_names_collide_are_refused(bare_project: Project, capsys):
    # det_gemm's kernel nt_simt and det_gemm_nt's kernel simt would both be det_gemm_nt_simt.
    bare_project.edit(
        OP,
        "kernels:\n",
        "kernels:\n  nt_simt:\n    kind: native\n    template: kernels/det_gemm_simt.j2\n    guarantees: [deterministic, batch_invariant, portable]\n",
    )
    bare_project.edit(OP, "  cpu: [simt, amx]", "  cpu: [nt_simt, simt, amx]")
    err = errors_of(bare_project, capsys)
    assert "op det_gemm_nt kernel simt and op det_gemm kernel nt_simt both generate the name det_gemm_nt_simt" in err, err


def test_a_kernel_named_like_a_package_header_is_refused(bare_project: Project, capsys):
    # op rlk_tensor's kernel core would render rlk_tensor_core.h over the tensor-core header.
    source = (bare_project.root / "specs/ops/silu.yaml").read_text()
    (bare_project.root / "specs/ops/rlk_tensor.yaml").write_text(source.replace("name: silu\n", "name: rlk_tensor\n").replace("  elementwise:\n", "  core:\n").replace("[elementwise]", "[core]"))
    err = errors_of(bare_project, capsys)
    assert "op rlk_tensor kernel core and a package header both generate the name rlk_tensor_core" in err, err


ATTENTION = "specs/ops/attention.yaml"


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("    offsets: {TQ: cu_seqlens_q, TK: cu_seqlens_k}", "    offsets: {TQ: q, TK: cu_seqlens_k}", "tests.sequences.offsets.TQ: q is not a required 1-D int32 or int64 argument"),
        ("    offsets: {TQ: cu_seqlens_q, TK: cu_seqlens_k}", "    offsets: {TX: cu_seqlens_q, TK: cu_seqlens_k}", "tests.sequences.offsets: TX is not a dimension of a required argument"),
        ("    prefix_if: causal", "    prefix_if: window", "tests.sequences.prefix_if: window is not a bool attribute"),
        ("    - {window: 70}", "    - {windows: 70}", "tests.variants[0]: windows is not an attribute"),
        ("    - {window: 70}", "    - {window: true}", "tests.variants[0]: window = True is not a int"),
        ("  - {dim: HQ, multiple_of_dim: HK}", "  - {dim: HQ, multiple_of_dim: HX}", "multiple_of_dim HX is not another dimension of a required argument"),
        ("  - {dim: HQ, multiple_of_dim: HK}", "  - {dim: HQ, multiple_of_dim: HK, multiple_of: 2}", "give exactly one of multiple_of, multiple_of_dim, count_nonzero_of and equals_dim"),
        ("reduction: {dim: TK, order: online_blocks, block: 64", "reduction: {dim: TK, order: online_blocks, block: 48", "block must be a power of two, got 48"),
        ("  sequences:\n", "  batch_dim: TQ\n  sequences:\n", "give batch_dim or sequences, not both"),
    ],
)
def test_packed_sequence_specs_that_mean_nothing_are_refused(bare_project: Project, capsys, old, new, message):
    """tests.sequences, tests.variants, multiple_of_dim and online_blocks: each rule names what is wrong."""
    bare_project.edit(ATTENTION, old, new)
    err = errors_of(bare_project, capsys)
    assert f"{ATTENTION}:" in err and message in err, err


PAGED = "specs/ops/paged_attention.yaml"


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("  - {dim: B1, equals_dim: B, plus: 1}", "  - {dim: B1, equals_dim: BX, plus: 1}", "equals_dim BX is not another dimension of a required argument"),
        ("  - {dim: B1, equals_dim: B, plus: 1}", "  - {dim: B1, multiple_of: 2, plus: 1}", "plus is added to equals_dim's size: give it only with equals_dim"),
        ("HK: 1, B: 2, MB: 80, B1: 3}", "HK: 1, B: 2, MB: 80, B1: 2}", "tests.shapes[2]: B1 = 2, but the constraint says B1 = B + 1 = 3"),
        ("  - {dim: B1, equals_dim: B, plus: 1}\n", "", "query_start_loc holds one offset more than there are sequences: constrain it ({dim: B1, equals_dim: B, plus: 1})"),
        ("    lengths: seq_lens", "    lengths: q", "tests.paged.lengths: q must be 1-D"),
        ("    block_table: block_table", "    block_table: seq_lens", "tests.paged.block_table: seq_lens must be 2-D"),
        ("    caches: [k_cache, v_cache]", "    caches: [k_cache, q]", "tests.paged.caches: q must have the blocks and the block size as its first two dimensions"),
        ("    caches: [k_cache, v_cache]", "    caches: [k_cache, block_table]", "tests.paged.caches: block_table must be a floating tensor"),
        ("    queries: TQ", "    queries: HQ", "tests.paged.queries: no output has HQ as its first dimension"),
        ("    prefix_if: causal", "    prefix_if: window", "tests.paged.prefix_if: window is not a bool attribute"),
        ("  paged:\n", "  batch_dim: TQ\n  paged:\n", "give paged, or batch_dim or sequences, not several"),
        ("args: [q, k_cache, v_cache, query_start_loc, seq_lens]", "args: [q, k_cache, v_cache, block_table, seq_lens]", "the block table has no place among packed sequences' arguments"),
        ("args: [q, k_cache, v_cache, query_start_loc, seq_lens]", "args: [q, v_cache, k_cache, seq_lens, query_start_loc]", "its cu_seqlens_q, given seq_lens, is the lengths of the keys, which go where its keys' offsets (cu_seqlens_k) go"),
        ("args: [q, k_cache, v_cache, query_start_loc, seq_lens]", "args: [k_cache, q, v_cache, query_start_loc, seq_lens]", "argument 0 of attention, its q, given k_cache, is not one of its keys' rows [TK, ...]"),
        ("args: [q, k_cache, v_cache, query_start_loc, seq_lens]", "args: [q, k_cache, v_cache, query_start_loc]", "attention takes 5 tensor arguments, got 4"),
        ("{op: attention, args:", "{op: logp, args:", "logp is not an op of packed sequences with a queries' and a keys' dimension"),
        ("{op: attention, args:", "{op: attentions, args:", "Unknown op attentions. Expected one of"),
    ],
)
def test_paged_specs_that_mean_nothing_are_refused(bare_project: Project, capsys, old, new, message):
    """equals_dim and tests.paged: each rule names what is wrong, at the spec's line."""
    bare_project.edit(PAGED, old, new)
    err = errors_of(bare_project, capsys)
    assert f"{PAGED}:" in err and message in err, err


# --------------------------------------------------------------------------- the two YAML readers


def test_libyaml_reads_every_spec_exactly_as_the_reference_reader():
    """Specs are read by libyaml where PyYAML has it; values and lines must be the reference's."""
    from generator import load

    if not load._HAVE_LIBYAML:
        pytest.skip("PyYAML was built without libyaml: only the reference reader exists")
    files = sorted((REPO / "specs").rglob("*.yaml"))
    assert files
    for file in files:
        text = file.read_text(encoding="utf-8")
        src = load.SourceMap(file.name)
        fast = load._read_fast(text, src)
        assert fast is not None, f"{file.name} was not read by libyaml"
        assert fast == load._read_reference(text, file.name, src), file.name


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\n\tb: 2\n",  # a tab
        "a: x\u2029y\n",  # line breaks only Unicode knows
        "a: x \u2028 y\n",
        "a: 1\r\nb: 2\r\n",  # carriage returns
        "a: &x 1\nb: *x\n",  # an alias (refused)
        "a: 1\na: 2\n",  # a duplicate key (refused)
        "a: [1, 2\n",  # a syntax error
    ],
)
def test_text_libyaml_does_not_take_goes_to_the_reference_reader(text):
    from generator import load

    src = load.SourceMap("x.yaml")
    assert load._read_fast(text, src) is None


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('  arch_macros: {"9.0a": __CUDA_ARCH_FEAT_SM90_ALL}', "  arch_macros: {}", "kernel wgmma needs arch 9.0a, but platform cuda names no macro for it (build.arch_macros)"),
        ("  copy_from_symbol: cudaMemcpyFromSymbol\n", "", "kernel wgmma needs arch 9.0a, but platform cuda's runtime lacks copy_from_symbol"),
    ],
)
def test_a_platform_that_cannot_run_a_kernels_arch_is_refused_where_the_kernel_names_it(bare_project: Project, capsys, old: str, new: str, message: str):
    """The platform lacks what the kernel's arch needs: the error points at the kernel's `archs` line."""
    bare_project.edit(CUDA, old, new)
    err = errors_of(bare_project, capsys)
    line = next(i for i, text in enumerate((bare_project.root / OP).read_text().splitlines(), 1) if text.startswith("    archs:"))
    assert f"{OP}:{line}: kernels.wgmma.archs.0: {message}" in err, err
