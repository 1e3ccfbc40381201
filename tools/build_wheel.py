"""Build dist/rlkernels-<version>+<label>-*.whl from generated/<platform>/.

    python tools/build_wheel.py --platform cpu|cuda|rocm|musa [--dist DIR] [--python PY] [--clean] [--device-archs]

The wheel is built by pip (PEP 517, no build isolation) with the torch already installed
in the chosen interpreter, because the extension must be compiled against the exact torch
it will run with.  Interpreter per platform: $RLK_<PLATFORM>_PYTHON if set, else
  cpu        this interpreter (.venv, CPU torch)
  cuda       .venv-cuda, created on first use with a CUDA build of torch
  rocm, musa this interpreter; point RLK_ROCM_PYTHON / RLK_MUSA_PYTHON at one with the
             vendor's torch (a ROCm build of torch; torch_musa).

A device wheel is for other machines, so it targets the platform spec's architectures
(RLK_SPEC_ARCHS=1 for the generated setup.py) even where a device is visible; --device-archs
leaves the choice to torch (the visible devices), and the platform's arch variable, when set,
wins over both.  The wheel is named for the torch it was built against (+<label>.torch<XY>) and
requires that torch's minor release; both are checked before the wheel reaches dist/.

The toolchain is checked first, with the facts in specs/platforms/<platform>.yaml, so a
missing one is reported in a second, before anything compiles, and never leaves a wheel.
The build runs in .build/wheel-<platform>/ (a content-synced copy of generated/<platform>)
so generated/ stays clean and ninja can reuse objects whose sources did not change.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLATFORMS = ("cpu", "cuda", "rocm", "musa")

# How .venv-cuda is made when no CUDA interpreter is given (torch 2.14.1 is a cu130 build).
CUDA_VENV = ROOT / ".venv-cuda"
CUDA_VENV_PACKAGES = ["torch==2.14.1", "ninja", "numpy", "setuptools", "wheel"]
CUDA_VENV_STAMP = CUDA_VENV / ".rlk-installed"

# Runs inside the chosen interpreter: reports what it has, never raises.
PROBE = r"""
import importlib, json, os, re, sys

def resolve(dotted):
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except Exception:  # not a module, or a vendor plugin that fails to import
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
        return obj
    return None

def try_import(name):
    try:
        importlib.import_module(name)
        return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

want = json.loads(sys.argv[1])
out = {"imports": {}, "attrs": {}}
out["torch_error"] = try_import("torch")
if out["torch_error"] is None:
    import torch
    out["torch"] = torch.__version__
    for name in want["imports"]:
        out["imports"][name] = try_import(name)
    for name in want["attrs"]:
        value = resolve(name)
        out["attrs"][name] = None if value is None else str(value)
try:
    import nvidia  # the CUDA wheels of torch ship their toolkit headers here
    out["nvidia_includes"] = sorted(
        os.path.join(p, d, "include") for p in nvidia.__path__ for d in os.listdir(p)
        if re.fullmatch(r"cu\d+", d) and os.path.isdir(os.path.join(p, d, "include")))
except Exception:
    out["nvidia_includes"] = []
print(json.dumps(out))
"""


class BuildError(Exception):
    """The wheel cannot be built; the message says why and what to do."""


def log(message: str) -> None:
    print(f"build_wheel: {message}", flush=True)


def platform_spec(platform: str) -> dict:
    import yaml  # here, so tools/gpu_check.py can reuse sync_tree where PyYAML is absent

    return yaml.safe_load((ROOT / "specs" / "platforms" / f"{platform}.yaml").read_text())


def env_var(platform: str) -> str:
    return f"RLK_{platform.upper()}_PYTHON"


def ensure_cuda_venv() -> Path:
    """.venv-cuda with a CUDA build of torch (~5.5 GB; minutes the first time)."""
    python = CUDA_VENV / "bin" / "python"
    if CUDA_VENV_STAMP.exists() and python.exists():
        return python
    log(f"creating {CUDA_VENV.name} with {' '.join(CUDA_VENV_PACKAGES)} (about 5.5 GB, a few minutes; once)")
    if not python.exists():
        subprocess.run([os.environ.get("PYTHON", "python3"), "-m", "venv", str(CUDA_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *CUDA_VENV_PACKAGES], check=True)
    CUDA_VENV_STAMP.touch()  # only after a complete install, so a broken one is retried
    return python


def choose_python(platform: str, given: str | None) -> Path:
    given = given or os.environ.get(env_var(platform))
    if given:
        # Absolute (the build runs elsewhere), but not resolved: a venv's python is a
        # symlink, and following it would leave the venv.
        python = Path(os.path.abspath(shutil.which(given) or given))
        if not (python.exists() and os.access(python, os.X_OK)):
            raise BuildError(f"{python} (from --python or {env_var(platform)}) is not an executable interpreter")
        return python
    if platform == "cuda":
        return ensure_cuda_venv()
    return Path(sys.executable)


def build_env(platform: str, python: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The interpreter's own bin/ first: torch finds ninja there only through PATH, and
    # without ninja it silently falls back to a serial build.
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    if platform == "cuda" and "CUDA_HOME" not in env and Path("/usr/local/cuda").is_dir():
        env["CUDA_HOME"] = "/usr/local/cuda"
    return env


def probe(python: Path, spec: dict, env: dict[str, str]) -> dict:
    detection, build, wheel = spec["detection"], spec["build"], spec["wheel"]
    imports = [m for m in (detection.get("import_module"), build["extension_module"]) if m]
    attrs = [a for a in (detection.get("version_attr"), wheel.get("version_from"), build.get("toolkit_home")) if a]
    result = subprocess.run(
        [str(python), "-c", PROBE, json.dumps({"imports": imports, "attrs": attrs})],
        env=env, capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        raise BuildError(f"{python} could not run the toolchain probe:\n{result.stderr.strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def find_compiler(name: str, home: str | None, env: dict[str, str]) -> str | None:
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    return shutil.which(name, path=env["PATH"])


def toolchain_problems(spec: dict, facts: dict, env: dict[str, str]) -> list[str]:
    """Everything missing for this platform's build, from the facts in its spec."""
    if facts.get("torch_error"):
        return [f"torch cannot be imported ({facts['torch_error']})"]
    detection, build, wheel = spec["detection"], spec["build"], spec["wheel"]
    torch = f"torch {facts['torch']}"
    problems = []
    module = detection.get("import_module")
    if module and facts["imports"][module]:
        problems.append(f"{module} cannot be imported ({facts['imports'][module]})")
    elif facts["imports"][build["extension_module"]]:
        problems.append(f"{build['extension_module']} cannot be imported ({facts['imports'][build['extension_module']]})")
    attr = detection.get("version_attr")
    if attr and (facts["attrs"][attr] is not None) != detection["version_attr_set"]:
        problems.append(f"{torch} is not built for {spec['display_name']} ({attr} is {facts['attrs'][attr]!r})")
    source = wheel.get("version_from")
    if source and not facts["attrs"].get(source) and not problems:
        problems.append(f"{torch} is not built for {spec['display_name']} ({source} is unset)")
    home_attr = build.get("toolkit_home")
    home = facts["attrs"].get(home_attr) if home_attr else None
    if home_attr and home is None:
        problems.append(f"the {spec['compiler']} toolkit was not found ({home_attr} is None)")
    if find_compiler(spec["compiler"], home, env) is None:
        where = f"{home}/bin or PATH" if home else "PATH"
        problems.append(f"the compiler {spec['compiler']} was not found in {where}")
    if shutil.which("ninja", path=env["PATH"]) is None:
        problems.append("ninja was not found (pip install ninja in the build interpreter)")
    return problems


def sync_tree(src: Path, dest: Path) -> None:
    """Make dest's sources equal src's, rewriting only files whose bytes differ.

    A changed file gets a fresh mtime, so ninja rebuilds exactly what changed; build
    outputs (build/, *.egg-info) are left for reuse, except build/lib*, which setuptools
    never prunes and would otherwise ship modules that no longer exist.
    """
    wanted = {p.relative_to(src) for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    for rel in sorted(wanted):
        target = dest / rel
        data = (src / rel).read_bytes()
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    for path in sorted(dest.rglob("*"), reverse=True):
        rel = path.relative_to(dest)
        if rel.parts[0] == "build" or rel.parts[0].endswith(".egg-info"):
            continue
        if path.is_file() and rel not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for stale in (dest / "build").glob("lib*"):
        shutil.rmtree(stale)


def check_metadata(wheel: Path, torch_version: str) -> None:
    """The wheel names the torch it was built against and requires that minor release."""
    major, minor = torch_version.split("+")[0].split(".")[:2]
    if f".torch{major}{minor}-" not in wheel.name:
        raise BuildError(f"{wheel.name} does not name torch {major}.{minor} (+<label>.torch{major}{minor}), which it was built against")
    with zipfile.ZipFile(wheel) as zf:
        metadata = next((zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA")), "")
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    if f"torch=={major}.{minor}.*" not in requires:
        raise BuildError(f"{wheel.name} requires {requires or 'nothing'}, not torch=={major}.{minor}.* (the torch it was built against)")


def build(platform: str, dist: Path, python_arg: str | None, clean: bool, device_archs: bool = False) -> Path:
    source = ROOT / "generated" / platform
    if not (source / "setup.py").exists():
        raise BuildError(f"{source.relative_to(ROOT)}/setup.py is missing; run `make generate` first")
    spec = platform_spec(platform)
    python = choose_python(platform, python_arg)
    env = build_env(platform, python)
    facts = probe(python, spec, env)
    problems = toolchain_problems(spec, facts, env)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise BuildError(
            f"cannot build the {spec['display_name']} wheel with {python}:\n{listed}\n"
            f"To get it: {spec['build']['toolkit_hint']}.\n"
            f"Then set {env_var(platform)} to an interpreter that has it."
        )
    if platform == "cuda" and facts["nvidia_includes"]:
        # torch's CUDA headers include cusparse.h & co., which the CUDA wheels ship
        # under site-packages/nvidia/cu*/include rather than in CUDA_HOME.
        env["CPATH"] = os.pathsep.join([*facts["nvidia_includes"], *filter(None, [env.get("CPATH")])])
    log(f"{platform}: torch {facts['torch']} in {python}")
    if spec["build"].get("arch_env") and not device_archs:
        env["RLK_SPEC_ARCHS"] = "1"

    staging = ROOT / ".build" / f"wheel-{platform}"
    if clean and staging.exists():
        shutil.rmtree(staging)
    sync_tree(source, staging)

    dist.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"rlk-wheel-{platform}-") as out:
        # Into a temporary directory first: only a complete, checked wheel reaches dist/.
        # -v: pip hides the compiler output of a successful build, and a CUDA build takes minutes.
        command = [str(python), "-m", "pip", "wheel", "-v", "--no-cache-dir", "--no-build-isolation", "--no-deps", "-w", out, str(staging)]
        log(" ".join(command))
        if subprocess.run(command, env=env, cwd=staging).returncode != 0:
            raise BuildError(f"the {platform} build failed (see the compiler output above); no wheel was written")
        wheels = list(Path(out).glob("rlkernels-*.whl"))
        if len(wheels) != 1:
            raise BuildError(f"expected one rlkernels wheel, pip produced {[w.name for w in Path(out).iterdir()]}")
        with zipfile.ZipFile(wheels[0]) as zf:
            if not any(n.startswith("rlkernels/_C") and n.endswith(".so") for n in zf.namelist()):
                raise BuildError(f"{wheels[0].name} has no native library rlkernels/_C*.so")
        check_metadata(wheels[0], facts["torch"])
        wheel = dist / wheels[0].name
        shutil.move(str(wheels[0]), wheel)
    elapsed = time.perf_counter() - start
    log(f"wrote {wheel} ({wheel.stat().st_size / 1e6:.2f} MB, built in {elapsed:.0f} s)")
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", required=True, choices=PLATFORMS)
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the wheel goes (default: dist/)")
    parser.add_argument("--python", help="build interpreter (default: $RLK_<PLATFORM>_PYTHON, see above)")
    parser.add_argument("--clean", action="store_true", help="rebuild every object from scratch")
    parser.add_argument("--device-archs", action="store_true",
                        help="build for the visible devices (torch's choice) instead of the platform spec's architectures")
    args = parser.parse_args(argv)
    try:
        build(args.platform, args.dist.resolve(), args.python, args.clean, args.device_archs)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
