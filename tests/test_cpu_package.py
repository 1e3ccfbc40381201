"""The generated CPU package builds with torch.utils.cpp_extension (ninja) and keeps det_gemm's contract."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")

from bitwise import same_bits
from package_build import import_built

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)




@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_det_gemm_matches_matmul_within_reduction_tolerance(rlkernels, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 130, generator=g).to(dtype)
    b = torch.randn(130, 45, generator=g).to(dtype)
    c = rlkernels.det_gemm(a, b)
    assert c.dtype == dtype and c.shape == (37, 45)
    atol, rtol = rlkernels.TOLERANCES["reduction"][str(dtype).removeprefix("torch.")]  # the spec's one table
    torch.testing.assert_close(c.float(), torch.matmul(a.float(), b.float()), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_det_gemm_is_bitwise_deterministic(rlkernels, dtype):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 257, generator=g).to(dtype), torch.randn(257, 96, generator=g).to(dtype)
    first = rlkernels.det_gemm(a, b)
    assert same_bits(rlkernels.det_gemm(a, b), first)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_row_of_one_row_batch_equals_row_of_64_row_batch(rlkernels, dtype):
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 300, generator=g).to(dtype), torch.randn(300, 70, generator=g).to(dtype)
    full = rlkernels.det_gemm(a, b)
    for i in (0, 17, 63):
        assert same_bits(rlkernels.det_gemm(a[i : i + 1], b)[0], full[i]), f"row {i}"


def test_rounds_once_at_the_store(rlkernels):
    """bf16 output equals the fp32 product rounded once to bf16 (round to nearest even)."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(16, 64, generator=g).to(torch.bfloat16), torch.randn(64, 16, generator=g).to(torch.bfloat16)
    assert same_bits(rlkernels.det_gemm(a, b), rlkernels.det_gemm(a.float(), b.float()).to(torch.bfloat16))


def test_generated_package_tests_pass(rlkernels, tmp_path):
    """The generated contract tests pass in the built package; then, and only then, what they
    exercised is recorded as `executed` evidence in the repository's evidence/cpu/executed.json."""
    import json
    import os

    from generator import record
    from generator.pipeline import Layout, load_checked
    from generator.source_hash import package_files
    from package_build import CACHE, REPO

    root = CACHE / "inplace-cpu"
    results_file = tmp_path / "evidence-results.json"
    env = {**os.environ, "RLK_EVIDENCE_OUT": str(results_file)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
    assert results_file.is_file(), "the generated tests wrote no $RLK_EVIDENCE_OUT file"
    results = json.loads(results_file.read_text())
    catalog = load_checked(Layout(REPO))
    records, skipped = record.executed_records(results, catalog, package_files(root, "cpu"), record.commit_of(REPO), str(results_file))
    assert records, f"nothing to record: {skipped}"
    outcome = record.record(REPO, records)
    print(f"{len(records)} executed records, {len(outcome.changed)} new or changed; {outcome.note}")


@pytest.mark.parametrize("K", [64, 896, 4096])
def test_ktree_half_k_results_combine_to_the_full_result(rlkernels, K):
    """Tensor parallelism over K: two half-K products and one bf16 add give the full product's bits."""
    g = torch.Generator().manual_seed(4)
    a = torch.randn(5, K, generator=g).to(torch.bfloat16)
    b = torch.randn(K, 7, generator=g).to(torch.bfloat16)
    half = K // 2
    full = rlkernels.det_gemm_ktree(a, b)
    left = rlkernels.det_gemm_ktree(a[:, :half].contiguous(), b[:half].contiguous())
    right = rlkernels.det_gemm_ktree(a[:, half:].contiguous(), b[half:].contiguous())
    assert same_bits(left + right, full)


@pytest.mark.parametrize("op", ["det_gemm_nt", "det_gemm_tn"])
def test_fp32_output_is_the_accumulator_before_its_one_rounding(rlkernels, op):
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(48, 40, generator=g).to(torch.bfloat16), torch.randn(48, 40, generator=g).to(torch.bfloat16)
    fn = getattr(rlkernels, op)
    wide = fn(a, b, out_fp32=True)
    assert wide.dtype == torch.float32
    assert same_bits(fn(a, b), wide.to(torch.bfloat16))


def test_det_linear_is_differentiable_with_the_catalog_kernels(rlkernels):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(6, 32, generator=g, requires_grad=True)
    w = torch.randn(24, 32, generator=g, requires_grad=True)
    y = rlkernels.det_linear(x, w)
    y.backward(torch.ones_like(y))
    # The gradients are det_gemm / det_gemm_tn results, bit for bit.
    assert same_bits(x.grad, rlkernels.det_gemm(torch.ones(6, 24), w.detach()))
    assert same_bits(w.grad, rlkernels.det_gemm_tn(torch.ones(6, 24), x.detach()))


def test_fp32_output_is_differentiable_back_to_the_input_dtype(rlkernels):
    g = torch.Generator().manual_seed(7)
    a = torch.randn(8, 16, generator=g).to(torch.bfloat16).requires_grad_()
    b = torch.randn(16, 4, generator=g).to(torch.bfloat16).requires_grad_()
    rlkernels.det_gemm(a, b, out_fp32=True).sum().backward()
    assert a.grad.dtype == b.grad.dtype == torch.bfloat16
    ones = torch.ones(8, 4, dtype=torch.bfloat16)
    assert same_bits(a.grad, rlkernels.det_gemm_nt(ones, b.detach()))
    assert same_bits(b.grad, rlkernels.det_gemm_tn(a.detach(), ones))


def test_leading_dimensions_may_be_empty(rlkernels):
    assert rlkernels.silu(torch.randn(2, 3, 0)).shape == (2, 3, 0)
    assert rlkernels.silu(torch.randn(0, 3, 5)).shape == (0, 3, 5)


# Sizes that give each op several threads' worth of work, in its generated tests' terms.
THREADED_CASES = {
    "silu": {"R": 64, "C": 16384},
    "swiglu": {"R": 64, "C": 16384},
    "silu_backward": {"R": 64, "C": 16384},
    "swiglu_backward": {"R": 64, "C": 16384},
    "logp": {"N": 96, "V": 4099},
    "logp_backward": {"N": 96, "V": 4099},
    "rms_norm": {"T": 513, "H": 2048},
    "rms_norm_backward": {"T": 513, "H": 2048},
    "ratio_kl": {"B": 64, "T": 16384},
    "ratio_kl_backward": {"B": 64, "T": 16384},
    "embedding": {"V": 64, "H": 4096, "N": 512},
    "embedding_backward": {"V": 64, "H": 4096, "N": 512},
}


@pytest.mark.parametrize("op", sorted(THREADED_CASES))
def test_host_threads_and_instruction_sets_change_no_bit(rlkernels, op, monkeypatch):
    """Host kernels split rows or elements among the threads of torch's pool, and run a copy of
    their code compiled for AVX2+FMA or AVX-512 where the CPU has them: one thread on the baseline
    copy and every thread on each wider copy give the same bits."""
    from package_build import CACHE, contract_cases

    tests = contract_cases(CACHE / "inplace-cpu")[op]
    dims = {**tests.shapes[0], **THREADED_CASES[op]}
    runs = (("1", "generic"), ("4", "avx2"), ("4", "native"))
    for dtype in tests.dtypes:
        inputs = tests.make_inputs(dims, dtype, "cpu", seed=5)
        results = {}
        for threads, simd in runs:
            monkeypatch.setenv("RLK_NUM_THREADS", threads)
            monkeypatch.setenv("RLK_CPU_SIMD", simd)
            results[threads, simd] = tests.run(*inputs)
        baseline = results[runs[0]]
        for run in runs[1:]:
            for one, other in zip(baseline, results[run]):
                assert one.dtype == other.dtype and one.shape == other.shape, f"{op} {dtype}"
                bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[one.element_size()]
                assert torch.equal(one.view(bits), other.view(bits)), f"{op} {dtype}: the bits differ ({run} vs {runs[0]})"


def test_logp_ids_outside_the_vocabulary_give_nan_rows_only(rlkernels):
    """The spec's rule for ids outside [0, V) other than ignore_index: that row's lp is NaN (its
    lse the row's logsumexp), its gradient a NaN row; ignored rows give 0; no other row changes,
    and nothing raises (checking the ids would read them back from the device)."""
    g = torch.Generator().manual_seed(8)
    V = 37
    logits = torch.randn(6, V, generator=g)
    ids = torch.tensor([3, -1, V, -100, 2**40, 0])
    valid = torch.tensor([True, False, False, False, False, True])
    leaf = logits.clone().requires_grad_()
    lp, lse = rlkernels.logp(leaf, ids)
    assert torch.isnan(lp[1:3]).all() and torch.isnan(lp[4]) and lp[3] == 0
    torch.testing.assert_close(lse[valid], torch.logsumexp(logits, -1)[valid])
    assert torch.isfinite(lse[[1, 2, 4]]).all() and lse[3] == 0
    alone, _ = rlkernels.logp(logits[valid], ids[valid])
    assert same_bits(lp[valid], alone)
    lp.backward(torch.ones(6))
    assert torch.isnan(leaf.grad[[1, 2, 4]]).all() and same_bits(leaf.grad[3], torch.zeros(V))
    assert torch.isfinite(leaf.grad[valid]).all()
    for doc in (rlkernels.logp.__doc__, rlkernels.OPS["logp"].summary, rlkernels.OPS["logp_backward"].summary):
        assert "outside [0, V)" in doc and "NaN" in doc


def test_logp_finds_the_maximum_in_every_position_of_a_row(rlkernels):
    """logp's row maximum runs in interleaved pieces on the host: a maximum in any position --
    each piece's, and the tail past the last whole group -- still shifts the row (a large logit
    missed would overflow exp to an infinite lse), a NaN there still makes the row NaN, and a
    zero maximum gives the same bits whichever signs its zeros have."""
    V = 16 * 3 + 5
    canonical_nan = 0x7FC00000
    ids = (torch.arange(V) + 1) % V
    base = torch.randn(V, V, generator=torch.Generator().manual_seed(10))
    for special in (200.0, float("nan"), float("inf")):
        logits = base.clone()
        logits[torch.arange(V), torch.arange(V)] = special  # row p holds it at position p
        lp, lse = rlkernels.logp(logits, ids)
        if math.isnan(special):
            assert (lse.view(torch.int32) == canonical_nan).all() and (lp.view(torch.int32) == canonical_nan).all()
        elif special == float("inf"):
            assert torch.isposinf(lse).all() and torch.isneginf(lp).all()
        else:
            want = torch.log_softmax(logits.double(), -1)
            torch.testing.assert_close(lse.double(), torch.logsumexp(logits.double(), -1))
            torch.testing.assert_close(lp.double(), want.gather(-1, ids[:, None])[:, 0])
    signs = torch.randint(0, 2, (4, V), generator=torch.Generator().manual_seed(11)).bool()
    zeros = torch.where(signs, torch.tensor(-0.0), torch.tensor(0.0))
    zeros[0], zeros[1] = 0.0, -0.0
    lp, lse = rlkernels.logp(zeros, torch.zeros(4, dtype=torch.int64))
    assert (lse.view(torch.int32) == lse[0].view(torch.int32)).all() and (lp.view(torch.int32) == lp[0].view(torch.int32)).all()
    torch.testing.assert_close(lse[0].double(), torch.tensor(V, dtype=torch.float64).log())


def test_embedding_rows_are_copies_and_ids_outside_the_table_give_nan_rows(rlkernels):
    """The spec's rule for ids outside [0, V): that row of y is the canonical NaN of the dtype and
    sends no gradient; every other row is the table's row bit for bit, whatever it holds (a NaN
    payload, -0.0); nothing raises."""
    g = torch.Generator().manual_seed(9)
    V, H = 5, 7
    weight = torch.randn(V, H, generator=g).to(torch.bfloat16)
    weight[2, 0] = -0.0
    weight.view(torch.int16)[2, 1] = 0x7F81  # a NaN with a payload
    ids = torch.tensor([2, -1, V, 0, 2**40, 2])
    valid = torch.tensor([True, False, False, True, False, True])
    y = rlkernels.embedding(weight, ids)
    assert torch.equal(y[valid].view(torch.int16), weight[ids[valid]].view(torch.int16))
    assert (y[~valid].view(torch.int16) == 0x7FC0).all()
    leaf = weight.float().requires_grad_()
    rlkernels.embedding(leaf, ids).backward(torch.ones(len(ids), H))
    assert same_bits(leaf.grad, torch.zeros(V, H).index_add(0, ids[valid], torch.ones(3, H)))
    for doc in (rlkernels.embedding.__doc__, rlkernels.OPS["embedding"].summary):
        assert "outside [0, V)" in doc and "NaN" in doc


def test_embedding_backward_adds_positions_in_ascending_order(rlkernels):
    """grad_weight equals, bit for bit, float32 sums taken position by position in ascending order
    and rounded once; rows no position selects are +0 (all bits zero)."""
    g = torch.Generator().manual_seed(10)
    N, H, V = 300, 33, 9
    grad_y = torch.randn(N, H, generator=g) * torch.logspace(-4, 4, N).unsqueeze(1)  # magnitudes that make the order show
    ids = torch.randint(0, V - 2, (N,), generator=g)  # rows V-2 and V-1 get nothing
    ids[::7] = -3
    want = _ascending(grad_y, ids, V)
    for dtype in (torch.float32, torch.bfloat16):
        got = rlkernels.embedding_backward(grad_y.to(dtype), ids, torch.empty(V, H, dtype=dtype), out_fp32=True)
        exact = want if dtype == torch.float32 else _ascending(grad_y.to(dtype).float(), ids, V)
        assert torch.equal(got.view(torch.int32), exact.view(torch.int32)), dtype
        assert same_bits(rlkernels.embedding_backward(grad_y.to(dtype), ids, torch.empty(V, H, dtype=dtype)), exact.to(dtype))
        assert (got[V - 2 :].view(torch.int32) == 0).all()
    assert not same_bits(_ascending(grad_y, ids, V, reverse=True), want), "the inputs must tell the orders apart"


def _ascending(grad_y, ids, V, reverse=False):
    """float32 sums of grad_y's rows into the rows their ids select, one position at a time."""
    out = torch.zeros(V, grad_y.shape[1])
    for r in reversed(range(len(ids))) if reverse else range(len(ids)):
        if 0 <= int(ids[r]) < V:
            out[int(ids[r])] += grad_y[r]
    return out


def test_pack_with_no_sequences_writes_cu_seqlens(rlkernels):
    """cu_seqlens of zero sequences is [0], even when new memory starts as garbage."""
    was = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # new int64 memory holds the largest int64
    try:
        packed, cu_seqlens = rlkernels.pack(torch.randn(0, 5, 3), torch.zeros(0, 5, dtype=torch.bool))
    finally:
        torch.use_deterministic_algorithms(was[0])
        torch.utils.deterministic.fill_uninitialized_memory = was[1]
    assert packed.shape == (0, 3) and cu_seqlens.tolist() == [0]


def test_a_list_given_with_leading_dimensions_is_an_input_error(rlkernels):
    """Type checks run before the public function flattens leading dimensions or reads requires_grad."""
    logits = torch.randn(2, 3, 5, requires_grad=True)
    with pytest.raises(rlkernels.InputTypeError, match=r"^logp: argument 'ids' must be a torch.Tensor, got list$"):
        rlkernels.logp(logits, [[0, 1, 2], [0, 1, 2]])
    assert issubclass(rlkernels.InputTypeError, rlkernels.InputError) and issubclass(rlkernels.InputTypeError, TypeError)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("causal", "window"), [(True, -1), (False, -1), (True, 37)])
def test_attention_backward_fused_pass_gives_the_bits_of_the_two_passes(rlkernels, dtype, causal, window, monkeypatch):
    """The host attention backward computes each p and ds once, for dq, dk and dv together, when it
    has a sequence and key head for every thread, and in a pass for dq and another for dk and dv
    otherwise.  One sequence with one key head takes the fused pass on one thread and the two
    passes on two: the bits must be the same (the sums are the same, in the same order)."""
    generator = torch.Generator().manual_seed(11)
    TQ, TK, HQ, HK, D = 150, 170, 2, 1, 32  # key blocks of 64: 170 keys end in a partial block

    def rand(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    q, k, v = rand(TQ, HQ, D), rand(TK, HK, D), rand(TK, HK, D)
    grad_o, o = rand(TQ, HQ, D), rand(TQ, HQ, D)
    lse = torch.rand(TQ, HQ, generator=generator) + 3.0
    cu_q = torch.tensor([0, TQ], dtype=torch.int32)
    cu_k = torch.tensor([0, TK], dtype=torch.int32)
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        results = []
        for threads in ("1", "2"):
            monkeypatch.setenv("RLK_NUM_THREADS", threads)
            results.append(rlkernels.attention_backward(grad_o, q, k, v, o, lse, cu_q, cu_k, causal=causal, window=window))
    finally:
        torch.set_num_threads(previous)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    for name, fused, separate in zip(("grad_q", "grad_k", "grad_v"), *results):
        assert torch.equal(fused.view(bits), separate.view(bits)), f"{name}: the bits differ"


# (what is wrong, block table, seq_lens, query_start_loc, window, rows of the 10 queries that are NaN)
PAGED_INVALID = [
    ("nothing", [[0, 1, 2], [3, 4, 5]], [40, 20], [0, 4, 10], -1, []),
    ("a block id of -1 every query of sequence 0 sees", [[0, -1, 2], [3, 4, 5]], [40, 20], [0, 4, 10], -1, [0, 1, 2, 3]),
    ("block ids 2^31 - 1 and -2^31, the latter past sequence 1's keys", [[0, 1, 2**31 - 1], [3, 4, -(2**31)]], [40, 20], [0, 4, 10], -1, [0, 1, 2, 3]),
    ("a block id past NB that a window keeps out of sight", [[0, 12, 2], [3, 4, 5]], [40, 20], [0, 4, 10], 3, []),
    ("fewer keys than queries", [[0, 1, 2], [3, 4, 5]], [3, 20], [0, 4, 10], -1, [0, 1, 2, 3]),
    ("more keys than the table's row holds", [[0, 1, 2], [3, 4, 5]], [49, 20], [0, 4, 10], -1, [0, 1, 2, 3]),
    ("a negative number of keys", [[0, 1, 2], [3, 4, 5]], [40, -5], [0, 4, 10], -1, [4, 5, 6, 7, 8, 9]),
    ("offsets out of order", [[0, 1, 2], [3, 4, 5]], [40, 20], [0, 6, 4], -1, list(range(10))),
    ("offsets past the queries", [[0, 1, 2], [3, 4, 5]], [40, 20], [0, 4, 12], -1, [4, 5, 6, 7, 8, 9]),
    ("rows before the first sequence and after the last", [[0, 1, 2], [3, 4, 5]], [40, 20], [2, 4, 8], -1, [0, 1, 8, 9]),
]


@pytest.mark.parametrize(("what", "table", "seq_lens", "starts", "window", "nan_rows"), PAGED_INVALID, ids=[case[0] for case in PAGED_INVALID])
@pytest.mark.parametrize("simd", ["generic", "native"])
def test_paged_attention_invalid_input_gives_nan_rows_only(rlkernels, monkeypatch, what, table, seq_lens, starts, window, nan_rows, simd):
    """The spec's rules for invalid paged input: exactly the rows it names are NaN (o and lse), every
    other row is the reference's and, for a sequence left valid, the bits it has in a valid step;
    no block id is read through (ids far outside the cache would fault), nothing raises."""
    from rlkernels import _references

    if simd == "native":
        monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
    else:
        monkeypatch.setenv("RLK_CPU_SIMD", simd)
    g = torch.Generator().manual_seed(12)
    q = torch.randn(10, 4, 16, generator=g)
    k_cache, v_cache = torch.randn(12, 16, 2, 16, generator=g), torch.randn(12, 16, 2, 16, generator=g)
    args = [torch.tensor(x, dtype=torch.int32) for x in (table, seq_lens, starts)]
    o, lse = rlkernels.paged_attention(q, k_cache, v_cache, *args, window=window)
    want_o, want_lse = _references.paged_attention(q, k_cache, v_cache, *args, window=window)
    expected = torch.zeros(10, dtype=torch.bool)
    expected[nan_rows] = True
    assert torch.equal(torch.isnan(lse).all(1), expected) and torch.equal(torch.isnan(lse).any(1), expected), what
    assert torch.equal(torch.isnan(o).flatten(1).all(1), expected) and not torch.isnan(o[~expected]).any(), what
    assert (o[expected].view(torch.int32) == 0x7FC00000).all() and (lse[expected].view(torch.int32) == 0x7FC00000).all(), "canonical NaN"
    torch.testing.assert_close(o, want_o, equal_nan=True, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, want_lse, equal_nan=True, atol=1e-4, rtol=1e-4)
    valid_o, valid_lse = rlkernels.paged_attention(q, k_cache, v_cache, *(torch.tensor(x, dtype=torch.int32) for x in PAGED_INVALID[0][1:4]), window=window)
    if starts == PAGED_INVALID[0][3]:  # the same sequences: the rows left valid keep their bits
        assert torch.equal(o[~expected].view(torch.int32), valid_o[~expected].view(torch.int32)), what
        assert torch.equal(lse[~expected].view(torch.int32), valid_lse[~expected].view(torch.int32)), what


# Sequences of a step: (keys, queries) each -- a prefill, a decode, a chunk of a prefill -- at
# the head sizes of models, over key blocks of 64 whole and partial, with query groups of 1 and 4.
PAGED_STEP = [(131, 131), (200, 1), (70, 70), (150, 37), (1, 1), (257, 1)]


@pytest.mark.parametrize("D", [64, 80, 128])
@pytest.mark.parametrize(("HQ", "HK"), [(4, 4), (8, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("simd", ["generic", "avx2", "avx512", "native"])
def test_paged_attention_at_model_head_sizes_gives_the_bits_of_attention(rlkernels, monkeypatch, D, HQ, HK, dtype, simd):
    """The host kernels compute a block's scores and o's sums several (query, head) pairs at a
    time, in vector lanes of each code path's width, with a rest of d where D is not a multiple
    of it, each cache block's keys read through the table a run at a time: each output must still
    be attention's on the same keys packed, bit for bit, causal or within a window, on every code
    path.  (The two host kernels share their block arithmetic, _attention_host.j2; what checks
    that arithmetic against an independent one is the device kernels' comparison with the host's
    in tests/test_device_emulated.py, and tools/compare_builds.py --paged against an earlier
    build.)"""
    if simd == "native":
        monkeypatch.delenv("RLK_CPU_SIMD", raising=False)
    else:
        monkeypatch.setenv("RLK_CPU_SIMD", simd)
    g = torch.Generator().manual_seed(13)
    BS = 16
    blocks = [(keys + BS - 1) // BS for keys, _ in PAGED_STEP]
    NB = sum(blocks) + 3
    order = torch.randperm(NB, generator=g)[: sum(blocks)].to(torch.int32)
    table = torch.full((len(PAGED_STEP), max(blocks)), -1, dtype=torch.int32)
    starts = [0]
    for b, count in enumerate(blocks):
        table[b, :count] = order[sum(blocks[:b]) : sum(blocks[:b]) + count]
        starts.append(starts[-1] + PAGED_STEP[b][1])
    q = torch.randn(starts[-1], HQ, D, generator=g).to(dtype)
    k_cache, v_cache = (torch.randn(NB, BS, HK, D, generator=g).to(dtype) for _ in range(2))
    seq_lens = torch.tensor([keys for keys, _ in PAGED_STEP], dtype=torch.int32)
    # The same keys packed: sequence b's key j is row j % BS of cache block table[b, j // BS].
    rows = torch.cat([table[b, torch.arange(keys) // BS].long() * BS + torch.arange(keys) % BS for b, (keys, _) in enumerate(PAGED_STEP)])
    k, v = k_cache.flatten(0, 1)[rows], v_cache.flatten(0, 1)[rows]
    cu_q = torch.tensor(starts, dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.cumsum(seq_lens, 0).tolist()], dtype=torch.int32)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    for causal, window in ((True, -1), (False, -1), (True, 45)):
        o, lse = rlkernels.paged_attention(q, k_cache, v_cache, table, seq_lens, cu_q, causal=causal, window=window)
        want_o, want_lse = rlkernels.attention(q, k, v, cu_q, cu_k, causal=causal, window=window)
        assert not torch.isnan(lse).any(), "every row is valid"
        assert torch.equal(o.view(bits), want_o.view(bits)), f"o differs (causal={causal}, window={window})"
        assert torch.equal(lse.view(torch.int32), want_lse.view(torch.int32)), f"lse differs (causal={causal}, window={window})"


def _thread_cpu_ticks() -> dict[int, int]:
    """User plus system CPU time of each thread of this process, in clock ticks (Linux /proc)."""
    ticks = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="per-thread CPU times are read from Linux's /proc")
def test_host_kernels_run_on_more_than_one_thread(rlkernels, monkeypatch):
    """A large host kernel asked for two threads spends CPU time on two threads of the process
    (torch's intra-op pool): a build whose parallel loop ran on the calling thread alone (as
    one compiled without OpenMP does) fails here, while every result would still be right."""
    monkeypatch.delenv("RLK_NUM_THREADS", raising=False)
    x = torch.randn(4096, 4096, generator=torch.Generator().manual_seed(3))
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rlkernels.silu(x)  # starts the pool's threads
        before = _thread_cpu_ticks()
        for _ in range(8):  # about a second of work, in pieces handed out one at a time
            rlkernels.silu(x)
        after = _thread_cpu_ticks()
    finally:
        torch.set_num_threads(previous)
    spent = {tid: after[tid] - before.get(tid, 0) for tid in after}
    total = sum(spent.values())
    busy = [tid for tid, t in spent.items() if t >= max(2, total // 10)]
    assert len(busy) >= 2, f"one thread did the work: CPU ticks per thread {sorted(spent.values(), reverse=True)[:4]} of {total}"
