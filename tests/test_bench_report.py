"""docs/performance.md is rendered from the rows in docs/performance.json, never parsed back: a run
replaces the tables it measured and keeps the others, each marked with the run that measured it;
det_gemm keeps a table per code path (one machine runs one of them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conftest import REPO

sys.path.insert(0, str(REPO))
from tools.bench import report
from tools.bench.sections import all_sections
from tools.bench.sections.gemm import NOTES as GEMM_NOTES
from tools.bench.sections.gemm import GemmRow, GemmSection
from tools.bench.sections.ops import OpRow, OpsSection

AVX2 = "AVX2 + FMA, 6 × 16 tiles, an fma per product"
AVX512 = "AVX-512, 12 × 32 tiles, an fma per product"


def facts(path: str, date: str, cpu: str = "Some CPU (x86_64), 2 logical CPUs, 2 usable") -> dict[str, str]:
    return {"CPU": cpu, "torch": "2.13.0+cpu (CPU capability X)", "det_gemm code path": path, "Date (UTC)": date}


def gemm(ratio: float) -> GemmRow:
    return GemmRow("float32", (1024, 1024, 1024), 1, 50.0, 50.0 / ratio, ratio, 5, True, True)


def op(ratio: float) -> OpRow:
    return OpRow("logp", "float32", "N=512 V=32768", 1, 1.0, ratio, ratio, 25, True, True)


def test_each_code_path_keeps_its_last_table():
    sections = [GemmSection()]
    store = report.record(report.Store(), facts(AVX512, "2026-01-01 00:00"), [(sections[0], [gemm(0.5)])])
    store = report.record(store, facts(AVX2, "2026-02-02 00:00"), [(sections[0], [gemm(0.9)])])
    text = report.render(store, sections)
    assert text.index(f"### Code path: {AVX2}") < text.index(f"### Code path: {AVX512}"), "the newest table comes first"
    avx2, avx512 = text.split(f"### Code path: {AVX512}")
    assert "*Run of 2026-02-02 00:00 on Some CPU" in avx2 and "**0.90**" in avx2 and "**0.50**" not in avx2
    assert "*Run of 2026-01-01 00:00 on Some CPU" in avx512 and "**0.50**" in avx512
    assert text.count(GEMM_NOTES) == 1 and text.endswith(GEMM_NOTES + "\n")

    again = report.record(store, facts(AVX2, "2026-03-03 00:00"), [(sections[0], [gemm(1.1)])])
    text = report.render(again, sections)
    assert "**1.10**" in text and "**0.90**" not in text and "**0.50**" in text
    assert sorted(again.runs) == ["2026-01-01 00:00", "2026-03-03 00:00"], "a run no table comes from any more is dropped"


def test_a_cpu_whose_torch_has_amx_keeps_a_table_of_its_own():
    """torch's bfloat16 matmul on AMX is another baseline: its run does not replace the same code path's table without it."""
    sections = [GemmSection()]
    amx = {**facts(AVX512, "2026-02-02 00:00"), "Matrix instructions": "AMX (amx_bf16, amx_tile): torch's bfloat16 matmul may use them"}
    store = report.record(report.Store(), facts(AVX512, "2026-01-01 00:00"), [(sections[0], [gemm(0.5)])])
    store = report.record(store, amx, [(sections[0], [gemm(0.1)])])
    text = report.render(store, sections)
    assert f"### Code path: {AVX512}, torch with AMX" in text and f"### Code path: {AVX512}\n" in text
    assert "**0.50**" in text and "**0.10**" in text


def test_a_section_this_run_did_not_measure_keeps_its_table_marked_with_its_run():
    sections = [GemmSection(), OpsSection()]
    first = report.record(report.Store(), facts(AVX512, "2026-01-01 00:00", cpu="Old CPU"), [(sections[1], [op(3.5)])])
    second = report.record(first, facts(AVX512, "2026-02-02 00:00"), [(sections[0], [gemm(1.0)])])
    text = report.render(second, sections)
    assert "| Date (UTC) | 2026-02-02 00:00 |" in text, "the machine table is the last run's"
    kept = text.split(f"## {sections[1].title}\n")[1]
    assert kept.startswith("\n*Not measured by this run: the table of the run of 2026-01-01 00:00 on Old CPU, torch 2.13.0+cpu (CPU capability X).*\n")
    assert "**3.50**" in kept
    measured = report.record(second, facts(AVX512, "2026-03-03 00:00"), [(sections[1], [op(4.0)])])
    assert "Not measured" not in report.render(measured, sections).split(f"## {sections[1].title}\n")[1]


def test_rows_survive_the_json_and_render_the_same(tmp_path: Path):
    sections = all_sections()
    doc, store_path = tmp_path / "performance.md", tmp_path / "performance.json"
    written = report.write(facts(AVX512, "2026-01-01 00:00"), [(sections[0], [gemm(0.75)]), (sections[1], [op(2.0)])], sections, doc, store_path)
    loaded = report.load(store_path)
    assert loaded == written
    assert report.render(loaded, sections) == doc.read_text()
    assert report.dumps(loaded) == store_path.read_text()
    (gemm_table,) = [t for t in json.loads(store_path.read_text())["tables"] if t["section"] == "gemm"]
    assert gemm_table["variant"] == AVX512 and gemm_table["rows"][0]["shape"] == [1024, 1024, 1024]


def test_the_committed_report_is_what_its_rows_render():
    """docs/performance.md is generated: from docs/performance.json, by the sections' own formats."""
    store = report.load(REPO / "docs" / "performance.json")
    assert report.render(store, all_sections()) == (REPO / "docs" / "performance.md").read_text()
    assert report.dumps(store) == (REPO / "docs" / "performance.json").read_text()
