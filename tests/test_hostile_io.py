"""Hostile files and trees around the specs and the output: spec files that are not regular files
(a FIFO, a device, a directory), spec files the loader would skip, an empty catalog, a `--base`
that is not a revision, a read-only or unwritable tree, something other than a file at the lock
path, and control characters echoed back.  Each ends in exit 2 with a clear message and no
traceback, and leaves generated/ byte for byte as it was."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, Project
from generator.load import MAX_SPEC_BYTES

OP = "specs/ops/det_gemm.yaml"


@pytest.fixture
def project(small_project: Project) -> Project:
    """det_gemm only: none of this depends on how many ops there are."""
    return small_project


def run_cli(project: Project, *args: str, limit_bytes: int | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process: a run that hangs, or reads until memory runs out, fails the test
    instead of the test run.  ``limit_bytes``: the child's address space limit."""

    def limit() -> None:
        if limit_bytes is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    try:
        return subprocess.run(
            [sys.executable, "-m", "generator", "--root", str(project.root), *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`generator {' '.join(args)}` still ran after {timeout} s")


def refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    for needle in needles:
        assert needle in result.stderr, result.stderr


# --------------------------------------------------------------------------- spec files that are not regular files


def test_a_fifo_spec_is_refused_without_blocking(project: Project):
    before = project.snapshot()
    os.mkfifo(project.spec("ops/evil.yaml"))
    for command in ("generate", "check"):
        refused(run_cli(project, command, timeout=30), "specs/ops/evil.yaml:1: not a regular file (a FIFO)")
    assert project.snapshot() == before


def test_a_fifo_package_spec_is_refused_without_blocking(project: Project):
    before = project.snapshot()
    package = project.spec("package.yaml")
    package.unlink()
    os.mkfifo(package)
    refused(run_cli(project, "generate", timeout=30), "specs/package.yaml:1: not a regular file (a FIFO)")
    assert project.snapshot() == before


def test_a_fifo_readme_is_refused_without_blocking(project: Project):
    """The README's generated blocks are spliced into it: read, like every input, through the one
    bounded reader."""
    before = project.snapshot()
    os.mkfifo(project.root / "README.md")
    refused(run_cli(project, "generate", timeout=30), "README.md: cannot read it (not a regular file (a FIFO))")
    assert project.snapshot() == before


def test_a_readme_linked_outside_the_project_is_refused(project: Project, tmp_path: Path):
    outside = tmp_path / "elsewhere.md"
    outside.write_text("# elsewhere\n")
    (project.root / "README.md").symlink_to(outside)
    before = project.snapshot()
    refused(run_cli(project, "generate", timeout=30), "README.md: cannot read it (a symbolic link to", "outside the project")
    assert project.snapshot() == before
    assert outside.read_text() == "# elsewhere\n"


def test_a_symlink_to_an_endless_device_is_refused_without_reading_it(project: Project):
    """Read whole, /dev/zero fills memory; the child is limited to 2 GiB so that a regression fails fast."""
    before = project.snapshot()
    project.spec("ops/zero.yaml").symlink_to("/dev/zero")
    refused(run_cli(project, "generate", limit_bytes=2 << 30), "specs/ops/zero.yaml:1: not a regular file (a character device)")
    assert project.snapshot() == before


def test_a_huge_spec_is_refused_after_reading_at_most_the_limit(project: Project):
    """A sparse 16 GiB file costs no disk; reading it whole would need 16 GiB of memory."""
    before = project.snapshot()
    with open(project.spec("ops/huge.yaml"), "wb") as handle:
        handle.truncate(16 << 30)
    refused(run_cli(project, "generate", limit_bytes=2 << 30), f"specs/ops/huge.yaml:1: file is larger than {MAX_SPEC_BYTES} bytes")
    assert project.snapshot() == before


def test_the_spec_reader_reads_at_most_the_limit_plus_one_byte(project: Project, monkeypatch):
    from generator import load

    spec = project.spec("ops/huge.yaml")
    spec.write_bytes(b"#" * (4 * MAX_SPEC_BYTES))
    asked: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        asked.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(load.os, "read", counting_read)
    with pytest.raises(load.SpecError, match="larger than"):
        load.read_yaml(spec, "specs/ops/huge.yaml")
    assert asked and sum(asked) <= MAX_SPEC_BYTES + 1


def test_a_directory_named_like_a_spec_is_refused(project: Project, capsys):
    before = project.snapshot()
    project.spec("ops/folder.yaml").mkdir()
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert "specs/ops/folder.yaml:1: not a regular file (a directory)" in err
    assert project.snapshot() == before


def test_a_symlink_to_a_spec_inside_the_project_is_loaded(project: Project, capsys):
    """A symlink that resolves to a regular file inside the project is read like the file itself."""
    before = project.snapshot()
    shared = project.root / "shared"
    shared.mkdir()
    spec = project.root / OP
    spec.rename(shared / "det_gemm.yaml")
    spec.symlink_to("../../shared/det_gemm.yaml")
    assert project.run("check") == 0
    assert project.run("generate") == 0
    assert project.snapshot() == before


def test_a_symlink_to_a_spec_outside_the_project_is_refused(project: Project, tmp_path: Path, capsys):
    before = project.snapshot()
    outside = tmp_path / "elsewhere.yaml"
    spec = project.root / OP
    outside.write_bytes(spec.read_bytes())
    spec.unlink()
    spec.symlink_to(outside)
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert f"{OP}:1: a symbolic link to {outside}, outside the project" in err
    assert project.snapshot() == before


# --------------------------------------------------------------------------- spec files the loader would skip


@pytest.mark.parametrize(
    "rel, message",
    [
        ("ops/extra.YAML", "spec files end in .yaml (lower case); rename it or remove it"),
        ("ops/extra.Yaml", "spec files end in .yaml (lower case); rename it or remove it"),
        ("ops/extra.yml", "spec files end in .yaml (lower case); rename it or remove it"),
        ("platforms/metal.YML", "spec files end in .yaml (lower case); rename it or remove it"),
        ("ops/more/extra.yaml", "not loaded: spec files lie directly in specs/ops/ or specs/platforms/, not in a sub-folder"),
        ("ops/more/deeper/extra.yml", "not loaded: spec files lie directly in specs/ops/ or specs/platforms/, not in a sub-folder"),
        ("platforms/old/cuda.yaml", "not loaded: spec files lie directly in specs/ops/ or specs/platforms/, not in a sub-folder"),
        ("extra.yaml", "not loaded: op specs lie in specs/ops/, platform specs in specs/platforms/"),
        ("drafts/extra.yaml", "not loaded: op specs lie in specs/ops/, platform specs in specs/platforms/"),
    ],
)
def test_a_spec_that_would_not_be_loaded_is_an_error(project: Project, capsys, rel: str, message: str):
    before = project.snapshot()
    path = project.spec(rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((project.root / OP).read_bytes())
    assert project.run("generate") == 2
    err = capsys.readouterr().err
    assert f"specs/{rel}:1: {message}" in err
    assert "Traceback" not in err
    assert project.snapshot() == before


def test_other_files_beside_the_specs_are_left_alone(project: Project):
    """A README or a .gitkeep is not a spec, wherever it lies."""
    project.spec("ops/README.md").write_text("notes\n")
    (project.spec("ops/notes")).mkdir()
    project.spec("ops/notes/.gitkeep").write_text("")
    project.spec("README.md").write_text("notes\n")
    assert project.run("check") == 0


# --------------------------------------------------------------------------- an empty catalog


@pytest.mark.parametrize("how", ["empty", "missing"])
def test_an_empty_catalog_is_an_error_not_a_wipe(project: Project, capsys, how: str):
    before = project.snapshot()
    ops = project.root / "specs" / "ops"
    for spec in ops.glob("*.yaml"):
        spec.unlink()
    if how == "missing":
        ops.rmdir()
    for command in ("generate", "check", "diff"):
        assert project.run(command) == 2, command
        err = capsys.readouterr().err
        assert "specs/ops:1: no op specs found in specs/ops" in err, err
    assert project.snapshot() == before


# --------------------------------------------------------------------------- diff --base takes revisions only


def git(project: Project, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=project.root, check=True, capture_output=True)


@pytest.fixture
def committed(project: Project) -> Project:
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "base")
    return project


@pytest.mark.parametrize("option", ["--output={victim}", "-o{victim}", "--output", "--no-index", "-"])
def test_a_base_that_looks_like_an_option_is_not_passed_to_git_as_one(committed: Project, tmp_path: Path, capsys, option: str):
    """Passed on, `--output=F` makes git write F:generated/registry.json: a file outside the tree
    wherever the folder F:generated exists (made here, so that a regression shows)."""
    victim = tmp_path / "out"
    (tmp_path / "out:generated").mkdir()
    value = option.format(victim=victim)
    before = committed.snapshot()
    assert committed.run("diff", f"--base={value}") == 2
    err = capsys.readouterr().err
    assert f"error: --base {value}: not a commit in this repository" in err
    assert not list((tmp_path / "out:generated").iterdir()), "git wrote a file outside the tree"
    assert committed.snapshot() == before


@pytest.mark.parametrize("value", ["no-such-rev", "HEAD:generated/registry.json", "HEAD^{tree}", ""])
def test_a_base_that_is_not_a_commit_is_refused(committed: Project, capsys, value: str):
    assert committed.run("diff", "--base", value) == 2
    assert f"error: --base {value or repr('')}: not a commit in this repository" in capsys.readouterr().err


def test_a_base_with_control_characters_is_echoed_escaped(committed: Project, capsys):
    assert committed.run("diff", "--base", "HEAD\x1b[2J\rx") == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err
    assert "error: --base 'HEAD\\x1b[2J\\rx': not a commit in this repository" in err


def test_a_base_that_names_a_commit_is_read_at_that_commit(committed: Project, capsys):
    assert committed.run("diff", "--base", "HEAD~0", "--summary") == 0
    assert "semantic changes (HEAD~0:generated/registry.json → the specs): none" in capsys.readouterr().out


# --------------------------------------------------------------------------- explain echoes nothing raw


@pytest.mark.parametrize("args", [("explain", "\x1b]0;pwned\x07det\x1b[2Jgemm"), ("explain", "det_gemm", "--platform", "cu\rda\x1b[1m")])
def test_explain_escapes_the_names_it_echoes(project: Project, capsys, args: tuple[str, ...]):
    assert project.run(*args) == 2
    captured = capsys.readouterr()
    echoed = captured.out + captured.err
    assert not any(c in echoed for c in "\x1b\x07\r"), echoed
    name = args[-1]
    assert f"error: Unknown {'platform' if '--platform' in args else 'op'} {name!a}. Expected one of" in captured.err


# --------------------------------------------------------------------------- a read-only or unwritable tree

EROFS_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class ReadOnly:
    """Every write under ``dirs`` fails as on a read-only mount (EROFS), at the level of the
    system calls the generator makes; permission bits would not do, as the tests may run as root.
    ``attempts``: what was tried."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *dirs: Path) -> None:
        import builtins
        import io

        self.dirs = [d.resolve() for d in dirs]
        self.attempts: list[str] = []
        real_open, real_os_open = io.open, os.open

        def checked(path: object, what: str) -> None:
            target = Path(os.fsdecode(path)).absolute()  # type: ignore[arg-type]
            target = target.parent.resolve() / target.name
            if any(target == d or d in target.parents for d in self.dirs):
                self.attempts.append(f"{what} {target}")
                raise OSError(30, "Read-only file system", str(target))

        def fake_open(file, mode="r", *args, **kwargs):
            if not isinstance(file, int) and any(c in mode for c in "wax+"):
                checked(file, f"open({mode})")
            return real_open(file, mode, *args, **kwargs)

        def fake_os_open(path, flags, *args, **kwargs):
            if flags & EROFS_FLAGS:
                checked(path, "os.open")
            return real_os_open(path, flags, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", fake_open)
        monkeypatch.setattr(io, "open", fake_open)
        monkeypatch.setattr(os, "open", fake_os_open)
        for name in ("unlink", "remove", "rmdir", "mkdir"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, lambda path, *a, _real=real, _name=name, **k: (checked(path, _name), _real(path, *a, **k))[1])
        for name in ("replace", "rename"):
            real = getattr(os, name)
            monkeypatch.setattr(
                os, name, lambda src, dst, *a, _real=real, _name=name, **k: (checked(src, _name), checked(dst, _name), _real(src, dst, *a, **k))[2]
            )


def no_traceback(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out, captured.err


@pytest.mark.parametrize("scope", ["generated", "root"])
def test_check_and_diff_work_on_a_read_only_tree_without_writing(project: Project, monkeypatch, capsys, scope: str):
    before = project.snapshot()
    fake = ReadOnly(monkeypatch, project.generated if scope == "generated" else project.root)
    assert project.run("check") == 0
    assert project.run("diff") == 0
    assert project.run("explain", "det_gemm") == 0
    no_traceback(capsys)
    assert fake.attempts == []
    assert project.snapshot() == before


def test_check_and_diff_on_a_read_only_root_without_a_lock_file_say_they_run_unlocked(project: Project, monkeypatch, capsys):
    lock = project.root / ".rlk-generate.lock"
    lock.unlink()
    ReadOnly(monkeypatch, project.root)
    for command in ("check", "diff"):
        assert project.run(command) == 0
        _, err = no_traceback(capsys)
        assert f"note: cannot create the lock file {lock} (Read-only file system); running without it" in err
    assert not lock.exists()


def test_check_ignores_leftovers_it_cannot_remove_from_a_read_only_tree(project: Project, monkeypatch, capsys):
    leftover = project.generated / "cuda/setup.py.rlk-new"
    leftover.write_text("half")
    ReadOnly(monkeypatch, project.generated)
    assert project.run("check") == 0
    assert project.run("diff") == 0
    no_traceback(capsys)
    assert leftover.exists()


def test_check_with_an_interrupted_commit_on_a_read_only_tree_is_an_error(project: Project, monkeypatch, capsys):
    (project.generated / ".rlk-journal.json").write_text('{"rename": [], "delete": ["cuda/setup.py"], "extra": []}')
    ReadOnly(monkeypatch, project.generated)
    assert project.run("check") == 2
    _, err = no_traceback(capsys)
    assert "could not finish the interrupted commit" in err and "Read-only file system" in err


@pytest.mark.parametrize("scope", ["generated", "root"])
def test_generate_on_a_read_only_tree_is_an_error_and_changes_nothing(project: Project, monkeypatch, capsys, scope: str):
    before = project.snapshot()
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    ReadOnly(monkeypatch, project.generated if scope == "generated" else project.root)
    assert project.run("generate") == 2
    _, err = no_traceback(capsys)
    assert "error: could not write" in err and "Read-only file system" in err and "it was left as it was" in err
    assert project.snapshot() == before
    assert not list(project.root.rglob("*.rlk-new"))


def test_generate_with_nothing_to_write_succeeds_on_a_read_only_tree(project: Project, monkeypatch, capsys):
    fake = ReadOnly(monkeypatch, project.root)
    assert project.run("generate") == 0
    out, _ = no_traceback(capsys)
    assert "0 written, 0 removed" in out
    assert fake.attempts == []


def test_generate_on_a_read_only_root_without_a_lock_file_is_an_error(project: Project, monkeypatch, capsys):
    lock = project.root / ".rlk-generate.lock"
    lock.unlink()
    ReadOnly(monkeypatch, project.root)
    for command in ("generate", "schema"):
        assert project.run(command) == 2
        _, err = no_traceback(capsys)
        assert f"error: cannot create the lock file {lock} (Read-only file system)" in err


def test_schema_on_a_read_only_tree_is_an_error(project: Project, monkeypatch, capsys):
    stale = project.root / "schema" / "op.schema.json"
    stale.write_text("{}")
    ReadOnly(monkeypatch, project.root)
    assert project.run("schema") == 2
    _, err = no_traceback(capsys)
    assert f"error: could not write {stale}: Read-only file system" in err
    assert stale.read_text() == "{}"


def test_writing_evidence_to_a_read_only_tree_is_an_error(project: Project, monkeypatch):
    from generator import evidence
    from generator.errors import GeneratorError
    from generator.evidence import How, Record

    new = Record(op="det_gemm", kernel="simt", platform="cpu", dtype="float32", level="executed", source_sha256="a" * 64, commit="0" * 40, how=How(check="a check"))
    ReadOnly(monkeypatch, project.root)
    with pytest.raises(GeneratorError, match="could not write evidence/cpu/executed.json: Read-only file system"):
        evidence.write_ledger(project.root, [new])


# --------------------------------------------------------------------------- the lock path


@pytest.mark.parametrize("command", ["generate", "check", "diff", "schema"])
def test_a_directory_at_the_lock_path_is_an_error(project: Project, capsys, command: str):
    before = project.snapshot()
    lock = project.root / ".rlk-generate.lock"
    lock.unlink()
    lock.mkdir()
    assert project.run(command) == 2
    _, err = no_traceback(capsys)
    assert f"error: {lock}: the generator's lock file is a directory, not a regular file; remove it and run again" in err
    assert project.snapshot() == before


def test_a_fifo_at_the_lock_path_is_an_error_without_blocking(project: Project):
    lock = project.root / ".rlk-generate.lock"
    lock.unlink()
    os.mkfifo(lock)
    refused(run_cli(project, "check", timeout=30), f"error: {lock}: the generator's lock file is a FIFO, not a regular file")


def test_a_symbolic_link_at_the_lock_path_is_an_error_and_creates_nothing(project: Project, tmp_path: Path, capsys):
    lock = project.root / ".rlk-generate.lock"
    lock.unlink()
    victim = tmp_path / "victim"
    lock.symlink_to(victim)
    assert project.run("generate") == 2
    _, err = no_traceback(capsys)
    assert f"error: {lock}: the generator's lock file is a symbolic link, not a regular file" in err
    assert not victim.exists()


# --------------------------------------------------------------------------- files the tools read besides the specs
# The manifest, the commit journal, the evidence ledger, registry.json and a results file are each
# read through one bounded reader: a FIFO, a device, a file past its size limit or JSON nested past
# its depth limit is an error naming it (or, for the manifest, a manifest rebuilt from the tree),
# never a hang, a RecursionError or a MemoryError.

DEEP_JSON = b"[" * 100_000


def _plant(path: Path, what: str) -> None:
    path.unlink(missing_ok=True)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "zero":
        path.symlink_to("/dev/zero")
    elif what == "deep":
        path.write_bytes(DEEP_JSON)
    elif what == "mangled":
        path.write_text('{"files": [')


@pytest.mark.parametrize("what", ["fifo", "zero", "deep", "mangled"])
def test_a_hostile_manifest_is_rebuilt_from_the_tree(project: Project, what: str):
    """The manifest cannot say what the generator owns: the files that begin as its files begin
    are its, so the files of a kernel no longer generated are still reported stale and removed."""
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    (project.generated / "rocm" / "NOTES.txt").write_text("mine")
    _plant(project.generated / "manifest.json", what)
    checked = run_cli(project, "check", limit_bytes=4 << 30)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
    assert "stale: generated/rocm/csrc/kernels/rocm/det_gemm_simt.hip is no longer produced" in checked.stderr
    if what == "zero":  # a symbolic link leading out of the tree is never touched: a clear refusal
        refused(run_cli(project, "generate"), "refusing to touch manifest.json: it lies outside")
        (project.generated / "manifest.json").unlink()
    generated = run_cli(project, "generate", limit_bytes=4 << 30)
    assert generated.returncode == 0, generated.stderr
    assert not (project.generated / "rocm/csrc/kernels/rocm/det_gemm_simt.hip").exists()
    assert (project.generated / "rocm" / "NOTES.txt").read_text() == "mine", "a file the generator never wrote is left alone"
    assert project.run("check") == 0


@pytest.mark.parametrize("what", ["fifo", "zero", "deep"])
def test_a_hostile_ledger_file_is_an_error_naming_it(project: Project, what: str):
    ledger = project.root / "evidence/cpu/executed.json"
    _plant(ledger, what)
    before = project.snapshot()
    refused(run_cli(project, "generate", "--full", limit_bytes=4 << 30), "evidence/cpu/executed.json: ")
    assert project.snapshot() == before


@pytest.mark.parametrize("what", ["fifo", "zero", "deep"])
def test_a_hostile_results_file_is_an_error_naming_it(project: Project, tmp_path: Path, what: str):
    results = tmp_path / "results.json"
    _plant(results, what)
    refused(run_cli(project, "evidence", "record-executed", str(results), limit_bytes=4 << 30), f"{results}: ")


@pytest.mark.parametrize("what", ["fifo", "zero", "deep"])
def test_a_hostile_registry_makes_the_semantic_summary_unavailable(project: Project, what: str):
    _plant(project.generated / "registry.json", what)
    done = run_cli(project, "diff", "--summary", limit_bytes=4 << 30)
    assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith("semantic changes: unavailable (generated/registry.json: "), done.stdout


def _repeat_first_key(path: Path) -> str:
    """Give the file's first key a second time, with another value: the JSON parser alone would
    keep the last one.  Returns the key."""
    text = path.read_text()
    key = text[text.index('"') + 1 : text.index('"', text.index('"') + 1)]
    path.write_text(text.replace("{", f'{{"{key}": null, ', 1))
    return key


def test_every_json_file_the_tools_read_refuses_a_repeated_key(project: Project, tmp_path: Path):
    """One reader decodes every JSON file: a key given twice is malformed JSON, whichever file it is
    in: the ledger and a results file are errors naming them, and registry.json leaves the
    semantic summary unavailable (a manifest, read the same way, is rebuilt from the tree)."""
    results = tmp_path / "results.json"
    results.write_text('{"package_platform": "cpu", "outcomes": []}')
    key = _repeat_first_key(results)
    refused(run_cli(project, "evidence", "record-executed", str(results)), f"{results}: not valid JSON (duplicate key '{key}' in one object)")

    ledger = project.root / "evidence/cpu/executed.json"
    key = _repeat_first_key(ledger)
    refused(run_cli(project, "check"), f"evidence/cpu/executed.json: not valid JSON (duplicate key '{key}' in one object)")
    ledger.write_text(ledger.read_text().replace(f'{{"{key}": null, ', "{", 1))

    key = _repeat_first_key(project.generated / "registry.json")
    done = run_cli(project, "diff", "--summary")
    assert done.stdout.startswith(f"semantic changes: unavailable (generated/registry.json: not valid JSON (duplicate key '{key}' in one object)"), done.stdout


def test_a_fifo_in_an_outputs_place_is_replaced_not_read(project: Project):
    target = project.generated / "cpu" / "README.md"
    target.unlink()
    os.mkfifo(target)
    done = run_cli(project, "generate")
    assert done.returncode == 0, done.stderr
    assert target.is_file() and not target.is_fifo()


def test_an_output_tree_that_is_a_symbolic_link_is_not_written_through(project: Project, tmp_path: Path):
    outside = tmp_path / "elsewhere"
    project.generated.rename(outside)
    project.generated.symlink_to(outside)
    project.edit(OP, "  rocm: [simt]", "  rocm: []")
    before = {p.relative_to(outside).as_posix(): p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    refused(run_cli(project, "generate"), "is a symbolic link", "the output tree must be a folder of the project")
    assert {p.relative_to(outside).as_posix(): p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
