"""A ``generate`` that would change nothing is recognised without rendering (generator/noop.py),
and never wrongly: any change to an input or an output, any state file that is not exactly what a
successful run stored, and anything unusual among the files renders as before."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import REPO, Project
from generator import cli, noop, pipeline, write
from generator.readme import BEGIN, END

SKIPPED = "so nothing was rendered"
OP = "specs/ops/det_gemm.yaml"


@pytest.fixture
def project(small_project: Project) -> Project:
    return small_project


class Renders:
    """Counts the runs that rendered (``produce_all``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = pipeline.produce_all

        def counting(layout, workers=None):  # type: ignore[no-untyped-def]
            self.count += 1
            return real(layout, workers)

        monkeypatch.setattr(pipeline, "produce_all", counting)


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Renders:
    return Renders(monkeypatch)


def everything(project: Project) -> dict[str, tuple[str, int]]:
    """Every file of the project but the stored state and the lock: hash and mtime."""
    skip = {noop.STATE, write.LOCK}
    return {
        rel: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(project.root.rglob("*"))
        if p.is_file() and not p.is_symlink() and (rel := p.relative_to(project.root).as_posix()) not in skip
    }


def state_file(project: Project) -> Path:
    return project.root / noop.STATE


def generate(project: Project, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert project.run("generate", *args) == 0
    return capsys.readouterr().out


# --------------------------------------------------------------------------- the skip itself


def test_an_unchanged_project_is_not_rendered_again(project: Project, renders: Renders, capsys):
    """The fixture's generate stored the state; the next run matches it, renders nothing and touches nothing."""
    assert noop.read_state(project.root) is not None
    before = everything(project)
    out = generate(project, capsys)
    assert renders.count == 0 and SKIPPED in out
    assert "0 written, 0 removed" in out
    assert everything(project) == before


def test_the_skip_prints_the_same_evidence_report_as_a_render(project: Project, capsys):
    capsys.readouterr()
    assert project.run("generate", "--full") == 0
    rendered = capsys.readouterr()
    assert project.run("generate") == 0
    skipped = capsys.readouterr()
    assert SKIPPED in skipped.out
    assert skipped.out.splitlines()[1:] == rendered.out.splitlines()[1:]
    assert skipped.err == rendered.err


def test_full_renders_even_when_nothing_changed(project: Project, renders: Renders, capsys):
    before = everything(project)
    assert SKIPPED not in generate(project, capsys, "--full")
    assert renders.count == 1
    assert everything(project) == before


# --------------------------------------------------------------------------- an input changed: render


def edit_spec(project: Project) -> None:
    project.edit(OP, "summary: ", "summary: Edited. ")


def edit_template(project: Project) -> None:
    # a comment: the output does not change, but a changed template is never assumed harmless
    path = project.root / "templates/kernels/det_gemm_simt.j2"
    path.write_text("{# edited #}\n" + path.read_text())


def add_template(project: Project) -> None:
    (project.root / "templates/kernels/unused.j2").write_text("nothing uses this\n")


def edit_evidence(project: Project) -> None:
    ledger = next((project.root / "evidence").glob("*/*.json"))
    ledger.write_text(ledger.read_text() + "\n")


def add_stray_spec(project: Project) -> None:
    (project.root / "specs/ops/notes").mkdir()


def change_versions(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    # what another Jinja, pydantic or PyYAML (or Python) would look like to the digest
    real = noop._installed_versions()
    assert "jinja2" in real
    monkeypatch.setattr(noop, "_installed_versions", lambda: {**real, "jinja2": "0." + real["jinja2"]})
    noop._versions.cache_clear()
    monkeypatch.setattr(noop, "_versions", noop._versions.__wrapped__)


INPUT_CHANGES = {
    "spec": edit_spec,
    "template": edit_template,
    "new-template": add_template,
    "evidence": edit_evidence,
    "folder-in-specs": add_stray_spec,
    "library-versions": change_versions,
}


@pytest.mark.parametrize("change", INPUT_CHANGES.values(), ids=INPUT_CHANGES.keys())
def test_a_changed_input_renders(project: Project, renders: Renders, capsys, monkeypatch, change):
    if change is change_versions:
        change(project, monkeypatch)
    else:
        change(project)
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    assert project.run("check") == 0
    assert SKIPPED in generate(project, capsys), "the state stored by that run matches the next"


def test_a_changed_generator_renders(project: Project, renders: Renders, capsys, tmp_path, monkeypatch):
    """The generator's own sources are inputs: a copy of the package stands in for the running one."""
    copy = tmp_path / "pkg" / "generator"
    shutil.copytree(noop.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(noop, "PACKAGE_DIR", copy)
    generate(project, capsys)  # the state now names the copy's digest
    assert SKIPPED in generate(project, capsys)
    renders.count = 0
    (copy / "render.py").write_text((copy / "render.py").read_text() + "\n# edited\n")
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "render.cpython.pyc").write_bytes(b"compiled")
    assert SKIPPED in generate(project, capsys), "compiled caches are not sources"


def test_an_input_edited_while_rendering_renders_next_time(project: Project, renders: Renders, capsys, monkeypatch):
    """The inputs are digested before they are read: the stored digest is the one before the edit."""
    real = pipeline.produce_all

    def edited_meanwhile(layout, workers=None):  # type: ignore[no-untyped-def]
        edit_spec(project)
        return real(layout, workers)

    monkeypatch.setattr(pipeline, "produce_all", edited_meanwhile)
    assert SKIPPED not in generate(project, capsys, "--full")
    monkeypatch.undo()
    counted = Renders(monkeypatch)
    assert SKIPPED not in generate(project, capsys)
    assert counted.count == 1


def test_an_input_edited_while_rendering_and_reverted_after_renders_next_time(project: Project, renders: Renders, capsys, monkeypatch):
    """Rendered from the edited spec, then the spec put back: the inputs match the digest taken
    before the run, but the outputs are the edited spec's, so the run must store no state."""
    spec = project.spec("ops/det_gemm.yaml")
    original = spec.read_bytes()
    expected = everything(project)
    real = pipeline.produce_all

    def edited_meanwhile(layout, workers=None):  # type: ignore[no-untyped-def]
        edit_spec(project)
        return real(layout, workers)

    with monkeypatch.context() as patched:
        patched.setattr(pipeline, "produce_all", edited_meanwhile)
        assert SKIPPED not in generate(project, capsys, "--full")
    spec.write_bytes(original)
    assert noop.read_state(project.root) is None
    renders.count = 0
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    assert {k: v[0] for k, v in everything(project).items()} == {k: v[0] for k, v in expected.items()}


# --------------------------------------------------------------------------- an output changed: render, which repairs it


def hand_edit(project: Project) -> None:
    path = project.generated / "cuda/rlkernels/_ops.py"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"def ", b"def_", 1))  # same length, different bytes


def hand_edit_same_mtime(project: Project) -> None:
    path = project.generated / "cpu/setup.py"
    info = path.stat()
    hand_edit_bytes = path.read_bytes().replace(b"import", b"imqort", 1)
    path.write_bytes(hand_edit_bytes)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def delete_output(project: Project) -> None:
    (project.generated / "rocm/csrc/kernels/rocm/det_gemm_simt.hip").unlink()


def delete_manifest(project: Project) -> None:
    (project.generated / write.MANIFEST).unlink()


def edit_readme_block(project: Project) -> None:
    readme = project.root / "README.md"
    readme.write_text(f"# a project\n\n{BEGIN}\nhand-written rows\n{END}\n")


def edit_schema(project: Project) -> None:
    schema = next((project.root / "schema").glob("*.json"))
    schema.write_text("{}\n")


def staged_leftover(project: Project) -> None:
    (project.generated / "cuda/setup.py.rlk-new").write_text("half")


def staged_extra_leftover(project: Project) -> None:
    (project.root / "schema/op.schema.json.rlk-new").write_text("half")


OUTPUT_CHANGES = {
    "hand-edited-file": hand_edit,
    "hand-edited-same-mtime": hand_edit_same_mtime,
    "deleted-file": delete_output,
    "deleted-manifest": delete_manifest,
    "readme-block": edit_readme_block,
    "schema": edit_schema,
    "staged-leftover": staged_leftover,
    "staged-extra-leftover": staged_extra_leftover,
}


@pytest.mark.parametrize("change", OUTPUT_CHANGES.values(), ids=OUTPUT_CHANGES.keys())
def test_a_changed_output_renders_and_is_repaired(project: Project, renders: Renders, capsys, change):
    if change is edit_readme_block:  # the fixture's copy has no README: give it one with a block, and generate it
        edit_readme_block(project)
        generate(project, capsys)
        renders.count = 0
    expected = {rel: digest for rel, (digest, _) in everything(project).items()}
    change(project)
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    assert {rel: digest for rel, (digest, _) in everything(project).items()} == expected
    assert SKIPPED in generate(project, capsys)


def test_a_file_added_to_generated_renders(project: Project, renders: Renders, capsys):
    """Not the generator's, so left where it is; the run that saw it records it."""
    (project.generated / "notes.txt").write_text("mine")
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1 and (project.generated / "notes.txt").read_text() == "mine"
    assert SKIPPED in generate(project, capsys)


def lengthened(project: Project) -> None:
    path = project.generated / "cuda/rlkernels/_ops.py"
    path.write_bytes(path.read_bytes() + b"# mine\n")


@pytest.mark.parametrize("edit", [hand_edit, lengthened, hand_edit_same_mtime, delete_output], ids=lambda f: f.__name__)
def test_an_output_edited_after_writing_is_not_recorded_as_generated(project: Project, renders: Renders, capsys, monkeypatch, edit):
    """Edited between the commit and the digest of the outputs: the state stored, if any, is of
    the bytes rendered, so the next run renders and repairs the file."""
    expected = everything(project)
    real = cli.write_tree

    def edited_after(*args, **kwargs):  # type: ignore[no-untyped-def]
        changes = real(*args, **kwargs)
        edit(project)
        return changes

    with monkeypatch.context() as patched:
        patched.setattr(cli, "write_tree", edited_after)
        generate(project, capsys, "--full")
    inputs = noop.inputs_digest(project.root)
    assert inputs is not None and noop.unchanged(project.root, inputs) is None
    renders.count = 0
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    assert {k: v[0] for k, v in everything(project).items()} == {k: v[0] for k, v in expected.items()}
    assert SKIPPED in generate(project, capsys)


# --------------------------------------------------------------------------- the state file itself


def garbage(project: Project) -> None:
    state_file(project).write_bytes(b"\x00\xff garbage")


def truncated(project: Project) -> None:
    data = state_file(project).read_bytes()
    state_file(project).write_bytes(data[: len(data) // 2])


def forged_count(project: Project) -> None:
    """Well-formed JSON whose checksum no longer matches."""
    body = json.loads(state_file(project).read_bytes())
    body["files"] += 1
    state_file(project).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


def other_format(project: Project) -> None:
    body = json.loads(state_file(project).read_bytes())
    body["format"] = noop.FORMAT + 1
    state_file(project).write_text(json.dumps(body))


def empty(project: Project) -> None:
    state_file(project).write_bytes(b"")


def huge(project: Project) -> None:
    with open(state_file(project), "wb") as handle:
        handle.truncate(8 << 30)  # sparse: no disk, and never read


def a_directory(project: Project) -> None:
    state_file(project).unlink()
    state_file(project).mkdir()


def a_fifo(project: Project) -> None:
    state_file(project).unlink()
    os.mkfifo(state_file(project))


def a_symlink(project: Project) -> None:
    """A link to a copy of a valid state: never followed, and its target never written."""
    target = project.root / "elsewhere.json"
    target.write_bytes(state_file(project).read_bytes())
    state_file(project).unlink()
    state_file(project).symlink_to(target)


def state_dir_symlink(project: Project) -> None:
    elsewhere = project.root / "elsewhere"
    (project.root / noop.STATE_DIR).rename(elsewhere)
    (project.root / noop.STATE_DIR).symlink_to(elsewhere)


def state_dir_file(project: Project) -> None:
    shutil.rmtree(project.root / noop.STATE_DIR)
    (project.root / noop.STATE_DIR).write_text("not a folder")


def missing(project: Project) -> None:
    state_file(project).unlink()


BAD_STATES = {
    "garbage": garbage,
    "truncated": truncated,
    "forged": forged_count,
    "other-format": other_format,
    "empty": empty,
    "huge": huge,
    "directory": a_directory,
    "fifo": a_fifo,
    "symlink": a_symlink,
    "state-dir-symlink": state_dir_symlink,
    "state-dir-a-file": state_dir_file,
    "missing": missing,
}


def outputs(project: Project) -> dict[str, str]:
    """Every file's hash, but the state's folder and what the damage put beside it."""
    return {rel: digest for rel, (digest, _) in everything(project).items() if not rel.startswith((noop.STATE_DIR, "elsewhere"))}


@pytest.mark.parametrize("damage", BAD_STATES.values(), ids=BAD_STATES.keys())
def test_a_bad_state_renders_and_never_crashes(project: Project, renders: Renders, capsys, damage):
    expected = outputs(project)
    damage(project)
    outside = {p: p.read_bytes() for p in (project.root / "elsewhere.json", project.root / "elsewhere" / "generate-state.json") if p.is_file()}
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    assert outputs(project) == expected
    for path, data in outside.items():
        assert path.read_bytes() == data, f"{path} was written through a link"
    assert project.run("check") == 0


# --------------------------------------------------------------------------- unusual inputs and outputs: always render


def symlinked_template(project: Project) -> None:
    path = project.root / "templates/kernels/det_gemm_simt.j2"
    moved = project.root / "det_gemm_simt.j2"
    path.rename(moved)
    path.symlink_to(moved)


def symlinked_output(project: Project) -> None:
    path = project.generated / "cpu/setup.py"
    moved = project.root / "setup.py.copy"
    shutil.copy(path, moved)
    path.unlink()
    path.symlink_to(moved)


def fifo_in_templates(project: Project) -> None:
    os.mkfifo(project.root / "templates/kernels/pipe")


@pytest.mark.parametrize("change", [symlinked_template, symlinked_output, fifo_in_templates], ids=["symlinked-template", "symlinked-output", "fifo"])
def test_anything_unusual_always_renders(project: Project, renders: Renders, capsys, change):
    change(project)
    for _ in range(2):
        out = generate(project, capsys)
        assert SKIPPED not in out
    assert renders.count == 2
    assert noop.read_state(project.root) is None


# --------------------------------------------------------------------------- failures, check and diff


def test_a_failed_generate_leaves_everything_as_it_was(project: Project, renders: Renders, capsys):
    """A spec error: nothing written, the state kept; undoing the error finds the tree as the state says."""
    before = everything(project)
    state = state_file(project).read_bytes()
    original = (project.root / OP).read_text()
    project.edit(OP, "\nname: det_gemm\n", "\nname: det_gemm_renamed\n")
    assert project.run("generate") == 2
    assert renders.count == 1
    assert {k: v for k, v in everything(project).items() if k != OP} == {k: v for k, v in before.items() if k != OP}
    assert state_file(project).read_bytes() == state
    (project.root / OP).write_text(original)
    assert SKIPPED in generate(project, capsys)


def test_a_failed_commit_leaves_everything_as_it_was(project: Project, capsys, monkeypatch):
    """The disk fills while staging: generated/ and the state are as they were, and the next run renders."""
    before = everything(project)
    state = state_file(project).read_bytes()
    edit_spec(project)
    real = write._fsync_write

    def full(path, data):  # type: ignore[no-untyped-def]
        if path.name.startswith(write.JOURNAL):
            raise OSError(28, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(write, "_fsync_write", full)
    assert project.run("generate") == 2
    monkeypatch.undo()
    assert {k: v for k, v in everything(project).items() if k != OP} == {k: v for k, v in before.items() if k != OP}
    assert state_file(project).read_bytes() == state
    counted = Renders(monkeypatch)
    assert SKIPPED not in generate(project, capsys)
    assert counted.count == 1


def test_check_and_diff_always_render(project: Project, renders: Renders, capsys):
    """A valid state changes nothing for them: a hand edit is reported whatever the state says."""
    hand_edit(project)
    assert project.run("check") == 1
    assert project.run("diff") == 1
    assert "_ops.py" in capsys.readouterr().out
    assert noop.read_state(project.root) is not None


# --------------------------------------------------------------------------- what the speed-ups must not change


def test_resolving_many_paths_at_once_agrees_with_resolving_each(tmp_path: Path):
    """write._Inside (one resolve per folder) answers exactly as write._is_inside (one per path),
    through links inside and outside the tree, links to the tree itself, loops, and '..'."""
    import itertools

    base, outside = tmp_path / "gen", tmp_path / "out"
    (base / "a/b").mkdir(parents=True)
    outside.mkdir()
    (base / "a/f").write_text("x")
    (base / "a/b/g").write_text("x")
    for link, target in [
        ("a/outdir", outside),
        ("a/indir", "b"),
        ("a/outfile", outside / "z"),
        ("a/b/up", "../.."),
        ("a/loop1", "loop2"),
        ("a/loop2", "loop1"),
        ("a/self", "."),
        ("a/tobase", base),
    ]:
        (base / link).symlink_to(target)
    parts = ["a", "b", "f", "g", "..", ".", "", "outdir", "indir", "outfile", "up", "loop1", "self", "tobase", "new"]

    def answer(check, rel):  # type: ignore[no-untyped-def]
        try:
            return check(rel)
        except Exception as exc:  # noqa: BLE001 -- both must fail alike
            return type(exc).__name__

    many = write._Inside(base)
    rels = ["/".join(combo) for k in (1, 2, 3) for combo in itertools.product(parts, repeat=k)] + ["/abs", "a/\x00", "a//f", "./a/f"]
    differ = [rel for rel in rels if answer(many, rel) != answer(lambda r: write._is_inside(base, r), rel)]
    assert not differ, differ[:10]
    assert many("a/f") and not many("a/outfile") and not many("a/outdir/x") and many("a/indir/g")


def test_check_is_not_fooled_by_a_forged_state(project: Project, renders: Renders, capsys):
    """A state forged to match a hand-edited tree makes generate skip (the state is trusted like
    the rest of the working tree), but check and diff never read it: they still find the edit."""
    hand_edit(project)
    inputs, outputs = noop.inputs_digest(project.root), noop.outputs_digest(project.root)
    assert inputs is not None and outputs is not None
    state_file(project).write_bytes(noop.State(inputs, outputs, 1, 0).to_bytes())
    assert SKIPPED in generate(project, capsys)
    assert renders.count == 0
    assert project.run("check") == 1
    assert project.run("diff") == 1
    assert renders.count == 2


def test_an_unreadable_state_renders(project: Project, renders: Renders, capsys, monkeypatch):
    """Permission denied (which a test running as root cannot arrange with chmod) on the state only."""
    real_open = os.open

    def denied(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).endswith("generate-state.json"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(noop.os, "open", denied)
    expected = outputs(project)
    assert SKIPPED not in generate(project, capsys)
    assert renders.count == 1
    assert outputs(project) == expected


def test_the_versions_digested_are_those_importlib_metadata_reads():
    """The no-op check reads the libraries' versions from dist-info folder names and looks for
    libyaml without importing anything; both must say what the libraries themselves say."""
    from importlib import metadata

    from generator import load

    installed = noop._installed_versions()
    for name in noop.DISTRIBUTIONS:
        assert installed[name] == metadata.version(name), name
    assert noop._has_libyaml() == load._HAVE_LIBYAML


def test_the_extra_paths_are_the_files_generate_writes_outside_generated():
    from generator import paths, readme, schema, spec_doc

    assert paths.extra_paths() == (readme.README, *schema.schema_files(), *spec_doc.spec_doc_files())
    assert paths.SCHEMA_KINDS == tuple(schema.MODELS)


def test_a_noop_generate_imports_neither_the_models_nor_the_renderer(project):
    """What keeps a no-op generate fast from the command line: it answers from digests alone."""
    import subprocess
    import sys

    assert project.run("generate") == 0
    probe = (
        "import sys; from generator.cli import run; code = run(['--root', sys.argv[1], 'generate']); "
        "heavy = sorted(m for m in ('pydantic', 'jinja2', 'yaml', 'generator.model', 'generator.render', 'generator.load') if m in sys.modules); "
        "print(code, heavy)"
    )
    result = subprocess.run([sys.executable, "-c", probe, str(project.root)], capture_output=True, text=True, check=True, cwd=REPO)
    assert result.stdout.strip().splitlines()[-1] == "0 []", result.stdout + result.stderr
