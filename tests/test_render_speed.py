"""What makes a large generate fast changes no byte: rendering in worker processes, compiled
templates kept between runs in .build/jinja, and a kernel platform's files rendered once for every
package that carries them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, Project, copy_project
from generator import render
from generator.load import load_catalog
from generator.pipeline import Layout, produce_all
from generator.plan import make_plan


def _in_a_fresh_interpreter(script: str) -> None:
    """Runs ``script`` in a new Python, as the generator's command runs: the workers fork only from
    a process without other threads, and this one may hold some (torch.compile leaves a pool)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(REPO)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes are forked, and this system cannot fork")
def test_rendering_in_worker_processes_gives_the_same_bytes() -> None:
    _in_a_fresh_interpreter(
        """
        import sys
        from pathlib import Path
        from generator import render
        from generator.pipeline import Layout, load_checked, produce_all, runtime_files
        from generator.plan import make_plan

        layout = Layout(Path(sys.argv[1]))
        jobs = make_plan(load_checked(layout), runtime_files(layout.runtime))
        env = render.make_environment(layout.templates)
        parallel = render._render_parallel(jobs, env, 3, layout.root)
        assert parallel is not None, "the workers did not run"
        serial = [render._render_job(env, job, layout.root) for job in jobs]
        differ = [job.path for job, a, b in zip(jobs, serial, parallel, strict=True) if a != b]
        assert differ == [], f"rendered differently by the workers: {differ}"
        whole, alone = produce_all(layout, workers=3), produce_all(layout, workers=1)
        assert whole.files == alone.files and whole.extras == alone.extras
        """
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes are forked, and this system cannot fork")
def test_workers_are_forked_only_from_a_process_without_other_threads() -> None:
    _in_a_fresh_interpreter(
        """
        import sys
        import threading
        from pathlib import Path
        from generator import render
        from generator.pipeline import Layout, load_checked, runtime_files
        from generator.plan import make_plan

        layout = Layout(Path(sys.argv[1]))
        jobs = make_plan(load_checked(layout), runtime_files(layout.runtime))[:40]
        env = render.make_environment(layout.templates)
        release = threading.Event()
        other = threading.Thread(target=release.wait)
        other.start()
        try:
            assert render._render_parallel(jobs, env, 2, layout.root) is None, "forked while another thread ran"
        finally:
            release.set()
            other.join()
        alone = [render._render_job(env, job, layout.root) for job in jobs]
        assert render._render_parallel(jobs, env, 2, layout.root) == alone, "no workers once the other thread ended"
        """
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes are forked, and this system cannot fork")
def test_op_specs_read_in_worker_processes_give_the_same_catalog_and_the_same_errors(tmp_path: Path) -> None:
    """A catalog read by forked workers (every op file past the first few) equals one read alone,
    and its problems read the same, in the same order."""
    project = copy_project(tmp_path / "proj", with_generated=False)
    _in_a_fresh_interpreter(
        f"""
        import sys
        from pathlib import Path
        from generator import forked, load
        from generator.errors import SpecError

        root = Path({str(project.root)!r})
        ran = []
        real = forked.map_shares
        def counted(*args):
            parts = real(*args)
            ran.append(parts is not None)
            return parts
        forked.map_shares = counted

        def read(min_ops):
            load.PARALLEL_MIN_OPS = min_ops
            try:
                return load.load_catalog(root / "specs", root)
            except SpecError as exc:
                return str(exc)

        assert read(2) == read(10**9) and ran == [True], ran
        ops = sorted((root / "specs" / "ops").glob("*.yaml"))
        ops[1].write_text(ops[1].read_text().replace("name: ", "nmae: ", 1))
        ops[-1].write_text("name: [unclosed\\n")
        ran.clear()
        broken = read(2)
        assert isinstance(broken, str) and broken == read(10**9) and ran == [True], (ran, broken)
        assert ops[1].name in broken and ops[-1].name in broken and broken.index(ops[1].name) < broken.index(ops[-1].name)
        """
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="worker processes are forked, and this system cannot fork")
def test_a_template_failure_in_a_worker_reads_as_it_does_without_workers(project: Project) -> None:
    project.edit("templates/package/launcher.h.j2", "for op {{ op.name }}", "for op {{ op.no_such_value }}")
    before = project.snapshot()

    def generate(jobs: str) -> subprocess.CompletedProcess[str]:
        # A new process, as the command runs: this one may hold threads, and then no worker forks.
        return subprocess.run([sys.executable, "-m", "generator", "--root", str(project.root), "--jobs", jobs, "generate"],
                              cwd=REPO, capture_output=True, text=True, timeout=600)

    parallel, alone = generate("2"), generate("1")
    assert parallel.returncode != 0 and alone.returncode == parallel.returncode
    assert parallel.stderr == alone.stderr
    assert "no_such_value" in parallel.stderr and "nothing was written" in parallel.stderr
    assert project.snapshot() == before


def test_jobs_must_be_a_bounded_whole_number(project: Project, capsys) -> None:
    for bad in ("0", "-1", "257", "two", "1e3"):
        with pytest.raises(SystemExit):
            project.run("--jobs", bad, "check")
        assert f"argument -j/--jobs: expected a whole number from 1 to 256, got {bad}" in capsys.readouterr().err


def test_compiled_templates_are_kept_and_a_damaged_cache_is_compiled_again(project: Project, tmp_path: Path) -> None:
    import jinja2

    folders = [p for p in (project.root / ".build" / "jinja").iterdir() if p.is_dir()]
    assert len(folders) == 1, "one cache folder, named by the Jinja and Python versions and the environment"
    entries = sorted(folders[0].iterdir())
    assert entries, "generate kept no compiled template in .build/jinja"
    expected = produce_all(Layout(project.root), workers=1).files
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    damages = [
        lambda entry: entry.write_bytes(b"not bytecode"),
        lambda entry: entry.write_bytes(jinja2.bccache.bc_magic + b"garbage after the magic"),
        lambda entry: entry.write_bytes(entry.read_bytes()[:-7]),  # cut short
        lambda entry: (entry.unlink(), entry.symlink_to(fifo)),  # a link to a FIFO: never opened for reading
    ]
    for i, entry in enumerate(entries):
        damages[i % len(damages)](entry)
    render._environment.cache_clear()  # a new process: read the cache again
    assert produce_all(Layout(project.root), workers=1).files == expected


def test_a_change_to_what_compiled_code_depends_on_gets_a_cache_of_its_own(project: Project, monkeypatch) -> None:
    cache = project.root / ".build" / "jinja"
    (before,) = [p.name for p in cache.iterdir()]
    render._cache_key.cache_clear()
    render._environment.cache_clear()
    monkeypatch.setattr(render.jinja2, "__version__", "0.0-other")
    try:
        assert project.run("generate", "--full") == 0
        (after,) = [p.name for p in cache.iterdir()]  # the old folder is removed
        assert after != before
    finally:
        render._cache_key.cache_clear()
        render._environment.cache_clear()


def test_a_cache_that_cannot_be_used_is_skipped(project: Project, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    build = project.root / ".build"
    for entry in sorted(build.rglob("*"), reverse=True):
        entry.rmdir() if entry.is_dir() else entry.unlink()
    build.rmdir()
    build.symlink_to(elsewhere)  # a link could lead the cache anywhere: not followed
    render._environment.cache_clear()
    assert project.run("generate", "--full") == 0
    assert list(elsewhere.iterdir()) == []


def test_a_kernel_platforms_files_are_rendered_once_for_every_package() -> None:
    catalog = load_catalog(REPO / "specs", REPO)
    jobs = make_plan(catalog)
    host = [j for j in jobs if "/csrc/kernels/cpu/" in j.path]
    assert host and all(j.path.startswith("cpu/") for j in host)
    devices = sorted(p.name for p in catalog.platforms if p.kind != "host")
    assert all(sorted(c.split("/")[0] for c in j.copies) == devices for j in host)
    files = render.render_all(host, REPO / "templates", workers=1)
    for job in host:
        for copy in job.copies:
            assert files[copy] == files[job.path] == (REPO / "generated" / copy).read_bytes()


def test_package_files_that_never_see_the_platform_are_rendered_once_for_every_package() -> None:
    """The catalog's data (_catalog.json) is the same in every package: rendered once, without
    the platform in its context, and written into each."""
    catalog = load_catalog(REPO / "specs", REPO)
    packages = sorted(p.name for p in catalog.platforms)
    shared = [j for j in make_plan(catalog) if j.path.endswith("/rlkernels/_catalog.json")]
    assert len(shared) == 1
    for job in shared:
        assert "platform" not in job.context and "targets" not in job.context
        assert [path.split("/")[0] for path in (job.path, *job.copies)] == packages
    files = render.render_all(shared, REPO / "templates", workers=1)
    for job in shared:
        for copy in job.copies:
            assert files[copy] == files[job.path] == (REPO / "generated" / copy).read_bytes()
