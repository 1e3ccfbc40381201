"""README.md and docs/: quoted output is what the commands print, links resolve, named tests and
files exist, and the Makefile's help and diff behave as the docs say.

A quoted output is a fenced block after a marker line, ``<!-- output: what ran -->``; ``QUOTED``
says how to run it. Each line of the block must be a line of the real output, in order and
contiguous, so an edited spec, a moved line or a reworded message fails here.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, Project, copy_project

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
OP = "specs/ops/det_gemm.yaml"


# --------------------------------------------------------------------------- reading the docs


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif fence is not None and stripped.startswith(fence) and not stripped.strip("`"):
            fence = None
        elif fence is None:
            yield number, line


def _without_code_spans(line: str) -> str:
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


@dataclass(frozen=True)
class Quote:
    doc: Path
    line: int
    what: str
    lines: tuple[str, ...]


def quotes() -> list[Quote]:
    """Every fenced block that follows an ``<!-- output: ... -->`` line, dedented to its fence."""
    found = []
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").split("\n")
        for index, line in enumerate(lines):
            marker = re.fullmatch(r"\s*<!-- output: (.+) -->", line)
            if marker is None:
                continue
            fence = lines[index + 1]
            indent = len(fence) - len(fence.lstrip())
            assert fence.strip() == "```", f"{_rel(doc)}:{index + 2}: the output marker must be followed by a ``` block"
            end = next(i for i in range(index + 2, len(lines)) if lines[i].strip() == "```")
            body = tuple(text[indent:] for text in lines[index + 2 : end])
            found.append(Quote(doc, index + 1, marker.group(1), body))
    return found


def _contiguous_in(block: tuple[str, ...], output: list[str]) -> bool:
    return any(tuple(output[i : i + len(block)]) == block for i in range(len(output) - len(block) + 1))


# --------------------------------------------------------------------------- running the commands


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """One copy of the project for the module: each case edits the det_gemm spec and puts it back."""
    return copy_project(tmp_path_factory.mktemp("docs") / "proj")


@dataclass(frozen=True)
class Ran:
    status: int
    out: list[str]
    err: list[str]


def _run(project: Project, *args: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = project.run(*args)
    return Ran(status, out.getvalue().splitlines(), err.getvalue().splitlines())


@contextlib.contextmanager
def _edited(project: Project, old: str, new: str) -> Iterator[None]:
    path = project.root / OP
    before = path.read_bytes()
    project.edit(OP, old, new)
    try:
        yield
    finally:
        path.write_bytes(before)


MUSA_MATMUL = ("  musa: [simt]", "  musa: [torch_matmul]")


def _refusal(project: Project) -> list[str]:
    before = project.snapshot()
    with _edited(project, *MUSA_MATMUL):
        ran = _run(project, "generate")
    assert ran.status == 2 and project.snapshot() == before, "a refused mapping must write nothing"
    return ran.err


def _with(edit: tuple[str, str], *args: str, stream: str = "out") -> Callable[[Project], list[str]]:
    def run(project: Project) -> list[str]:
        with _edited(project, *edit):
            return getattr(_run(project, *args), stream)

    return run


def _plain(*args: str) -> Callable[[Project], list[str]]:
    return lambda project: _run(project, *args).out


def _asserted_in(test_file: str) -> Callable[[Project], list[str]]:
    """A runtime message the docs quote: every string a test asserts (regex anchors dropped), as lines."""

    def strings(_: Project) -> list[str]:
        tree = ast.parse((REPO / test_file).read_text(encoding="utf-8"))
        return [node.value.strip("^$") for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]

    return strings


@dataclass(frozen=True)
class Source:
    run: Callable[[Project], list[str]]
    whole: bool = False
    """The block must be the whole output, not an excerpt."""
    asserted: bool = False
    """``run`` gives the strings a test asserts: each line of the block must be one of them (or in one)."""


QUOTED: dict[str, Source] = {
    "explain det_gemm --platform musa": Source(_plain("explain", "det_gemm", "--platform", "musa")),
    "generate, with musa: [torch_matmul]": Source(_refusal, whole=True),
    "explain det_gemm --platform musa, with musa: [torch_matmul]": Source(_with(MUSA_MATMUL, "explain", "det_gemm", "--platform", "musa")),
    "diff --summary, with cuda: [mma, wgmma, simt]": Source(
        _with(("  cuda: [wgmma, mma, simt]", "  cuda: [mma, wgmma, simt]"), "diff", "--summary"), whole=True
    ),
    "diff --summary, with musa: []": Source(_with(("  musa: [simt]", "  musa: []"), "diff", "--summary")),
    "diff --summary, with step: add in specs/ops/det_gemm.yaml": Source(_with(("order: ascending, accumulator: float32, step: fma}", "order: ascending, accumulator: float32, step: add}"), "diff", "--summary")),
    "rlkernels.logp(logits, [[0, 1, 2], [0, 1, 2]]), checked in tests/test_cpu_package.py": Source(
        _asserted_in("tests/test_cpu_package.py"), asserted=True
    ),
    "torch.mm of float64 tensors with strict=False, checked in tests/test_aten_mode.py": Source(
        _asserted_in("tests/test_aten_mode.py"), asserted=True
    ),
}


def test_every_quoted_output_has_a_source_and_every_source_is_quoted():
    found = {quote.what for quote in quotes()}
    assert found - set(QUOTED) == set(), "a quoted output this test does not run"
    assert set(QUOTED) - found == set(), "a source whose quote is gone from the docs"


@pytest.mark.parametrize("quote", quotes(), ids=lambda q: f"{_rel(q.doc)}:{q.line}")
def test_quoted_output_is_what_the_command_prints(shared: Project, quote: Quote):
    source = QUOTED[quote.what]
    output = source.run(shared)
    where = f"{_rel(quote.doc)}:{quote.line} ({quote.what})"
    if source.whole:
        assert list(quote.lines) == output, f"{where}: the block must be the whole output:\n" + "\n".join(output)
    elif source.asserted:
        for line in quote.lines:
            assert any(line in text for text in output), f"{where}: no test asserts {line!r}"
    else:
        assert quote.lines and _contiguous_in(quote.lines, output), f"{where}: not lines of the output:\n" + "\n".join(output)


def test_the_readme_quotes_the_refusal_with_its_spec_line(shared: Project):
    """The refusal names the line of the musa entry, whatever the spec above it holds."""
    line = next(i for i, text in enumerate((shared.root / OP).read_text().split("\n"), 1) if text == MUSA_MATMUL[0])
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for message in _refusal(shared)[:-1]:
        assert message.startswith(f"{OP}:{line}: backends.musa.0: refusing to map op det_gemm")
        assert message in readme


# --------------------------------------------------------------------------- links, names, paths


LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens; repeats get -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6} (.+)", line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links() -> list[tuple[Path, int, str]]:
    found = []
    for doc in DOCS:
        for number, line in _prose_lines(doc.read_text(encoding="utf-8")):
            for match in LINK.finditer(_without_code_spans(line)):
                found.append((doc, number, match.group(2)))
    return found


def _link_params() -> list[object]:
    return [pytest.param(doc, line, target, id=f"{_rel(doc)}:{line}:{target}") for doc, line, target in links()]


def test_the_docs_have_links():
    assert len(links()) > 20


@pytest.mark.parametrize("doc, line, target", _link_params())
def test_every_relative_link_resolves(doc: Path, line: int, target: str):
    if re.match(r"[a-z]+:", target):
        pytest.skip("not a relative link")
    where = f"{_rel(doc)}:{line}: {target}"
    path_part, _, anchor = target.partition("#")
    path = (doc.parent / path_part).resolve() if path_part else doc
    assert path.exists(), f"{where}: no such file"
    assert path == REPO or REPO in path.parents, f"{where}: outside the project"
    if anchor:
        assert path.suffix == ".md", f"{where}: an anchor into a file that is not Markdown"
        assert anchor in _anchors(path), f"{where}: no heading with that anchor in {_rel(path)}"


def _spans(doc: Path) -> Iterator[str]:
    for _, line in _prose_lines(doc.read_text(encoding="utf-8")):
        for match in re.finditer(r"(`+)((?:(?!\1).)+?)\1", line):
            yield match.group(2).strip()


def test_every_test_the_docs_name_exists():
    defined = set()
    for source in [*REPO.glob("tests/*.py"), *REPO.glob("runtime/tests/*.py")]:
        defined |= set(re.findall(r"^def (test_\w+)", source.read_text(encoding="utf-8"), re.MULTILINE))
    missing = set()
    for doc in DOCS:
        for span in _spans(doc):
            for word in span.split():
                name = word.split("::")[-1]
                if re.fullmatch(r"test_\w+", name) and name not in defined:
                    missing.add(f"{_rel(doc)}: {name}")
    missing = sorted(missing)
    assert not missing, "tests the docs name that do not exist:\n" + "\n".join(missing)


ROOTS = ("generator/", "tests/", "tools/", "runtime/", "specs/", "templates/", "docs/", "evidence/", "schema/", "generated/", ".ci/")


def test_every_path_the_docs_name_exists():
    """A path in a code span that starts at a top-level folder exists, in the project or (for a
    package's own files, such as tests/contract_cases.json) in generated/cpu/."""
    missing = []
    for doc in DOCS:
        for span in _spans(doc):
            path = span.split()[0] if span else ""
            if not path.startswith(ROOTS) or re.search(r"[<>*…{}]", path):
                continue
            if not (REPO / path).exists() and not (REPO / "generated" / "cpu" / path).exists():
                missing.append(f"{_rel(doc)}: {path}")
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)


# --------------------------------------------------------------------------- the Makefile


def _make(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not found")
    # Without the flags of a make this test may run under (-s, a jobserver), which would change what it prints.
    outer = {key: value for key, value in os.environ.items() if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run([make, "--no-print-directory", "-f", str(REPO / "Makefile"), *args], cwd=cwd, capture_output=True, text=True,
                          env={**outer, **env}, timeout=600)


def test_make_help_lists_every_target():
    phony = re.search(r"^\.PHONY:(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    shown = _make("help").stdout
    for target in phony.group(1).split():
        assert re.search(rf"^make {re.escape(target)}\b", shown, re.MULTILINE), f"make help does not list {target}"


def test_make_diff_succeeds_showing_changes_and_fails_on_errors(small_project: Project):
    """The CLI's exit status 1 (changes shown) is make diff's success; 2 (an error) still fails it."""
    root = small_project.root
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    stamp = root / "venv" / ".gen-stamp"
    stamp.parent.mkdir()
    stamp.touch()  # newer than the copied pyproject.toml: make does not rebuild the environment
    given = {"VENV": "venv", "GEN": f"{sys.executable} -m generator"}
    args = [f"{key}={value}" for key, value in given.items()]

    clean = _make("diff", *args, cwd=root)
    assert clean.returncode == 0 and "Error" not in clean.stderr, clean
    small_project.edit(OP, "  rocm: [simt]", "  rocm: []")
    changed = _make("diff", *args, cwd=root)
    assert changed.returncode == 0 and "Error" not in changed.stderr, changed
    assert "WEAKENS CONTRACT: det_gemm/rocm: supported → unsupported" in changed.stdout
    small_project.edit(OP, "  rocm: []", "  rocm: [torch_matmul]")
    refused = _make("diff", *args, cwd=root)
    assert refused.returncode == 2 and "refusing to map op det_gemm on platform rocm" in refused.stderr, refused
    assert "Error 2" in refused.stderr, "make reports the failure"


# --------------------------------------------------------------------------- the README's example


@pytest.mark.slow
def test_the_readmes_example_runs_on_the_cpu_package():
    """Each Python block of the README, in a fresh process with the CPU package built in place."""
    pytest.importorskip("torch", reason="the CPU package needs torch (make test installs it)")
    from package_build import build_inplace

    root = build_inplace("cpu")
    examples = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    assert examples, "the README has no Python example"
    for code in examples:
        ran = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, f"{code}\n{ran.stdout}\n{ran.stderr}"
