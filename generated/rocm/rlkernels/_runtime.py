# Copied from runtime/rlkernels/_runtime.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""Platform detection and backend choice.  Fails closed: an op runs only on a backend the
registry lists for the inputs' platform (the generator admitted each for the op's contract),
or it raises."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch.autograd import forward_ad

from ._registry import BUILD_PLATFORM, CARRIED_PLATFORMS, OPS, PACKAGE, PLATFORMS, Kernel, Platform

_BUILT_FOR = next(p for p in PLATFORMS if p.name == BUILD_PLATFORM)

try:
    if _BUILT_FOR.import_module is not None:
        importlib.import_module(_BUILT_FOR.import_module)  # registers the platform's device type with torch
    from . import _C  # noqa: F401  (registers torch.ops.<package>.*)

    NATIVE_ERROR: str | None = None
except ImportError as exc:  # keep the package importable; ops then say why they cannot run
    NATIVE_ERROR = f"{type(exc).__name__}: {exc}"


class UnsupportedError(RuntimeError):
    """The op cannot run here without breaking its contract."""


def _resolve(dotted: str) -> Any:
    """Import ``a.b.c`` as module ``a.b`` attribute ``c`` (or deeper); raises on failure."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _version_attr_matches(p: Platform) -> bool:
    if p.version_attr is None:
        return True
    try:
        value = _resolve(p.version_attr)
    except (ImportError, AttributeError):
        value = None
    return (value is not None) == p.version_attr_set


def _platform_present(p: Platform) -> bool:
    """Whether the process has a usable device of this platform.  Never raises."""
    try:
        if p.import_module is not None:
            importlib.import_module(p.import_module)
        if p.available is not None and not _resolve(p.available)():
            return False
    except Exception:  # noqa: BLE001 -- a broken vendor plugin means "not available", not a crash
        return False
    return _version_attr_matches(p)


def detect_platform() -> str:
    """The best platform this process can use, checked in the registry's order."""
    for p in PLATFORMS:
        if _platform_present(p):
            return p.name
    return "cpu"


# Platforms found so far, by device type: the answer depends on the device type and on the
# version attributes of the torch build, which stay as they are while the process runs.  Every
# op call asks, so it is looked up once (a plain dict, as _CHOSEN below).
_PLATFORM_OF: dict[str, str] = {}


def platform_of(device: torch.device | str) -> str:
    """The platform that owns tensors on ``device`` (platforms that share a device type are told apart by their version attribute)."""
    if isinstance(device, torch.device):
        device_type = device.type
    else:
        found = _PLATFORM_OF.get(device)  # a bare device type, as the ops pass it: no parsing
        if found is not None:
            return found
        device_type = torch.device(device).type
    found = _PLATFORM_OF.get(device_type)
    if found is not None:
        return found
    for p in PLATFORMS:
        if p.device_type == device_type and _version_attr_matches(p):
            _PLATFORM_OF[device_type] = p.name
            return p.name
    raise UnsupportedError(f"{PACKAGE}: no platform handles tensors on device type {device_type!r}")


def _assume_constant_result(fn: Any) -> Any:
    """torch.compiler.assume_constant_result's mark, set without importing torch._dynamo.

    That decorator imports torch._dynamo only to set one attribute, and the import takes
    about as long as importing torch itself, on every import of this package, whether or
    not the program ever compiles.  Only torch.compile reads the mark, and by then it has
    imported torch._dynamo.  tests/test_runtime_dispatch.py checks that this mark is the
    decorator's own, and the contract tests compile the public functions (with fullgraph=True
    where the op's shapes allow) from empty caches, which fails where the mark is not honoured."""
    fn._dynamo_marked_constant = True
    return fn


_DISPATCH_KEYS = {p.name: p.dispatch_key for p in PLATFORMS}


@_assume_constant_result  # a fact of the loaded library: torch.compile need not trace it
def _native_available(op: str, kernel: str, platform: str) -> str | None:
    """None when the kernel can run, else why not."""
    if NATIVE_ERROR is not None:
        return f"the native library {PACKAGE}._C failed to load ({NATIVE_ERROR})"
    if not torch._C._dispatch_has_kernel_for_dispatch_key(f"{PACKAGE}::{op}.{kernel}", _DISPATCH_KEYS[platform]):
        return f"this build has no {kernel} kernel for {platform}"
    return None


# Backends chosen so far, by (op, platform): a choice depends only on the registry and the
# loaded library, which stay as they are while the process runs.  A plain dict, not
# functools.lru_cache, which torch.compile traces through with a warning on every call site.
_CHOSEN: dict[tuple[str, str], Kernel] = {}


def select_backend(op: str, platform: str) -> Kernel:
    """The first backend in the registry's order that can run here."""
    chosen = _CHOSEN.get((op, platform))
    if chosen is None:
        chosen = _CHOSEN[op, platform] = _choose_backend(op, platform)
    return chosen


def _choose_backend(op: str, platform: str) -> Kernel:
    entry = OPS[op]
    if platform not in entry.backends:
        carried = ", ".join(CARRIED_PLATFORMS)
        label = next(p.wheel_label for p in PLATFORMS if p.name == platform).replace("{version}", "<version>")
        raise UnsupportedError(
            f"{PACKAGE}.{op}: this build carries kernels for {carried}, not for {platform} tensors; "
            f"install the {PACKAGE} wheel built for {platform} (+{label})"
        )
    names = entry.backends[platform]
    if not names:
        raise UnsupportedError(
            f"{PACKAGE}.{op} is not supported on {platform}: the spec maps it to no backend there, "
            f"and it never falls back to one that breaks its contract ({', '.join(sorted(entry.requires))})"
        )
    refused = []
    for name in names:
        kernel = entry.kernels[name]
        why = _native_available(op, name, platform) if kernel.kind == "native" else None
        if why is not None:
            refused.append(f"{name}: {why}")
            continue
        return kernel
    raise UnsupportedError(f"{PACKAGE}.{op}: no backend can run on {platform}: " + "; ".join(refused))


# torch.library runs a Python function at the autograd key of every op with a backward, on every
# call, only to find that nothing needs a graph and to redispatch below it: a few microseconds,
# which is most of a small op's time.  A call that records nothing goes below autograd at once,
# as that function itself would (the same guard, from torch's own torch.library code).
_BELOW_AUTOGRAD = getattr(torch._C, "_AutoDispatchBelowAutograd", None)


def _records_nothing(args: tuple[Any, ...]) -> bool:
    # While a dual level is open a call may carry a tangent, which only the autograd kernel sees
    # (and refuses): below autograd it would be dropped without a word.
    if _BELOW_AUTOGRAD is None or torch.compiler.is_compiling() or forward_ad._current_level >= 0:
        return False
    if not torch.is_grad_enabled():
        return True
    for a in args:  # a loop, not any() over a generator: this runs on every call
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return False
    return True


def ops_namespace() -> Any:
    """``torch.ops.<package>``: the library the native extension registers."""
    return getattr(torch.ops, PACKAGE)


# Each kernel's torch.ops overload, looked up once (a plain dict, as _CHOSEN above).
_OVERLOADS: dict[tuple[str, str], Any] = {}


def overload(op: str, name: str) -> Any:
    """``torch.ops.<package>.<op>.<name>`` (``default`` for the op's own dispatch)."""
    found = _OVERLOADS.get((op, name))
    if found is None:
        found = _OVERLOADS[op, name] = getattr(getattr(ops_namespace(), op), name)
    return found


def call(op: str, kernel: Kernel, *args: Any) -> Any:
    if kernel.kind == "native":
        native = _OVERLOADS.get((op, kernel.name))  # overload(), inlined: this runs on every call
        if native is None:
            native = overload(op, kernel.name)
        if _records_nothing(args):
            with _BELOW_AUTOGRAD():  # type: ignore[misc]
                return native(*args)
        return native(*args)
    return _resolve(kernel.python or "")(*args, **kernel.kwargs)
