"""The command at the edges of a process: Ctrl-C, a reader that closed the pipe, output that cannot
be written, a terminal that cannot show a character.  Each ends in one line and the usual exit
status, never a traceback.  The faults are injected where they would happen, not timed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO, Project


def command(project: Project, *args: str, env: dict[str, str] | None = None, stdout: int | None = subprocess.PIPE, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``python -m generator --root <project> args``, with ``prelude`` run first (to inject a fault)."""
    script = textwrap.dedent(prelude) + "\nimport sys\nfrom generator.cli import run\nsys.exit(run(sys.argv[1:]))\n"
    return subprocess.run(
        [sys.executable, "-c", script, "--root", str(project.root), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
    )


def test_ctrl_c_during_generate_exits_130_with_one_line_and_leaves_the_tree_whole(project: Project):
    before = project.snapshot()
    project.edit("specs/ops/det_gemm.yaml", "  rocm: [simt]", "  rocm: []")
    interrupted = command(
        project,
        "generate",
        prelude="""
        from generator import write
        real = write._apply
        def interrupt(*args, **kwargs):
            raise KeyboardInterrupt  # Ctrl-C as the commit begins
        write._apply = interrupt
        """,
    )
    assert interrupted.returncode == 130, interrupted.stderr
    assert interrupted.stderr.strip().splitlines() == ["error: interrupted; nothing half-written remains (an interrupted commit is finished by the next run)"]
    assert "Traceback" not in interrupted.stderr
    assert project.run("check") in (0, 1)  # readable and consistent: finished or as it was
    project.edit("specs/ops/det_gemm.yaml", "  rocm: []", "  rocm: [simt]")
    assert project.run("generate") == 0
    assert {k: v[0] for k, v in project.snapshot().items()} == {k: v[0] for k, v in before.items()}


def test_a_reader_that_goes_away_ends_the_run_silently_with_141(project: Project):
    done = command(
        project,
        "explain",
        "det_gemm",
        prelude="""
        import sys
        class Closed:
            def write(self, text): raise BrokenPipeError(32, "Broken pipe")
            def flush(self): raise BrokenPipeError(32, "Broken pipe")
            def fileno(self): return sys.__stdout__.fileno()
        sys.stdout = Closed()
        """,
    )
    assert done.returncode == 141 and done.stderr == "", done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", [("check",), ("explain", "det_gemm"), ("diff", "--summary")])
def test_output_that_cannot_be_written_is_one_error_line(project: Project, args: tuple[str, ...]):
    with open("/dev/full", "w") as full:
        done = command(project, *args, stdout=full.fileno())
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: cannot write the output (No space left on device)"
    assert "Traceback" not in done.stderr


def test_an_ascii_only_terminal_gets_escapes_not_a_traceback(project: Project):
    done = command(project, "explain", "det_gemm", "--platform", "cuda", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert "chosen: wgmma \\u2192 mma \\u2192 simt" in done.stdout
