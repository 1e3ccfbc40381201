"""Deterministic, batch-invariant kernels for RL training, generated for every platform.

Each op of the catalog is a function of this package (``rlkernels.det_gemm``,
``rlkernels.linear_logp``, ...; ``OPS`` lists them with their contracts).  A build carries the
kernels of one platform and the CPU's, so CPU tensors work everywhere and device results can be
compared with CPU results bit for bit (``BUILD_PLATFORM``, ``CARRIED_PLATFORMS``).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata as _metadata
from typing import Any

from . import aten as aten  # the aten-level mode; importing it registers nothing until it is enabled
from ._checks import InputError, InputTypeError
from ._public import PUBLIC as _PUBLIC
from ._registry import BASE_VERSION as _BASE_VERSION
from ._registry import BUILD_PLATFORM, CARRIED_PLATFORMS, OPS, TOLERANCES
from ._registry import PACKAGE as _PACKAGE
from ._runtime import NATIVE_ERROR, UnsupportedError, detect_platform, platform_of, select_backend

try:
    __version__ = _metadata.version(_PACKAGE)
except _metadata.PackageNotFoundError:  # built in place, not installed
    __version__ = _BASE_VERSION

# The ops' public functions, under their names.  The generator refuses an op named like any other
# name of this module (the names above, the submodules), so none is shadowed.
globals().update(_PUBLIC)

__all__ = [
    "BUILD_PLATFORM",
    "CARRIED_PLATFORMS",
    "NATIVE_ERROR",
    "OPS",
    "TOLERANCES",
    "InputError",
    "InputTypeError",
    "UnsupportedError",
    "detect_platform",
    "platform_of",
    "select_backend",
]
__all__.extend(_PUBLIC)


def __getattr__(name: str) -> Callable[..., Any]:
    """Only for names the package does not hold: the same error as any module's.  Type checkers
    read its signature as "every other name is a function", which the ops are."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
