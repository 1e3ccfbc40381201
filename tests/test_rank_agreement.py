"""The rules by which tensor-parallel ranks agree (runtime/rlkernels/_rank_agreement.py), in one process.

The multi-process refusals are in test_distributed.py; here the module is loaded from its source
(no package build): the verdict on any sizes and sources the ranks may hold, the checksum's
properties, and when a layer is checked (a process group of one rank, gloo).
"""

from __future__ import annotations

import gc
import importlib.util
import re
import sys
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO

torch = pytest.importorskip("torch", reason="the rank agreement needs torch")
dist = pytest.importorskip("torch.distributed", reason="the rank agreement needs torch.distributed")


def _load() -> ModuleType:
    path = REPO / "runtime" / "rlkernels" / "_rank_agreement.py"
    spec = importlib.util.spec_from_file_location("rank_agreement_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ra = _load()
ROWS = ra.Same("weight", "the rows of each rank's part (V / world)", 0, 32)
WORLDS = st.sampled_from([1, 2, 4, 8])


def _culprits(problem: str) -> set[int]:
    """The ranks a size problem blames: the numbers in its last parenthesis, less 'from rank 0'."""
    tail = problem.rsplit(" (", 1)[1].replace("from rank 0", "")
    return {int(n) for n in re.findall(r"\d+", tail)}


@st.composite
def part_sizes(draw: st.DrawFn) -> list[int]:
    """The sizes of the ranks' parts: mostly equal whole leaves with one rank off, or anything."""
    world = draw(WORLDS)
    equal = [32 * draw(st.integers(0, 8))] * world
    kind = draw(st.sampled_from(["equal", "one off", "any"]))
    if kind == "one off":
        equal[draw(st.integers(0, world - 1))] = draw(st.integers(0, 300))
    elif kind == "any":
        equal = draw(st.lists(st.integers(0, 300), min_size=world, max_size=world))
    return equal


@settings(max_examples=300, deadline=None)
@given(part_sizes())
def test_part_sizes_are_refused_exactly_when_unequal_or_not_whole_leaves(sizes):
    problem = ra.size_problem(ROWS, sizes)
    whole = all(size > 0 and size % 32 == 0 for size in sizes)
    assert (problem is None) == (whole and len(set(sizes)) == 1), (sizes, problem)
    if problem is None:
        return
    assert problem.startswith("weight: expected the rows of each rank's part (V / world) to be the same on every rank and a positive multiple of 32")
    assert ", got " + ", ".join(f"{size} on rank {rank}" for rank, size in enumerate(sizes)) + " (" in problem
    unequal = {rank for rank, size in enumerate(sizes) if size != sizes[0]}
    partial = {rank for rank, size in enumerate(sizes) if size <= 0 or size % 32}
    assert _culprits(problem) == unequal | partial, problem


def test_a_size_problem_reads_as_expected_against_got():
    assert ra.size_problem(ROWS, [512, 384]) == (
        "weight: expected the rows of each rank's part (V / world) to be the same on every rank and a positive multiple of 32 "
        "(whole leaves of the tree), got 512 on rank 0, 384 on rank 1 (rank 1 differs from rank 0)"
    )
    reduce = ra.Same("reduce", "the combine", 0, names=("tree", "all_reduce"))
    assert ra.size_problem(reduce, [0, 1, 0, 0]) == (
        "reduce: expected the combine to be the same on every rank, got 'tree' on rank 0, 'all_reduce' on rank 1, 'tree' on rank 2, "
        "'tree' on rank 3 (rank 1 differs from rank 0)"
    )


SOURCE = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([0, 1]), st.integers(0, 8), st.sampled_from([1, 2, 4, 8]), st.sampled_from([(1, 2), (3, 4)])),
)


@settings(max_examples=300, deadline=None)
@given(WORLDS.flatmap(lambda world: st.lists(SOURCE, min_size=world, max_size=world)), st.booleans())
def test_parts_are_refused_unless_every_rank_holds_its_own_part_of_one_full_weight(sources, fix_places):
    world = len(sources)
    if fix_places:  # make the common case, every rank at its place, frequent
        sources = [None if s is None else (0, rank, world, s[3]) for rank, s in enumerate(sources)]
    part = ra.Part("weight", torch.empty(0), 0)
    problem = ra.part_problem(part, sources)
    if all(s is None for s in sources):
        assert problem is None  # nothing to compare: sizes only
        return
    fine = all(s is not None and s[:3] == (0, rank, world) for rank, s in enumerate(sources)) and len({s[3] for s in sources if s}) == 1
    assert (problem is None) == fine, (sources, problem)
    if problem is not None:
        assert problem.startswith("weight: expected "), problem
        if any(s is None for s in sources):
            assert "cut by shard or load_full on" in problem and "parts of their own on" in problem


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=300), st.data())
def test_the_checksum_changes_with_any_one_byte_and_any_swap(data, draw):
    raw = torch.tensor(list(data), dtype=torch.uint8)
    before = ra.digest(raw).tolist()
    assert ra.digest(raw.clone()).tolist() == before
    i = draw.draw(st.integers(0, len(data) - 1))
    changed = raw.clone()
    changed[i] = draw.draw(st.integers(0, 255).filter(lambda v: v != data[i]))
    assert ra.digest(changed).tolist()[0] != before[0]
    j = draw.draw(st.integers(0, len(data) - 1))
    if data[i] != data[j]:
        swapped = raw.clone()
        swapped[i], swapped[j] = raw[j], raw[i]
        assert ra.digest(swapped).tolist()[1] != before[1]


def _checksum_by_definition(tensor) -> list[int]:
    """digest's two sums straight from their definition, in Python integers."""
    data = tensor.contiguous().reshape(-1).view(torch.uint8).tolist()
    return [sum(b + 1 for b in data) % ra.PRIME, sum((b + 1) * (i % ra.PERIOD + 1) for i, b in enumerate(data)) % ra.PRIME]


@pytest.mark.parametrize("rows", [1, 2, 64])
def test_the_checksum_is_its_definition_in_any_number_of_steps(monkeypatch, rows):
    """Bytes over several rows of PERIOD and a ragged tail, read in steps of 1, 2 and 64 rows."""
    monkeypatch.setattr(ra, "ROWS", rows)
    t = torch.randn(3 * ra.PERIOD // 2 + 5, generator=torch.Generator().manual_seed(0))  # float32: 6 PERIOD + 20 bytes
    assert ra.digest(t).tolist() == _checksum_by_definition(t)
    assert ra.digest(torch.full((ra.PERIOD,), 255, dtype=torch.uint8)).tolist() == _checksum_by_definition(torch.full((ra.PERIOD,), 255, dtype=torch.uint8))


def test_the_checksum_reads_bits_in_row_major_order():
    t = torch.randn(37, 29, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert ra.digest(t.t()).tolist() == ra.digest(t.t().contiguous()).tolist() == _checksum_by_definition(t.t())
    assert ra.digest(torch.tensor([0.0])).tolist() != ra.digest(torch.tensor([-0.0])).tolist()  # bits, not values
    assert ra.digest(torch.zeros(3, dtype=torch.bool)).tolist() != ra.digest(torch.zeros(4, dtype=torch.bool)).tolist()
    assert ra.digest(torch.arange(5)).tolist() != ra.digest(torch.arange(5).flip(0)).tolist()
    assert ra.digest(torch.empty(0)).tolist() == [0, 0]


@pytest.fixture
def world_of_one(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    if dist.is_initialized():
        pytest.skip("this process already has a process group; the test needs its own")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _counting(monkeypatch) -> list[int]:
    gathers: list[int] = []
    real = ra._gather

    def gather(vector, group):
        gathers.append(1)
        return real(vector, group)

    monkeypatch.setattr(ra, "_gather", gather)
    return gathers


def _terms(weight, leaf: int = 32):
    return lambda: ra.Terms((ra.Same("weight", "the rows of each rank's part", weight.shape[0], leaf),), part=ra.Part("weight", weight, 0))


def test_a_layer_is_checked_on_its_first_call_or_on_every_call(world_of_one, monkeypatch):
    gathers = _counting(monkeypatch)
    weight, other = torch.zeros(64, 4), torch.zeros(64, 4)
    cpu = torch.device("cpu")
    for _ in range(3):
        ra.agree("column_parallel_linear", None, "first", weight, cpu, _terms(weight))
    assert len(gathers) == 1
    ra.agree("column_parallel_linear", None, "first", other, cpu, _terms(other))
    assert len(gathers) == 2, "another layer (another weight) is checked on its own first call"
    ra.agree("column_parallel_linear", None, "layout", weight, cpu, _terms(weight))
    assert len(gathers) == 3, "another check mode checks again"
    for _ in range(2):
        ra.agree("column_parallel_linear", None, "every", weight, cpu, _terms(weight))
    assert len(gathers) == 5
    ra.forget_checks(weight)
    ra.agree("column_parallel_linear", None, "first", weight, cpu, _terms(weight))
    assert len(gathers) == 6, "a weight whose values were replaced is checked again"


def test_a_refused_layer_is_checked_again_and_a_bad_mode_is_refused(world_of_one, monkeypatch):
    gathers = _counting(monkeypatch)
    weight = torch.zeros(48, 4)
    cpu = torch.device("cpu")
    for attempt in (1, 2):
        with pytest.raises(ra.LayoutError, match=r"^weight: expected the rows of each rank's part to be the same on every rank and a positive multiple of 32"):
            ra.agree("column_parallel_linear", None, "first", weight, cpu, _terms(weight))
        assert len(gathers) == attempt
    with pytest.raises(ValueError, match=r"^check: expected one of 'first', 'every', 'layout', got 'always'$"):
        ra.agree("column_parallel_linear", None, "always", weight, cpu, _terms(weight))


def test_a_source_is_forgotten_with_its_tensor():
    part = torch.zeros(4)
    ra.record_source(part, ra.Source(torch.zeros(2, dtype=torch.int64), 0, 0, 1))
    assert ra.source_of(part) is not None and ra.source_of(part.clone()) is None
    key = id(part)
    del part
    gc.collect()
    assert key not in ra._sources
