"""Why an op runs on the backends it runs on: each candidate, accepted or refused, and where the spec says so.

Reads the catalog without the contract check, so it can also explain a mapping
that ``generate`` refuses.  The verdicts are ``admission.admissible``'s, the rule
``contracts`` applies; this module only puts them in words.
"""

from __future__ import annotations

import re

from .admission import admissible
from .errors import GeneratorError
from .load import Catalog
from .model import NativeKernel, OpSpec, PlatformSpec


def _one_of(kind: str, name: str, known: list[str]) -> str:
    """An unknown name as given on the command line: as typed, or escaped (``ascii``) when it holds
    anything but letters, digits, ``_``, ``.`` and ``-``, so that no control character reaches the terminal."""
    shown = name if re.fullmatch(r"[A-Za-z0-9_.\-]+", name) else ascii(name)
    return f"Unknown {kind} {shown}. Expected one of {', '.join(sorted(known)) or '(none)'}"


def _names(values: object) -> str:
    return ", ".join(getattr(v, "value", str(v)) for v in values) or "none"  # type: ignore[attr-defined]


def verdict(op: OpSpec, platform: str, kernel: str) -> tuple[bool, str]:
    """(accepted, why) for running ``kernel`` as a backend of ``op`` on ``platform``: the verdict
    of ``admission.admissible``, the rule ``contracts`` applies, in words."""
    found = admissible(op, platform, kernel)
    if not found.declared:
        return False, f"refused: the op declares no kernel {kernel} (kernels: {', '.join(sorted(op.kernels))})"
    if not found.runs_here:
        return False, f"refused: kernel {kernel} is written for {', '.join(found.written_for or ())} only"
    if found.missing and found.reference is not None:
        return False, f"refused: lacks {_names(op.requires)} that {op.name} requires (a Python reference, {found.reference}, keeps no guarantee)"
    if found.missing:
        return False, f"refused: lacks {_names(found.missing)} that {op.name} requires (it guarantees: {_names(found.declares)})"
    if not op.requires:
        return True, f"accepted: {op.name} requires nothing (it guarantees: {_names(found.declares)})"
    return True, f"accepted: its guarantees ({_names(found.declares)}) cover what {op.name} requires ({_names(op.requires)})"


def _kind(op: OpSpec, kernel: str) -> str:
    spec = op.kernels[kernel]
    if isinstance(spec, NativeKernel):
        where = f"{', '.join(spec.platforms)} only" if spec.platforms is not None else "any platform"
        return f"native, {spec.template}, {where}"
    return f"reference, {spec.python}"


def _explain_platform(catalog: Catalog, op: OpSpec, platform: PlatformSpec) -> list[str]:
    src = catalog.op_source(op.name)
    listed = op.backends.get(platform.name)
    lines = [f"{op.name} on {platform.name} ({platform.display_name}; {catalog.platform_file(platform.name)})"]
    if listed is None:
        lines.append(f"  no backends entry for {platform.name} ({src.file}:{src.line(('backends',))}): generate refuses the op until one is added")
        listed = ()
    else:
        lines.append(f"  backends: [{', '.join(listed)}]  ({src.file}:{src.line(('backends', platform.name))})")
    verdicts = []
    for index, kernel in enumerate(listed):
        accepted, why = verdict(op, platform.name, kernel)
        if kernel in listed[:index]:
            accepted, why = False, f"refused: {kernel} is already listed at position {listed.index(kernel) + 1}"
        where = src.line(("kernels", kernel)) if kernel in op.kernels else src.line(("backends", platform.name, index))
        kind = f" [{_kind(op, kernel)}]" if kernel in op.kernels else ""
        lines.append(f"  {index + 1}. {kernel}{kind}: {why}  ({src.file}:{where})")
        verdicts.append(accepted)
    if not listed and op.backends.get(platform.name) is not None:
        lines.append(f"  chosen: none: {op.name} is unsupported on {platform.name}; it raises there and never falls back")
    elif verdicts and all(verdicts):
        lines.append(f"  chosen: {' → '.join(listed)} (at run time the first one available runs)")
    elif verdicts:
        lines.append("  chosen: none: generate refuses this mapping until every listed backend is accepted")
    others = [k for k in sorted(op.kernels) if k not in listed]
    if others:
        lines.append("  not listed:")
        for kernel in others:
            accepted, why = verdict(op, platform.name, kernel)
            lines.append(f"     {kernel} [{_kind(op, kernel)}]: would be {why.split(': ', 1)[0]}: {why.split(': ', 1)[1]}  ({src.file}:{src.line(('kernels', kernel))})")
    return lines


def explain(catalog: Catalog, op_name: str, platform_name: str | None = None) -> list[str]:
    """The explanation, as lines; ``GeneratorError`` for an unknown op or platform."""
    names = [o.name for o in catalog.ops]
    if op_name not in names:
        raise GeneratorError(_one_of("op", op_name, names))
    platforms = [p.name for p in catalog.platforms]
    if platform_name is not None and platform_name not in platforms:
        raise GeneratorError(_one_of("platform", platform_name, platforms))
    op = catalog.op(op_name)
    src = catalog.op_source(op.name)
    lines = [
        f"{op.name}: {op.summary}",
        f"  spec: {src.file}",
        f"  requires: {_names(op.requires)}  ({src.file}:{src.line(('requires',))})",
    ]
    for platform in catalog.platforms:
        if platform_name in (None, platform.name):
            lines += ["", *_explain_platform(catalog, op, platform)]
    return lines
