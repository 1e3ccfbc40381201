"""Malformed, hostile and mutated specs end in a clear SpecError, or in a clean render.

Every problem of a SpecError must name a file, a line >= 1 and a one-line message;
no input may raise anything else, hang, or put a payload into generated code outside
a comment or a string literal.  The loader and validators are called in-process
(thousands of cases in well under a minute); a few cases also go through the CLI.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import keyword
import os
import random
import subprocess
import sys
import tokenize
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from conftest import REPO, copy_project
from generator.errors import SpecError
from generator.load import MAX_SPEC_BYTES, parse_yaml, validate
from generator.model import DottedName, OpSpec, PackageSpec, PlatformSpec, Text
from generator.pipeline import Layout, load_checked
from generator.plan import make_plan
from generator.render import render_all

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover - 3.10 skips the TOML syntax check
    tomllib = None  # type: ignore[assignment]

MODELS: list[type[Any]] = [PackageSpec, PlatformSpec, OpSpec]
MARK = "rlkpwn"
"""Every hostile payload carries this marker; generated code may hold it only in comments and strings."""
PAYLOADS = [
    f'x); system("rm -rf /"); {MARK}(',
    f'"); {MARK}(); ("',
    f'a"""; import os; {MARK}(); """',
    f"a'''; {MARK}(); '''",
    f"*/ {MARK}(); /*",
    f"{MARK}; rm -rf /",
    f"$({MARK})",
    f"`{MARK}`",
    f"{{{{ {MARK} }}}}",
    f"{MARK}\n#include <cstdlib>",
    f"{MARK}\\",
    f"# {MARK}",
    f"{MARK}\u2028next",
    f"{MARK}\u202e\u0085",
    f"{MARK}; -- ",
    f"-D{MARK}=1",
    f"{MARK}::evil",
    f"{MARK}.evil",
    f"../../{MARK}",
]
NAMES = [
    "", " ", "det_gemm", "simt", "mma", "torch_matmul", "cpu", "cuda", "musa", "rocm", "float32", "bfloat16", "int64", "bool",
    "T", "U", "K", "M", "N", "deterministic", "portable", "native", "reference", "host", "device", "kernels/det_gemm_simt.j2",
    "torch.matmul", "class", "self", "a__b", "b_", "A", "a" * 48, "a" * 49, "dét_gemm", "det_g\u0435mm", ".cu", "PrivateUse1",
]
# Known gaps of the model, each probed here so that the tests follow the model by themselves:
# while a gap is open, the random fuzzers leave out the values that hit it (or every run would fail
# on it) and a strict xfail test records it; once the model closes it, both cover it again.
def _accepts(annotation: Any, value: str) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


TEXT_ACCEPTS_QUOTES = _accepts(Text, 'say "hi"')
"""model.Text lets '"' through, which closes the Python string and docstring literals free text is put in."""
DOTTED_ACCEPTS_KEYWORDS = _accepts(DottedName, "class")
"""model.DottedName lets Python keywords through: `extension_module: class` renders `from class import …`."""
FUZZ_PAYLOADS = [p for p in PAYLOADS if not (TEXT_ACCEPTS_QUOTES and '"' in p)]
AVOID = set(keyword.kwlist) if DOTTED_ACCEPTS_KEYWORDS else set()
"""Strings the random fuzzers must not produce while the keyword gap is open (random text can spell 'if')."""
FUZZ_NAMES = [n for n in NAMES if n not in AVOID]
FIXED = [0, -1, 1, 2**31, 2**63, 10**30, 0.5, -0.0, 1e308, float("inf"), float("nan"), True, False, None, [], {}, [[]], {"": None}]

CI = os.environ.get("CI") == "true"


def fuzz(examples: int, shrink: bool = True) -> Any:
    # Deterministic in CI (a red build must be reproducible); fresh examples on developers' runs.
    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target] + ([Phase.shrink] if shrink else [])
    return settings(
        max_examples=examples, deadline=None, derandomize=CI, database=None if CI else settings.default.database, phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


scalars = st.one_of(
    st.sampled_from(FUZZ_PAYLOADS), st.sampled_from(FUZZ_NAMES), st.sampled_from(FIXED),
    st.integers(min_value=-(2**80), max_value=2**80), st.floats(), st.text(max_size=24).filter(lambda t: t not in AVOID),
    st.booleans(), st.none(),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8).filter(lambda t: t not in AVOID) | st.sampled_from(FUZZ_NAMES), inner, max_size=4), max_leaves=12)


@functools.cache
def _real(rel: str) -> str:
    data, _ = parse_yaml((REPO / "specs" / rel).read_bytes(), f"specs/{rel}")
    return json.dumps(data)


def real(rel: str) -> dict[str, Any]:
    """A fresh copy of a real spec's data, read once (replayed examples must see the same specs)."""
    return json.loads(_real(rel))


SPEC_FILES = {
    "package.yaml": PackageSpec,
    **{f"platforms/{p.name}": PlatformSpec for p in sorted((REPO / "specs/platforms").glob("*.yaml"))},
    **{f"ops/{p.name}": OpSpec for p in sorted((REPO / "specs/ops").glob("*.yaml"))},
}


def assert_clean_error(exc: SpecError, text: str | None = None) -> None:
    assert exc.problems, "a SpecError without problems"
    last_line = max(1, text.count("\n") + 1) if text is not None else None
    for problem in exc.problems:
        assert isinstance(problem.file, str) and problem.file, problem
        assert isinstance(problem.line, int) and problem.line >= 1, problem
        if last_line is not None:
            assert problem.line <= last_line + 1, f"line {problem.line} beyond the file's {last_line} lines: {problem}"
        assert isinstance(problem.message, str) and problem.message.strip(), problem
        assert "\n" not in str(problem) and "\r" not in str(problem), f"a problem must render as one line: {problem!r}"
        assert "Traceback" not in str(problem)


def load_bytes(raw: bytes, model: type[Any], display: str = "specs/ops/fuzz.yaml") -> Any:
    """parse + validate; returns the model, or None after checking the SpecError."""
    try:
        data, src = parse_yaml(raw, display)
        return validate(model, data, src)
    except SpecError as exc:
        assert_clean_error(exc, raw.decode("utf-8", errors="replace"))
        return None


def dump(data: Any) -> bytes:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=200).encode("utf-8")


# --------------------------------------------------------------------------- mutations of the real specs


def paths_of(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += paths_of(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += paths_of(value, (*path, i))
    return out


def like(old: Any, rnd: random.Random, new_value: Any) -> Any:
    """A value of the same kind as ``old``: a hostile or plausible string, a nearby or extreme number, a shuffled list."""
    if isinstance(old, bool):
        return not old
    if isinstance(old, str):
        return new_value if isinstance(new_value, str) else rnd.choice(FUZZ_PAYLOADS + FUZZ_NAMES)
    if isinstance(old, int):
        return rnd.choice([old + 1, old - 1, old * 2, 0, -1, 2**31, 2**64, old + rnd.randint(-1000, 1000)])
    if isinstance(old, float):
        return rnd.choice([old * 10, old / 10, 0.0, -old, float("inf"), float("nan")])
    if isinstance(old, list):
        return rnd.sample(old, len(old)) if rnd.random() < 0.5 else old[: rnd.randint(0, len(old))]
    return new_value


def mutate(data: Any, rnd: random.Random, new_value: Any, new_key: str) -> Any:
    """One random edit: replace a value, delete an entry, add an unknown key, rename a key, or duplicate a list item."""
    data = json.loads(json.dumps(data))  # deep copy; the real specs are plain JSON-able data
    path = rnd.choice(paths_of(data))
    if not path:
        return new_value if rnd.random() < 0.2 else {**data, new_key: new_value}
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    action = rnd.choice(["replace", "replace", "same-type", "same-type", "delete", "add", "rename", "duplicate"])
    if action == "same-type":  # keeps many specs valid, so the render and its inertness checks run too
        parent[last] = like(parent[last], rnd, new_value)
    elif action == "replace":
        parent[last] = new_value
    elif action == "delete":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[new_key] = new_value
    elif action == "rename" and isinstance(parent, dict):
        parent[new_key] = parent.pop(last)
    elif action == "duplicate" and isinstance(parent, list):
        parent.insert(int(last), json.loads(json.dumps(parent[last])))
    else:
        parent[last] = new_value
    return data


# a standard Random seeded by the example: uniform over paths (HypothesisRandom favours the first ones)
edits = st.tuples(st.randoms(use_true_random=True), values, st.sampled_from(FUZZ_PAYLOADS + FUZZ_NAMES) | st.text(max_size=8).filter(lambda t: t not in AVOID))


@fuzz(600)
@given(rel=st.sampled_from(sorted(SPEC_FILES)), edit=edits)
def test_mutated_specs_validate_or_fail_cleanly(rel, edit):
    rnd, new_value, new_key = edit
    load_bytes(dump(mutate(real(rel), rnd, new_value, new_key)), SPEC_FILES[rel], f"specs/{rel}")


def python_marks_are_inert(path: str, text: str) -> None:
    """In Python, the marker may only sit inside one string or comment token, and the file must parse."""
    ast.parse(text, filename=path)
    inert = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if MARK in tok.string:
            assert tok.type in inert, f"{path}:{tok.start[0]}: {MARK} escaped into code as {tokenize.tok_name[tok.type]}: {tok.line.strip()!r}"


def cpp_marks_are_inert(path: str, text: str) -> None:
    """In C/C++, the marker may only sit after // on its line, or inside a string literal it cannot close."""
    for number, line in enumerate(text.split("\n"), 1):  # C++ ends lines at \n only, not at U+2028 or U+0085
        start = 0
        while (at := line.find(MARK, start)) >= 0:
            start = at + 1
            comment = line.find("//")
            if 0 <= comment < at:
                continue
            quotes = line[:at].replace('\\"', "").count('"')
            assert quotes % 2 == 1, f"{path}:{number}: {MARK} escaped into code: {line.strip()!r}"


def assert_inert(files: dict[str, bytes]) -> None:
    for path, data in files.items():
        text = data.decode("utf-8")
        if path.endswith(".py"):
            python_marks_are_inert(path, text)
        elif path.endswith((".h", ".cpp", ".cu", ".hip", ".mu")):
            cpp_marks_are_inert(path, text)
        elif path.endswith(".json"):
            json.loads(text)
        elif path.endswith(".toml") and tomllib is not None:
            tomllib.loads(text)


def fuzz_project(root: Path) -> Path:
    """The package, every platform and one op: each render stays fast, and the op's spec is the one mutated."""
    return copy_project(root, with_generated=False, ops=("det_gemm",)).root


@pytest.fixture(scope="module")
def fuzz_root(tmp_path_factory) -> Path:
    return fuzz_project(tmp_path_factory.mktemp("fuzz"))


def render_checked(root: Path, rel: str, raw: bytes) -> None:
    """The whole pipeline in-process, with one spec file replaced: a clean SpecError, or inert output."""
    target = root / "specs" / rel
    original = target.read_bytes()
    target.write_bytes(raw)
    try:
        try:
            catalog = load_checked(Layout(root))
        except SpecError as exc:
            assert_clean_error(exc)
            return
        # a valid catalog must render (a RenderError here means the model let through what a template cannot take);
        # only the packages the edited file reaches, to keep the fuzzer fast
        platform = rel.removeprefix("platforms/").removesuffix(".yaml") if rel.startswith("platforms/") else "cuda"
        jobs = [j for j in make_plan(catalog) if "/" not in j.path or j.path.split("/")[0] in {platform, "cpu"}]
        assert_inert(render_all(jobs, root / "templates"))
    finally:
        target.write_bytes(original)


RENDERED_SPECS = sorted(rel for rel in SPEC_FILES if not rel.startswith("ops/") or rel == "ops/det_gemm.yaml")


@fuzz(100, shrink=False)  # a render per example: shrinking a failure would take minutes; the example is small already
@given(rel=st.sampled_from(RENDERED_SPECS), edit=edits)
def test_mutated_specs_render_or_fail_cleanly(fuzz_root, rel, edit):
    rnd, new_value, new_key = edit
    render_checked(fuzz_root, rel, dump(mutate(real(rel), rnd, new_value, new_key)))


# Fields whose values reach generated code as free text (comments, docstrings, messages).
TEXT_FIELDS = {
    "ops/det_gemm.yaml": [("summary",), ("args", 0, "doc"), ("outputs", 0, "doc"), ("kernels", "simt", "doc")],
    "package.yaml": [("description",)],
    "platforms/cpu.yaml": [("display_name",), ("compiler",)],
    "platforms/cuda.yaml": [("display_name",), ("compiler",), ("build", "toolkit_hint")],
}
TEXT_QUOTE_GAP = pytest.mark.xfail(TEXT_ACCEPTS_QUOTES, strict=True, reason="model.Text accepts '\"', which closes string literals in generated Python")


@pytest.mark.parametrize(
    "payload", [pytest.param(p, marks=TEXT_QUOTE_GAP if '"' in p else ()) for p in PAYLOADS], ids=range(len(PAYLOADS))
)
def test_payloads_in_free_text_stay_inert(tmp_path, payload):
    """Each payload in every free-text field that reaches a generated file: refused, or kept inside comments and strings."""
    fuzz_project(tmp_path)
    for rel, paths in TEXT_FIELDS.items():
        data = real(rel)
        for path in paths:
            node = data
            for part in path[:-1]:
                node = node[part]
            node[path[-1]] = payload
        (tmp_path / "specs" / rel).write_bytes(dump(data))
    render_checked(tmp_path, "ops/det_gemm.yaml", (tmp_path / "specs/ops/det_gemm.yaml").read_bytes())


# --------------------------------------------------------------------------- garbage


@fuzz(700)
@given(raw=st.binary(max_size=400))
def test_binary_garbage(raw):
    for model in MODELS:
        load_bytes(raw, model)


yamlish = st.lists(
    st.sampled_from([*":-[]{},#&*!|>'\"%@`?\t\n ab1.\\\x00\x85\u2028é", "  ", "- ", ": ", "\n  ", "!!", "&a", "*a", "<<", "name", "---"]), max_size=60
).map("".join)


@fuzz(700)
@given(text=yamlish)
def test_yaml_shaped_garbage(text):
    for model in MODELS:
        load_bytes(text.encode("utf-8", errors="surrogatepass"), model)


@fuzz(300)
@given(doc=st.dictionaries(st.sampled_from([*FUZZ_NAMES, "name", "kernels", "backends", "args", "tests", "torch", "build"]), values, max_size=6))
def test_random_documents(doc):
    raw = dump(doc)
    for model in MODELS:
        load_bytes(raw, model)


# --------------------------------------------------------------------------- named hostile inputs


# Each hostile input is read in a child process whose CPU time and memory the kernel limits, so a
# hang or a blow-up in the making fails the case that caused it, whatever else the machine runs
# (no wall-clock bound).  One child reads every case in turn, reporting each as it finishes.
HOSTILE_CPU_SECONDS = 120
HOSTILE_MEMORY_BYTES = 4 << 30
_HOSTILE: list[bytes] = []

_READ_EACH = """
import json, pickle, resource, sys, traceback
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
sys.path.insert(0, {tests!r})
import test_fuzz_specs as fuzz
from generator.model import OpSpec
for index, raw in enumerate(pickle.load(open(sys.argv[1], "rb"))):
    print(json.dumps({{"started": index}}), flush=True)
    try:
        verdict = "accepted" if fuzz.load_bytes(raw, OpSpec) is not None else "refused"
    except BaseException:
        verdict = traceback.format_exc(limit=3)
    print(json.dumps({{"index": index, "verdict": verdict}}), flush=True)
"""


def _hostile(raw: bytes) -> bytes:
    _HOSTILE.append(raw)
    return raw


@functools.cache
def _hostile_verdicts(workdir: str) -> dict[bytes, str]:
    import pickle

    cases = Path(workdir) / "hostile.pickle"
    cases.write_bytes(pickle.dumps(_HOSTILE))
    script = _READ_EACH.format(cpu=HOSTILE_CPU_SECONDS, memory=HOSTILE_MEMORY_BYTES, tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script, str(cases)], cwd=REPO, capture_output=True, text=True)
    verdicts: dict[bytes, str] = {}
    started = None
    for line in done.stdout.splitlines():
        event = json.loads(line)
        if "started" in event:
            started = event["started"]
        else:
            verdicts[_HOSTILE[event["index"]]] = event["verdict"]
    if started is not None and _HOSTILE[started] not in verdicts:
        verdicts[_HOSTILE[started]] = f"the reader was stopped by its limits ({HOSTILE_CPU_SECONDS} CPU seconds, {HOSTILE_MEMORY_BYTES >> 30} GiB) on this input: exit {done.returncode}"
    return verdicts


def bounded(raw: bytes, workdir: Path) -> None:
    verdict = _hostile_verdicts(str(workdir)).get(raw, "not read: the reader stopped on an earlier input")
    assert verdict == "refused", f"a hostile input was not refused: {verdict}"


@pytest.fixture(scope="module")
def hostile_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


BILLION_LAUGHS = b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + b"".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n".encode() for i in range(9)
)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(_hostile(BILLION_LAUGHS), id="billion-laughs"),
        pytest.param(_hostile(b"a: &x [1, *x]\n"), id="self-referencing-alias"),
        pytest.param(_hostile(b"a: &x {b: 1}\nc:\n  <<: *x\n"), id="merge-key"),
        pytest.param(_hostile(b"[" * 100_000), id="deep-flow-sequence"),
        pytest.param(_hostile(b"{a: " * 50_000), id="deep-flow-mapping"),
        pytest.param(_hostile("".join(f"{'  ' * i}k{i}:\n" for i in range(400)).encode()), id="deep-block-mapping"),
        pytest.param(_hostile(b"- " * 60_000), id="deep-block-sequence"),
        # Compact nesting on one line after an explicit key's value indicator, which libyaml's
        # composer (recursing in C) must never be given.
        pytest.param(_hostile(b"? k\n: " + b"- " * 120_000 + b"x\n"), id="deep-compact-after-value-indicator"),
        pytest.param(_hostile(b"? " + b"- " * 120_000 + b"x\n"), id="deep-compact-after-key-indicator"),
        pytest.param(_hostile(b"? k\n: " + b"? " * 120_000 + b"x\n"), id="deep-compact-keys"),
        pytest.param(_hostile(b"- " + b"&a - " * 40_000 + b"x\n"), id="deep-compact-with-anchors"),
        pytest.param(_hostile(b"- " + b"!!seq - " * 25_000 + b"x\n"), id="deep-compact-with-tags"),
        pytest.param(_hostile(b"a: " + b"9" * 10_000 + b"\n"), id="huge-integer"),
        pytest.param(_hostile(b"a: 1e99999\nb: -.inf\nc: .nan\n"), id="infinities"),
        pytest.param(_hostile(b"a: " + b"x" * (MAX_SPEC_BYTES + 1)), id="over-size-limit"),
        pytest.param(_hostile(b""), id="empty"),
        pytest.param(_hostile(b"# only a comment\n"), id="only-comments"),
        pytest.param(_hostile(b"---\n...\n"), id="empty-document"),
        pytest.param(_hostile(b"a: 1\n---\nb: 2\n"), id="two-documents"),
        pytest.param(_hostile(b"\xef\xbb\xbf"), id="bom-only"),
        pytest.param(_hostile(b"\xff\xfe\x00n\x00a\x00m\x00e"), id="utf16"),
        pytest.param(_hostile(b"name: det\x00gemm\n"), id="nul"),
        pytest.param(_hostile(b"a: !!python/object/apply:os.system ['id']\n"), id="python-tag"),
        pytest.param(_hostile(b"a: !!binary aGVsbG8=\n"), id="binary-tag"),
        pytest.param(_hostile(b"a: 2024-02-30\n"), id="impossible-date"),
        pytest.param(_hostile(b"a: !!bool maybe\n"), id="bad-bool"),
        pytest.param(_hostile(b"? [a, b]\n: c\n"), id="complex-key"),
        pytest.param(_hostile(b"1: a\n"), id="int-key"),
        pytest.param(_hostile(b"name: a\nname: b\n"), id="duplicate-key"),
        pytest.param(_hostile(b"- a\n- b\n"), id="top-level-list"),
        pytest.param(_hostile(b"just a string"), id="top-level-scalar"),
        pytest.param(_hostile(b"a: 'unterminated\n"), id="unterminated-quote"),
        pytest.param(_hostile(b"\ta: 1\n"), id="tab-indent"),
        pytest.param(_hostile("name: dét_gemm\n".encode()), id="unicode-name"),
    ],
)
def test_hostile_yaml_is_refused_within_cpu_and_memory_limits(raw, hostile_workdir):
    bounded(raw, hostile_workdir)


def op_with(**changes: Any) -> bytes:
    data = real("ops/det_gemm.yaml")
    data.update(changes)
    return dump(data)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(_hostile(op_with(name='x); system("rm -rf /"')), id="injected-op-name"),
        pytest.param(_hostile(op_with(args=[{"name": "a", "dtype": "T", "shape": ["M", "K"]}, {"name": "a", "dtype": "T", "shape": ["K", "N"]}])), id="duplicate-arg"),
        pytest.param(_hostile(op_with(args=[{"name": "a", "dtype": "T", "shape": ["M", "K"]}], outputs=[{"name": "a", "dtype": "T", "shape": ["M"]}])), id="output-shadows-arg"),
        pytest.param(_hostile(op_with(kernels={"simt; evil": {"kind": "native", "template": "kernels/det_gemm_simt.j2", "guarantees": []}})), id="injected-kernel"),
        pytest.param(_hostile(op_with(backends={"cpu": ['simt"); evil("']})), id="injected-backend"),
        pytest.param(_hostile(op_with(tests={"shapes": [{"M": 10**40, "K": 1, "N": 1}], "batch_dim": "M"})), id="huge-test-shape"),
        pytest.param(_hostile(op_with(dtype_vars={"T": ["float32"] * 1000})), id="many-dtypes"),
        pytest.param(_hostile(op_with(args=[{"name": f"a{i}", "dtype": "float32", "shape": ["M"] * 9} for i in range(3)])), id="rank-9"),
        pytest.param(_hostile(op_with(summary="x" * 100_000)), id="long-summary"),
        pytest.param(_hostile(op_with(summary="line one\nline two")), id="multi-line-summary"),
    ],
)
def test_hostile_ops_are_refused(raw, hostile_workdir):
    bounded(raw, hostile_workdir)


@pytest.mark.xfail(DOTTED_ACCEPTS_KEYWORDS, strict=True, reason="model.DottedName accepts Python keywords")
@pytest.mark.parametrize("field", ["extension_module", "build_ext"])
def test_python_keywords_in_dotted_names_are_refused(field):
    data = real("platforms/cuda.yaml")
    data["build"][field] = "class" if field == "extension_module" else "torch.class.BuildExtension"
    assert load_bytes(dump(data), PlatformSpec) is None


def test_reference_cycle_and_self_reference_are_refused(fuzz_root):
    """An op whose reference is a native kernel (itself a backend) and a backend naming the op itself."""
    for changes in ({"reference": "simt"}, {"backends": {"cpu": ["det_gemm"], "cuda": ["simt"], "rocm": ["simt"], "musa": ["simt"]}}):
        data = real("ops/det_gemm.yaml")
        data.update(changes)
        render_checked(fuzz_root, "ops/det_gemm.yaml", dump(data))


def test_cli_on_hostile_specs_exits_2_without_traceback(tmp_path):
    """A handful of end-to-end runs: the CLI reports file:line and writes nothing."""
    fuzz_project(tmp_path)
    op = tmp_path / "specs/ops/det_gemm.yaml"
    for raw in (b"\x00\xff garbage", BILLION_LAUGHS, op_with(name='x); system("rm -rf /"')):
        op.write_bytes(raw)
        result = subprocess.run(
            [sys.executable, "-m", "generator", "--root", str(tmp_path), "generate"], capture_output=True, text=True, cwd=REPO, check=False, timeout=60
        )
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "specs/ops/det_gemm.yaml:" in result.stderr
        assert not (tmp_path / "generated").exists()


# --------------------------------------------------------------------------- names and numbers at their bounds

from generator import model as _model
from generator import reserved as _reserved

CLASHING = [n for kind in _reserved.KINDS for n in _reserved.names(kind)]
LOWER_CLASHES = sorted(n for n in CLASHING if n[:1].islower())
UPPER_CLASHES = sorted(n for n in CLASHING if n[:1].isupper() and len(n) <= 8 and n.isalnum() and n.isupper())


@fuzz(150)
@given(name=st.sampled_from(LOWER_CLASHES), dim=st.sampled_from(UPPER_CLASHES), where=st.sampled_from(["arg", "alias", "output", "attr", "dim"]))
def test_names_from_the_clash_lists_are_refused(name, dim, where):
    data = real("ops/det_gemm.yaml")
    if where == "arg":
        data["args"][0]["name"] = name
    elif where == "alias":
        data["aliases"] = [name]
    elif where == "output":
        data["outputs"][0]["name"] = name
    elif where == "attr":
        data["attrs"][0]["name"] = name
    else:
        data["args"][0]["shape"][0] = dim
    assert load_bytes(dump(data), OpSpec) is None


BOUNDS = [
    (("attrs", 1), {"name": "k", "type": "int"}, "default", _model.INT64_MAX, _model.INT64_MAX + 1),
    (("attrs", 1), {"name": "k", "type": "int"}, "default", _model.INT64_MIN, _model.INT64_MIN - 1),
    (("attrs", 1), {"name": "k", "type": "float"}, "default", _model.FLOAT32_MAX, 3.5e38),
    (("kernels", "mma", "params"), None, "block_n", _model.MAX_PARAM, _model.MAX_PARAM + 1),
    (("kernels", "mma", "params"), None, "block_n", 1, 0),
    (("kernels", "simt", "tiles", "rows"), None, 0, _model.MAX_TILE_ROWS, _model.MAX_TILE_ROWS + 1),
    (("kernels", "simt", "tiles", "reduction"), None, 0, _model.MAX_TILE_REDUCTION, _model.MAX_TILE_REDUCTION + 1),
]


@fuzz(60)
@given(case=st.sampled_from(BOUNDS), past=st.booleans(), extra=st.integers(0, 3))
def test_numbers_at_and_past_their_bounds(case, past, extra):
    path, replace_with, key, at, beyond = case
    data = real("ops/det_gemm.yaml")
    node = data
    for part in path[:-1]:
        node = node[part]
    if replace_with is not None:
        node.append({**replace_with})  # a new attribute after the spec's own
    target = node[path[-1]]
    value = beyond + (extra if beyond > at else -extra) * (1 if isinstance(at, int) else 1e37) if past else at
    target[key] = value
    result = load_bytes(dump(data), OpSpec)
    assert (result is None) == past, f"{path}.{key} = {value!r}"
