# Copied from runtime/tests/conftest.py by rlkernels' generator. DO NOT EDIT: edit that file and run `make generate`.
"""The contract suite's options and evidence.

``pytest tests --op NAME`` (repeatable) runs only the contracts of those ops.

With RLK_EVIDENCE_OUT=<file> set, the session ends by writing there, per op, kernel, platform
and dtype, how many contract tests passed, failed and were skipped, with the torch, device
and toolkit they ran on: the raw material of an `executed` evidence record.
"""

from __future__ import annotations

import json
import os
import platform as host
from collections import Counter
from typing import Any

import pytest
import torch
from cases import CASES, DEVICE_TYPE, OpCase, package, present, registry, runtime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--op", action="append", default=[], metavar="NAME", help="run the contracts of this op only (repeatable)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = config.getoption("--op")
    if not wanted:
        return
    unknown = sorted(set(wanted) - set(CASES))
    if unknown:
        raise pytest.UsageError(f"--op: unknown op {', '.join(unknown)}. Expected one of {', '.join(sorted(CASES))}")
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if _op_of(item) in wanted else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def _op_of(item: Any) -> str | None:
    case = getattr(getattr(item, "callspec", None), "params", {}).get("case")
    return case.name if isinstance(case, OpCase) else None


@pytest.fixture(autouse=True)
def _native_library_loaded() -> None:
    assert package.NATIVE_ERROR is None, f"the native library did not load: {package.NATIVE_ERROR}"


# ------------------------------------------------------------------ evidence of what ran

_OUTCOMES: Counter[tuple[str, ...]] = Counter()


def _key(item: Any) -> tuple[str, str, str, str] | None:
    """(op, kernel, platform, dtype) of a test that exercises one kernel, else None."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    op = _op_of(item)
    if op is None or params.get("kernel") in (None, "default") or "dtype" not in params or params.get("device") is None:
        return None
    # A case of several dtype variables ("bfloat16/float32") counts under the first variable's dtype.
    return op, params["kernel"], runtime.platform_of(params["device"]), params["dtype"].split("/")[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    key = _key(item)
    if key is None or not (report.when == "call" or report.outcome != "passed"):
        return
    _OUTCOMES[key + ("skipped" if report.skipped else report.outcome,)] += 1


def _device_name(platform: str) -> str:
    if platform != "cpu" and present(platform):
        module = getattr(torch, DEVICE_TYPE, None)
        if module is not None and hasattr(module, "get_device_name"):
            return str(module.get_device_name())
    return host.processor() or host.machine()


def _toolkit() -> str | None:
    """The device toolkit this torch was built with, as the platform spec says where to read it."""
    built_for = next(p for p in registry.PLATFORMS if p.name == registry.BUILD_PLATFORM)
    if built_for.toolkit_version_from is None:
        return None
    try:
        version = runtime._resolve(built_for.toolkit_version_from)
    except (ImportError, AttributeError):
        return None
    return f"{registry.BUILD_PLATFORM} {version}" if version else None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get("RLK_EVIDENCE_OUT")
    if not path:
        return
    rows: dict[tuple[str, ...], dict[str, int]] = {}
    for (*key, outcome), count in _OUTCOMES.items():
        row = rows.setdefault(tuple(key), {"passed": 0, "failed": 0, "skipped": 0})
        row[outcome] = row.get(outcome, 0) + count
    outcomes = [{"op": op, "kernel": kernel, "platform": platform, "dtype": dtype, **counts} for (op, kernel, platform, dtype), counts in sorted(rows.items())]
    record = {
        "package_platform": registry.BUILD_PLATFORM,
        "torch": torch.__version__,
        "device_name": _device_name(registry.BUILD_PLATFORM),
        "toolkit": _toolkit(),
        "outcomes": outcomes,
    }
    with open(path, "w", encoding="utf-8") as out:
        json.dump(record, out, indent=1, sort_keys=True)
        out.write("\n")
