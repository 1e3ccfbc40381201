"""Shared by the tests that run generated CUDA sources in the host emulator (tests/emulator)."""

from __future__ import annotations

import re

from conftest import REPO

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
