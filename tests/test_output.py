"""generated/ is byte-stable, carries provenance, is written only where it changes,
drops files it no longer produces, and `check` catches anything stale."""

from __future__ import annotations

import os
import time

import pytest

from conftest import REPO, Project, copy_project

OP = "specs/ops/det_gemm.yaml"


def test_generate_is_byte_stable_across_runs_and_locations(tmp_path, project: Project):
    other = copy_project(tmp_path / "elsewhere" / "deeper")
    mine, theirs = project.snapshot(), other.snapshot()
    assert {k: v[0] for k, v in mine.items()} == {k: v[0] for k, v in theirs.items()}
    for path in project.generated.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"\r\n" not in data, path
            assert str(tmp_path).encode() not in data, f"{path} contains an absolute path"
            assert data.endswith(b"\n") and not data.endswith(b"\n\n"), path


def test_committed_generated_tree_is_fresh():
    """The repository's own generated/ is exactly what its specs produce."""
    from generator.cli import main

    assert main(["--root", str(REPO), "check"]) == 0


def test_every_file_has_a_provenance_header(project: Project):
    for path in project.generated.rglob("*"):
        if not path.is_file() or path.name == "manifest.json":
            continue
        head = path.read_text().splitlines()[:3]
        if path.suffix == ".json":
            assert '"_generated"' in path.read_text(), path
            continue
        assert "DO NOT EDIT" in head[0], path
        if head[0].startswith(("# Copied from runtime/", "// Copied from runtime/")):  # the package's hand-written Python and C++, as it is
            rel = head[0].split("Copied from ")[1].split(" ")[0]
            assert path.read_text().split("\n", 1)[1] == (project.root / rel).read_text(), path
            continue
        assert head[1].split("Specs: ")[1].startswith("specs/"), path
        assert head[2].split("Template: ")[1].startswith("templates/"), path


def test_noop_generate_writes_nothing_and_keeps_mtimes(project: Project, capsys):
    before = project.snapshot()
    time.sleep(0.01)
    assert project.run("generate") == 0
    assert ", 0 written, 0 removed" in capsys.readouterr().out
    assert project.snapshot() == before


def test_spec_edit_rewrites_only_affected_files(project: Project):
    before = project.snapshot()
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    assert project.run("generate") == 0
    after = project.snapshot()
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed, "the edit changed nothing"
    assert all(k.startswith("rocm/") or "/" not in k for k in changed), changed
    for key in before.keys() & after.keys():
        if key not in changed:
            assert before[key][1] == after[key][1], f"{key} was rewritten with identical bytes"


def test_check_catches_a_hand_edit(project: Project, capsys):
    target = project.generated / "cuda/csrc/kernels/cuda/det_gemm_simt.cu"
    target.write_text(target.read_text().replace("kTileK = 8", "kTileK = 32"))
    assert project.run("check") == 1
    err = capsys.readouterr().err
    assert "generated/cuda/csrc/kernels/cuda/det_gemm_simt.cu differs" in err


def test_check_catches_a_deleted_file(project: Project, capsys):
    (project.generated / "cpu/rlkernels/_catalog.json").unlink()
    assert project.run("check") == 1
    assert "generated/cpu/rlkernels/_catalog.json is missing" in capsys.readouterr().err


def test_check_catches_a_stale_template(project: Project, capsys):
    template = project.root / "templates/package/README.md.j2"
    template.write_text(template.read_text() + "\nchanged\n")
    assert project.run("check") == 1
    err = capsys.readouterr().err
    for platform in ("cpu", "cuda", "rocm", "musa"):
        assert f"generated/{platform}/README.md differs" in err


def test_diff_shows_what_generate_would_change(project: Project, capsys):
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    assert project.run("diff") == 1
    out = capsys.readouterr().out
    assert "--- a/generated/rocm/csrc/kernels/rocm/det_gemm_simt.hip" in out
    assert "+++ /dev/null" in out
    assert "--- a/generated/rocm/rlkernels/_build.json" in out and '+      "rocm": []' in out


def test_stale_files_are_removed_but_unowned_files_are_kept(project: Project):
    stray = project.generated / "cuda" / "NOTES.txt"
    stray.write_text("mine")
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    assert project.run("generate") == 0
    assert not (project.generated / "rocm/csrc/kernels/rocm/det_gemm_simt.hip").exists()
    assert not (project.generated / "rocm/csrc/kernels/rocm/det_gemm_simt.h").exists()
    assert stray.read_text() == "mine", "files the generator never owned are left alone"
    assert "rocm/csrc/kernels/rocm/det_gemm_simt.hip" not in (project.generated / "manifest.json").read_text()


def test_removing_an_op_removes_its_files(project: Project):
    project.spec("ops/grpo_loss.yaml").unlink()  # an op no other op's backward and no integration uses
    assert project.run("generate") == 0
    assert not list(project.generated.rglob("grpo_loss_block*"))
    assert list(project.generated.rglob("grpo_loss_backward_block*")), "only the removed op's files go"
    assert (project.generated / "cpu/rlkernels/_registry.py").exists()


def test_template_error_leaves_generated_untouched(project: Project, capsys):
    before = project.snapshot()
    project.edit(OP, "  rocm: [simt]", "  rocm: []")  # a real change, so something would be written
    template = project.root / "templates/review/REGISTRY.md.j2"  # the last file rendered
    template.write_text(template.read_text() + "{{ no_such_variable }}\n")
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "templates/review/REGISTRY.md.j2" in err and "no_such_variable" in err
    assert project.snapshot() == before


def test_unwritable_directory_leaves_generated_untouched(project: Project, capsys, monkeypatch):
    """Simulated with a patched writer, since root (which CI runs as) ignores directory permissions."""
    from generator import write

    before = project.snapshot()
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    real = write._fsync_write

    def refuse_rocm(path, data):
        if "/rocm/" in str(path):
            raise PermissionError(13, "Permission denied", str(path))
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", refuse_rocm)
    assert project.run("generate") == 2
    assert "Permission denied" in capsys.readouterr().err
    assert project.snapshot() == before
    assert not list(project.generated.rglob("*.rlk-new"))


def test_write_failure_midway_rolls_back(project: Project, capsys, monkeypatch):
    """A failure while staging the last file leaves no new, changed or half-written file behind."""
    from generator import write

    before = project.snapshot()
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    real = write._fsync_write
    calls = {"n": 0}

    def failing(path, data):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", failing)
    assert project.run("generate") == 2
    assert "No space left on device" in capsys.readouterr().err
    assert project.snapshot() == before
    assert not list(project.generated.rglob("*.rlk-new"))


def test_killed_between_files_is_finished_by_the_next_run(project: Project, monkeypatch):
    """If the process dies after the journal is written, the next command completes the commit."""
    from generator import write

    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    real_replace = os.replace
    renamed = {"n": 0}

    def dying_replace(src, dst):
        if str(src).endswith(write.NEW_SUFFIX):
            renamed["n"] += 1
            if renamed["n"] == 2:
                raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(write.os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        project.run("generate")
    monkeypatch.setattr(write.os, "replace", real_replace)
    assert (project.generated / write.JOURNAL).exists()
    assert project.run("check") == 0, "check finishes the interrupted commit first, then finds the tree fresh"
    assert not (project.generated / write.JOURNAL).exists()
    assert not list(project.generated.rglob("*.rlk-new"))
