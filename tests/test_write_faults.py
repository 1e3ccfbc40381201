"""The commit protocol of generator/write.py under faults beyond those of test_output.py:
a crash while writing the journal, a damaged journal, leftovers of a killed staging, a lost
journal, a directory in the way, a hand-mangled manifest, and the extras (README, schema/)
that share the commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, Project
from generator import write
from generator.readme import BEGIN, END

OP = "specs/ops/det_gemm.yaml"
UNSUPPORT_ROCM = ("  rocm: [simt]", "  rocm: []")
ROCM_KERNEL = "rocm/csrc/kernels/rocm/det_gemm_simt.hip"


@pytest.fixture
def project(small_project: Project) -> Project:
    """det_gemm only: the commit protocol does not care how many ops there are."""
    return small_project


def leftovers(project: Project) -> list[str]:
    return sorted(p.relative_to(project.root).as_posix() for p in project.root.rglob(f"*{write.NEW_SUFFIX}"))


def journal(project: Project):
    return project.generated / write.JOURNAL


def test_crash_while_writing_the_journal_leaves_the_old_tree(project: Project, monkeypatch):
    """Killed (here: Ctrl-C) while the journal is half written: nothing was committed, every staged file is gone."""
    before = project.snapshot()
    project.edit(OP, *UNSUPPORT_ROCM)
    real = write._fsync_write

    def dies_on_journal(path, data):
        if path.name.startswith(write.JOURNAL):
            path.write_bytes(data[: len(data) // 2])
            raise KeyboardInterrupt("killed")
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", dies_on_journal)
    with pytest.raises(KeyboardInterrupt):
        project.run("generate")
    assert project.snapshot() == before
    assert not leftovers(project)
    assert not journal(project).exists() and not (project.generated / (write.JOURNAL + ".tmp")).exists()


def test_disk_full_while_writing_the_journal_leaves_the_old_tree(project: Project, monkeypatch, capsys):
    before = project.snapshot()
    project.edit(OP, *UNSUPPORT_ROCM)
    real = write._fsync_write

    def full_on_journal(path, data):
        if path.name.startswith(write.JOURNAL):
            raise OSError(28, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", full_on_journal)
    assert project.run("generate") == 2
    assert "No space left on device" in capsys.readouterr().err
    assert project.snapshot() == before
    assert not leftovers(project)


def test_leftovers_of_a_killed_staging_are_dropped(project: Project):
    """SIGKILL during staging leaves .rlk-new files, a half journal .tmp and maybe a new empty directory, but no journal."""
    before = project.snapshot()
    (project.generated / "cuda/rlkernels/_ops.py.rlk-new").write_text("half")
    new_dir = project.generated / "cuda/csrc/kernels/metal"
    new_dir.mkdir()
    (new_dir / "det_gemm_simt.metal.rlk-new").write_text("half")
    (project.generated / (write.JOURNAL + ".tmp")).write_text('{"rename": ["cuda/rlk')
    assert project.run("check") == 0
    assert not leftovers(project)
    assert not new_dir.exists(), "the directory the killed run created is pruned with its leftovers"
    assert not (project.generated / (write.JOURNAL + ".tmp")).exists()
    assert project.snapshot() == before


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"rename": ["cuda/setup.py"', id="truncated"),
        pytest.param(b"\x00\xff\xfe", id="binary"),
        pytest.param(b"[]", id="a-list"),
        pytest.param(b"null", id="null"),
        pytest.param(b'{"rename": []}', id="no-delete-key"),
        pytest.param(b'{"rename": "cuda/setup.py", "delete": []}', id="rename-not-a-list"),
        pytest.param(b'{"rename": [1, 2], "delete": []}', id="entries-not-paths"),
    ],
)
def test_a_damaged_journal_is_reported_not_followed(project: Project, capsys, content):
    before = project.snapshot()
    journal(project).write_bytes(content)
    assert project.run("check") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"generated/{write.JOURNAL}: unreadable commit journal" in err and "remove it and run `make generate`" in err
    assert {k: v for k, v in project.snapshot().items() if k != write.JOURNAL} == {k: v for k, v in before.items() if k != write.JOURNAL}


@pytest.mark.parametrize("key", ["rename", "delete", "extra"])
def test_a_journal_pointing_outside_the_tree_touches_nothing(project: Project, capsys, key):
    victim = project.root / "specs" / "package.yaml"
    original = victim.read_bytes()
    staged = victim.with_name(victim.name + write.NEW_SUFFIX)
    staged.write_text("evil")
    entry = "../specs/package.yaml" if key != "extra" else "../outside.txt"
    plan = {"rename": [], "delete": [], key: [entry]}
    journal(project).write_text(json.dumps(plan))
    assert project.run("check") == 2
    assert "refusing to touch" in capsys.readouterr().err
    assert victim.read_bytes() == original
    staged.unlink()


def test_after_removing_a_damaged_journal_generate_repairs_the_tree(project: Project):
    """The advice the error gives works: whatever half of the commit had landed, generate converges."""
    project.edit(OP, *UNSUPPORT_ROCM)
    real_replace = os.replace
    count = {"n": 0}

    def dying_replace(src, dst):
        if str(src).endswith(write.NEW_SUFFIX):
            count["n"] += 1
            if count["n"] == 3:
                raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(write.os, "replace", dying_replace)
    try:
        with pytest.raises(KeyboardInterrupt):
            project.run("generate")
    finally:
        monkeypatch.undo()
    journal(project).write_text("{ damaged")
    journal(project).unlink()  # what the user is told to do
    assert project.run("generate") == 0
    assert project.run("check") == 0
    assert not (project.generated / ROCM_KERNEL).exists(), "the manifest is renamed last, so the stale kernel was still owned and got removed"
    assert not leftovers(project)


def test_killed_before_the_manifest_is_renamed_and_journal_lost_still_removes_stale_files(project: Project, monkeypatch):
    project.edit(OP, *UNSUPPORT_ROCM)
    real_replace = os.replace

    def dies_at_manifest(src, dst):
        if str(src).endswith(write.MANIFEST + write.NEW_SUFFIX):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(write.os, "replace", dies_at_manifest)
    with pytest.raises(KeyboardInterrupt):
        project.run("generate")
    monkeypatch.setattr(write.os, "replace", real_replace)
    assert not (project.generated / ROCM_KERNEL).exists(), "deletions happen before the manifest is renamed"
    assert ROCM_KERNEL in (project.generated / write.MANIFEST).read_text(), "the old manifest is still in place"
    journal(project).unlink()  # the journal is lost as well
    assert project.run("generate") == 0
    assert project.run("check") == 0
    assert ROCM_KERNEL not in (project.generated / write.MANIFEST).read_text()


def test_killed_while_recovering_is_finished_by_the_next_run(project: Project, monkeypatch):
    project.edit(OP, *UNSUPPORT_ROCM)
    real_replace = os.replace
    count = {"n": 0}

    def dying_replace(src, dst):
        if str(src).endswith(write.NEW_SUFFIX):
            count["n"] += 1
            if count["n"] in (2, 4):  # once during the commit, once during its recovery
                raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(write.os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        project.run("generate")
    with pytest.raises(KeyboardInterrupt):
        project.run("check")
    monkeypatch.setattr(write.os, "replace", real_replace)
    assert journal(project).exists()
    assert project.run("check") == 0
    assert not journal(project).exists() and not leftovers(project)


def test_a_directory_in_the_way_fails_before_anything_is_committed(project: Project, capsys):
    before = project.snapshot()
    project.edit(OP, *UNSUPPORT_ROCM)
    target = project.generated / "rocm/rlkernels/_registry.py"
    target.unlink()
    target.mkdir()
    assert project.run("generate") == 2
    assert "a directory is in the way" in capsys.readouterr().err
    assert not journal(project).exists() and not leftovers(project)
    assert project.snapshot() == {k: v for k, v in before.items() if k != "rocm/rlkernels/_registry.py"}


def test_a_mangled_manifest_neither_crashes_nor_reaches_outside(project: Project):
    outside = project.root / "specs" / "package.yaml"
    original = outside.read_bytes()
    (project.generated / write.MANIFEST).write_text(
        json.dumps({"files": {"../specs/package.yaml": "x", "/etc/hostname": "x", "": "x", "cuda/setup.py": "x"}})
    )
    assert project.run("generate") == 0
    assert outside.read_bytes() == original
    assert project.run("check") == 0
    (project.generated / write.MANIFEST).write_text(json.dumps({"files": [1, None, {"a": 1}]}))
    assert project.run("generate") == 0
    assert project.run("check") == 0


def test_ctrl_c_while_staging_rolls_back(project: Project, monkeypatch):
    before = project.snapshot()
    project.edit(OP, *UNSUPPORT_ROCM)
    real = write._fsync_write
    calls = {"n": 0}

    def interrupted(path, data):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        project.run("generate")
    assert project.snapshot() == before
    assert not leftovers(project)


# --------------------------------------------------------------------------- extras share the commit


def with_readme(project: Project) -> str:
    text = f"# demo\n\n## Operators\n\n{BEGIN}\n{END}\n\nmore prose\n"
    (project.root / "README.md").write_text(text)
    return text


def test_readme_block_is_written_with_the_tree_and_checked(project: Project, capsys):
    with_readme(project)
    assert project.run("check") == 1
    assert "stale: README.md has an operator table" in capsys.readouterr().err
    assert project.run("generate") == 0
    text = (project.root / "README.md").read_text()
    assert text.startswith("# demo\n") and text.endswith(f"{END}\n\nmore prose\n")
    assert "| `det_gemm` |" in text
    assert project.run("check") == 0
    (project.root / "README.md").write_text(text.replace("| `det_gemm` |", "| `det_gemm2` |"))
    assert project.run("check") == 1


def test_a_failure_staging_the_readme_leaves_everything_as_it_was(project: Project, monkeypatch, capsys):
    readme = with_readme(project)
    before = project.snapshot()
    project.edit(OP, *UNSUPPORT_ROCM)
    real = write._fsync_write

    def refuse_readme(path, data):
        if path.name.startswith("README.md"):
            raise PermissionError(13, "Permission denied", str(path))
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", refuse_readme)
    assert project.run("generate") == 2
    assert "Permission denied" in capsys.readouterr().err
    assert project.snapshot() == before
    assert (project.root / "README.md").read_text() == readme
    assert not leftovers(project)


def test_a_kill_mid_commit_finishes_the_readme_too(project: Project, monkeypatch):
    with_readme(project)
    project.edit(OP, *UNSUPPORT_ROCM)
    real_replace = os.replace

    def dying_replace(src, dst):
        if str(src).endswith(write.NEW_SUFFIX) and "README" not in str(src):
            raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(write.os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        project.run("generate")
    monkeypatch.setattr(write.os, "replace", real_replace)
    assert project.run("check") == 0, "recovery renamed the staged README along with the tree"
    assert not leftovers(project)


def test_a_stale_staged_readme_is_dropped(project: Project):
    with_readme(project)
    assert project.run("generate") == 0
    (project.root / ("README.md" + write.NEW_SUFFIX)).write_text("half")
    assert project.run("check") == 0
    assert not leftovers(project)


@pytest.mark.parametrize(
    "text",
    [f"{BEGIN}\n", f"{END}\n{BEGIN}\n", f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n"],
    ids=["no-end", "end-first", "twice"],
)
def test_broken_readme_markers_are_an_error_naming_the_lines(project: Project, capsys, text):
    before = project.snapshot()
    (project.root / "README.md").write_text("# demo\n" + text)
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "README.md:2" in err and "exactly one" in err
    assert project.snapshot() == before


def test_a_second_run_waits_for_the_first_to_finish(project: Project):
    """Two runs on one tree (a save hook and a terminal, say) take turns instead of interleaving commits."""
    import queue
    import threading

    before = project.snapshot()
    lines: queue.Queue[str] = queue.Queue()
    with write.exclusive(project.root):
        second = subprocess.Popen(
            [sys.executable, "-m", "generator", "--root", str(project.root), "generate"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=lambda: [lines.put(line) for line in second.stderr], daemon=True).start()
        assert "waiting for another generator run" in lines.get(timeout=120)
        assert second.poll() is None, "the second run went ahead while the first held the lock"
    assert second.wait(timeout=120) == 0
    assert "0 written, 0 removed" in second.stdout.read()
    assert project.snapshot() == before
