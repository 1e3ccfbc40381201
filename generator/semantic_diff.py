"""What a change to the specs means, one line per fact, for reviewers.

Compares two review states: ``registry.json`` as committed (or at a git revision)
and as the specs now render it.  Both sides are that one rendered file, so the
comparison never parses YAML, and an old registry that lacks a newer key simply
skips the comparisons that need it.  Lines that weaken a contract — an op
requiring less, a kernel in use losing a guarantee, a platform losing its
support — carry a loud prefix so that no review misses them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .files import FileProblem, parse_json

WEAKENS = "WEAKENS CONTRACT: "

State = Mapping[str, Any]


@dataclass(frozen=True)
class Change:
    subject: str
    """What changed: ``op``, ``op/platform``, ``op kernel k``, ``platform p`` or ``tolerance c/dtype``."""
    text: str
    weakens: bool = False

    def __str__(self) -> str:
        return f"{WEAKENS if self.weakens else ''}{self.subject}: {self.text}"


class StateError(ValueError):
    """A registry.json that cannot be read as a review state."""


def parse_state(data: bytes, where: str) -> State:
    try:
        state = parse_json(data)
    except FileProblem as problem:
        raise StateError(f"{where}: {problem}") from None
    if not isinstance(state, dict) or not isinstance(state.get("ops", {}), dict):
        raise StateError(f"{where}: not a registry (expected an object with an 'ops' object)")
    return state


def _list(values: Iterable[Any]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _show(value: Any) -> str:
    return _list(_strs(value)) if isinstance(value, list) else json.dumps(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _guarantees(op: State, kernel: str) -> set[str]:
    return set(_strs(_dict(_dict(op.get("kernels")).get(kernel)).get("guarantees")))


def _served(op: State, platform: str) -> set[str] | None:
    """Guarantees that hold on ``platform`` whichever listed backend runs; None where unsupported."""
    names = _strs(_dict(op.get("backends")).get(platform))
    if not names:
        return None
    return set.intersection(*(_guarantees(op, k) for k in names))


def _ordered(values: Iterable[str]) -> list[str]:
    return sorted(values)


def _tensor_changes(name: str, role: str, old: State, new: State) -> list[Change]:
    out: list[Change] = []
    for tensor in _ordered(old.keys() | new.keys()):
        a, b = _dict(old.get(tensor)), _dict(new.get(tensor))
        if tensor not in new:
            out.append(Change(name, f"{role} {tensor} removed"))
        elif tensor not in old:
            out.append(Change(name, f"{role} {tensor} added: {_list(_strs(b.get('dtype')))} {_list(_strs(b.get('shape')))}"))
        else:
            for key in _ordered(a.keys() | b.keys()):
                if a.get(key) != b.get(key):
                    out.append(Change(name, f"{role} {tensor} {key} {_show(a.get(key))} → {_show(b.get(key))}"))
    return out


def _reduction_changes(name: str, where: str, old: State, new: State) -> list[Change]:
    """One line per changed field of a reduction and of the reductions inside it: each changes the op's bits."""
    out: list[Change] = []
    if not old or not new:
        if old != new:
            what = ", ".join(f"{key} {value}" for key, value in sorted((new or old).items()) if key != "inner")
            out.append(Change(name, f"{where} {'added' if new else 'removed'}: {what} (the op's bits change)"))
        return out
    for key in _ordered((old.keys() | new.keys()) - {"inner"}):
        if old.get(key) != new.get(key):
            out.append(Change(name, f"{where} {key} {_show(old.get(key))} → {_show(new.get(key))} (the op's bits change)"))
    if "inner" in old or "inner" in new:
        out += _reduction_changes(name, f"{where} inner", _dict(old.get("inner")), _dict(new.get("inner")))
    return out


def _param_changes(subject: str, old: State, new: State) -> list[Change]:
    """One line per template parameter changed, added or removed: each renders another source."""
    out: list[Change] = []
    for key in _ordered(old.keys() | new.keys()):
        if key not in new:
            out.append(Change(subject, f"param {key} removed (was {json.dumps(old[key])})"))
        elif key not in old:
            out.append(Change(subject, f"param {key} added: {json.dumps(new[key])}"))
        elif old[key] != new[key]:
            out.append(Change(subject, f"param {key} {json.dumps(old[key])} → {json.dumps(new[key])}"))
    return out


def _tolerance_note(old_state: State, new_state: State, old_class: str, new_class: str) -> str:
    """'looser' / 'tighter' / '' for a switch between tolerance classes, when both tables are known."""
    old_table = _dict(_dict(old_state.get("tolerances")).get(old_class))
    new_table = _dict(_dict(new_state.get("tolerances")).get(new_class))
    looser = tighter = False
    for dtype in old_table.keys() & new_table.keys():
        for bound in ("atol", "rtol"):
            a, b = _dict(old_table[dtype]).get(bound), _dict(new_table[dtype]).get(bound)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                looser |= b > a
                tighter |= b < a
    return " (looser)" if looser and not tighter else " (tighter)" if tighter and not looser else " (looser in part, tighter in part)" if looser else ""


def _op_changes(name: str, old: State, new: State, old_state: State, new_state: State) -> list[Change]:
    out: list[Change] = []

    if old.get("summary") != new.get("summary"):
        out.append(Change(name, f"summary {json.dumps(old.get('summary'))} → {json.dumps(new.get('summary'))}"))

    old_req, new_req = set(_strs(old.get("requires"))), set(_strs(new.get("requires")))
    for g in _ordered(old_req - new_req):
        out.append(Change(name, f"requires no longer includes {g} (requires {_list(_ordered(old_req))} → {_list(_ordered(new_req))})", weakens=True))
    for g in _ordered(new_req - old_req):
        out.append(Change(name, f"requires gains {g} (requires {_list(_ordered(old_req))} → {_list(_ordered(new_req))})"))

    if old.get("dtypes") != new.get("dtypes"):
        out.append(Change(name, f"dtypes {_list(_strs(old.get('dtypes')))} → {_list(_strs(new.get('dtypes')))}"))
    if old.get("torch_schema") != new.get("torch_schema") and "torch_schema" in old and "torch_schema" in new:
        out.append(Change(name, f"signature {old.get('torch_schema')} → {new.get('torch_schema')}"))
    old_sig, new_sig = _dict(old.get("signature")), _dict(new.get("signature"))
    for role, key in (("argument", "args"), ("output", "outputs")):
        out += _tensor_changes(name, role, _dict(old_sig.get(key)), _dict(new_sig.get(key)))
    for key in _ordered((old_sig.keys() | new_sig.keys()) - {"args", "outputs"}):
        if old_sig.get(key) != new_sig.get(key):
            out.append(Change(name, f"signature {key} changed: {json.dumps(old_sig.get(key))} → {json.dumps(new_sig.get(key))}"))

    if "reduction" in old and "reduction" in new:
        out += _reduction_changes(name, "reduction", _dict(old.get("reduction")), _dict(new.get("reduction")))

    if old.get("tolerance") != new.get("tolerance"):
        note = _tolerance_note(old_state, new_state, str(old.get("tolerance")), str(new.get("tolerance")))
        out.append(Change(name, f"tolerance {old.get('tolerance')} → {new.get('tolerance')}{note}"))

    old_k, new_k = _dict(old.get("kernels")), _dict(new.get("kernels"))
    new_backends = _dict(new.get("backends"))
    for kernel in _ordered(old_k.keys() | new_k.keys()):
        subject = f"{name} kernel {kernel}"
        if kernel not in new_k:
            out.append(Change(subject, "removed"))
            continue
        if kernel not in old_k:
            gs = _ordered(_guarantees(new, kernel))
            out.append(Change(subject, f"added ({_dict(new_k[kernel]).get('kind')}, guarantees {_list(gs)})"))
            continue
        a, b = _dict(old_k[kernel]), _dict(new_k[kernel])
        if a.get("kind") != b.get("kind"):
            out.append(Change(subject, f"kind {a.get('kind')} → {b.get('kind')}"))
        lost, gained = _guarantees(old, kernel) - _guarantees(new, kernel), _guarantees(new, kernel) - _guarantees(old, kernel)
        serving = [p for p in _ordered(new_backends) if kernel in _strs(new_backends[p])]
        for g in _ordered(lost):
            where = f" (listed for {', '.join(serving)})" if serving else " (listed for no platform)"
            out.append(Change(subject, f"loses guarantee {g}{where}", weakens=bool(serving)))
        for g in _ordered(gained):
            out.append(Change(subject, f"gains guarantee {g}"))
        if "params" in a and "params" in b:
            out += _param_changes(subject, _dict(a["params"]), _dict(b["params"]))
        # A key one side lacks is a registry of another format (an older --base), not a change.
        for key in _ordered((a.keys() & b.keys()) - {"kind", "guarantees", "params"}):
            if a.get(key) != b.get(key):
                out.append(Change(subject, f"{key} {json.dumps(a.get(key))} → {json.dumps(b.get(key))}"))

    old_b, new_b = _dict(old.get("backends")), _dict(new.get("backends"))
    for platform in _ordered(old_b.keys() | new_b.keys()):
        subject = f"{name}/{platform}"
        before, after = _strs(old_b.get(platform)), _strs(new_b.get(platform))
        arrow = f"backends {_list(before)} → {_list(after)}"
        if platform not in new_b:
            out.append(Change(subject, f"no longer listed ({arrow})", weakens=bool(before)))
        elif platform not in old_b:
            out.append(Change(subject, f"now listed: {'backends ' + _list(after) if after else 'unsupported'}"))
        elif before == after:
            continue
        elif before and not after:
            out.append(Change(subject, f"supported → unsupported ({arrow})", weakens=True))
        elif after and not before:
            out.append(Change(subject, f"unsupported → supported ({arrow})"))
        elif sorted(before) == sorted(after):
            out.append(Change(subject, f"backends reordered {_list(before)} → {_list(after)}"))
        else:
            out.append(Change(subject, arrow))
        served_before, served_after = _served(old, platform), _served(new, platform)
        if before != after and served_before is not None and served_after is not None:
            for g in _ordered(served_before - served_after):
                # a kernel that itself lost the guarantee is reported above, once, with its platforms
                if not any(g in _guarantees(old, k) and g not in _guarantees(new, k) for k in after):
                    out.append(Change(subject, f"no longer guarantees {g} whichever backend runs ({arrow})", weakens=True))

    for key in _ordered((old.keys() | new.keys()) - _KNOWN_OP_KEYS):
        if old.get(key) != new.get(key):
            out.append(Change(name, f"{key} changed"))
    return out


_KNOWN_OP_KEYS = frozenset({"spec", "summary", "requires", "dtypes", "signature", "torch_schema", "tolerance", "reduction", "kernels", "backends"})


def compare(old: State, new: State) -> list[Change]:
    """Every meaningful difference from ``old`` to ``new``, contract-weakening ones first."""
    out: list[Change] = []
    old_p, new_p = _dict(old.get("platforms")), _dict(new.get("platforms"))
    if "platforms" in old and "platforms" in new:
        for p in _ordered(old_p.keys() - new_p.keys()):
            out.append(Change(f"platform {p}", "removed"))
        for p in _ordered(new_p.keys() - old_p.keys()):
            out.append(Change(f"platform {p}", f"added ({_dict(new_p[p]).get('kind')})"))
    for key in ("package", "version"):
        if key in old and old.get(key) != new.get(key):
            out.append(Change(key, f"{old.get(key)} → {new.get(key)}"))

    old_t, new_t = _dict(old.get("tolerances")), _dict(new.get("tolerances"))
    if "tolerances" in old and "tolerances" in new:
        for cls in _ordered(old_t.keys() | new_t.keys()):
            if cls not in new_t or cls not in old_t:
                out.append(Change(f"tolerance {cls}", "removed" if cls not in new_t else "added"))
                continue
            a, b = _dict(old_t[cls]), _dict(new_t[cls])
            for dtype in _ordered(a.keys() | b.keys()):
                for bound in ("atol", "rtol"):
                    x, y = _dict(a.get(dtype)).get(bound), _dict(b.get(dtype)).get(bound)
                    if x != y:
                        trend = ""
                        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                            trend = " (looser)" if y > x else " (tighter)"
                        out.append(Change(f"tolerance {cls}/{dtype}", f"{bound} {x} → {y}{trend}"))

    old_ops, new_ops = _dict(old.get("ops")), _dict(new.get("ops"))
    for name in _ordered(old_ops.keys() | new_ops.keys()):
        if name not in new_ops:
            out.append(Change(name, "op removed", weakens=True))
        elif name not in old_ops:
            op = _dict(new_ops[name])
            backends = _dict(op.get("backends"))
            where = ", ".join(f"{p} {_list(_strs(backends[p])) if _strs(backends[p]) else 'unsupported'}" for p in _ordered(backends))
            out.append(Change(name, f"op added (requires {_list(_strs(op.get('requires')))}; {where})"))
        else:
            out += _op_changes(name, _dict(old_ops[name]), _dict(new_ops[name]), old, new)
    return [c for c in out if c.weakens] + [c for c in out if not c.weakens]


def report(changes: list[Change], source: str) -> list[str]:
    """The block printed above the unified diff."""
    if not changes:
        return [f"semantic changes ({source} → the specs): none"]
    lines = [f"semantic changes ({source} → the specs):"]
    lines += [f"  {change}" for change in changes]
    weakening = sum(c.weakens for c in changes)
    if weakening:
        lines.append(f"  {weakening} change{'s' if weakening > 1 else ''} weaken{'s' if weakening == 1 else ''} a contract: review them with care")
    return lines
