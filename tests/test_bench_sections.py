"""tools/bench/: every section implements the one interface, the runner drives any section that does,
and the cases the gemm, ops and model tables measure come from the specs' bench sections (read
without pydantic, as the generator's model reads them) with baselines from a closed vocabulary.
No timing is asserted: sections run here with fake rows or not at all."""

from __future__ import annotations

import dataclasses
import math
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from generator.load import load_catalog
from generator.model import LayerDim, NativeKernel, ReferenceKernel, TorchBaseline

sys.path.insert(0, str(REPO))
from tools.bench import cases, core, report, runner, specs
from tools.bench.baselines import BASELINES
from tools.bench.sections import all_sections
from tools.bench.sections.decoder import DecoderRow, DecoderSection, LargeDecoderSection
from tools.bench.sections.model import MODEL_SIZES, row_kinds

# ---------------------------------------------------------------- the interface


def example_row(cls: type) -> Any:
    """A row of ``cls`` with a plausible value in every field."""
    values = {int: 2, float: 1.5, bool: True, str: "x", tuple[int, ...]: (4, 5, 6)}
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: values[hints[f.name]] for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("section", all_sections(), ids=lambda s: s.name)
def test_every_section_implements_the_interface(section: core.Section):
    assert [s.name for s in runner.selected([section.name], all_sections())] == [section.name]
    assert section.title and "\n" not in section.title
    assert dataclasses.is_dataclass(section.row_type)
    assert isinstance(section.needs_torch, bool)
    assert isinstance(section.variant({"det_gemm code path": "AVX2 + FMA"}), str)
    assert callable(section.run)
    row = example_row(section.row_type)
    formatted = section.format([row, row])
    # The last lines are one per row, each a Markdown table row: what a run prints as it measures.
    assert formatted.table[-1] == formatted.table[-2] and formatted.table[-1].startswith("| ") and formatted.table[-1].endswith(" |")
    assert section.format([row]).table[-1] == formatted.table[-1]
    assert formatted.notes.startswith("* ")
    # A row survives docs/performance.json.
    assert report.row_from_json(section.row_type, report.row_to_json(row)) == row


def test_sections_have_distinct_names_and_titles():
    sections = all_sections()
    assert len({s.name for s in sections}) == len(sections) == len({s.title for s in sections})
    assert [s.name for s in runner.selected(["kernel"], sections)] == ["gemm", "ops"]


@dataclasses.dataclass
class FakeRow:
    what: str
    value: float
    deterministic: bool = True
    invariant: bool = True


class FakeSection:
    """A section that measures nothing: what the runner and the report need of one, and no more."""

    title = "A fake table"
    row_type = FakeRow
    needs_torch = False

    def __init__(self, name: str, stable: bool = True) -> None:
        self.name, self.stable, self.ran = name, stable, 0

    def variant(self, facts: Any) -> str:
        return ""

    def run(self, context: core.Context) -> list[FakeRow]:
        self.ran += 1
        rows = [FakeRow(f"{self.name} row {i}", 1.0 / (i + 1), invariant=self.stable or i == 0) for i in range(2 if not context.quick else 1)]
        for row in rows:
            context.emit(self, row)
        return rows

    def format(self, rows: Sequence[FakeRow]) -> core.Formatted:
        return core.Formatted(["| what | value |", "| --- | ---: |", *(f"| {r.what} | **{r.value:.2f}** |" for r in rows)], f"* {len(rows)} rows.")


@pytest.fixture
def fake(monkeypatch, tmp_path: Path) -> list[FakeSection]:
    sections = [FakeSection("one"), FakeSection("two")]
    monkeypatch.setattr(runner, "all_sections", lambda: sections)
    monkeypatch.setattr(report, "DOC", tmp_path / "performance.md")
    monkeypatch.setattr(report, "STORE", tmp_path / "performance.json")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    monkeypatch.setattr(runner, "ROOT", tmp_path)
    return sections


def test_the_runner_drives_any_section_and_writes_the_report_from_its_rows(fake, capsys):
    assert runner.main(["one"]) == 0
    out = capsys.readouterr().out
    assert "| one row 0 | **1.00** |" in out and "| one row 1 | **0.50** |" in out and "| Command |" in out and "load average at the end" in out
    assert fake[0].ran == 1 and fake[1].ran == 0
    doc = report.DOC.read_text()
    assert "## A fake table\n\n| what | value |" in doc and doc.endswith("* 2 rows.\n")
    assert report.load(report.STORE).tables[0].rows == [{"what": "one row 0", "value": 1.0, "deterministic": True, "invariant": True},
                                                       {"what": "one row 1", "value": 0.5, "deterministic": True, "invariant": True}]


def test_quick_and_op_runs_write_no_report(fake, capsys):
    assert runner.main(["--quick", "one", "two"]) == 0
    assert fake[0].ran == fake[1].ran == 1
    assert "| one row 1 |" not in capsys.readouterr().out
    assert runner.main(["one", "--op", "silu"]) == 0
    assert not report.DOC.exists() and not report.STORE.exists()


def test_an_unstable_row_fails_the_run_and_is_named(fake, capsys):
    fake[1].stable = False
    assert runner.main(["two"]) == 1
    assert "bench: two row 1 was not bitwise stable" in capsys.readouterr().err


def test_an_unknown_section_is_refused(fake, capsys):
    with pytest.raises(SystemExit):
        runner.main(["three"])
    assert "unknown section three; expected kernel, one, two" in capsys.readouterr().err


# ---------------------------------------------------------------- cases from the specs


def test_the_vocabularies_are_the_models():
    assert set(BASELINES) == set(typing.get_args(TorchBaseline))
    assert set(cases.LAYER_DIMS) == set(typing.get_args(LayerDim))
    size = MODEL_SIZES[0]
    assert all(isinstance(getattr(size, dim), int) for dim in cases.LAYER_DIMS)


def test_the_reader_reads_what_the_generators_model_reads():
    """tools/bench/specs.py reads the spec files with PyYAML alone (gpu_check runs where pydantic is
    not installed): every fact it gives must be the validated model's."""
    catalog = load_catalog(REPO / "specs", REPO)
    read = specs.read_ops(REPO)
    assert list(read) == sorted(op.name for op in catalog.ops)
    for op in catalog.ops:
        data = read[op.name]
        assert data.aliases == op.aliases
        assert [(a.name, a.dtype, a.shape, a.optional) for a in data.args] == [(a.name, a.dtype, a.shape, a.optional) for a in op.args]
        assert [(a.low, a.high) for a in data.args if a.name in {x.name for x in op.args if x.values}] == [
            (a.values.low, a.values.high) for a in op.args if a.values
        ]
        assert data.attrs == {a.name: a.default for a in op.attrs}
        assert data.outputs == tuple((o.name, o.shape) for o in op.outputs)
        assert data.batch_dim == op.tests.batch_dim
        assert data.offsets == (dict(op.tests.sequences.offsets) if op.tests.sequences else {})
        sequences = op.tests.sequences
        causal = sequences is not None and (sequences.prefix_if is None or any(a.name == sequences.prefix_if and a.default for a in op.attrs))
        assert data.prefix == bool(sequences and sequences.prefix and causal)
        assert data.test_shapes == op.tests.shapes
        assert (data.reference, data.tolerance, data.has_backward) == (op.reference, op.tolerance, bool(op.backward))
        assert data.references == {n: k.python for n, k in op.kernels.items() if isinstance(k, ReferenceKernel)}
        assert {n for n, k in op.kernels.items() if isinstance(k, NativeKernel)}.isdisjoint(data.references)
        if op.bench is None:
            assert data.bench is None
            continue
        assert data.bench is not None
        assert (data.bench.baseline_torch, data.bench.baseline_kernel) == (op.bench.baseline.torch, op.bench.baseline.kernel)
        assert data.bench.dtypes == op.bench.dtypes and data.bench.shapes == op.bench.shapes
        assert [(c.sizes, c.label, c.backward) for c in data.bench.layer] == [(c.sizes, c.label or op.name, c.backward) for c in op.bench.layer]


def test_the_model_table_is_the_specs_data():
    """Which rows the model table has, in which order, is what the specs' bench.layer say."""
    kinds = row_kinds(specs.read_ops(REPO))
    labels = [kind.label for kind in kinds]
    assert labels[:4] == ["det_linear q/k/v/o", "det_linear MLP up/gate", "det_linear MLP down", "det_linear vocabulary"]
    assert labels[4:12] == ["swiglu", "silu", "rms_norm", "logp", "linear_logp", "embedding", "rope", "attention"]
    assert labels[12:] == [f"{name} fwd+bwd" for name in ("det_linear MLP up/gate", "swiglu", "rms_norm", "linear_logp", "attention")]


TINY = cases.ModelSize(tokens=12, hidden=128, vocab=96)


def bench_cases() -> list[tuple[str, dict[str, int], bool]]:
    """Every benchmark case of the specs, at tiny sizes: (op, sizes, with the backward)."""
    found = []
    for data in specs.read_ops(REPO).values():
        if data.bench is None:
            continue
        shapes = data.bench.shapes or data.test_shapes[:1]
        found += [(data.name, {d: min(n, 40) for d, n in shape.items()}, False) for shape in shapes]
        found += [(data.name, cases.layer_sizes(case.sizes, TINY), case.backward) for case in data.bench.layer]
    return found


@pytest.mark.parametrize(("name", "sizes", "backward"), bench_cases(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_baseline_runs_on_the_inputs_its_spec_draws(name: str, sizes: dict[str, int], backward: bool):
    """The baseline a spec names takes the op's arguments as drawn from its signature and gives a
    tensor of the shape of the op's first output; the rows of a batch cut alone keep their shapes."""
    pytest.importorskip("torch")
    data = specs.read_ops(REPO)[name]
    inputs = cases.draw(data, sizes, data.bench.dtypes[0], layer_scale=True, grad=backward)
    call = cases.baseline_call(data)
    out = call(*inputs.args)
    assert list(out.shape) == [sizes[d] for d in data.outputs[0][1]], cases.baseline_code(data)
    rows = cases.batch_rows(inputs)
    if rows is not None:
        alone = cases.take_rows(inputs, 0, 3)
        assert list(call(*alone.args).shape) == list(cases.output_rows(data, out, 0, 3).shape)
    if backward:
        gradient = cases.with_backward(call, inputs)()
        first = next(t for a, t in zip(data.args, inputs.args) if a.floating)
        assert gradient.shape == first.shape and math.isfinite(float(gradient.float().abs().sum()))
    for arg, tensor in zip(data.args, inputs.args):
        if tensor is not None and not arg.floating and arg.name not in data.offsets.values():
            high = sizes[arg.high] if isinstance(arg.high, str) else arg.high
            assert int(tensor.min()) >= arg.low and int(tensor.max()) < high, f"{arg.name}: only the spec's valid range, never planted ids"


def test_a_linear_layers_weight_is_drawn_at_its_scale_and_nothing_else():
    pytest.importorskip("torch")
    data = specs.read_ops(REPO)["det_gemm_nt"]
    layer = cases.draw(data, {"M": 64, "K": 1024, "N": 512}, "float32", layer_scale=True)
    plain = cases.draw(data, {"M": 64, "K": 1024, "N": 512}, "float32")
    assert layer.args[0].equal(plain.args[0]), "the activations are standard normals either way"
    assert layer.args[1].equal(plain.args[1] * 1024**-0.5), "the weight [out, in], over sqrt(in)"
    assert layer.args[2] is None and layer.shown() == "a 64×1024, b 512×1024"


# ---------------------------------------------------------------- the transformers sections


def decoder_row(dtype: str, threads: int, ratio: float, torch_amx: bool = False) -> DecoderRow:
    return DecoderRow(1024, 4, 512, dtype, "fwd+bwd", threads, 9000.0, 9000.0 * ratio, ratio, 3, True, True, torch_amx)


class NoBuild(core.Context):
    """A run's context whose CPU package is never built (the sections' _bench is replaced)."""

    def package(self) -> Any:
        return None


@pytest.mark.slow  # the section asks for transformers, which only make test installs (the vllm extra)
def test_the_large_model_runs_forward_and_backward_only_and_is_not_in_the_default_run(monkeypatch):
    torch = pytest.importorskip("torch")
    large = LargeDecoderSection()
    (size,) = large.sizes
    assert (size.hidden, size.layers, size.heads, size.kv_heads, size.intermediate, size.vocab, size.batch, size.length) == (1024, 8, 16, 8, 2816, 32000, 4, 512)
    assert [(m.heads, m.kv_heads) for m in DecoderSection().sizes] == [(4, 2)], "the small model keeps its heads: H / 64 over half as many"
    measured: list[tuple[int, str, str]] = []

    def bench(self: Any, context: core.Context, threads: int, size: Any, dtype: str, step: str) -> DecoderRow:
        measured.append((threads, dtype, step))
        return decoder_row(dtype, threads, 1.0)

    monkeypatch.setattr(LargeDecoderSection, "_bench", bench)
    monkeypatch.setattr(core, "thread_counts", lambda: [1, 2])
    monkeypatch.setenv("RLK_NUM_THREADS", "1")  # a run sets it per thread count: restored after the test
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    rows = large.run(NoBuild(out=lambda line: None))
    assert measured == [(1, "bfloat16", "fwd+bwd"), (1, "float32", "fwd+bwd"), (2, "bfloat16", "fwd+bwd"), (2, "float32", "fwd+bwd")]
    assert len(rows) == 4
    measured.clear()
    large.run(NoBuild(quick=True, out=lambda line: None))
    assert measured == [(1, "bfloat16", "fwd+bwd")]
    sections = all_sections()
    assert "transformers-large" not in [s.name for s in runner.selected(runner.DEFAULT, sections)]
    assert "transformers" in [s.name for s in runner.selected(runner.DEFAULT, sections)]
    assert [s.name for s in runner.selected(["transformers-large"], sections)] == ["transformers-large"]


def test_the_large_models_rows_format_and_survive_the_report(tmp_path: Path):
    sections = all_sections()
    small, large = (next(s for s in sections if s.name == name) for name in ("transformers", "transformers-large"))
    rows = [decoder_row("bfloat16", 1, 0.42, torch_amx=True), decoder_row("float32", 2, 1.07, torch_amx=True)]
    table = large.format(rows).table
    assert table[-2] == "| Qwen2 H=1024 | bfloat16 | fwd+bwd | 4×512 | 1 | 9000.0 | 3780.0 (AMX) | **0.42** | yes (3 runs) | yes |"
    assert table[-1] == "| Qwen2 H=1024 | float32 | fwd+bwd | 4×512 | 2 | 9000.0 | 9630.0 | **1.07** | yes (3 runs) | yes |", "AMX runs bfloat16 only"
    notes = large.format(rows).notes
    assert "H = 1024, 8 layers, 16 heads over 8 KV heads, I = 2816, V = 32000, 4 rows of 512 tokens" in notes
    assert "a ratio of at least 1.0" in notes and "at least 3 pairs, no more" in notes and "* (AMX) after an unpatched time" in notes
    assert "(AMX)" not in large.format([decoder_row("bfloat16", 1, 0.9)]).notes + large.format([decoder_row("bfloat16", 1, 0.9)]).table[-1]

    # A row stored before torch_amx was recorded reads back without it.
    old = report.row_to_json(decoder_row("bfloat16", 1, 0.86))
    del old["torch_amx"]
    assert report.row_from_json(DecoderRow, old) == decoder_row("bfloat16", 1, 0.86)

    doc, store_path = tmp_path / "performance.md", tmp_path / "performance.json"
    when = {"CPU": "Some CPU", "torch": "2.13.0+cpu", "Date (UTC)": "2026-01-01 00:00"}
    small_rows = [dataclasses.replace(decoder_row("float32", 1, 1.25), hidden=256, length=128)]
    written = report.write(when, [(small, small_rows), (large, rows)], sections, doc, store_path)
    loaded = report.load(store_path)
    assert loaded == written and report.render(loaded, sections) == doc.read_text()
    assert [report.row_from_json(DecoderRow, r) for r in next(t for t in loaded.tables if t.section == "transformers-large").rows] == rows
    text = doc.read_text()
    small_part, large_part = text.split(f"## {large.title}\n")
    assert f"## {small.title}\n" in small_part and "| Qwen2 H=256 | float32 | fwd+bwd | 4×128 | 1 |" in small_part and "H=1024" not in small_part
    assert table[-2] in large_part and table[-1] in large_part and "H=256" not in large_part.split("## ")[0]


# ---------------------------------------------------------------- the vllm section, on fake engines


class FakeEngine:
    """Answers a run as tests/vllm_worker.py does, in ``seconds(run)`` and without vLLM; its
    completions and log-prob bits come from the prompts, or change every call when ``unstable``."""

    def __init__(self, name: str, seconds: Any, cached: int | None = None, unstable: bool = False) -> None:
        self.name, self.seconds, self.cached, self.unstable, self.runs = name, seconds, cached, unstable, []

    def run(self, run: dict[str, Any]) -> dict[str, Any]:
        self.runs.append(run)
        outputs = [
            {"prompt": p, "completion": [p[0] % 7] * run["max_tokens"], "prompt_logprobs": [],
             "sampled_logprobs": [len(p) + (len(self.runs) if self.unstable else 0)] * run["max_tokens"],
             "cached_tokens": len(p) if self.cached is None else self.cached}
            for p in run["prompts"]
        ]
        return {"name": run["name"], "seconds": self.seconds(run), "threads": run["threads"], "outputs": outputs}


def test_the_vllm_section_computes_its_rows_from_the_runs_and_they_survive_the_report():
    from tools.bench.sections import vllm as section_vllm

    settings = section_vllm.VllmSettings(prompts=3, lengths=(3, 40), tokens=4, contexts=(32, 64), decode_tokens=5, pairs=3)
    # The plugin: 2 s a batch, 10 ms + 1 ms per 32 context tokens a decode token; stock vLLM: 1 s, 5 ms flat.
    plugin = FakeEngine("plugin", lambda r: 2.0 if r["name"] == "generate" else 0.5 + r["max_tokens"] * (0.010 + 0.001 * len(r["prompts"][0]) / 32))
    stock = FakeEngine("stock", lambda r: 1.0 if r["name"] == "generate" else 0.5 + r["max_tokens"] * 0.005)
    generate = section_vllm.generate_row(plugin, stock, settings, 2)
    assert [r["name"] for r in plugin.runs] == ["generate"] * 4 and all(r["reset_prefix_cache"] and r["prompt_logprobs"] is False for r in plugin.runs)
    assert len(plugin.runs[0]["prompts"]) == 3 and all(3 <= len(p) <= 40 for p in plugin.runs[0]["prompts"])
    assert generate.plugin == 3 * 4 / 2.0 and generate.stock == 3 * 4 / 1.0 and generate.ratio == 0.5 and generate.reps == 3 and generate.same_bits

    decode = section_vllm.decode_rows(plugin, stock, settings, 2)
    assert [r.workload for r in decode] == ["1 prompt at context 32, 5 greedy tokens", "1 prompt at context 64, 5 greedy tokens"]
    assert math.isclose(decode[0].plugin, 11.0) and math.isclose(decode[1].plugin, 12.0) and math.isclose(decode[1].stock, 5.0)
    assert math.isclose(decode[1].growth, 12.0 / 11.0) and math.isclose(decode[1].stock_growth, 1.0) and decode[0].growth == 1.0
    assert math.isclose(decode[1].ratio, 5.0 / 12.0)
    timed = [r for r in plugin.runs if r["name"] in ("one", "many")]
    assert {r["max_tokens"] for r in timed} == {1, 6} and not any(r["reset_prefix_cache"] for r in timed)

    section = section_vllm.VllmSection(full=settings)
    rows = [generate, *decode]
    lines = section.format(rows).table
    assert lines[-3].startswith("| generate | 3 prompts of ") and "| 6.0 tokens/s | 12.0 tokens/s | **0.50** | — | 3 | yes |" in lines[-3]
    assert lines[-1] == "| decode | 1 prompt at context 64, 5 greedy tokens | bfloat16 | 2 | 12.00 ms/token | 5.00 ms/token | **0.42** | 1.09 (1.00) | 3 | yes |"
    store = report.record(report.Store(), {"Date (UTC)": "2026-01-01 00:00"}, [(section, rows)])
    assert [report.row_from_json(section_vllm.VllmRow, r) for r in store.tables[0].rows] == rows
    text = report.render(store, [section])
    assert f"## {section.title}\n\n" + "\n".join(lines) in text


def test_the_vllm_section_refuses_decode_rows_without_the_prefix_cache_and_reports_unstable_bits():
    from tools.bench.sections import vllm as section_vllm

    settings = section_vllm.VllmSettings(prompts=2, lengths=(3, 9), tokens=2, contexts=(128,), decode_tokens=2, pairs=2)
    flat = lambda r: 1.0
    with pytest.raises(SystemExit, match="the stock engine read 0 of 128 prompt tokens from the prefix cache"):
        section_vllm.decode_rows(FakeEngine("plugin", flat), FakeEngine("stock", flat, cached=0), settings, 1)
    row = section_vllm.generate_row(FakeEngine("plugin", flat, unstable=True), FakeEngine("stock", flat), settings, 1)
    assert not row.same_bits and "| **no** |" in section_vllm.VllmSection().format([row]).table[-1]


def test_the_vllm_section_is_in_the_default_set_and_selectable_by_name():
    assert "vllm" in runner.DEFAULT and [s.name for s in runner.selected(["vllm"], all_sections())] == ["vllm"]
    assert "In `make bench`'s default set" in next(s for s in all_sections() if s.name == "vllm").format([]).notes
