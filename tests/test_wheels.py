"""Wheels from tools/build_wheel.py: the CPU wheel installed where nothing else is and its
generated tests run there; the CUDA wheel built and linked against a CUDA build of torch;
platforms whose toolchain is missing refused at once; the GPU check rehearsed on the CPU."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BUILD_WHEEL = REPO / "tools" / "build_wheel.py"
VERSION = yaml.safe_load((REPO / "specs" / "package.yaml").read_text())["version"]


def build_wheel(platform: str, dist: Path, timeout: int, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not (k.startswith("RLK_") and k.endswith("_PYTHON"))}
    return subprocess.run(
        [sys.executable, str(BUILD_WHEEL), "--platform", platform, "--dist", str(dist)],
        env={**clean, **env}, capture_output=True, text=True, timeout=timeout,
    )


def the_wheel(dist: Path, label_prefix: str) -> Path:
    wheels = sorted(dist.glob("rlkernels-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {dist}, found {[w.name for w in wheels]}"
    assert wheels[0].name.startswith(f"rlkernels-{VERSION}+{label_prefix}"), wheels[0].name
    return wheels[0]


def run_python(python: Path | str, code: str, **kwargs) -> dict:
    """Run ``code`` in another interpreter; it prints one JSON object as its last line."""
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def same_version_as_here(name: str) -> list[str]:
    """``name==<the version installed here>``, or nothing when it is not installed here."""
    try:
        return [f"{name}=={importlib.metadata.version(name)}"]
    except importlib.metadata.PackageNotFoundError:
        return []


@pytest.fixture
def fresh_venv(tmp_path):
    """A new, empty virtual environment (it grows to ~1 GB).  Left in tmp_path, which pytest
    removes with the runs it no longer keeps: deleting torch's thousands of files here took
    over a minute of the suite's time."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv


# Installed into a new venv rather than borrowed from .venv (a .pth file or
# --system-site-packages): only then does the test show that the wheel's metadata, its
# dependency on torch and its native library work on their own, without the generator,
# an in-place build or anything else .venv happens to hold.  torch comes from the local
# wheel cache (~30 s, ~0.9 GB), pinned to the version the wheel was built against.
@pytest.mark.slow
def test_cpu_wheel_installs_in_a_clean_venv_and_passes_its_generated_tests(tmp_path, fresh_venv: Path):
    torch = pytest.importorskip("torch", reason="building the CPU wheel needs torch (make test installs it)")
    built = build_wheel("cpu", tmp_path / "dist", timeout=900)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    wheel = the_wheel(tmp_path / "dist", f"cpu.torch{major}{minor}")
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"Requires-Dist: torch=={major}.{minor}.*" in metadata.splitlines(), metadata

    python = fresh_venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"torch=={torch.__version__.split('+')[0]}",
         f"pytest=={pytest.__version__}", *same_version_as_here("numpy"), str(wheel)],
        capture_output=True, text=True, timeout=900,
    )
    assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]

    # Run from an empty directory so that nothing but the installed package can be imported.
    work = tmp_path / "work"
    work.mkdir()
    facts = run_python(python, "import json, rlkernels; print(json.dumps({'version': rlkernels.__version__, "
                       "'file': rlkernels.__file__, 'native_error': rlkernels.NATIVE_ERROR, 'platform': rlkernels.BUILD_PLATFORM}))",
                       cwd=work)
    assert facts["version"] == f"{VERSION}+cpu.torch{major}{minor}"
    assert facts["platform"] == "cpu"
    assert facts["native_error"] is None
    assert Path(facts["file"]).is_relative_to(fresh_venv), facts["file"]

    shutil.copytree(REPO / "generated" / "cpu" / "tests", work / "tests")
    tests = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                           cwd=work, capture_output=True, text=True, timeout=900)
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-2000:]
    assert " passed" in tests.stdout.strip().splitlines()[-1]


def cuda_python() -> Path | None:
    """An interpreter with a CUDA build of torch: $RLK_CUDA_PYTHON, else a complete .venv-cuda."""
    if os.environ.get("RLK_CUDA_PYTHON"):
        return Path(os.environ["RLK_CUDA_PYTHON"])
    venv = REPO / ".venv-cuda"
    return venv / "bin" / "python" if (venv / ".rlk-installed").exists() else None


@pytest.mark.slow
@pytest.mark.cuda_build
@pytest.mark.skipif(
    cuda_python() is None,
    reason="no CUDA build of torch: set RLK_CUDA_PYTHON to an interpreter with one, or run `make wheel PLATFORM=cuda` once to create .venv-cuda",
)
def test_cuda_wheel_builds_and_links_against_cuda_torch(tmp_path):
    python = cuda_python()
    cuda = run_python(python, "import json, torch; print(json.dumps(torch.version.cuda))")
    assert cuda, f"{python} has no CUDA build of torch"
    major, minor = run_python(python, "import json, torch; print(json.dumps(torch.__version__))").split("+")[0].split(".")[:2]
    label = "cu" + "".join(cuda.split(".")[:2]) + f".torch{major}{minor}"

    built = build_wheel("cuda", tmp_path / "dist", timeout=1800, RLK_CUDA_PYTHON=str(python))
    assert built.returncode == 0, built.stdout[-6000:] + built.stderr[-4000:]
    wheel = the_wheel(tmp_path / "dist", label)
    assert wheel.name.startswith(f"rlkernels-{VERSION}+{label}-")

    # No GPU here, but loading the library proves it links against this torch and registers
    # its CUDA kernels; the CPU kernels it carries must run.
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    facts = run_python(python, """
import json, torch, rlkernels
from rlkernels._registry import OPS
native = [k.name for k in OPS["det_gemm"].kernels.values() if k.kind == "native"]
has = lambda name, key: torch._C._dispatch_has_kernel_for_dispatch_key(f"rlkernels::det_gemm.{name}", key)
a, b = torch.randn(9, 64), torch.randn(64, 5)
print(json.dumps({
    "native_error": rlkernels.NATIVE_ERROR,
    "cuda_kernels": {n: has(n, "CUDA") for n in native},
    "cpu_close": bool(torch.allclose(rlkernels.det_gemm(a, b), a @ b, atol=1e-4, rtol=1e-4)),
}))
""", cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)})
    assert facts["native_error"] is None
    assert facts["cuda_kernels"] and all(facts["cuda_kernels"].values()), facts["cuda_kernels"]
    assert facts["cpu_close"]


@pytest.mark.parametrize(
    "platform, named",
    [
        ("musa", ["torch_musa", "mcc"]),
        ("rocm", ["torch.version.hip", "hipcc", "ROCm"]),
    ],
)
def test_missing_toolchain_is_refused_before_anything_compiles(tmp_path, platform, named):
    if platform == "musa" and importlib.util.find_spec("torch_musa") is not None:
        pytest.skip("torch_musa is installed here")
    if platform == "rocm":
        torch = pytest.importorskip("torch")
        if torch.version.hip:
            pytest.skip("this torch is a ROCm build")
    # The limit is loose (it only imports torch) so a loaded machine cannot make it flaky;
    # what shows that nothing compiled is that no build started and no dist/ appeared.
    result = build_wheel(platform, tmp_path / "dist", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    message = result.stderr
    assert message.startswith("error: cannot build"), message
    for name in named:
        assert name in message, f"{name!r} not in {message!r}"
    assert "To get it:" in message and f"RLK_{platform.upper()}_PYTHON" in message
    assert "pip wheel" not in result.stdout, "it started a build"
    assert not (tmp_path / "dist").exists(), "it created the dist directory"


@pytest.mark.slow
def test_gpu_check_dry_run_passes_every_stage_on_the_cpu(tmp_path):
    """tools/gpu_check.py, every stage, on the CPU package with tiny shapes: no GPU needed."""
    pytest.importorskip("torch", reason="the GPU check needs torch")
    result = subprocess.run([sys.executable, str(REPO / "tools" / "gpu_check.py"), "--dry-run", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=900, cwd=REPO)
    report = (tmp_path / "gpu_report.md").read_text()
    assert result.returncode == 0, report + (tmp_path / "gpu_check.log").read_text()[-6000:]
    for stage in ("env", "build", "tests", "chain", "compare", "invariance", "bench", "tiles"):
        assert f"| {stage} | PASS |" in report, report


def test_a_wheel_that_does_not_name_and_pin_its_torch_is_refused(tmp_path: Path):
    """build_wheel's last check, on wheels as setuptools writes them (no compiler needed)."""
    spec = importlib.util.spec_from_file_location("build_wheel", BUILD_WHEEL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)

    def wheel(name: str, *requires: str) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w") as zf:
            lines = ["Metadata-Version: 2.4", "Name: rlkernels", *(f"Requires-Dist: {r}" for r in requires)]
            zf.writestr("rlkernels-0.1.0.dist-info/METADATA", "\n".join(lines) + "\n")
        return path

    tool.check_metadata(wheel("rlkernels-0.1.0+cu130.torch214-cp311-cp311-linux_x86_64.whl", "torch==2.14.*"), "2.14.1+cu130")
    with pytest.raises(tool.BuildError, match=r"does not name torch 2\.14"):
        tool.check_metadata(wheel("rlkernels-0.1.0+cu130-cp311-cp311-linux_x86_64.whl", "torch==2.14.*"), "2.14.1+cu130")
    with pytest.raises(tool.BuildError, match=r"requires \['torch'\], not torch==2\.14\.\*"):
        tool.check_metadata(wheel("rlkernels-0.1.0+cu130.torch214-cp311-cp311-linux_x86_64.whl", "torch"), "2.14.1+cu130")
