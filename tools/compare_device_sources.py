"""Compare the generated device kernel sources of a base revision with the working tree's.

    python tools/compare_device_sources.py [--base REV] [--no-compile]

No GPU runs here, so the device kernels' bits are compared where they can be without one: for
every .cu, .hip and .mu source under generated/<platform>/csrc/kernels/<platform>/,
1. its token stream (comments and provenance left out, #include lines as a set, and the ABI's
   prefixed names -- arg_x, out_y, dim_K, attr_eps, dtype_out_c -- read as the spec's bare
   names) against the base's: a source whose tokens are equal compiles to the same code;
2. for a source whose tokens differ, the compiler's output for both: PTX for .cu (nvcc, the
   platform's flags, its first arch) and for .mu (nvcc through the MUSA header shim: the same
   well-formedness check compile_check makes, not mcc), AMDGPU assembly for .hip (hipcc, the
   first arch), instructions only (no comments, no metadata naming parameters, the anonymous
   namespace's mangled hash left out).  Equal output
   means the same device code whatever the source's text; where it differs, the same
   instructions counted by opcode (mul.rn.f32, ld.global.nc.u16, ...) mean the same operations
   in another order or other registers, which for separately rounded operations (no
   contraction) is the same arithmetic.
Prints one line per source and a summary; exit status 1 when any source's instructions differ.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import compile_check

from generator.load import load_catalog
from generator.plan import OpView

TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|::|->|<<|>>|[<>=!+\-*/%&|^]=?|&&|\|\||\+\+|--|\S")
ANONYMOUS = re.compile(r"_GLOBAL__N__[0-9a-f]{8}_")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def tokens(text: str, rename: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """(sorted #include lines, the other tokens, each a key of ``rename`` replaced by its value)."""
    text = COMMENT.sub(" ", text)
    includes = sorted(line.strip() for line in text.splitlines() if line.strip().startswith("#include"))
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("#include"))
    rename = rename or {}
    return includes, [rename.get(token, token) for token in TOKEN.findall(body)]


def bare_names(view: OpView) -> dict[str, str]:
    """The op's launcher parameter names -> the spec's bare names the base revision used."""
    abi = view.abi
    names = {abi.arg[n]: n for n in abi.arg} | {abi.out[n]: n for n in abi.out} | {abi.dim[n]: n for n in abi.dim}
    return names | {abi.attr[n]: n for n in abi.attr} | {abi.out_dtype[n]: f"dtype_{n}" for n in abi.out_dtype}


def device_code(job: compile_check.Job, compiler: str, source: Path, work: Path) -> str:
    """The instructions the compiler makes of ``source`` with ``job``'s flags (first arch)."""
    args = [str(source) if a == str(job.source) else a for a in job.args]
    args = [a for a in args if a not in ("-c", "-save-temps", "-v")]
    if job.compiler == "nvcc":
        kept: list[str] = []
        arch = "80"
        skip = False
        for a in args:
            if skip:
                arch = re.search(r"compute_(\w+)", a)[1]  # type: ignore[index]
                skip = False
            elif a == "-gencode":
                skip = True
            elif a != "-Xptxas":
                kept.append(a)
        out = work / "out.ptx"
        command = [compiler, *kept, f"-arch=compute_{arch}", "-ptx", "-o", str(out)]
    else:
        out = work / "out.s"
        command = [compiler, *args, "--cuda-device-only", "-S", "-o", str(out)]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, env={**os.environ, **job.env}, timeout=900)
    if proc.returncode != 0:
        return f"COMPILE FAILED: {proc.stderr[-2000:]}"
    lines = []
    for line in out.read_text().splitlines():
        line = line.split("//")[0] if job.compiler == "nvcc" else line.split(";")[0]
        stripped = line.strip()
        if not stripped or stripped.startswith((".file", ".loc", ".ident")):
            continue
        if job.compiler == "hipcc" and (stripped.startswith((".", "-")) or (":" in stripped and not stripped.endswith(":"))):
            continue  # directives and the metadata block (it names parameters)
        # The anonymous namespace's mangled name carries a hash of the file (its text, its path).
        lines.append(ANONYMOUS.sub("_GLOBAL__N__", stripped))
    return "\n".join(lines)


def opcodes(code: str) -> Counter[str]:
    """How many times each instruction's opcode (with its type and rounding suffixes) occurs: the
    same operations whatever their order and registers.  Labels, branches' targets and register
    declarations left out."""
    found: Counter[str] = Counter()
    for line in code.splitlines():
        word = line.split()[0] if line.split() else ""
        if word and not word.endswith(":") and not word.startswith((".", "{", "}", "@", "$")):
            found[word] += 1
    return found


FLOAT_TYPE = re.compile(r"\.(?:f16|f32|f64|bf16|f16x2|bf16x2)\b|_(?:f16|f32|f64)(?:_|\b)")
MEMORY_OR_MOVE = re.compile(r"^(?:ld|st|mov|global_|buffer_|flat_|scratch_|ds_|s_mov|v_mov|v_cndmask|selp)")


def float_ops(code: str) -> Counter[str]:
    """The floating-point arithmetic among ``opcodes`` (conversions included; loads, stores,
    moves and selects left out): the same counts mean the same rounded operations, each taken
    as many times, whatever else surrounds them."""
    return Counter({op: n for op, n in opcodes(code).items() if FLOAT_TYPE.search(op) and not MEMORY_OR_MOVE.match(op)})


def base_tree(rev: str) -> Path:
    """generated/ as committed at ``rev``, extracted once under .build/compare/."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    dest = ROOT / ".build" / "compare" / f"generated-{commit[:12]}"
    if not (dest / "generated").is_dir():
        archive = subprocess.run(["git", "archive", "--format=tar", commit, "generated"], cwd=ROOT, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return dest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="HEAD")
    parser.add_argument("--no-compile", action="store_true", help="token streams only")
    parser.add_argument("--only", default="", help="compare only the sources whose path holds this text")
    args = parser.parse_args()
    generated = ROOT / "generated"
    catalog = load_catalog(ROOT / "specs", ROOT)
    jobs = {job.source: job for job in compile_check.plan(catalog, generated, first_arch=True) if job.compiler in ("nvcc", "hipcc")}
    base = base_tree(args.base)
    views = {f"{op.name}_{kernel}": OpView(op, "") for op in catalog.ops for kernel in op.kernels}
    same = compiled_same = reordered = same_float = differ = 0
    for source, job in sorted(jobs.items()):
        rel = source.relative_to(ROOT).as_posix()
        if args.only not in rel:
            continue
        old_path = base / rel
        old = old_path.read_text() if old_path.is_file() else None
        if old is None:
            print(f"NEW       {rel}")
            differ += 1
            continue
        if tokens(old) == tokens(source.read_text(), bare_names(views[source.stem])):
            same += 1
            print(f"tokens    {rel}")
            continue
        if args.no_compile:
            print(f"TOKENS DIFFER {rel}")
            differ += 1
            continue
        compiler = compile_check.find_compiler(job.compiler)
        assert compiler is not None, job.compiler
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            (work / "o").mkdir()
            (work / "n").mkdir()
            a = device_code(job, compiler, base / rel, work / "o")
            b = device_code(job, compiler, source, work / "n")
        if a == b and not a.startswith("COMPILE FAILED"):
            compiled_same += 1
            print(f"code      {rel} ({job.compiler}: tokens differ, {len(b.splitlines())} instruction lines equal)")
        elif not a.startswith("COMPILE FAILED") and not b.startswith("COMPILE FAILED") and opcodes(a) == opcodes(b):
            reordered += 1
            print(f"reordered {rel} ({job.compiler}: the same {sum(opcodes(b).values())} instructions by opcode, in another order or registers)")
        elif not a.startswith("COMPILE FAILED") and not b.startswith("COMPILE FAILED") and float_ops(a) == float_ops(b):
            same_float += 1
            others = {k: v for k, v in ((opcodes(b) - opcodes(a)) | {f"-{k}": v for k, v in (opcodes(a) - opcodes(b)).items()}).items()}
            print(f"float ops {rel} ({job.compiler}: the same {sum(float_ops(b).values())} floating-point instructions by opcode; "
                  f"other instructions differ: {', '.join(f'{k} {v:+d}' if not k.startswith('-') else f'{k[1:]} -{v}' for k, v in sorted(others.items()))})")
        else:
            differ += 1
            print(f"DIFFERS   {rel}: {a[:300] if a.startswith('COMPILE') else ''}{b[:300] if b.startswith('COMPILE') else ''}")
    print(
        f"device sources: {same} with equal token streams, {compiled_same} with equal compiled code, "
        f"{reordered} with the same instructions in another order, {same_float} with the same floating-point instructions "
        f"(their loads, stores, branches or integer conversions differ), {differ} differing"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
