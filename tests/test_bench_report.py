"""docs/performance.md keeps det_gemm's table per code path: a run on one instruction set replaces
that code path's table and keeps the others' (one machine runs one of them)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import bench

AVX2 = "AVX2 + FMA, 6 × 16 tiles, an fma per product"
AVX512 = "AVX-512, 12 × 32 tiles, an fma per product"


def machine(path: str, date: str) -> list[str]:
    return [
        "| CPU | Some CPU (x86_64), 2 logical CPUs, 2 usable |",
        "| torch | 2.13.0+cpu (CPU capability X) |",
        f"| det_gemm code path | {path} |",
        f"| Date (UTC) | {date} |",
    ]


def row(ratio: float) -> bench.GemmRow:
    return bench.GemmRow("float32", (1024, 1024, 1024), 1, 50.0, 50.0 / ratio, ratio, 5, True, True)


def test_each_code_path_keeps_its_last_table() -> None:
    first = bench.gemm_section(machine(AVX512, "2026-01-01 00:00"), [row(0.5)], {})
    tables = bench.gemm_tables("\n".join(first), bench._facts(machine(AVX512, "2026-01-01 00:00")))
    assert list(tables) == [AVX512] and "**0.50**" in tables[AVX512] and "2026-01-01 00:00" in tables[AVX512]

    second = "\n".join(bench.gemm_section(machine(AVX2, "2026-02-02 00:00"), [row(0.9)], tables))
    kept = bench.gemm_tables(second, {})
    assert list(kept) == [AVX2, AVX512]
    assert "**0.90**" in kept[AVX2] and "2026-02-02 00:00" in kept[AVX2]
    assert "**0.50**" in kept[AVX512] and "2026-01-01 00:00" in kept[AVX512] and "**0.90**" not in kept[AVX512]

    again = "\n".join(bench.gemm_section(machine(AVX2, "2026-03-03 00:00"), [row(1.1)], kept))
    latest = bench.gemm_tables(again, {})
    assert "**1.10**" in latest[AVX2] and "**0.90**" not in again and "**0.50**" in latest[AVX512]
    assert again.count(bench.GEMM_NOTES) == 1


def test_a_table_from_before_the_code_paths_is_kept_with_its_own_run() -> None:
    old = (
        "*Not measured by this run: the table of the run of 2026-01-01 00:00 on Old CPU, torch 2.0.*\n\n"
        + "\n".join([bench.GEMM_HEADER, bench.format_gemm_row(row(0.25))])
        + "\n\n"
        + bench.GEMM_NOTES
    )
    tables = bench.gemm_tables(old, bench._facts(machine(AVX512, "2026-05-05 00:00")))
    assert list(tables) == [AVX512]
    assert tables[AVX512].startswith("*Run of 2026-01-01 00:00 on Old CPU, torch 2.0.*") and "**0.25**" in tables[AVX512]
    assert "Speed ratio" not in tables[AVX512]
