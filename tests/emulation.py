"""Shared by the tests that run generated CUDA sources in the host emulator (tests/emulator)."""

from __future__ import annotations

import platform as host
import re
import subprocess
from pathlib import Path

from conftest import REPO
from generator import record
from generator.evidence import How, Record
from generator.pipeline import Layout, load_checked
from generator.source_hash import closure

EMULATOR = REPO / "tests/emulator"


def emulated_source(text: str) -> str:
    """A generated .cu file with the two CUDA-only spellings the host compiler cannot read
    (dynamic shared memory and the launch syntax) written as emulator calls."""
    text = re.sub(
        r"extern __shared__ ([^;\[]*?)(\w+)\[\];",
        lambda m: f"auto* {m.group(2)} = static_cast<{re.sub(r'__align__[(][0-9]+[)]', '', m.group(1)).strip()}*>(::rlk_emu::dynamic_shared());",
        text,
    )
    return re.sub(
        r"([\w:]+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);",
        lambda m: f"::rlk_emu::launch(::rlk_emu::config({m.group(2)}), {m.group(1)}, {m.group(3)});",
        text,
        flags=re.DOTALL,
    )


# Verdicts of tests/emulator/compare_package.py that pass: bits equal to the CPU's, accurate
# within tolerance, and a contract check (--contracts) that held.
PASSED = ("identical", "accurate", "holds")
GRID_LIMIT = re.compile(rb"^(constexpr int64_t kMaxGridBlocks = )\d+;$", re.MULTILINE)


def same_but_grid_limit(real: dict[str, bytes], emulated: dict[str, bytes], paths: list[str]) -> bool:
    """Whether the emulated copy's files equal the repository's, but for the grid limit's value."""
    for rel in paths:
        if rel not in emulated:
            return False
        if real[rel] != emulated[rel] and GRID_LIMIT.sub(rb"\g<1>0;", real[rel]) != GRID_LIMIT.sub(rb"\g<1>0;", emulated[rel]):
            return False
    return True


def emulated_records(
    platform: str, results: dict[str, list[dict[str, str]]], emulated_generated: Path, root: Path = REPO
) -> tuple[list[Record], list[str]]:
    """`emulated` records for each (op, kernel, dtype) of ``platform`` whose cases all passed
    (tests/emulator/compare_package.py's results), and what was not recorded and why.

    The emulated packages are rendered with a lowered grid limit; a record carries the hash of the
    sources in ``root``'s generated/ (what users build), and only for a kernel whose files there
    equal the emulated ones but for that limit's value."""
    catalog = load_checked(Layout(root))
    real, emulated = record.tree_files(root / "generated"), record.tree_files(emulated_generated)
    suffix = catalog.platform(platform).source_suffix
    skipped = []

    def passed(op: str, kernel: str, on: str, dtypes: tuple[str, ...]) -> list[str]:
        if on != platform:
            return []
        paths = closure(real, platform, op, kernel, suffix)
        if not paths or paths != closure(emulated, platform, op, kernel, suffix) or not same_but_grid_limit(real, emulated, paths):
            skipped.append(f"{platform} {op}/{kernel}: generated/ differs from the emulated sources beyond the grid limit")
            return []
        cases = [c for c in results.get(op, []) if c["kernel"] == kernel]
        return [d for d in dtypes if any(c["dtype"] == d for c in cases) and all(c["verdict"] in PASSED for c in cases if c["dtype"] == d)]

    gxx = subprocess.run(["g++", "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    limit = GRID_LIMIT.search(emulated.get(f"{platform}/csrc/kernels/{platform}/rlk_numerics.h", b""))
    lowered = limit.group(0).decode().rsplit("= ", 1)[1].rstrip(";") if limit else "?"
    try:
        import torch

        torch_version: str | None = torch.__version__
    except ImportError:
        torch_version = None

    def how(op: str, kernel: str, on: str) -> How:
        note = (
            f"grid limit lowered to {lowered} blocks (kMaxGridBlocks in rlk_numerics.h), every other byte as rendered; "
            "launch syntax rewritten for the host compiler"
        )
        if any(p.endswith("/rlk_tensor_core.h") for p in closure(real, on, op, kernel, suffix)):
            note += "; rlk_tensor_core.h replaced by the emulator's model of the PTX instructions"
        return How(
            check="make test: tests/test_device_emulated.py, the package's device kernels in the host emulator (tests/emulator) against its CPU kernels",
            where=f"host emulator ({host.machine()})",
            toolchain=f"g++ {gxx}",
            torch=torch_version,
            note=note,
        )

    records = record.records_for_kernels(catalog, real, passed, "emulated", how, record.commit_of(root))
    return records, skipped
