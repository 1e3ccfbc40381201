"""Write generator/reserved_names.json: every name a spec name would meet in generated code.

A spec name lands in generated Python (module level of each package file, function parameters
next to the builtins) and in generated C/C++ (parameters and locals of kernels, launchers and
bindings, after every header those sources include).  This tool derives the lists from the
sources themselves rather than by hand:

- C/C++ macros: ``g++ -E -dM`` over every header the templates include with <...>, plus <cerrno>,
  <csignal> and <cstdint>, and the vendors' runtime headers where their toolkits are installed;
- C/C++ types, enumerators and variables declared at global scope: a scan of the same headers
  preprocessed with ``g++ -E``;
- C/C++ functions declared at global scope that the generated sources call unqualified;
- Python keywords (``keyword``): spec names reach the package's Python only as data.

Only names a spec could spell are kept (lower-case identifiers, upper-case dimension names), so
the file stays small.  Run it after changing a template's includes or a toolkit:

    python tools/reserved_names.py            # rewrite the file
    python tools/reserved_names.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import json
import keyword
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from generator.model import DIM_NAME, IDENTIFIER
from generator.reserved import DATA_FILE

SPELLABLE = re.compile(f"(?:{IDENTIFIER})|(?:{DIM_NAME})")
EXTRA_HEADERS = ("cerrno", "csignal", "cstdint", "cmath", "cstdio", "cstdlib", "cstring")
# Toolkit headers: (platform, header, include dirs, extra flags)
VENDORS = (
    ("cuda", "cuda_runtime.h", ("/usr/local/cuda/include",), ()),
    ("cuda", "cuda_fp16.h", ("/usr/local/cuda/include",), ()),
    ("cuda", "cuda_bf16.h", ("/usr/local/cuda/include",), ()),
    ("rocm", "hip/hip_runtime.h", ("/opt/rocm/include", "/usr/include"), ("-D__HIP_PLATFORM_AMD__",)),
    ("musa", "musa_runtime.h", (str(REPO / "tools/musa_shim"), "/usr/local/musa/include"), ()),
)
# Built-in variables of the device languages (CUDA, HIP and MUSA share them); no header declares
# them to a host compiler, so they are listed from the languages' programming guides.
DEVICE_BUILTINS = ("threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize")

_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|[A-Za-z_][A-Za-z0-9_]*|::|[{}()<>;,=\[\]]|\S')
_TYPE_KEYS = {"struct", "class", "union", "enum"}


def _spellable(names: set[str]) -> list[str]:
    return sorted(n for n in names if SPELLABLE.fullmatch(n) and "__" not in n and not n.endswith("_"))


def template_headers() -> list[str]:
    found: set[str] = set()
    for path in (REPO / "templates").rglob("*.j2"):
        found |= set(re.findall(r"#include\s*<([^>]+)>", path.read_text()))
    return sorted(found)


def _compile(args: list[str], source: str) -> str | None:
    with tempfile.NamedTemporaryFile("w", suffix=".cpp") as f:
        f.write(source)
        f.flush()
        result = subprocess.run(["g++", "-std=c++17", *args, f.name], capture_output=True, text=True, check=False)
    return result.stdout if result.returncode == 0 else None


def _global_declarations(text: str) -> tuple[set[str], set[str]]:
    """Types, enumerators and variables; and functions: names declared at global scope (or in extern "C")."""
    tokens = _TOKEN.findall("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    types: set[str] = set()
    functions: set[str] = set()
    stack: list[str] = []  # "global" (extern "C"), "ns", "enum", "other"
    paren = 0
    statement: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        at_global = all(kind == "global" for kind in stack)
        if tok == "template" and i + 1 < len(tokens) and tokens[i + 1] == "<":
            depth, i = 0, i + 1
            while i < len(tokens):
                depth += {"<": 1, ">": -1}.get(tokens[i], 0)
                if depth == 0:
                    break
                i += 1
            i += 1
            continue
        if tok == "(":
            plain = statement and re.fullmatch(r"[A-Za-z_]\w*", statement[-1]) and statement[-2:-1] != ["::"]
            if at_global and paren == 0 and plain and "typedef" not in statement:
                functions.add(statement[-1])
            paren += 1
        elif tok == ")":
            paren = max(0, paren - 1)
        elif tok == "{":
            kind = "other"
            if "namespace" in statement:
                kind = "ns"
            elif statement[-2:] == ["extern", '"C"'] or statement[-2:] == ["extern", '"C++"']:
                kind = "global"
            elif "enum" in statement and paren == 0:
                kind = "enum"
                if at_global and statement[-1] not in {"enum", "class", "struct"}:
                    types.add(statement[-1])
            if at_global and statement and statement[0] in _TYPE_KEYS | {"typedef"} and len(statement) > 1:
                name = statement[statement.index(statement[0]) + 1]
                if statement[0] != "typedef" and re.fullmatch(r"[A-Za-z_]\w*", name):
                    types.add(name)
            stack.append(kind)
            statement = []
        elif tok == "}":
            if stack and stack[-1] == "enum" and statement and all(k in {"global", "enum"} for k in stack):
                types.add(statement[0])
            if stack:
                stack.pop()
            statement = []
        elif tok in {";", ","} and paren == 0:
            in_enum = bool(stack) and stack[-1] == "enum" and all(k in {"global", "enum"} for k in stack)
            if in_enum and statement:
                types.add(statement[0])  # an enumerator
            elif at_global and statement and "(" not in statement:
                # typedefs, tags and extern variables; a definition's own name waits for its body
                if statement[0] == "typedef":
                    types.add(statement[-1])
                elif statement[0] == "using" and len(statement) > 2 and statement[2] == "=":
                    types.add(statement[1])
                elif statement[0] == "extern" and "=" not in statement:
                    names = [t for t in statement if re.fullmatch(r"[A-Za-z_]\w*", t)]
                    types.add(names[-1])
                elif statement[0] in _TYPE_KEYS and len(statement) > 1:
                    types.add(statement[1])
            elif at_global and statement and statement[0] == "typedef" and "(" in statement:
                inner = [t for t in statement if re.fullmatch(r"[A-Za-z_]\w*", t)]
                star = statement.index("(") + 1
                if star + 1 < len(statement) and statement[star] == "*":
                    types.add(statement[star + 1])
                elif inner:
                    pass
            statement = statement[:1] if tok == "," and statement[:1] == ["typedef"] else []
        else:
            statement.append(tok)
        i += 1
    # A name counts only where the text also declares it plainly: the scan above knows scopes,
    # these patterns know declarations.
    body = " ".join(tokens)
    declared = set(re.findall(r"\btypedef\b[^;{}()]*?\b(\w+) ;", body))
    declared |= set(re.findall(r"\btypedef\b[^;{}]*?\( \* (\w+) \)", body))
    declared |= set(re.findall(r"\b(?:struct|class|union|enum) (\w+) [{;:]", body))
    declared |= set(re.findall(r"\bextern [^;(){}]*?\b(\w+) ;", body))
    for enum_body in re.findall(r"\benum\b[^{};()]*\{([^{}]*)\}", body):
        declared |= set(re.findall(r"(?:^|,) (\w+) (?=[=,]|$)", enum_body))
    declared |= set(re.findall(r"\busing (\w+) =", body))
    return types & declared, functions


def called_in_generated() -> set[str]:
    """Identifiers the generated C/C++ sources call unqualified (a name followed by '(', not after :: . or ->)."""
    called: set[str] = set()
    for path in (REPO / "generated").rglob("*"):
        if path.suffix in {".h", ".cpp", ".cu", ".hip", ".mu"}:
            text = re.sub(r"//[^\n]*|\"(?:\\.|[^\"\\])*\"", " ", path.read_text())
            called |= set(re.findall(r"(?<![\w:.>])([A-Za-z_]\w*)\s*\(", text))
    return called


def cpp_names() -> tuple[dict[str, list[str]], list[str]]:
    groups: dict[str, list[tuple[str, list[str]]]] = {"host": [(h, []) for h in (*template_headers(), *EXTRA_HEADERS)]}
    python_include = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], capture_output=True, text=True, check=True).stdout.strip()
    torch_dirs: list[str] = []
    try:
        import torch.utils.cpp_extension as ext

        torch_dirs = list(ext.include_paths())
    except ImportError:
        pass
    provenance = [f"g++ {subprocess.run(['g++', '-dumpfullversion'], capture_output=True, text=True, check=False).stdout.strip()} -std=c++17"]
    macros: set[str] = set()
    types: set[str] = set()
    functions: set[str] = set()
    vendor_headers = {h for _, h, _, _ in VENDORS}
    for header, _ in groups["host"]:
        if header in vendor_headers or "{" in header:  # a platform's own headers: below
            continue
        flags = [f"-I{d}" for d in [python_include, *torch_dirs]]
        source = f"#include <{header}>\n"
        defined = _compile(["-E", "-dM", *flags], source)
        expanded = _compile(["-E", *flags], source) if not header.startswith(("torch/", "ATen/", "Python")) else ""
        if defined is None or expanded is None:
            provenance.append(f"<{header}>: not found, skipped")
            continue
        macros |= set(re.findall(r"^#define ([A-Za-z_]\w*)", defined, re.MULTILINE))
        t, f = _global_declarations(expanded)
        types |= t
        functions |= f
        provenance.append(f"<{header}>" + (": macros only" if not expanded else ""))
    for platform, header, dirs, extra in VENDORS:
        found = next((d for d in dirs if (Path(d) / header).is_file()), None)
        if found is None:
            provenance.append(f"{platform} <{header}>: not installed, skipped")
            continue
        flags = [f"-I{found}", *extra]
        defined = _compile(["-E", "-dM", *flags], f"#include <{header}>\n")
        expanded = _compile(["-E", *flags], f"#include <{header}>\n")
        if defined is None or expanded is None:
            provenance.append(f"{platform} <{header}> in {found}: does not preprocess with g++, skipped")
            continue
        macros |= set(re.findall(r"^#define ([A-Za-z_]\w*)", defined, re.MULTILINE))
        t, f = _global_declarations(expanded)
        types |= t
        functions |= f
        provenance.append(f"{platform} <{header}> in {found}")
    from generator.model import _CPP_KEYWORDS

    called = (called_in_generated() & functions) - _CPP_KEYWORDS
    return {"cpp_macros": _spellable(macros), "cpp_types": _spellable(types - _CPP_KEYWORDS), "cpp_functions": _spellable(called)}, provenance


def python_names() -> dict[str, list[str]]:
    """Python's keywords, which no parameter may be named.  Spec names reach the package's Python
    only as data (its registry is JSON), never as identifiers, so nothing else of Python's is
    reserved; op names, which become the package's attributes, are checked against the package's
    own names by the generator (generator/runtime_tree.py)."""
    return {"python_keywords": sorted({*keyword.kwlist, *keyword.softkwlist})}


def build() -> dict[str, object]:
    cpp, provenance = cpp_names()
    return {
        "_generated": "by tools/reserved_names.py from the headers the templates include and from generated/; do not edit",
        "_provenance": provenance,
        "device_builtins": sorted(DEVICE_BUILTINS),
        **cpp,
        **python_names(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = parser.parse_args()
    if shutil.which("g++") is None:
        print("g++ is needed to read the headers", file=sys.stderr)
        return 1
    text = json.dumps(build(), indent=1, sort_keys=True) + "\n"
    if args.check:
        same = DATA_FILE.is_file() and DATA_FILE.read_text() == text
        print(f"{DATA_FILE.relative_to(REPO)}: {'up to date' if same else 'out of date; run tools/reserved_names.py'}")
        return 0 if same else 1
    DATA_FILE.write_text(text)
    print(f"wrote {DATA_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
