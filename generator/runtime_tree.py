"""The package's hand-written Python under ``runtime/``: which files reach every package, and
the names the package itself defines, which no op may take.

``runtime/rlkernels/`` becomes the package's Python folder, ``runtime/tests/`` its tests,
``runtime/csrc/`` hand-written C++ headers beside the generated ones (``csrc/`` of the package) and
``runtime/setup.py`` its build script, copied as they are (``plan``).  An op's public function is an attribute of the package, beside
the package's own names (its modules, and what ``__init__.py`` binds); ``contracts`` refuses an
op named like one of them, so no op can shadow the package or the package an op.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import GeneratorError
from .files import FileProblem, read_regular
from .paths import RUNTIME_DIR

PACKAGE_DIR = "rlkernels"
"""The folder of ``runtime/`` that becomes the package's Python folder (named as the package spec says)."""
TESTS_DIR = "tests"
CSRC_DIR = "csrc"
"""The folder of ``runtime/`` whose C++ headers go to the package's ``csrc/`` (kernels include them as ``../../<name>``)."""
KERNELS_DIR = "kernels"
"""The folder of ``runtime/`` whose C++ headers go next to each kernel platform's kernels
(``csrc/kernels/<platform>/``; ``plan`` says which platforms take which), included as ``<name>``."""
MAX_SOURCE_BYTES = 1024 * 1024


ROOT_FILES = frozenset({"setup.py", "pyproject.toml"})
"""Files of ``runtime/`` itself, copied to the package's root."""


def destination(rel: str, package: str) -> str | None:
    """Where ``runtime/<rel>`` goes inside a package; None for a file nothing copies."""
    folder, _, rest = rel.partition("/")
    if not rest:
        return rel if rel in ROOT_FILES else None
    return {PACKAGE_DIR: f"{package}/{rest}", TESTS_DIR: f"{TESTS_DIR}/{rest}", CSRC_DIR: f"{CSRC_DIR}/{rest}"}.get(folder)


def runtime_files(runtime: Path) -> tuple[str, ...]:
    """The hand-written files under ``runtime/`` (relative to it, sorted): every Python source of
    its ``rlkernels/`` and ``tests/`` folders and every C++ header of its ``csrc/`` and ``kernels/``.  Anything else there -- a symbolic link, a special
    file, a file of another kind, a sub-folder -- is an error naming it, so nothing unexpected
    reaches a package.  Python's byte-code caches are skipped."""
    if not runtime.is_dir():
        raise GeneratorError(f"{RUNTIME_DIR}/: missing; it holds the package's hand-written Python")
    found: list[str] = []
    problems: list[str] = []
    for parent, dirs, files in os.walk(runtime, onerror=lambda exc: problems.append(f"{exc.filename}: {exc.strerror}")):
        here = Path(parent)
        for name in sorted(dirs):
            shown = (here / name).relative_to(runtime.parent).as_posix()
            if name == "__pycache__":
                continue
            if (here / name).is_symlink():
                problems.append(f"{shown}: a symbolic link; the package's sources must be plain folders and files")
            elif here != runtime:
                problems.append(f"{shown}: a sub-folder; {RUNTIME_DIR}/{PACKAGE_DIR}/ and {RUNTIME_DIR}/{TESTS_DIR}/ hold files only")
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not (here / d).is_symlink() and here == runtime)
        for name in sorted(files):
            path = here / name
            rel = path.relative_to(runtime).as_posix()
            shown = f"{RUNTIME_DIR}/{rel}"
            if name.endswith(".pyc"):
                continue
            if path.is_symlink() or not path.is_file():
                problems.append(f"{shown}: not a regular file; the package's sources must be plain files")
            elif rel.startswith(f"{KERNELS_DIR}/"):
                if not name.endswith(".h"):
                    problems.append(f"{shown}: not a C++ header; {RUNTIME_DIR}/{KERNELS_DIR}/ holds the headers copied next to the kernels")
                else:
                    found.append(rel)
            elif rel in ROOT_FILES:
                found.append(rel)
            elif not name.endswith(".h" if rel.startswith(f"{CSRC_DIR}/") else (".py", ".typed")) or destination(rel, "package") is None:
                problems.append(
                    f"{shown}: not copied into any package; {RUNTIME_DIR}/ holds the Python files of {PACKAGE_DIR}/ and {TESTS_DIR}/, "
                    f"the C++ headers of {CSRC_DIR}/ and {KERNELS_DIR}/, and {', '.join(sorted(ROOT_FILES))}"
                )
            else:
                found.append(rel)
    if problems:
        raise GeneratorError("; ".join(problems))
    return tuple(sorted(found))


@dataclass(frozen=True)
class PackageNames:
    """The names the package defines itself: each a reason an op may not take it."""

    modules: frozenset[str]
    """Its modules (``transformers``, ``aten``, ``_ops``, ...)."""
    exported: frozenset[str]
    """What its ``__init__.py`` binds at the top level (``detect_platform``, ``OPS``, ...)."""
    references: frozenset[str] = frozenset()
    """The public functions of its ``_references.py``, which reference kernels may name."""

    def clash(self, name: str) -> str | None:
        """What ``name`` would shadow in the package, or None."""
        if name in self.modules:
            return f"the package's module {name} ({RUNTIME_DIR}/{PACKAGE_DIR}/{name}.py)"
        if name in self.exported:
            return f"the package's own {name} ({RUNTIME_DIR}/{PACKAGE_DIR}/__init__.py)"
        return None


def _read_source(path: Path, shown: str) -> str:
    try:
        data = read_regular(path, MAX_SOURCE_BYTES, follow_links=False)
    except FileProblem as problem:
        raise GeneratorError(f"{shown}: {problem}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise GeneratorError(f"{shown}: larger than {MAX_SOURCE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GeneratorError(f"{shown}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name a module binds at its top level (imports, assignments, definitions), and the
    strings of its ``__all__`` list."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            value = node.value
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and isinstance(value, (ast.List, ast.Tuple)):
                names.update(e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
        elif isinstance(node, (ast.Try, ast.If)):
            names |= _bound_names(ast.Module(body=[*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])], type_ignores=[]))
    return names


def package_names(runtime: Path) -> PackageNames:
    """The names ``runtime/rlkernels/`` defines at the package's top level."""
    folder = runtime / PACKAGE_DIR
    modules = frozenset(rel.split("/", 1)[1].removesuffix(".py") for rel in runtime_files(runtime) if rel.startswith(f"{PACKAGE_DIR}/") and rel.endswith(".py"))
    init = folder / "__init__.py"
    shown = f"{RUNTIME_DIR}/{PACKAGE_DIR}/__init__.py"
    try:
        tree = ast.parse(_read_source(init, shown), filename=shown)
    except SyntaxError as exc:
        raise GeneratorError(f"{shown}:{exc.lineno}: {exc.msg}") from None
    references: frozenset[str] = frozenset()
    if "_references" in modules:
        shown = f"{RUNTIME_DIR}/{PACKAGE_DIR}/_references.py"
        try:
            module = ast.parse(_read_source(folder / "_references.py", shown), filename=shown)
        except SyntaxError as exc:
            raise GeneratorError(f"{shown}:{exc.lineno}: {exc.msg}") from None
        references = frozenset(n.name for n in module.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_"))
    return PackageNames(modules - {"__init__"}, frozenset(_bound_names(tree)), references)


def calls_of(runtime: Path, module: str) -> frozenset[str]:
    """The catalog names ``runtime/rlkernels/<module>.py`` reaches: ``_ops.<name>`` attributes and
    ``OPS["<name>"]`` entries."""
    shown = f"{RUNTIME_DIR}/{PACKAGE_DIR}/{module}.py"
    try:
        tree = ast.parse(_read_source(runtime / PACKAGE_DIR / f"{module}.py", shown), filename=shown)
    except SyntaxError as exc:
        raise GeneratorError(f"{shown}:{exc.lineno}: {exc.msg}") from None
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "_ops":
            found.add(node.attr)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "OPS" and isinstance(node.slice, ast.Constant):
            found.add(str(node.slice.value))
    return frozenset(found)
