"""Reviewer tooling: the semantic diff, `explain`, the JSON Schemas, the coverage matrix and the README table."""

from __future__ import annotations

import difflib
import json
import random
import re
import subprocess

import pytest

from conftest import REPO, Project
from generator import contracts, evidence, readme, semantic_diff
from generator.cli import unified_diff
from generator.errors import SpecError
from generator.explain import explain, verdict
from generator.load import load_catalog, parse_yaml
from generator.schema import MODELS, schema_files, schema_header, schema_path, spec_kind
from generator.source_hash import source_sha256

OP = "specs/ops/det_gemm.yaml"


def line_of(project: Project, prefix: str, rel: str = OP) -> int:
    lines = (project.root / rel).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.startswith(prefix))


def backends_line(project: Project, platform: str) -> str:
    return next(line for line in (project.root / OP).read_text().splitlines() if line.startswith(f"  {platform}: ["))


# --------------------------------------------------------------------------- semantic diff: the comparison


def state(**ops: dict) -> dict:
    base = {
        "platforms": {p: {"kind": "host" if p == "cpu" else "device"} for p in ("cpu", "cuda", "musa")},
        "tolerances": {"reduction": {"float32": {"atol": 1e-4, "rtol": 1e-4}}, "elementwise": {"float32": {"atol": 1e-5, "rtol": 1e-5}}},
        "ops": ops,
    }
    return json.loads(json.dumps(base))


def gemm(**changes) -> dict:
    op = {
        "summary": "GEMM",
        "requires": ["batch_invariant", "deterministic"],
        "dtypes": ["float32", "bfloat16"],
        "signature": {"args": {"a": {"dtype": ["float32", "bfloat16"], "shape": ["M", "K"]}}, "outputs": {"c": {"dtype": ["float32", "bfloat16"], "shape": ["M", "N"]}}},
        "torch_schema": "(Tensor a) -> Tensor",
        "tolerance": "reduction",
        "kernels": {
            "simt": {"kind": "native", "guarantees": ["batch_invariant", "deterministic", "portable"]},
            "mma": {"kind": "native", "guarantees": ["batch_invariant", "deterministic"]},
            "torch_matmul": {"kind": "reference", "guarantees": []},
        },
        "backends": {"cpu": ["simt"], "cuda": ["simt"], "musa": ["simt"]},
    }
    op.update(changes)
    return op


def lines(old: dict, new: dict) -> list[str]:
    return [str(c) for c in semantic_diff.compare(old, new)]


def test_no_change_no_lines():
    assert lines(state(det_gemm=gemm()), state(det_gemm=gemm())) == []


def test_backends_added_reordered_and_removed():
    old = state(det_gemm=gemm(backends={"cpu": ["simt"], "cuda": ["simt", "mma"], "musa": ["simt"]}))
    new = state(det_gemm=gemm(backends={"cpu": ["simt"], "cuda": ["mma", "simt"], "musa": ["mma", "simt"]}))
    out = lines(old, new)
    assert "det_gemm/cuda: backends reordered [simt, mma] → [mma, simt]" in out
    assert "det_gemm/musa: backends [simt] → [mma, simt]" in out
    assert "WEAKENS CONTRACT: det_gemm/musa: no longer guarantees portable whichever backend runs (backends [simt] → [mma, simt])" in out
    assert out[0].startswith("WEAKENS CONTRACT:"), "contract-weakening lines come first"


def test_platform_going_unsupported_is_loud_and_coming_back_is_not():
    supported, unsupported = gemm(), gemm(backends={"cpu": ["simt"], "cuda": ["simt"], "musa": []})
    assert lines(state(det_gemm=supported), state(det_gemm=unsupported)) == [
        "WEAKENS CONTRACT: det_gemm/musa: supported → unsupported (backends [simt] → [])"
    ]
    assert lines(state(det_gemm=unsupported), state(det_gemm=supported)) == ["det_gemm/musa: unsupported → supported (backends [] → [simt])"]


def test_requires_losing_a_guarantee_weakens_the_contract():
    out = lines(state(det_gemm=gemm()), state(det_gemm=gemm(requires=["deterministic"])))
    assert out == ["WEAKENS CONTRACT: det_gemm: requires no longer includes batch_invariant (requires [batch_invariant, deterministic] → [deterministic])"]
    gained = lines(state(det_gemm=gemm(requires=["deterministic"])), state(det_gemm=gemm()))
    assert gained == ["det_gemm: requires gains batch_invariant (requires [deterministic] → [batch_invariant, deterministic])"]


def test_kernel_losing_a_guarantee_is_loud_only_where_it_is_listed():
    weaker = json.loads(json.dumps(gemm()))
    weaker["kernels"]["simt"]["guarantees"] = ["batch_invariant", "deterministic"]
    weaker["kernels"]["mma"]["guarantees"] = ["deterministic"]
    out = lines(state(det_gemm=gemm()), state(det_gemm=weaker))
    assert "WEAKENS CONTRACT: det_gemm kernel simt: loses guarantee portable (listed for cpu, cuda, musa)" in out
    assert "det_gemm kernel mma: loses guarantee batch_invariant (listed for no platform)" in out


def test_ops_added_and_removed():
    out = lines(state(det_gemm=gemm()), state(silu=gemm(backends={"cpu": ["simt"], "cuda": [], "musa": ["simt"]})))
    assert "WEAKENS CONTRACT: det_gemm: op removed" in out
    assert "silu: op added (requires [batch_invariant, deterministic]; cpu [simt], cuda unsupported, musa [simt])" in out


def test_signature_dtype_and_tolerance_changes():
    new = gemm(
        dtypes=["float32"],
        torch_schema="(Tensor a, Tensor? bias) -> Tensor",
        tolerance="elementwise",
        signature={
            "args": {"a": {"dtype": ["float32"], "shape": ["M", "K"]}, "bias": {"dtype": ["float32"], "shape": ["N"]}},
            "outputs": {"c": {"dtype": ["float32", "bfloat16"], "shape": ["M", "N"]}},
        },
    )
    old_state, new_state = state(det_gemm=gemm()), state(det_gemm=new)
    new_state["tolerances"]["elementwise"]["float32"] = {"atol": 1e-3, "rtol": 1e-3}
    out = lines(old_state, new_state)
    assert "det_gemm: dtypes [float32, bfloat16] → [float32]" in out
    assert "det_gemm: signature (Tensor a) -> Tensor → (Tensor a, Tensor? bias) -> Tensor" in out
    assert "det_gemm: argument a dtype [float32, bfloat16] → [float32]" in out
    assert "det_gemm: argument bias added: [float32] [N]" in out
    assert "det_gemm: tolerance reduction → elementwise (looser)" in out
    assert "tolerance elementwise/float32: atol 1e-05 → 0.001 (looser)" in out
    new_state["tolerances"]["elementwise"]["float32"]["atol"] = 1e-6
    assert "det_gemm: tolerance reduction → elementwise (looser in part, tighter in part)" in lines(old_state, new_state)


def test_a_changed_reduction_step_or_order_is_reported_with_its_inner_reduction():
    """A reduction's order, step or parameters decide the op's bits: each change is one line."""
    before = {"dim": "K", "order": "ascending", "accumulator": "float32", "step": "add"}
    after = {**before, "step": "fma"}
    out = lines(state(det_gemm=gemm(reduction=before)), state(det_gemm=gemm(reduction=after)))
    assert out == ['det_gemm: reduction step "add" → "fma" (the op\'s bits change)']
    outer = {"dim": "V", "order": "lanes_tree", "lanes": 256, "accumulator": "float32", "step": "add"}
    out = lines(state(lp=gemm(reduction={**outer, "inner": before})), state(lp=gemm(reduction={**outer, "lanes": 512, "inner": after})))
    assert out == ["lp: reduction lanes 256 → 512 (the op's bits change)", 'lp: reduction inner step "add" → "fma" (the op\'s bits change)']
    out = lines(state(lp=gemm(reduction=outer)), state(lp=gemm(reduction={**outer, "inner": before})))
    assert out == ["lp: reduction inner added: accumulator float32, dim K, order ascending, step add (the op's bits change)"]
    assert lines(state(det_gemm=gemm(reduction=before)), state(det_gemm=gemm(reduction=None))) == [
        "det_gemm: reduction removed: accumulator float32, dim K, order ascending, step add (the op's bits change)"
    ]
    # An older registry without the key says nothing about reductions.
    assert lines(state(det_gemm=gemm()), state(det_gemm=gemm(reduction=after))) == []


def test_platforms_added_and_removed():
    new = state(det_gemm=gemm(backends={"cpu": ["simt"], "cuda": ["simt"], "metal": []}))
    del new["platforms"]["musa"]
    new["platforms"]["metal"] = {"kind": "device"}
    out = lines(state(det_gemm=gemm()), new)
    assert "platform musa: removed" in out and "platform metal: added (device)" in out
    assert "WEAKENS CONTRACT: det_gemm/musa: no longer listed (backends [simt] → [])" in out
    assert "det_gemm/metal: now listed: unsupported" in out


def test_an_older_registry_without_newer_keys_is_compared_as_far_as_it_goes():
    old = {"ops": {"det_gemm": {"backends": {"cpu": ["simt"]}, "requires": ["deterministic"]}}}
    out = lines(old, state(det_gemm=gemm()))
    assert "det_gemm: requires gains batch_invariant (requires [deterministic] → [batch_invariant, deterministic])" in out
    assert not any(line.startswith(("platform ", "tolerance ")) for line in out)


@pytest.mark.parametrize("data", [b"", b"[]", b"{not json", b'{"ops": []}'])
def test_unreadable_states_raise_state_error(data):
    with pytest.raises(semantic_diff.StateError):
        semantic_diff.parse_state(data, "x")


# --------------------------------------------------------------------------- semantic diff: the command


def test_diff_prints_the_summary_above_the_unified_diff(small_project: Project, capsys):
    small_project.edit(OP, backends_line(small_project, "musa"), "  musa: []")
    assert small_project.run("diff") == 1
    out = capsys.readouterr().out
    head = out.split("\n--- a/", 1)[0]
    assert "semantic changes (generated/registry.json → the specs):" in head
    assert "  WEAKENS CONTRACT: det_gemm/musa: supported → unsupported (backends [simt] → [])" in head
    assert "--- a/generated/musa/csrc/kernels/musa/det_gemm_simt.mu" in out


def test_diff_summary_only(small_project: Project, capsys):
    small_project.edit(OP, "requires: [deterministic, batch_invariant]", "requires: [deterministic]")
    assert small_project.run("diff", "--summary") == 1
    out = capsys.readouterr().out
    assert "WEAKENS CONTRACT: det_gemm: requires no longer includes batch_invariant" in out
    assert "--- a/" not in out and "@@" not in out


def test_diff_reports_a_reduction_step_change(small_project: Project, capsys):
    small_project.edit(OP, "order: ascending, accumulator: float32, step: fma}", "order: ascending, accumulator: float32, step: add}")
    assert small_project.run("diff", "--summary") == 1
    assert """det_gemm: reduction step "fma" → "add" (the op's bits change)""" in capsys.readouterr().out


def test_diff_on_a_fresh_tree_prints_nothing(small_project: Project, capsys):
    assert small_project.run("diff") == 0
    assert capsys.readouterr().out == ""


def test_diff_survives_a_damaged_registry(small_project: Project, capsys):
    (small_project.generated / "registry.json").write_text("{ damaged")
    assert small_project.run("diff") == 1
    out = capsys.readouterr().out
    assert "semantic changes: unavailable (generated/registry.json: not valid JSON" in out
    assert "--- a/generated/registry.json" in out


def git(project: Project, *args: str) -> None:
    subprocess.run(["git", *args], cwd=project.root, check=True, capture_output=True)


def test_diff_against_a_git_revision(small_project: Project, capsys):
    git(small_project, "init", "-q")
    git(small_project, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git(small_project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    small_project.edit(OP, backends_line(small_project, "rocm"), "  rocm: []")
    assert small_project.run("generate") == 0
    capsys.readouterr()
    assert small_project.run("diff", "--base", "HEAD", "--summary") == 1, "the tree is fresh, but differs from the base"
    out = capsys.readouterr().out
    assert "semantic changes (HEAD:generated/registry.json → the specs):" in out
    assert "WEAKENS CONTRACT: det_gemm/rocm: supported → unsupported" in out
    dropped = [r for r in records_covering(small_project) if (r.op, r.platform) == ("det_gemm", "rocm")]
    assert dropped and f"evidence of kernels the change stops rendering ({len(dropped)} records: they will name no contract):" in out
    assert "  det_gemm/rocm simt: " in out and "evidence the change makes stale" not in out
    assert small_project.run("diff", "--base", "no-such-rev") == 2
    assert "error: --base no-such-rev: not a commit in this repository" in capsys.readouterr().err


# --------------------------------------------------------------------------- diff: what a change costs


def records_covering(project: Project, base: str | None = "HEAD") -> list[evidence.Record]:
    """The ledger's records that cover the sources under generated/ (as committed at ``base``, or on disk)."""
    if base is None:
        files = {p.relative_to(project.generated).as_posix(): p.read_bytes() for p in project.generated.rglob("*") if p.is_file()}
    else:
        listed = subprocess.run(["git", "ls-files", "generated"], cwd=project.root, capture_output=True, text=True, check=True).stdout.split()
        files = {
            rel.removeprefix("generated/"): subprocess.run(["git", "show", f"{base}:{rel}"], cwd=project.root, capture_output=True, check=True).stdout
            for rel in listed
            if "/csrc/" in rel
        }
    ledger = evidence.read_ledger(project.root)
    return [r for r in ledger.records if r.source_sha256 == source_sha256(files, r.platform, r.op, r.kernel)]


def stale_block(out: str) -> list[str]:
    """The lines of diff's summary about the records a change makes stale, header first."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("evidence the change makes stale ("))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def test_diff_names_the_records_a_summary_edit_makes_stale_and_the_checks_that_renew_them(small_project: Project, capsys):
    """The summary is in each of the op's kernels' header comment, which their hash covers."""
    covering = [r for r in records_covering(small_project, base=None) if r.op == "det_gemm"]
    assert covering, "the ledger holds current records of det_gemm's kernels"
    small_project.edit(OP, "\nsummary: Deterministic batch-invariant", "\nsummary: Deterministic and batch-invariant")
    assert small_project.run("diff", "--summary") == 1
    out = capsys.readouterr().out
    assert 'det_gemm: summary "Deterministic batch-invariant' in out
    block = stale_block(out)
    assert block[0] == f"evidence the change makes stale ({len(covering)} records: the sources they were checked on change):"
    for platform, kernel in {(r.platform, r.kernel) for r in covering}:
        (line,) = [line for line in block if line.startswith(f"  det_gemm/{platform} {kernel}: ")]
        levels = {r.level for r in covering if (r.platform, r.kernel) == (platform, kernel)}
        assert all(level in line for level in levels), line
    assert not any(line.startswith(("  column_sum/", "  det_gemm_nt/", "  det_gemm_tn/")) for line in block)
    renew = out.split("renewed only by running again on the new sources the checks that wrote them:\n", 1)[1].splitlines()
    for check in {r.how.check for r in covering}:
        assert any(line.startswith(f"  {check} (") for line in renew), check


def test_diff_names_a_kernel_param_change_and_the_records_it_makes_stale(small_project: Project, capsys):
    covering = [r for r in records_covering(small_project, base=None) if (r.op, r.kernel) == ("det_gemm", "mma")]
    assert covering
    params = next(line for line in (small_project.root / OP).read_text().splitlines() if "warps_m: 2" in line)
    small_project.edit(OP, params, params.replace("stages: 3", "stages: 4"))
    assert small_project.run("diff", "--summary") == 1
    out = capsys.readouterr().out
    assert "  det_gemm kernel mma: param stages 3 → 4" in out
    assert "semantic changes (generated/registry.json → the specs): none" not in out
    block = stale_block(out)
    assert block[0].startswith(f"evidence the change makes stale ({len(covering)} records")
    assert [line.split(":")[0] for line in block[1:]] == ["  det_gemm/cuda mma"]
    # Put back after a generate, the records cover the sources again.
    assert small_project.run("generate") == 0
    small_project.edit(OP, params.replace("stages: 3", "stages: 4"), params)
    capsys.readouterr()
    assert small_project.run("diff", "--summary") == 1
    out = capsys.readouterr().out
    assert "  det_gemm kernel mma: param stages 4 → 3" in out
    assert f"evidence the change makes current again ({len(covering)} records: the sources they were checked on return):" in out
    assert "evidence the change makes stale" not in out


def test_param_changes_are_named_one_by_one_and_an_older_registry_without_params_shows_none():
    def with_params(**params):
        op = gemm()
        op["kernels"]["mma"] = {**op["kernels"]["mma"], "template": "kernels/det_gemm_mma.j2", "functor": None, "params": params}
        return op

    out = lines(state(det_gemm=with_params(block_k=32, stages=3, spare=True)), state(det_gemm=with_params(block_k=64, stages=3, warps=2)))
    assert out == ["det_gemm kernel mma: param block_k 32 → 64", "det_gemm kernel mma: param spare removed (was true)", "det_gemm kernel mma: param warps added: 2"]
    assert lines(state(det_gemm=gemm()), state(det_gemm=with_params(stages=3))) == []


def test_a_one_line_change_shows_as_one_line_in_registry_md(project: Project, capsys):
    """The whole catalog's REGISTRY.md repeats lines (blank lines, table headers) that difflib's
    heuristic took for junk: an unchanged line was shown removed and added again."""
    project.edit(OP, "\nsummary: Deterministic batch-invariant", "\nsummary: Deterministic and batch-invariant")
    capsys.readouterr()
    assert project.run("diff") == 1
    out = capsys.readouterr().out
    registry = out.split("--- a/generated/REGISTRY.md\n", 1)[1].split("\n--- ", 1)[0].splitlines()
    removed = [line[1:] for line in registry if line.startswith("-")]
    added = [line[1:] for line in registry if line.startswith("+") and not line.startswith("+++")]
    assert removed and not set(removed) & set(added), "an unchanged line is shown removed and added again"
    assert "Deterministic batch-invariant matrix product C = A @ B." in removed and len(removed) < 20


@pytest.mark.parametrize("seed", range(20))
def test_the_unified_diff_is_difflibs_where_difflib_matches_every_line(seed: int):
    rng = random.Random(seed)
    for _ in range(50):
        a = [rng.choice("abcde") + "\n" for _ in range(rng.randint(0, 40))]
        b = [rng.choice("abcde") + "\n" for _ in range(rng.randint(0, 40))]
        if rng.random() < 0.5:
            b = a[: rng.randint(0, len(a))] + b[:3] + a[rng.randint(0, len(a)) :]
        assert list(unified_diff(a, b, "a/x", "b/x")) == list(difflib.unified_diff(a, b, "a/x", "b/x"))


# --------------------------------------------------------------------------- explain


def test_explain_one_platform_names_choice_reasons_and_lines(small_project: Project, capsys):
    assert small_project.run("explain", "det_gemm", "--platform", "rocm") == 0
    out = capsys.readouterr().out
    requires = line_of(small_project, "requires:")
    rocm = line_of(small_project, "  rocm: [")
    simt = line_of(small_project, "  simt:")
    assert f"  requires: deterministic, batch_invariant  ({OP}:{requires})" in out
    assert f"  backends: [simt]  ({OP}:{rocm})" in out
    assert re.search(rf"  1\. simt \[native, [^]]+\]: accepted: its guarantees \(deterministic, batch_invariant, portable\) cover .*\({OP}:{simt}\)", out)
    assert "  chosen: simt" in out
    assert "torch_matmul [reference, torch.matmul]: would be refused: lacks deterministic, batch_invariant" in out
    assert "on cuda" not in out


def test_explain_without_platform_covers_every_platform(small_project: Project, capsys):
    assert small_project.run("explain", "det_gemm") == 0
    out = capsys.readouterr().out
    for platform in ("cpu", "cuda", "musa", "rocm"):
        assert f"det_gemm on {platform} (" in out


def test_explain_shows_refusals_that_generate_would_make(small_project: Project, capsys):
    small_project.edit(OP, "  simt:\n", "  cudaonly:\n    kind: native\n    template: kernels/det_gemm_simt.j2\n    platforms: [cuda]\n    guarantees: [deterministic, batch_invariant]\n  simt:\n")
    small_project.edit(OP, backends_line(small_project, "musa"), "  musa: [cudaonly, torch_matmul, simt]")
    assert small_project.run("explain", "det_gemm", "--platform", "musa") == 0
    out = capsys.readouterr().out
    assert "1. cudaonly [native, kernels/det_gemm_simt.j2, cuda only]: refused: kernel cudaonly is written for cuda only" in out
    assert "2. torch_matmul [reference, torch.matmul]: refused: lacks deterministic, batch_invariant that det_gemm requires" in out
    assert "chosen: none: generate refuses this mapping" in out
    # the same verdicts as the contract guard, position by position
    catalog = load_catalog(small_project.root / "specs", small_project.root)
    with pytest.raises(SpecError) as refused:
        contracts.check(catalog)
    flagged = {p.field for p in refused.value.problems}
    op = catalog.op("det_gemm")
    for index, kernel in enumerate(op.backends["musa"]):
        accepted, _ = verdict(op, "musa", kernel)
        assert accepted == (f"backends.musa.{index}" not in flagged), kernel


def test_explain_unsupported_platform(small_project: Project, capsys):
    small_project.edit(OP, backends_line(small_project, "musa"), "  musa: []")
    assert small_project.run("explain", "det_gemm", "--platform", "musa") == 0
    assert "chosen: none: det_gemm is unsupported on musa; it raises there and never falls back" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (("explain", "foo"), "error: Unknown op foo. Expected one of column_sum, det_gemm"),
        (("explain", "det_gemm", "--platform", "metal"), "error: Unknown platform metal. Expected one of cpu, cuda, musa, rocm"),
    ],
)
def test_explain_unknown_names(small_project: Project, capsys, args, message):
    assert small_project.run(*args) == 2
    assert message in capsys.readouterr().err


def test_explain_every_real_op_and_platform():
    catalog = load_catalog(REPO / "specs", REPO)
    for op in catalog.ops:
        text = "\n".join(explain(catalog, op.name))
        assert all(f"{op.name} on {p.name} (" in text for p in catalog.platforms)


# --------------------------------------------------------------------------- JSON Schema


def test_committed_schemas_are_fresh():
    for rel, data in schema_files().items():
        assert (REPO / rel).read_bytes() == data, f"{rel} is stale; run `python -m generator schema`"


def test_every_spec_file_points_at_its_schema():
    specs = sorted((REPO / "specs").rglob("*.yaml"))
    assert specs
    for path in specs:
        rel = path.relative_to(REPO / "specs").as_posix()
        first = path.read_text().split("\n", 1)[0]
        assert first == schema_header(rel), f"{path}: first line should be {schema_header(rel)!r}"
        target = (path.parent / first.split("$schema=", 1)[1]).resolve()
        assert target == (REPO / schema_path(spec_kind(rel))).resolve() and target.is_file(), path


def test_schemas_accept_the_real_specs_and_reject_unknown_keys():
    jsonschema = pytest.importorskip("jsonschema")
    validators = {kind: jsonschema.Draft202012Validator(json.loads((REPO / schema_path(kind)).read_text())) for kind in MODELS}
    for path in sorted((REPO / "specs").rglob("*.yaml")):
        rel = path.relative_to(REPO / "specs").as_posix()
        data, _ = parse_yaml(path.read_bytes(), rel)
        errors = [e.message for e in validators[spec_kind(rel)].iter_errors(data)]
        assert not errors, f"{rel}: {errors}"
        assert list(validators[spec_kind(rel)].iter_errors({**data, "colour": "red"})), "unknown keys must be flagged"


def test_schemas_carry_the_name_rules():
    """An editor validating against the schema flags a bad name as it is typed, as the loader would."""
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads((REPO / schema_path("op")).read_text()))
    data, _ = parse_yaml((REPO / OP).read_bytes(), "ops/det_gemm.yaml")
    for broken in (
        {**data, "name": "Det-Gemm"},
        {**data, "args": [{**data["args"][0], "shape": ["m", "K"]}, *data["args"][1:]]},
        {**data, "summary": "two\nlines"},
        {**data, "kernels": {**data["kernels"], "simt": {**data["kernels"]["simt"], "template": "../../etc/passwd"}}},
    ):
        assert list(validator.iter_errors(broken)), f"the schema accepts {broken}"


def test_schema_command_works_on_broken_specs_and_check_sees_stale_schemas(small_project: Project, capsys):
    (small_project.root / "specs/ops/det_gemm.yaml").write_text("not: [valid")
    schema = small_project.root / "schema/op.schema.json"
    schema.write_text("{}\n")
    assert small_project.run("schema") == 0
    assert json.loads(schema.read_text())["title"] == "OpSpec"
    schema.write_text("{}\n")
    (small_project.root / "specs/ops/det_gemm.yaml").write_bytes((REPO / OP).read_bytes())
    assert small_project.run("check") == 1
    assert "stale: schema/op.schema.json differs from what the specs produce" in capsys.readouterr().err


# --------------------------------------------------------------------------- coverage matrix and README table


def test_registry_matrix_lists_dtypes_backends_and_guarantees(small_project: Project):
    small_project.edit(OP, backends_line(small_project, "musa"), "  musa: []")
    assert small_project.run("generate") == 0
    text = (small_project.generated / "REGISTRY.md").read_text()
    assert "| `det_gemm` | deterministic, batch_invariant | float32, float16, bfloat16 |" in text
    assert "| platform | backends, in order | float32 | float16 | bfloat16 | guaranteed whichever backend runs |" in text
    # amx, which only CPUs run and which claims no portability, follows simt: portable is not
    # guaranteed whichever CPU backend runs.
    assert "| cpu | `simt` → `amx` | yes | yes | yes | deterministic, batch_invariant |" in text
    assert "| musa | unsupported | — | — | — | — |" in text


def test_repository_readme_carries_the_generated_operator_table():
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Operators\n", 1)[1].split("\n## ", 1)[0]
    assert readme.BEGIN in section and readme.END in section
    catalog = load_catalog(REPO / "specs", REPO)
    for op in catalog.ops:
        assert f"| `{op.name}` |" in section, f"{op.name} is missing from the README's operator table"


def test_readme_without_markers_is_left_alone(small_project: Project):
    (small_project.root / "README.md").write_text("# mine\n")
    assert small_project.run("generate") == 0
    assert (small_project.root / "README.md").read_text() == "# mine\n"


def test_splice_keeps_everything_outside_the_markers():
    text = f"a\n{readme.BEGIN}\nold\n{readme.END}\nb\n"
    assert readme.splice(text, "new 1\nnew 2\n") == f"a\n{readme.BEGIN}\nnew 1\nnew 2\n{readme.END}\nb\n"
    assert readme.splice("no markers\n", "x") is None
