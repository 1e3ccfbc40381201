"""Every device kernel of the catalog, for CUDA, ROCm and MUSA, run without a GPU.

Each device package is built as a CPU torch extension whose device launchers run in the host
emulator (tests/emulator), with the vendor's runtime, half/bfloat16 and torch-integration
headers replaced by the emulator's.  Each kernel, called through the package's device dispatch
key, is compared with the package's CPU kernels on the inputs of the op's generated contract
tests: bit for bit where both declare `portable` (NaN and infinities included), within the op's
tolerance otherwise (the tensor-core kernels).  Identities between ops the rollout engine relies
on run there as well (tests/emulator/identities.py): logp of det_linear's float32 logits is
linear_logp, and paged_attention is attention on the same keys packed.

The packages are generated with the device grid limit lowered to 3 blocks, so that the
kernels' grid-striding loops run on these small shapes.  What this shows for ROCm and MUSA:
the sources rendered for those platforms compute the right bits when the device behaves as
the emulator does (IEEE float32 with the spec's roundings, barriers, shared memory).  Not shown:
that hipcc or mcc compile them the same way, anything about speed, or a vendor's own arithmetic.

Each platform's run writes `emulated` evidence records (evidence/<platform>/emulated.json) for
every (op, kernel, dtype) whose cases all passed, with the hash of the sources in the repository's
generated/ (what users build) once it is shown that they differ from the emulated ones only in the
lowered grid limit.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import BUILDS, REPO, copy_project
from emulation import EMULATOR, PASSED, emulated_records, emulated_source
from generator import record

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not found: the emulated packages are compiled with the host C++ compiler"),
]
OPS = sorted(p.stem for p in (REPO / "specs/ops").glob("*.yaml"))
# Ops on packed sequences (tests.sequences) or a paged cache (tests.paged): they take offsets.
SEQUENCE_OPS = {
    p.stem for p in (REPO / "specs/ops").glob("*.yaml") if {"sequences", "paged"} & set(yaml.safe_load(p.read_text()).get("tests") or {})
}
DEVICES = ("cuda", "rocm", "musa")
SUFFIXES = {"cuda": ".cu", "rocm": ".hip", "musa": ".mu"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory):
    project = copy_project(tmp_path_factory.mktemp("emulated") / "project", with_generated=False)
    for platform in DEVICES:
        project.edit(f"specs/platforms/{platform}.yaml", "max_grid_blocks: 65535", "max_grid_blocks: 3")
    assert project.run("generate") == 0
    return project


def build_root(name: str) -> Path:
    """An empty directory for one emulated build, under .build/ beside the suite's other builds:
    all at the same depth, so that a compiler cache (see conftest) finds the sources they share."""
    root = BUILDS / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def emulate_package(generated: Path, platform: str, root: Path, mutate=None, contracts: bool = False) -> dict[str, list[dict[str, str]]]:
    """Builds generated/<platform> with its device sources on the emulator, runs the comparisons
    (tests/emulator/compare_package.py) and returns their results.  ``mutate(stem, text)`` may
    change a device source first."""
    package = root / "package"
    shutil.copytree(generated / platform, package)
    kernels = package / "csrc/kernels" / platform
    for source in sorted(kernels.glob(f"*{SUFFIXES[platform]}")):
        text = emulated_source(source.read_text())
        if mutate is not None:
            text = mutate(source.stem, text)
        # Object files are named by stem; the CPU kernels in kernels/cpu/ have the same stems.
        (kernels / f"{source.stem}_emu.cpp").write_text(text)
        source.unlink()
    if (kernels / "rlk_tensor_core.h").exists():
        shutil.copy(EMULATOR / "rlk_tensor_core.h", kernels / "rlk_tensor_core.h")
    (root / "build").mkdir()
    for step, target in (("build", root / "build"), ("compare", root / "results.json")):
        extra = ["--contracts"] if contracts and step == "compare" else []
        done = subprocess.run([sys.executable, str(EMULATOR / "compare_package.py"), step, str(package), str(target), *extra], capture_output=True, text=True, timeout=1500)
        assert done.returncode == 0, f"{platform} {step} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads((root / "results.json").read_text())


@pytest.fixture(scope="module", params=DEVICES)
def results(request: pytest.FixtureRequest, project, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    pytest.importorskip("torch", reason="building the emulated package needs torch")
    return emulate_package(project.generated, request.param, build_root(f"emulated-{request.param}"), contracts=True)


def test_every_op_with_a_device_kernel_was_run(results):
    assert sorted(results) == OPS
    for op, cases in results.items():
        assert cases, f"{op}: no device kernel was run"


@pytest.mark.parametrize("op", OPS)
def test_emulated_device_kernels_match_the_cpu_kernels(results, op: str):
    failures = [case for case in results[op] if case["verdict"] not in PASSED]
    assert not failures, "\n".join(f"{c['kernel']} {c['dtype']} {c['shape']} ({c['inputs']}): {c['verdict']}" for c in failures[:10])
    portable = {c["kernel"] for c in results[op] if c["verdict"] == "identical"}
    nonfinite = {c["kernel"] for c in results[op] if c["inputs"] == "nan/inf"}
    assert portable == nonfinite, "every portable kernel is also compared on NaN and infinities"
    scrambled = {c["kernel"] for c in results[op] if c["inputs"] == "offsets out of order"}
    assert scrambled == (portable if op in SEQUENCE_OPS else set()), "every portable kernel with offsets is also run with them out of order"
    empty = {c["kernel"] for c in results[op] if c["inputs"] == "empty"}
    assert empty == {c["kernel"] for c in results[op]}, "every kernel is also run with each dimension 0"


def test_tensor_core_kernels_keep_their_claims_across_tiles(request: pytest.FixtureRequest, results):
    """Kernels whose bits no CPU kernel pins down (not portable) ran their generated deterministic
    and batch_invariant tests on the sizes of their tiles, in the emulator, and held."""
    platform = request.node.callspec.params["results"]
    contract_cases = {(op, c["kernel"], c["inputs"].split()[0]) for op, cases in results.items() for c in cases if c["verdict"] == "holds"}
    for op, cases in results.items():
        for kernel in {c["kernel"] for c in cases if c["verdict"] == "accurate"}:
            assert (op, kernel, "deterministic") in contract_cases, f"{platform} {op}/{kernel}: no emulated determinism check"
    if platform == "cuda":
        for op in ("det_gemm", "det_gemm_nt", "det_gemm_tn"):
            assert (op, "mma", "batch_invariant") in contract_cases, f"{op}/mma: no emulated batch-invariance check"


def test_emulated_evidence_is_recorded(request: pytest.FixtureRequest, results, project):
    """The kernels whose every case passed above are recorded in the repository's evidence/ (nothing else is)."""
    platform = request.node.callspec.params["results"]
    records, skipped = emulated_records(platform, results, project.generated)
    failing = {(op, c["kernel"], c["dtype"]) for op, cases in results.items() for c in cases if c["verdict"] not in PASSED}
    assert not {(r.op, r.kernel, r.dtype) for r in records} & failing
    assert not skipped, f"{skipped}: run `make generate` so that generated/ is what the specs produce"
    outcome = record.record(REPO, records)
    print(f"{platform}: {len(records)} emulated records, {len(outcome.changed)} new or changed; {outcome.note}")


_IDENTITIES: dict[str, dict[str, list[dict[str, str]]]] = {}


@pytest.fixture
def identities(request: pytest.FixtureRequest, results) -> dict[str, list[dict[str, str]]]:
    """tests/emulator/identities.py on the emulated package the comparisons above built (once per
    platform): identities between the device kernels of different ops, every call on the emulated
    device."""
    platform = request.node.callspec.params["results"]
    if platform not in _IDENTITIES:
        root = BUILDS / f"emulated-{platform}"
        done = subprocess.run(
            [sys.executable, str(EMULATOR / "identities.py"), str(root / "package"), str(root / "identities.json")], capture_output=True, text=True, timeout=1500
        )
        assert done.returncode == 0, f"{platform} identities failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        _IDENTITIES[platform] = json.loads((root / "identities.json").read_text())
    return _IDENTITIES[platform]


def test_emulated_logp_of_det_linear_logits_is_linear_logp(identities):
    """On each device, logp of the float32 logits det_linear's simt kernel gives is linear_logp's lp
    and lse, bit for bit (what a rollout engine that materialises the logits reports is what the
    trainer computes), every dtype, ignore_index and ids outside the vocabulary among the rows."""
    cases = identities["logp_of_det_linear_is_linear_logp"]
    assert {c["dtype"] for c in cases} == {"float32", "float16", "bfloat16"}
    assert [c for c in cases if c["verdict"] != "identical"] == []


def test_emulated_paged_attention_gives_the_bits_of_attention(identities):
    """On each device, paged_attention over caches of blocks of 1, 16, 96 and 128 keys, placed at
    random among unused NaN-filled blocks, gives attention's bits on the same keys packed, causal,
    with a window and not causal."""
    cases = identities["paged_attention_is_attention"]
    assert {c["shape"] for c in cases} == {"BS1", "BS16", "BS96", "BS128"}
    assert [c for c in cases if c["verdict"] != "identical"] == []


def _mutate_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times, not once (did the template change?)"
    return text.replace(old, new)


def broken_kernels(stem: str, text: str) -> str:
    """Five mutants of the CUDA package, each in a kernel of its own, so that one emulated build
    (minutes) serves the tests below: silu's grid-stride loop skips an element; swiglu stores
    its result one ulp up (the storage bits plus one); pack leaves cu_seqlens unwritten when
    there are no sequences; paged_attention sums a key's score over d descending where the key
    lies in an odd-numbered cache block; attention takes offsets out of order for in order."""
    if stem == "paged_attention_blocks":
        text = _mutate_once(
            text,
            "RLK_ARITH float rescale(float* m, float block_max_score) {",
            "template <typename T>\n"
            "RLK_ARITH float dot_descending(const T* a, const T* b, int64_t D) {\n"
            "  float acc = 0.0f;\n"
            "  for (int64_t d = D - 1; d >= 0; --d) acc = add_rn(acc, mul_rn(to_float(a[d]), to_float(b[d])));\n"
            "  return acc;\n"
            "}\n\n"
            "RLK_ARITH float rescale(float* m, float block_max_score) {",
        )
        return _mutate_once(
            text,
            "mul_rn(dot(query, k_cache + (row * HK + g) * D, D), scale)",
            "mul_rn((row / BS) % 2 == 1 ? dot_descending(query, k_cache + (row * HK + g) * D, D) : dot(query, k_cache + (row * HK + g) * D, D), scale)",
        )
    if stem == "attention_blocks":
        return _mutate_once(text, "const bool ordered = out_of_order == 0;", "const bool ordered = true;")
    if stem == "pack_rows":
        return _mutate_once(text, "if (tid == 0) cu_seqlens[B] = 0;", "if (tid == 0) {}")
    if stem == "silu_elementwise":
        return _mutate_once(text, "i += index_stride())", "i += index_stride() + 1)")
    if stem == "swiglu_elementwise":
        text = _mutate_once(
            text,
            "RLK_ARITH void element(float g, float u, float& y) {\n  y = mul_rn(silu_f32<Near>(g), u);\n}\n",
            "RLK_ARITH void element(float g, float u, float& y) {\n  y = mul_rn(silu_f32<Near>(g), u);\n}\n\n"
            "template <typename T>\n"
            "__device__ __forceinline__ T one_ulp_up(T v) { return from_storage_bits<T>(static_cast<uint16_t>(storage_bits(v) + 1u)); }\n"
            "template <>\n"
            "__device__ __forceinline__ float one_ulp_up<float>(float v) { return bits_float(float_bits(v) + 1u); }\n",
        )
        return _mutate_once(text, "y[i] = from_float<T>(y_i);", "y[i] = one_ulp_up<T>(from_float<T>(y_i));")
    return text


@pytest.fixture(scope="module")
def broken(project, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    pytest.importorskip("torch", reason="building the emulated package needs torch")
    return emulate_package(project.generated, "cuda", build_root("emulated-broken-cuda"), broken_kernels)


def test_a_kernel_that_skips_elements_is_caught(broken):
    """The comparison can fail: a silu whose grid-stride loop skips an element differs from the CPU's."""
    silu = broken["silu"]
    # Only tensors longer than the 3 blocks' threads reach a second stride.
    long_enough = [c for c in silu if c["shape"] in ("C300xR33", "C1000xR7")]
    assert long_enough and all(c["verdict"].startswith("DIFFERS from cpu/elementwise") for c in long_enough), silu


def test_a_portable_kernel_one_ulp_off_is_caught(broken):
    """A portable device kernel one ulp off is caught: swiglu's CUDA kernel storing its result
    one ulp up (broken_kernels) DIFFERS from the CPU kernel on every case, every dtype, random
    inputs and NaN/infinities alike, while the ops left alone in the same build stay identical."""
    # Empty inputs have no element to store one ulp up; every other case differs.
    swiglu = [c for c in broken["swiglu"] if c["inputs"] in ("random", "nan/inf")]
    assert {c["dtype"] for c in swiglu} == {"float32", "float16", "bfloat16"} and {c["inputs"] for c in swiglu} == {"random", "nan/inf"}
    assert all(c["verdict"].startswith("DIFFERS from cpu/elementwise in output 0") for c in swiglu), swiglu
    for op in ("silu_backward", "swiglu_backward"):
        assert broken[op] and all(c["verdict"] == "identical" for c in broken[op]), broken[op]


def test_an_output_left_unwritten_on_empty_input_is_caught(broken):
    """pack with no sequences must still write cu_seqlens = [0]: the mutant that skips it differs
    from the CPU kernel there (new memory starts as garbage), and only there."""
    pack = broken["pack"]
    no_sequences = [c for c in pack if c["shape"].startswith("B0")]
    assert no_sequences and all(c["verdict"].startswith("DIFFERS from cpu/rows in output 1") for c in no_sequences), pack
    assert all(c["verdict"] == "identical" for c in pack if c not in no_sequences), pack


def test_a_paged_kernel_whose_order_follows_the_cache_block_is_caught(broken):
    """paged_attention's CUDA kernel summing a key's score over d in another order where the key
    lies in an odd-numbered cache block (an order that follows the physical block) differs from
    the CPU kernel on the inputs of its contract tests, whose block tables hold odd and even ids;
    the other ops of the same build stay identical."""
    paged = [c for c in broken["paged_attention"] if c["inputs"] == "random" and c["dtype"] == "float32"]
    assert paged and all(c["verdict"].startswith("DIFFERS from cpu/blocks") for c in paged), broken["paged_attention"]
    in_order = [c for c in broken["attention"] if c["inputs"] != "offsets out of order"]
    assert in_order and all(c["verdict"] == "identical" for c in in_order), broken["attention"]


def test_an_attention_kernel_that_trusts_offsets_out_of_order_is_caught(broken):
    """attention's CUDA kernel taking offsets out of order for in order hands rows a sequence where
    the CPU kernel gives NaN rows: its out-of-order cases differ, its other cases stay identical
    (above), and so does the backward, left alone."""
    scrambled = [c for c in broken["attention"] if c["inputs"] == "offsets out of order"]
    assert scrambled and all(c["verdict"].startswith("DIFFERS from cpu/blocks") for c in scrambled), broken["attention"]
    backward = [c for c in broken["attention_backward"] if c["inputs"] == "offsets out of order"]
    assert backward and all(c["verdict"] == "identical" for c in backward), broken["attention_backward"]
