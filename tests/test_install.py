"""The user's way in: `make install` into a fresh virtual environment runs the README's examples; every
command the README and docs/ show names a make target, variable, script, subcommand and flag that
exist (and the cheap ones run); the package's extras pin the releases the tests run; the README
stays short."""

from __future__ import annotations

import ast
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PLATFORMS = sorted(p.stem for p in (REPO / "specs" / "platforms").glob("*.yaml"))
README_MAX_LINES = 200


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# --------------------------------------------------------------------------- the extras


def _setup_extras() -> dict[str, list[str]]:
    """runtime/setup.py's extras_require, with vllm as the CPU package declares it."""
    tree = ast.parse((REPO / "runtime" / "setup.py").read_text(encoding="utf-8"))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    value = next(k.value for k in call.keywords if k.arg == "extras_require")
    assert isinstance(value, ast.Dict)
    extras = {}
    for key, item in zip(value.keys, value.values):
        assert isinstance(key, ast.Constant) and isinstance(item, ast.List)
        extras[key.value] = [e.body.value if isinstance(e, ast.IfExp) else e.value for e in item.elts]  # type: ignore[union-attr]
    return extras


def _pins(requirements: list[str]) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for r in requirements if (m := re.fullmatch(r"([A-Za-z0-9_.-]+)==([^;\s]+)", r.split(";")[0].strip()))}


def test_the_extras_pin_the_releases_the_tests_run():
    """Each requirement of the package's extras is an exact pin, the one the test environment installs
    (pyproject.toml's test and vllm extras): the extras resolve to what the tests ran, not to a newer
    release (transformers 5.25 under `>=5.19,<6`, which no test ran)."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    tested = _pins(project["test"] + project["vllm"])
    for extra, requirements in _setup_extras().items():
        pins = _pins(requirements)
        assert len(pins) == len(requirements), f"[{extra}]: {requirements} are not all exact pins"
        for name, version in pins.items():
            assert tested.get(name) == version, f"[{extra}] pins {name}=={version}; the tests run {name}=={tested.get(name)}"


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, more than {README_MAX_LINES}"


# --------------------------------------------------------------------------- the commands the docs show


def _fenced(text: str) -> Iterator[tuple[str, str]]:
    """(info string, body) of each fenced block."""
    for match in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```$", text, re.MULTILINE | re.DOTALL):
        body = "\n".join(line[len(match.group(1)):] for line in match.group(3).split("\n"))
        yield match.group(2), body


COMMAND_WORDS = ("make", "python", "python3", "bash", "pip")


def commands() -> list[tuple[str, str]]:
    """(where, command) for each shell command in a sh block, and each code span in prose that is one."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for info, body in _fenced(text):
            if info in ("sh", "bash", "shell"):
                found += [(_rel(doc), line.strip()) for line in body.split("\n") if line.strip() and not line.strip().startswith("#")]
        prose = re.sub(r"^( *)```.*?^\1```$", "", text, flags=re.MULTILINE | re.DOTALL)
        for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", prose):
            words = span.split()
            first = words[0] if words else ""
            if len(words) > 1 and (first in COMMAND_WORDS or first.endswith("/python")):
                found.append((_rel(doc), span))
    return sorted(set(found))


def _simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a line (split at &&, ||, ; and |), comments dropped, leading VAR=value
    assignments dropped, ``[...]`` marks of optional arguments taken off."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words: list[str] = []
    for token in [*lexer, ";"]:
        if token and set(token) <= set(";&|"):
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words.pop(0)
            if words:
                yield words
            words = []
        else:
            words.append(token.strip("[]"))


def _placeholder(word: str) -> bool:
    return bool(re.search(r"[<>…]|^[A-Z]+$", word))


@functools.cache
def _makefile() -> tuple[set[str], set[str]]:
    """The Makefile's targets and variables."""
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w.-]*):(?!=)", text, re.MULTILINE))
    variables = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:]?=", text, re.MULTILINE)) | set(re.findall(r"\$\(([A-Z_][A-Z0-9_]*)\)", text))
    return targets, variables


@functools.cache
def _help(*command: str) -> str:
    ran = subprocess.run([sys.executable, *command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"{' '.join(command)} --help failed:\n{ran.stderr[-2000:]}"
    return ran.stdout


def _flags_in(words: list[str], text: str, what: str) -> None:
    for word in words:
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and not _placeholder(flag):
            assert re.search(rf"{re.escape(flag)}(?![\w-])", text), f"{what} has no option {flag}"


def _check_make(words: list[str]) -> None:
    targets, variables = _makefile()
    extras = _setup_extras()
    for word in words[1:]:
        if word.startswith("-"):
            continue
        if "=" in word:
            name, value = word.split("=", 1)
            assert name in variables, f"the Makefile has no variable {name}"
            if name == "PLATFORM" and not _placeholder(value):
                assert set(value.split("|")) <= set(PLATFORMS), f"PLATFORM={value}: not a platform ({', '.join(PLATFORMS)})"
            if name == "EXTRAS" and not _placeholder(value):
                assert set(filter(None, value.split(","))) <= set(extras), f"EXTRAS={value}: the package's extras are {', '.join(extras)}"
        else:
            assert word in targets, f"the Makefile has no target {word}"
    # Dry run: make reads the Makefile and plans the command (a stale .venv stamp is printed, not run).
    given = [w for w in words[1:] if not _placeholder(w.split("=", 1)[-1]) and "|" not in w]
    ran = subprocess.run(["make", "-n", "--no-print-directory", *given], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert ran.returncode == 0, f"make -n {' '.join(given)}:\n{ran.stderr}"


def _check_python(words: list[str]) -> None:
    args = words[1:]
    if not args or args[0] == "-m" and args[1] in ("venv", "ensurepip"):
        return
    if args[0] == "-c":
        compile(args[1], "<-c>", "exec")
        return
    if args[0] == "-m" and args[1] == "generator":
        top = _help("-m", "generator")
        sub = args[2]
        assert re.search(rf"\b{sub}\b", top), f"python -m generator has no command {sub}"
        rest = args[3:]
        if sub == "evidence" and rest and not rest[0].startswith("-"):
            assert rest[0] in _help("-m", "generator", "evidence"), f"generator evidence has no command {rest[0]}"
            sub, rest = f"evidence {rest[0]}", rest[1:]
        _flags_in(rest, _help("-m", "generator", *sub.split()), f"python -m generator {sub}")
        for word in rest:
            if sub == "explain" and not word.startswith("-") and not _placeholder(word) and word not in PLATFORMS:
                assert (REPO / "specs" / "ops" / f"{word}.yaml").exists(), f"explain: no op {word}"
        return
    if args[0] == "-m" and args[1] == "tools.bench":
        text = _help("-m", "tools.bench")
        for word in args[2:]:
            assert word.split("=")[0] in text, f"python -m tools.bench knows no {word}"
        return
    if args[0] == "-m" and args[1] == "pytest":
        conftests = "".join(p.read_text(encoding="utf-8") for p in [REPO / "tests" / "conftest.py", REPO / "generated" / "cpu" / "tests" / "conftest.py"])
        _flags_in(args[2:], _help("-m", "pytest") + conftests, "pytest (with the project's conftests)")
        return
    script = args[0]
    if script == "setup.py":  # inside a generated package
        assert (REPO / "generated" / "cpu" / "setup.py").exists()
        return
    if script.startswith("tools/"):
        assert (REPO / script).exists(), f"no script {script}"
        _flags_in(args[1:], _help(script), script)
        return
    raise AssertionError(f"a Python command this test does not know: {' '.join(words)}")


def _check(words: list[str]) -> None:
    program = words[0]
    if program == "make":
        _check_make(words)
    elif program in ("python", "python3") or program.endswith("/python"):
        if "/" in program:
            assert program.endswith((".venv/bin/python", "/rl/bin/python")), f"an interpreter the docs do not set up: {program}"
        _check_python(words)
    elif program == "bash":
        script = REPO / words[1]
        assert script.exists(), f"no script {words[1]}"
        sources = script.read_text(encoding="utf-8") + (script.with_suffix(".py").read_text(encoding="utf-8") if script.with_suffix(".py").exists() else "")
        _flags_in(words[2:], sources, words[1])
    elif program == "pip":
        assert not any(re.match(r"['\"]?rlkernels\[", w) for w in words), "rlkernels is on no package index: `make install EXTRAS=...`"
    elif program in ("cd", ".", "source"):
        pass
    else:
        raise AssertionError(f"a command this test does not know: {' '.join(words)}")


def test_the_docs_show_commands():
    shown = commands()
    assert len(shown) > 30
    assert any("make install EXTRAS=" in c for _, c in shown)


@pytest.mark.parametrize("where, command", commands(), ids=lambda v: v)
def test_every_command_the_docs_show_exists(where: str, command: str):
    """Each make target and variable, script, module, subcommand and option a command names exists;
    make plans it (make -n), and the Python ones answer --help."""
    for words in _simple_commands(command):
        _check(words)


def test_no_doc_tells_users_to_pip_install_rlkernels_from_an_index():
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").split("\n"), 1):
            assert not re.search(r"pip install ['\"]?rlkernels\[", line), f"{_rel(doc)}:{number}: rlkernels is on no index"


# --------------------------------------------------------------------------- make install, and the README's examples


def _examples() -> tuple[list[str], list[str], list[str]]:
    """The README's ``python`` blocks (run as ``python -c``), its ``py`` blocks (scripts) and the
    ``python -c`` commands of its sh blocks."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = list(_fenced(text))
    checks = [line.strip() for info, body in blocks if info == "sh" for line in body.split("\n") if line.strip().startswith("python -c ")]
    return [b for i, b in blocks if i == "python"], [b for i, b in blocks if i == "py"], checks


def test_the_readme_has_examples_of_each_kind():
    python, scripts, checks = _examples()
    assert len(python) >= 2 and len(scripts) >= 1 and len(checks) >= 1


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """`make install EXTRAS=transformers,trl,vllm` into a new virtual environment, as the README says:
    (its python, the environment to run it in, an empty folder outside the project).  torch comes from
    pip's configured index (TORCH_INDEX=: CI reaches no other), and the wheel is built with this
    environment's torch 2.13.0 (RLK_CPU_PYTHON, so that it reuses the objects the suite's builds
    compiled) instead of a new .venv-build."""
    pytest.importorskip("torch", reason="building the CPU wheel needs torch (make test installs it)")
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not found")
    tmp_path = tmp_path_factory.mktemp("install")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(RLK_CPU_PYTHON=sys.executable, PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    # -o: the generator's .venv is this test's own environment, whatever its stamp's age.
    done = subprocess.run([make, "--no-print-directory", "-o", ".venv/.gen-stamp", "install", "EXTRAS=transformers,trl,vllm",
                           "TORCH_INDEX=", f"PYTHON={python}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-4000:]
    assert "install: done: rlkernels 0.1.0+cpu.torch" in done.stdout, done.stdout[-2000:]
    work = tmp_path / "work"
    work.mkdir()
    env.update(VLLM_CACHE_ROOT=str(tmp_path / "vllm-cache"), VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1")
    return python, env, work


@pytest.mark.slow
def test_make_install_into_a_fresh_venv_runs_the_readmes_examples(installed: tuple[Path, dict[str, str], Path]):
    """The README's ``python`` blocks (det_gemm, token_logprobs) and its check command, in the fresh
    install, from a folder outside the project."""
    python, env, work = installed
    python_blocks, _, checks = _examples()
    for code in python_blocks:
        ran = subprocess.run([str(python), "-c", code], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, f"{code}\n{ran.stdout[-3000:]}\n{ran.stderr[-5000:]}"
    for command in checks:
        ran = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, f"{command}\n{ran.stdout}\n{ran.stderr[-3000:]}"
        assert ran.stdout.strip().startswith("0.1.0+cpu.torch"), ran.stdout


@pytest.mark.slow
def test_the_readmes_vllm_example_runs_in_the_fresh_install(installed: tuple[Path, dict[str, str], Path]):
    """The README's ``py`` block, a rollout script: a real vLLM engine (vLLM's default, compiled mode,
    its engine core in a process of its own) on the plugin, compared with the patched model."""
    python, env, work = installed
    _, scripts, _ = _examples()
    for index, code in enumerate(scripts):
        script = work / f"example_{index}.py"
        script.write_text(code)
        ran = subprocess.run([str(python), str(script)], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert ran.returncode == 0, f"{code}\n{ran.stdout[-3000:]}\n{ran.stderr[-6000:]}"
