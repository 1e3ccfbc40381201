"""The package's hand-written Python (runtime/): copied as it is into every package, declared
calls into the catalog checked at generation, and names no op may take."""

from __future__ import annotations

import os

import pytest

from conftest import REPO, Project
from generator.load import load_catalog
from generator.runtime_tree import calls_of, package_names


def test_each_integration_declares_exactly_the_ops_it_calls():
    """specs/package.yaml's integrations list, per module, the catalog names the module's code
    reaches (``_ops.<name>``, ``OPS["<name>"]``): no more, no fewer."""
    catalog = load_catalog(REPO / "specs", REPO)
    declared = {module: set(ops) for module, ops in catalog.package.integrations.items()}
    assert declared, "no integration is declared"
    for module in sorted(package_names(REPO / "runtime").modules):
        if module.startswith("_"):
            continue
        assert calls_of(REPO / "runtime", module) == declared.get(module, set()), module


def test_removing_an_op_an_integration_calls_is_refused(project: Project, capsys):
    before = project.snapshot()
    (project.root / "specs/ops/swiglu.yaml").unlink()
    (project.root / "specs/ops/swiglu_backward.yaml").unlink()
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    line = next(i for i, text in enumerate((project.root / "specs/package.yaml").read_text().splitlines(), 1) if text.startswith("  transformers:"))
    assert f"specs/package.yaml:{line}: integrations.transformers.8: transformers calls op swiglu, which no spec defines" in err, err
    assert project.snapshot() == before


def test_an_integration_the_package_does_not_have_is_refused(project: Project, capsys):
    project.edit("specs/package.yaml", "  distributed: [", "  megatron: [")
    assert project.run("check") == 2
    assert "integrations.megatron: Unknown package module megatron. Expected one of aten, distributed, moe, transformers, trl, vllm" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("alias", "taken"),
    [
        ("transformers", "the package's module transformers (runtime/rlkernels/transformers.py)"),
        ("detect_platform", "the package's own detect_platform (runtime/rlkernels/__init__.py)"),
        ("aten", "the package's module aten"),
        ("cases", None),
    ],
)
def test_an_op_may_not_take_a_name_of_the_package(project: Project, capsys, alias, taken):
    """The package's modules and what its __init__ binds are refused; other names, the test
    suite's module names among them, are not the package's."""
    project.edit("specs/ops/det_gemm_nt.yaml", "aliases: [det_linear]", f"aliases: [det_linear, {alias}]")
    if taken is None:
        assert project.run("check") == 1  # accepted: generated/ merely differs
        return
    assert project.run("check") == 2
    assert f"aliases.1: {alias} is already {taken}" in capsys.readouterr().err


def test_copies_are_the_hand_written_files_after_a_header(project: Project):
    for package in ("cpu", "cuda", "rocm", "musa"):
        for source in sorted((project.root / "runtime").rglob("*.py")):
            rel = source.relative_to(project.root / "runtime").as_posix()
            target = project.generated / package / rel
            header, body = target.read_text().split("\n", 1)
            assert header == f"# Copied from runtime/{rel} by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`."
            assert body == source.read_text()


def test_an_edit_of_a_hand_written_file_reaches_every_package(project: Project):
    project.edit("runtime/rlkernels/aten.py", "class BatchVariantWarning(UserWarning):", "class BatchVariantWarning(UserWarning):  # edited")
    assert project.run("generate") == 0
    for package in ("cpu", "cuda", "rocm", "musa"):
        assert "# edited" in (project.generated / package / "rlkernels/aten.py").read_text()
    assert project.run("check") == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: (root / "runtime/rlkernels/notes.txt").write_text("x"), "runtime/rlkernels/notes.txt: not copied into any package"),
        (lambda root: os.symlink("/etc/hostname", root / "runtime/rlkernels/host.py"), "runtime/rlkernels/host.py: not a regular file"),
        (lambda root: (root / "runtime/rlkernels/sub").mkdir(), "runtime/rlkernels/sub: a sub-folder"),
        (lambda root: (root / "runtime/extra.py").write_text("x = 1\n"), "runtime/extra.py: not copied into any package"),
    ],
)
def test_anything_but_plain_python_under_runtime_is_refused(project: Project, capsys, make, message):
    before = project.snapshot()
    make(project.root)
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert project.snapshot() == before
