"""The generated setup.py files, run as pip runs them but with setuptools.setup captured: which
architectures a build targets with and without a visible device, the wheel's version and
requirements, and the MUSA builder's flags.  No compiler runs; the device, its torch build and
torch_musa are simulated in one child interpreter per platform, which runs every case in turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO, compiles

torch = pytest.importorskip("torch", reason="the generated setup.py imports torch (make test installs it)")

GENERATED = REPO / "generated"
VERSION = yaml.safe_load((REPO / "specs" / "package.yaml").read_text())["version"]
MAJOR, MINOR = torch.__version__.split("+")[0].split(".")[:2]


def spec_archs(platform: str) -> str:
    return ";".join(yaml.safe_load((REPO / "specs" / "platforms" / f"{platform}.yaml").read_text())["build"]["archs"])


# Runs generated/<platform>/setup.py with setuptools.setup replaced by a recorder, after making
# this CPU torch look like the platform's build.  The MUSA builder stands in for torch_musa's,
# and appends -march=native to the lists it is given exactly as torch_musa 2.7's MUSAExtension does.
HARNESS = r"""
import contextlib, io, json, os, runpy, sys, types
import setuptools
import torch
import torch.utils.cpp_extension as cpp_extension

platform, cases = sys.argv[1], json.loads(sys.argv[2])
state = {"visible": False}
captured = {}
setuptools.setup = lambda **kwargs: captured.update(kwargs)
visible = lambda: state["visible"]


class Extension:
    def __init__(self, name, sources, **kwargs):
        self.name, self.sources = name, sources
        self.extra_compile_args = kwargs.get("extra_compile_args", {})


if platform == "cuda":
    torch.version.cuda = "13.0"
    torch.cuda.is_available = visible
    cpp_extension.CUDA_HOME = "/usr/local/cuda"
    cpp_extension.CUDAExtension = Extension
elif platform == "musa":
    def MUSAExtension(name, sources, *args, **kwargs):
        kwargs["extra_compile_args"]["mcc"] += ["--offload-arch=mp_22"]
        kwargs["extra_compile_args"]["mcc"].append("-march=native")
        kwargs["extra_compile_args"]["cxx"].append("-march=native")
        return Extension(name, sources, **kwargs)

    musa_extension = types.ModuleType("torch_musa.utils.musa_extension")
    musa_extension.MUSAExtension = MUSAExtension
    musa_extension.BuildExtension = cpp_extension.BuildExtension
    utils = types.ModuleType("torch_musa.utils")
    utils.musa_extension = musa_extension
    torch_musa = types.ModuleType("torch_musa")
    torch_musa.__version__, torch_musa.utils = "2.7.1+8b583b3", utils
    sys.modules.update({"torch_musa": torch_musa, "torch_musa.utils": utils, "torch_musa.utils.musa_extension": musa_extension})
    torch.musa = types.SimpleNamespace(is_available=visible)

os.chdir(os.path.join(sys.argv[3], platform))
base = dict(os.environ)
results = []
for case in cases:
    os.environ.clear()
    os.environ.update({**base, **case["env"]})
    state["visible"] = case["visible"]
    captured.clear()
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            runpy.run_path("setup.py", run_name="__main__")
    except SystemExit as exc:
        results.append({"exit": str(exc), "log": log.getvalue()})
        continue
    results.append({
        "version": captured["version"],
        "install_requires": captured["install_requires"],
        "arch_env": {k: os.environ.get(k) for k in ("TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH", "TORCH_MUSA_ARCH_LIST")},
        "flags": captured["ext_modules"][0].extra_compile_args,
        "log": log.getvalue(),
    })
print(json.dumps(results))
"""


# Every case the tests below look at, per platform: (device visible, environment).
CASES: dict[str, list[tuple[bool, dict[str, str]]]] = {
    "cpu": [(False, {})],
    "cuda": [(False, {}), (True, {}), (True, {"RLK_SPEC_ARCHS": "1"}), (False, {"TORCH_CUDA_ARCH_LIST": "9.0a"})],
    "musa": [(False, {}), (False, {"TORCH_MUSA_ARCH_LIST": "21;22"})],
}
_results: dict[str, list[dict]] = {}


def run_setup(platform: str, visible: bool, **env: str) -> dict:
    """What setup.py set up for one case of CASES (all of a platform's cases run in one child)."""
    if platform not in _results:
        clean = {k: v for k, v in os.environ.items() if k not in ("TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH", "TORCH_MUSA_ARCH_LIST", "RLK_SPEC_ARCHS")}
        cases = [{"visible": v, "env": e} for v, e in CASES[platform]]
        result = subprocess.run([sys.executable, "-c", HARNESS, platform, json.dumps(cases), str(GENERATED)],
                                capture_output=True, text=True, timeout=300, env=clean)
        assert result.returncode == 0, result.stdout + result.stderr
        _results[platform] = json.loads(result.stdout.strip().splitlines()[-1])
    return _results[platform][CASES[platform].index((visible, env))]


def test_no_visible_device_builds_for_the_spec_archs():
    facts = run_setup("cuda", visible=False)
    assert facts["arch_env"]["TORCH_CUDA_ARCH_LIST"] == spec_archs("cuda") == "8.0;9.0a;10.0;12.0+PTX"
    assert "the platform spec's list (no device visible)" in facts["log"]


def test_a_visible_device_leaves_the_choice_to_torch():
    facts = run_setup("cuda", visible=True)
    assert facts["arch_env"]["TORCH_CUDA_ARCH_LIST"] is None, "setup.py overrode torch's detection of the visible device"
    assert "a device is visible: torch's own choice" in facts["log"]


def test_the_user_can_ask_for_the_spec_archs_or_name_their_own():
    asked = run_setup("cuda", visible=True, RLK_SPEC_ARCHS="1")
    assert asked["arch_env"]["TORCH_CUDA_ARCH_LIST"] == spec_archs("cuda")
    own = run_setup("cuda", visible=False, TORCH_CUDA_ARCH_LIST="9.0a")
    assert own["arch_env"]["TORCH_CUDA_ARCH_LIST"] == "9.0a"
    assert "TORCH_CUDA_ARCH_LIST as given" in own["log"]


def test_wheel_version_and_requirement_name_the_torch_it_is_built_against():
    cpu = run_setup("cpu", visible=False)
    assert cpu["version"] == f"{VERSION}+cpu.torch{MAJOR}{MINOR}"
    assert cpu["install_requires"] == [f"torch=={MAJOR}.{MINOR}.*"]
    cuda = run_setup("cuda", visible=False)
    assert cuda["version"] == f"{VERSION}+cu130.torch{MAJOR}{MINOR}"
    assert cuda["install_requires"] == [f"torch=={MAJOR}.{MINOR}.*"]


def test_musa_build_strips_march_native_and_pins_torch_and_torch_musa():
    facts = run_setup("musa", visible=False)
    for key in ("cxx", "mcc"):
        assert "-march=native" not in facts["flags"][key], (key, facts["flags"][key])
        assert "-ffp-contract=off" in facts["flags"][key]
    assert "--offload-arch=mp_22" in facts["flags"]["mcc"], "only the builder's -march=native is removed"
    assert facts["install_requires"] == [f"torch=={MAJOR}.{MINOR}.*", "torch_musa==2.7.1"]
    assert facts["version"] == f"{VERSION}+musa27.torch{MAJOR}{MINOR}"
    assert facts["arch_env"]["TORCH_MUSA_ARCH_LIST"] == spec_archs("musa") == "22;31"


def test_musa_archs_below_the_bfloat16_floor_are_refused():
    facts = run_setup("musa", visible=False, TORCH_MUSA_ARCH_LIST="21;22")
    assert "exit" in facts, facts
    assert "cannot build rlkernels+musa" in facts["exit"]
    assert "TORCH_MUSA_ARCH_LIST=21;22 names 21, below 22" in facts["exit"]
    assert "__mt_bfloat16 only for __MUSA_ARCH__ >= 220" in facts["exit"]


@compiles
def test_musa_device_code_refuses_an_arch_without_bfloat16(tmp_path: Path):
    """A device torch_musa picks by itself (an MP21 card) meets the #error in rlk_numerics.h."""
    tool = __import__("importlib").import_module("test_compile_check").tool_module
    nvcc = tool.find_compiler("nvcc")
    if nvcc is None:
        pytest.skip(f"nvcc not found: {tool.INSTALL_HINTS['nvcc']}")
    source = tmp_path / "probe.mu"
    source.write_text('#include "rlk_numerics.h"\n__global__ void k(float* p) { p[0] = rlk::musa::add_rn(p[0], 1.0f); }\n')
    headers = GENERATED / "musa" / "csrc" / "kernels" / "musa"

    def compile_for(arch: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([nvcc, "-x", "cu", "-std=c++17", "-I", str(tool.MUSA_SHIM), "-include", "musa_shim.h", "-I", str(headers),
                               f"-D__MUSA_ARCH__={arch}", "-c", str(source), "-o", str(tmp_path / "probe.o")],
                              capture_output=True, text=True, timeout=300)

    old = compile_for(210)
    assert old.returncode != 0
    assert "rlkernels needs __MUSA_ARCH__ >= 220" in old.stdout + old.stderr
    assert compile_for(220).returncode == 0
