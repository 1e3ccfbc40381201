"""The generated contract tests catch broken kernels.

Each test here builds a mutant of the CPU package -- one kernel source changed so that it
breaks one guarantee the way a real port could (tests/mutant_build.py: one workspace, a
translation unit or two recompiled per mutant) -- and runs that op's generated tests inside it.
They must fail in the tests of the broken guarantee and in no others (accuracy keeps passing:
each mutant stays within the op's tolerance), and the same tests pass on the real package
(test_the_real_kernels_pass).

The mutants break a guarantee only at the sizes the generated tests take from each kernel's
tiles -- batches past two row tiles and of at least 256 rows, reduction extents of several
steps plus a ragged tail -- and not at the small shapes those tests used before: each test
also calls the kernels directly to show that the small sizes alone would not catch it.

A mutant's edits are exact texts of the generated source that must each occur once, so a
template change that moves them fails here instead of testing an unmutated kernel.

The device packages' mutants (a portable kernel one ulp off) are in test_device_emulated.py,
which runs device kernels in the host emulator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the mutants are built against torch (make test installs it)")

from bitwise import same_bits
from mutant_build import Mutant, build_mutant, call_kernels, run_generated_tests
from package_build import build_inplace

pytestmark = pytest.mark.slow

# The generated tests each mutant runs: the guarantees' tests, and accuracy, which must pass.
SELECT = ("test_accuracy", "test_deterministic", "test_batch_invariant")
DTYPES = ("float32", "float16", "bfloat16")


@pytest.fixture(scope="module")
def built() -> Path:
    return build_inplace("cpu")


def assert_caught(mutant: Mutant, source: str, op: str, caught_by: set[str], tmp_path: Path, dtypes: tuple[str, ...] = DTYPES) -> None:
    """``mutant`` reused the copied objects, and the generated tests of ``op`` fail in exactly the
    test functions ``caught_by``, each on every case of ``dtypes``."""
    assert source in mutant.compiled, f"ninja compiled {mutant.compiled}, not {source}"
    outcomes = run_generated_tests(mutant.root, [op], SELECT, tmp_path / "junit.xml")
    assert outcomes.returncode == 1, f"pytest exited {outcomes.returncode}, not 1 (tests failed):\n{outcomes.output}"
    assert outcomes.failing == caught_by, f"failing: {sorted(outcomes.failing)}, expected {sorted(caught_by)}:\n{outcomes.output}"
    for function in caught_by:
        cases = outcomes.of(function)
        for dtype in dtypes:
            ran = [outcome for test, outcome in cases.items() if f"-{dtype}" in test and outcome != "skipped"]
            assert ran and set(ran) == {"failed"}, f"{function} on {dtype}: {cases}"
    assert "passed" in outcomes.of("test_accuracy").values()


def all_same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(same_bits(x, y) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------- det_gemm

GEMM_SUMS_K_BACKWARDS_ABOVE_200_ROWS = [
    (
        "inline void tile(const float* a_strip, const TB* b_panel, int64_t b_stride, int64_t steps, float* acc_out, bool from_zero) {",
        (
            "inline void tile(const float* a_strip, const TB* b_panel, int64_t b_stride, int64_t steps, float* acc_out, bool from_zero,"
            " bool descending = false) {"
        ),
    ),
    (
        """\
  for (int64_t k = 0; k < steps; ++k) {
    if constexpr (kInPlace) {""",
        """\
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t k = descending ? steps - 1 - step : step;  // MUTANT
    if constexpr (kInPlace) {""",
    ),
    (
        "  tile<TilePath, false>(a_strip, p.b + ((panel - p.b_panel0) * p.K + k0) * Cols, Cols, steps, acc, from_zero);",
        "  tile<TilePath, false>(a_strip, p.b + ((panel - p.b_panel0) * p.K + k0) * Cols, Cols, steps, acc, from_zero, /* MUTANT */ p.M > 200);",
    ),
]


def test_gemm_that_sums_k_backwards_for_large_batches_is_caught(built, tmp_path):
    """Mutant: det_gemm's simt CPU kernel adds each block of k descending instead of ascending when M > 200,
    as a GEMM that picks another kernel configuration for big batches would: still deterministic
    and accurate, but a row's bits now depend on the size of its batch.

    Caught by test_batch_invariant (batches of 1 to 65 rows, and chunks, against one of 256) on
    float32 and float16; not by test_accuracy or test_deterministic.  On bfloat16 that test passes:
    products of bf16 values are exact, and rounding each sum to bf16's 8 bits hides the changed
    order of the float32 adds on these inputs.  Not catchable at 71 rows or fewer, the most the
    generated tests ran before: there the mutant gives the real kernel's bits (checked below)."""
    mutant = build_mutant("det_gemm_simt.cpp", GEMM_SUMS_K_BACKWARDS_ABOVE_200_ROWS)
    assert_caught(mutant, "det_gemm_simt.cpp", "det_gemm", {"test_batch_invariant"}, tmp_path, dtypes=("float32", "float16"))

    g = torch.Generator().manual_seed(0)
    sizes = (1, 5, 25, 64, 71, 256)
    calls = [("det_gemm", "simt", (torch.randn(m, 96, generator=g), torch.randn(96, 72, generator=g))) for m in sizes]
    real, mutated = call_kernels(built, calls, tmp_path / "real"), call_kernels(mutant.root, calls, tmp_path / "mutated")
    assert [all_same_bits(r, m) for r, m in zip(real, mutated, strict=True)] == [m <= 71 for m in sizes]


# ---------------------------------------------------------------------------- logp

LOGP_FLIPS_A_BIT_EVERY_OTHER_LARGE_CALL = [
    ('#include "logp_rows.h"\n', '#include "logp_rows.h"\n\n#include <atomic>\n#include <cstdint>\n#include <cstring>\n'),
    (
        """\
void logp_rows(const void* arg_logits, const void* arg_ids, void* out_lp, void* out_lse, Dtype dtype_T, int64_t dim_N, int64_t dim_V, int64_t attr_ignore_index, float attr_temperature, int64_t num_threads) {
  const DefaultFloatingPointMode ieee_default_mode;  // for this call, whatever mode the calling thread set
  if (dim_N == 0) return;  // every output is empty: nothing to write
  switch (dtype_T) {""",
        """\
static void unmutated(const void* arg_logits, const void* arg_ids, void* out_lp, void* out_lse, Dtype dtype_T, int64_t dim_N, int64_t dim_V, int64_t attr_ignore_index, float attr_temperature, int64_t num_threads);

// MUTANT: with its rows shared among threads, every other call flips the last bit of lp[0].
void logp_rows(const void* arg_logits, const void* arg_ids, void* out_lp, void* out_lse, Dtype dtype_T, int64_t dim_N, int64_t dim_V, int64_t attr_ignore_index, float attr_temperature, int64_t num_threads) {
  static std::atomic<unsigned> calls{0};
  unmutated(arg_logits, arg_ids, out_lp, out_lse, dtype_T, dim_N, dim_V, attr_ignore_index, attr_temperature, num_threads);
  if (dim_N * dim_V >= (int64_t{1} << 17) && calls.fetch_add(1) % 2 == 1) {
    uint32_t bits;
    std::memcpy(&bits, out_lp, sizeof bits);
    bits ^= 1u;
    std::memcpy(out_lp, &bits, sizeof bits);
  }
}

static void unmutated(const void* arg_logits, const void* arg_ids, void* out_lp, void* out_lse, Dtype dtype_T, int64_t dim_N, int64_t dim_V, int64_t attr_ignore_index, float attr_temperature, int64_t num_threads) {
  const DefaultFloatingPointMode ieee_default_mode;  // for this call, whatever mode the calling thread set
  if (dim_N == 0) return;  // every output is empty: nothing to write
  switch (dtype_T) {""",
    ),
]


def test_logp_whose_bits_change_between_calls_is_caught(built, tmp_path):
    """Mutant: logp's rows CPU kernel flips the lowest mantissa bit of lp[0] on every other call
    once its rows are many enough to be shared among threads (N*V >= 2^17), as a race between
    threads would.

    Caught by test_deterministic (four runs on 256 rows of V = 3 * 4096 + 2049, which must agree)
    and by test_batch_invariant (whose 256-row calls alternate too), on every dtype; not by
    test_accuracy (one ulp is within tolerance).  Not catchable on the 7 rows of 50 that
    test_deterministic ran before: there repeated calls agree (checked below)."""
    mutant = build_mutant("logp_rows.cpp", LOGP_FLIPS_A_BIT_EVERY_OTHER_LARGE_CALL)
    assert_caught(mutant, "logp_rows.cpp", "logp", {"test_deterministic", "test_batch_invariant"}, tmp_path)

    g = torch.Generator().manual_seed(1)
    small, large = [(torch.randn(n, v, generator=g), torch.randint(0, v, (n,), generator=g)) for n, v in ((7, 50), (256, 1793))]
    runs = call_kernels(mutant.root, [("logp", "rows", args) for args in (small, small, large, large)], tmp_path / "mutated")
    assert all_same_bits(runs[0], runs[1]) and not all_same_bits(runs[2], runs[3])


# ---------------------------------------------------------------------------- softmax

SOFTMAX_SPLITS_LONG_ROWS_OF_SMALL_BATCHES = [
    (
        """\
      const float sum = host_sum_lanes_tree<kLanes>(V, [x, out, shift](int64_t v) {
        const float term = shifted_exp(to_float(x[v]), shift);
        out[v] = term;
        return term;
      });""",
        """\
      const auto term_of = [x, out, shift](int64_t v) {
        const float term = shifted_exp(to_float(x[v]), shift);
        out[v] = term;
        return term;
      };
      // MUTANT: few rows and long ones: sum each half of a row on its own, then add the halves.
      const int64_t half = V / 2;
      const float sum = N < 4 && V > 2 * kLanes
                            ? add_rn(host_sum_lanes_tree<kLanes>(half, term_of),
                                     host_sum_lanes_tree<kLanes>(V - half, [&term_of, half](int64_t v) { return term_of(half + v); }))
                            : host_sum_lanes_tree<kLanes>(V, term_of);""",
    ),
]


def test_softmax_that_splits_long_rows_of_small_batches_is_caught(built, tmp_path):
    """Mutant: softmax's rows CPU kernel (a MoE router's scoring), given fewer than 4 rows longer
    than two lane rounds (V > 512), sums each half of a row's exponentials separately and adds the
    two sums: the split reduction a kernel uses to keep a GPU busy on a small batch.  Each order
    alone is deterministic and accurate.

    Caught by test_batch_invariant (batches of 1 and 2 rows against 256) on every dtype; not by
    test_accuracy or test_deterministic.  Not catchable on a router's widths (V = 8 to 128): there
    one row alone gives its bits in a batch (checked below)."""
    mutant = build_mutant("softmax_rows.cpp", SOFTMAX_SPLITS_LONG_ROWS_OF_SMALL_BATCHES)
    assert_caught(mutant, "softmax_rows.cpp", "softmax", {"test_batch_invariant"}, tmp_path)

    g = torch.Generator().manual_seed(2)
    logits = torch.randn(64, 128, generator=g)
    calls = [("softmax", "rows", (logits[:1],)), ("softmax", "rows", (logits,))]
    alone, batch = call_kernels(mutant.root, calls, tmp_path / "mutated")
    assert same_bits(alone[0], batch[0][:1])


# ---------------------------------------------------------------------------- rms_norm

RMS_NORM_SPLITS_LONG_ROWS_OF_SMALL_BATCHES = [
    (
        """\
      const float ss = host_sum_lanes_tree<kLanes>(H, [xr](int64_t h) {
        const float v = to_float(xr[h]);
        return mul_rn(v, v);
      });""",
        """\
      const auto square = [xr](int64_t h) {
        const float v = to_float(xr[h]);
        return mul_rn(v, v);
      };
      // MUTANT: few rows and long ones: sum each half of a row on its own, then add the halves.
      const int64_t half = H / 2;
      const float ss = T < 4 && H > 2 * kLanes
                           ? add_rn(host_sum_lanes_tree<kLanes>(half, square),
                                    host_sum_lanes_tree<kLanes>(H - half, [&square, half](int64_t h) { return square(half + h); }))
                           : host_sum_lanes_tree<kLanes>(H, square);""",
    ),
]


def test_rms_norm_that_splits_long_rows_of_small_batches_is_caught(built, tmp_path):
    """Mutant: rms_norm's rows CPU kernel, given fewer than 4 rows longer than two lane rounds
    (H > 512), sums the squares of each half of a row separately and adds the two sums -- the
    split reduction a kernel uses to keep a GPU busy on a small batch, and the classic way to
    lose batch invariance.  Each order alone is deterministic and accurate.

    Caught by test_batch_invariant (batches of 1 and 2 rows against 256, with H = 3 * 256 + 129),
    on every dtype; not by test_accuracy or test_deterministic.  The split changes the bits of
    only one row in six to nine (rstd moves by an ulp or not at all), so the test must compare
    every row as part of a small batch, not only the first one or two.  Not catchable on the rows of 300 that
    test_batch_invariant ran before: there one row alone gives its bits in a batch of 64
    (checked below)."""
    mutant = build_mutant("rms_norm_rows.cpp", RMS_NORM_SPLITS_LONG_ROWS_OF_SMALL_BATCHES)
    assert_caught(mutant, "rms_norm_rows.cpp", "rms_norm", {"test_batch_invariant"}, tmp_path)

    # Each of 64 rows alone against the same rows in one batch, at the old and the new width.
    g = torch.Generator().manual_seed(2)
    inputs = {h: (torch.randn(64, h, generator=g), torch.randn(h, generator=g)) for h in (300, 897)}
    calls = [("rms_norm", "rows", (x[r : r + 1].contiguous() if r >= 0 else x, w)) for x, w in inputs.values() for r in range(-1, 64)]
    outputs = call_kernels(mutant.root, calls, tmp_path / "mutated")
    changed = {}
    for i, h in enumerate(inputs):
        full, *alone = outputs[i * 65 : (i + 1) * 65]
        changed[h] = sum(not all_same_bits([t[r : r + 1] for t in full], one) for r, one in enumerate(alone))
    assert changed[300] == 0 and changed[897] > 0, changed


# ---------------------------------------------------------------------------- attention

ATTENTION_SELECT = ("test_accuracy", "test_deterministic", "test_sequence", "test_chunked", "test_decode")

# The host kernels' dots run in block_dots, which both carry (_attention_host.j2) and which knows
# neither the sequence nor the call: a mutant gives its d loop an order from two thread-local
# settings (a rotation, or descending), which it sets where its kernel finds a block's keys.
DOTS_ORDER_SETTINGS = (
    "// dots[i][lane] for the P queries",
    """\
thread_local int64_t mutant_rotation = 0;  // MUTANT: the order of block_dots' sums over d
thread_local bool mutant_descending = false;
// dots[i][lane] for the P queries""",
)
DOTS_ORDER_FOLLOWS_THE_SETTINGS = (
    """\
  for (int64_t d = 0; d < D; ++d) {
    Vec k[V];""",
    """\
  for (int64_t step = 0; step < D; ++step) {
    const int64_t d = mutant_descending ? D - 1 - step : (step + mutant_rotation) % D;  // MUTANT
    Vec k[V];""",
)
ATTENTION_BLOCK_ROWS = """\
      const auto block_rows = [&](int64_t start, int64_t from, int64_t to, int64_t* rows) {
        for (int64_t j = from; j < to; ++j) rows[j - start] = seq.k0 + j;"""

ATTENTION_ORDER_FOLLOWS_THE_PACK = [
    DOTS_ORDER_SETTINGS,
    DOTS_ORDER_FOLLOWS_THE_SETTINGS,
    (
        ATTENTION_BLOCK_ROWS,
        ATTENTION_BLOCK_ROWS + "\n        mutant_rotation = seq.k0;  // MUTANT: the order follows the sequence's place in the pack",
    ),
]

ATTENTION_DECODE_DOTS_DESCENDING = [
    DOTS_ORDER_SETTINGS,
    DOTS_ORDER_FOLLOWS_THE_SETTINGS,
    (
        ATTENTION_BLOCK_ROWS,
        ATTENTION_BLOCK_ROWS + "\n        mutant_descending = TQ == 1;  // MUTANT: a decode path with its own order",
    ),
]


# ---------------------------------------------------------------------------- paged_attention

PAGED_SELECT = ("test_accuracy", "test_deterministic", "test_paged")
PAGED_BLOCK_ROWS = """\
      const auto block_rows = [&](int64_t start, int64_t from, int64_t to, int64_t* rows) {
        bool any_unreadable = false;"""

PAGED_ATTENTION_ORDER_FOLLOWS_THE_PHYSICAL_BLOCK = [
    DOTS_ORDER_SETTINGS,
    DOTS_ORDER_FOLLOWS_THE_SETTINGS,
    (
        PAGED_BLOCK_ROWS,
        PAGED_BLOCK_ROWS
        + """
        // MUTANT: each score's sum over d starts at the cache block that holds the logical block's first key.
        mutant_rotation = table[start / BS] < 0 ? 0 : table[start / BS];""",
    ),
]

PAGED_ATTENTION_ORDER_DEPENDS_ON_THE_BLOCK_SIZE = [
    DOTS_ORDER_SETTINGS,
    DOTS_ORDER_FOLLOWS_THE_SETTINGS,
    (
        PAGED_BLOCK_ROWS,
        PAGED_BLOCK_ROWS + "\n        mutant_descending = BS > kBlock;  // MUTANT: blocks larger than the reduction's sum d descending",
    ),
]


def assert_paged_caught(mutant: Mutant, caught_by: set[str], tmp_path: Path) -> None:
    assert "paged_attention_blocks.cpp" in mutant.compiled, f"ninja compiled {mutant.compiled}"
    outcomes = run_generated_tests(mutant.root, ["paged_attention"], PAGED_SELECT, tmp_path / "junit.xml")
    assert outcomes.failing == caught_by, f"failing: {sorted(outcomes.failing)}, expected {sorted(caught_by)}:\n{outcomes.output}"
    for function in caught_by:
        for dtype in ("float32", "float16"):
            ran = [outcome for test, outcome in outcomes.of(function).items() if f"-{dtype}-" in test and outcome != "skipped"]
            assert ran and "failed" in ran, f"{function} on {dtype}: {outcomes.of(function)}"
    assert set(outcomes.of("test_accuracy").values()) == {"passed"}
    assert set(outcomes.of("test_deterministic").values()) == {"passed"}


def test_paged_attention_whose_order_follows_the_physical_block_is_caught(built, tmp_path):
    """Mutant: paged_attention's CPU kernel starts each score's sum over d at the cache block that
    holds the logical block's first key (mod D), as a kernel that walks the cache rather than the
    sequence would: deterministic and accurate, but a sequence's bits now follow where its blocks
    lie.  Caught by every paged contract test -- the blocks shuffled, the block size changed, the
    sequence alone, its queries in chunks and one at a time (each call placing its blocks anew),
    and the packed attention op on the same keys -- and not by accuracy or determinism."""
    mutant = build_mutant("paged_attention_blocks.cpp", PAGED_ATTENTION_ORDER_FOLLOWS_THE_PHYSICAL_BLOCK)
    caught = {
        "test_paged_sequence_does_not_depend_on_block_placement",
        "test_paged_sequence_does_not_depend_on_block_size",
        "test_paged_sequence_does_not_depend_on_the_other_sequences",
        "test_paged_decode_and_chunked_prefill_give_the_bits_of_prefill",
        "test_paged_gives_the_bits_of_the_packed_op",
    }
    assert_paged_caught(mutant, caught, tmp_path)


def test_paged_attention_whose_order_depends_on_the_block_size_is_caught(built, tmp_path):
    """Mutant: with cache blocks larger than the reduction's block of 64 keys, paged_attention's CPU
    kernel sums each score's products over d in descending order, as a kernel tuned per block
    size would.  Only the tests that change the block size across 64 can see it: the block-size
    test (blocks of 1, 16, 96 and 128) and the comparison with packed attention at each of them;
    the placement, other-sequences and decode tests keep one block size below 64."""
    mutant = build_mutant("paged_attention_blocks.cpp", PAGED_ATTENTION_ORDER_DEPENDS_ON_THE_BLOCK_SIZE)
    assert_paged_caught(mutant, {"test_paged_sequence_does_not_depend_on_block_size", "test_paged_gives_the_bits_of_the_packed_op"}, tmp_path)


# ---------------------------------------------------------------------------- embedding_backward

EMBEDDING_BACKWARD_REVERSES_EVERY_OTHER_CALL = [
    (
        "  const int64_t cost = H * (1 + start[V] / V);\n",
        """\
  const int64_t cost = H * (1 + start[V] / V);
  // MUTANT: every other call adds each row's positions in descending order.
  static std::atomic<unsigned> calls{0};
  const bool descending = calls.fetch_add(1) % 2 == 1;
""",
    ),
    (
        "      for (int64_t k = start[v]; k < start[v + 1]; ++k) {\n",
        """\
      for (int64_t step = start[v]; step < start[v + 1]; ++step) {
        const int64_t k = descending ? start[v] + start[v + 1] - 1 - step : step;
""",
    ),
]
EMBEDDING_BACKWARD_SKIPS_THE_LAST_POSITION = [
    (
        "      for (int64_t k = start[v]; k < start[v + 1]; ++k) {\n",
        "      for (int64_t k = start[v]; k + 1 < start[v + 1]; ++k) {  // MUTANT: the last position of each row is left out\n",
    ),
]


# ---------------------------------------------------------------------------- linear_logp

LINEAR_LOGP_HALVES_ITS_CHUNK_FOR_LARGE_BATCHES = [
    (
        "inline void reduce_row(float* z, int64_t V, int64_t id, float temperature, float* lp, float* entropy, float* lse) {",
        "inline void reduce_row(float* z, int64_t V, int64_t id, float temperature, float* lp, float* entropy, float* lse, int lanes) {",
    ),
    (
        """\
  for (int64_t c0 = 0; c0 < V; c0 += kLanes) {
    const int n = static_cast<int>(std::min<int64_t>(kLanes, V - c0));
    const float* zc = z + c0;
    for (int l = 0; l < n; ++l) {
      const float e""",
        """\
  for (int64_t c0 = 0; c0 < V; c0 += lanes) {  // MUTANT
    const int n = static_cast<int>(std::min<int64_t>(lanes, V - c0));
    const float* zc = z + c0;
    for (int l = 0; l < n; ++l) {
      const float e""",
    ),
    (
        """\
  for (int half = kLanes / 2; half > 0; half >>= 1)
    for (int l = 0; l < half; ++l) {
      lane[l] = add_rn""",
        """\
  for (int half = lanes / 2; half > 0; half >>= 1)  // MUTANT
    for (int l = 0; l < half; ++l) {
      lane[l] = add_rn""",
    ),
    (
        "reduce_row(logits.data() + i * padded_v, V, id, temperature, lp + row, entropy + row, lse + row);",
        "reduce_row(logits.data() + i * padded_v, V, id, temperature, lp + row, entropy + row, lse + row, N >= 200 ? kLanes / 2 : kLanes);  // MUTANT",
    ),
]


def assert_attention_caught(mutant: Mutant, caught_by: set[str], tmp_path: Path) -> None:
    assert "attention_blocks.cpp" in mutant.compiled, f"ninja compiled {mutant.compiled}"
    outcomes = run_generated_tests(mutant.root, ["attention"], ATTENTION_SELECT, tmp_path / "junit.xml")
    assert outcomes.failing == caught_by, f"failing: {sorted(outcomes.failing)}, expected {sorted(caught_by)}:\n{outcomes.output}"
    for function in caught_by:
        ran = [outcome for test, outcome in outcomes.of(function).items() if "-float32-" in test and outcome != "skipped"]
        assert ran and "failed" in ran, f"{function} on float32: {outcomes.of(function)}"
    assert set(outcomes.of("test_accuracy").values()) == {"passed"}


def test_attention_whose_order_follows_the_pack_is_caught(built, tmp_path):
    """Mutant: attention's CPU kernel starts each score's sum over d at the sequence's offset in
    the packed keys (mod D), as a kernel whose tiling follows the packed buffer would:
    deterministic and accurate, and one sequence alone (at offset 0) gives the same bits as in
    chunked prefill or decode.  Caught by the packed-sequence test only, where a sequence's keys
    start elsewhere in the pack than alone."""
    mutant = build_mutant("attention_blocks.cpp", ATTENTION_ORDER_FOLLOWS_THE_PACK)
    assert_attention_caught(mutant, {"test_sequence_does_not_depend_on_what_is_packed_with_it"}, tmp_path)


def test_attention_with_its_own_decode_order_is_caught(built, tmp_path):
    """Mutant: when a call holds one query (a decode step), attention's CPU kernel adds each
    score's products over d in descending order, as a separate decode kernel would.  Caught by the
    decode test, by the chunked-prefill test (its first chunk is one query) and by the
    packed-sequence test (a sequence of one query alone), not by accuracy or determinism."""
    mutant = build_mutant("attention_blocks.cpp", ATTENTION_DECODE_DOTS_DESCENDING)
    caught = {"test_decode_gives_the_bits_of_prefill", "test_chunked_prefill_gives_the_bits_of_one_pass", "test_sequence_does_not_depend_on_what_is_packed_with_it"}
    assert_attention_caught(mutant, caught, tmp_path)


def test_linear_logp_whose_vocabulary_chunk_depends_on_the_batch_is_caught(built, tmp_path):
    """Mutant: linear_logp's rows CPU kernel sums the softmax statistics in chunks of 128
    vocabulary entries (a lanes tree of 128) instead of 256 once the batch has 200 rows or more
    -- a chunk size chosen from the shapes.  Each order alone is deterministic and accurate.

    Caught by test_batch_invariant (batches of 1 to 33 rows against 256, V = 3 * 256 + 129), on
    every dtype; not by test_accuracy or test_deterministic.  Not catchable below 200 rows: there
    the mutant is the real kernel (checked below)."""
    mutant = build_mutant("linear_logp_rows.cpp", LINEAR_LOGP_HALVES_ITS_CHUNK_FOR_LARGE_BATCHES)
    assert_caught(mutant, "linear_logp_rows.cpp", "linear_logp", {"test_batch_invariant"}, tmp_path)

    g = torch.Generator().manual_seed(3)
    h, weight, ids = torch.randn(256, 32, generator=g), torch.randn(1153, 32, generator=g), torch.randint(0, 1153, (256,), generator=g)
    few, many, many_again = call_kernels(
        mutant.root, [("linear_logp", "rows", (h[:n], weight, ids[:n])) for n in (199, 256, 256)], tmp_path / "mutated"
    )
    assert all_same_bits(many, many_again) and not all_same_bits([t[:199] for t in many], few)


def test_embedding_backward_whose_order_changes_between_calls_is_caught(tmp_path):
    """Mutant: embedding_backward's CPU kernel adds each table row's positions in descending order
    on every other call -- the order scatter-adds get when they follow the threads' timing
    (index_add, atomics).  Each order alone is accurate.

    Caught by test_deterministic on every dtype with out_fp32 (897 positions, about 18 per row
    and more in the row of the planted id 0): the float32 sums show the changed order.  Rounded
    to 16 bits the sums mostly hide it (an order change moves a float32 sum by a few of its own
    ulps, a small fraction of a bfloat16 ulp), which is why the op offers out_fp32 and the
    generated tests run the float32 variant."""
    mutant = build_mutant("embedding_backward_rows.cpp", EMBEDDING_BACKWARD_REVERSES_EVERY_OTHER_CALL)
    assert "embedding_backward_rows.cpp" in mutant.compiled, mutant.compiled
    outcomes = run_generated_tests(mutant.root, ["embedding_backward"], SELECT, tmp_path / "junit.xml")
    assert outcomes.returncode == 1 and outcomes.failing == {"test_deterministic"}, outcomes.output
    for dtype in DTYPES:
        assert outcomes.tests[f"test_deterministic[embedding_backward-cpu-rows-{dtype}-out_fp32]"] == "failed", outcomes.tests
    assert outcomes.tests["test_deterministic[embedding_backward-cpu-rows-float32-defaults]"] == "failed", outcomes.tests
    assert set(outcomes.of("test_accuracy").values()) == {"passed"}


def test_embedding_backward_that_skips_a_position_is_caught(tmp_path):
    """Mutant: embedding_backward's CPU kernel leaves out the last position of every table row.
    It stays deterministic; test_accuracy catches the missing terms, on every dtype."""
    mutant = build_mutant("embedding_backward_rows.cpp", EMBEDDING_BACKWARD_SKIPS_THE_LAST_POSITION)
    assert "embedding_backward_rows.cpp" in mutant.compiled, mutant.compiled
    outcomes = run_generated_tests(mutant.root, ["embedding_backward"], SELECT, tmp_path / "junit.xml")
    assert outcomes.returncode == 1 and outcomes.failing == {"test_accuracy"}, outcomes.output
    for dtype in DTYPES:
        assert "failed" in {o for test, o in outcomes.of("test_accuracy").items() if f"-{dtype}-" in test}, outcomes.tests
    assert set(outcomes.of("test_deterministic").values()) == {"passed"}


# ---------------------------------------------------------------------------- the Python layer

FAKE_DET_GEMM_ONE_COLUMN_TOO_WIDE = [
    (
        "        for dim, base, plus in op.derived_dims:\n            sizes[dim] = sizes[base] + plus\n",
        (
            "        for dim, base, plus in op.derived_dims:\n            sizes[dim] = sizes[base] + plus\n"
            '        if op.name == "det_gemm":\n            sizes["N"] = sizes["N"] + 1  # MUTANT\n'
        ),
    )
]
LOGP_BACKWARD_WITHOUT_AUTOGRAD = [
    (
        "            _register_autograd(op, overload, backward, setup)\n",
        (
            '            if op.name != "logp_backward":  # MUTANT: no autograd registered for it, so torch warns and differentiates to nothing\n'
            "                _register_autograd(op, overload, backward, setup)\n"
        ),
    )
]


def test_fake_kernel_with_a_wrong_shape_is_caught(built, tmp_path):
    """Mutant: det_gemm's fake kernel (what torch.compile and meta tensors see) claims one column
    more than the kernel returns.  Caught by test_opcheck (its fake-tensor check) and by the
    meta-tensor test, on every overload; the kernels themselves are untouched."""
    mutant = build_mutant("rlkernels/_public.py", FAKE_DET_GEMM_ONE_COLUMN_TOO_WIDE)
    outcomes = run_generated_tests(mutant.root, ["det_gemm"], ("test_opcheck", "test_public_function_on_meta_tensors", "test_accuracy"), tmp_path / "junit.xml")
    assert outcomes.failing == {"test_opcheck", "test_public_function_on_meta_tensors"}, outcomes.output
    assert set(outcomes.of("test_opcheck").values()) == {"failed"}


def test_op_without_autograd_is_caught(built, tmp_path):
    """Mutant: logp_backward loses its autograd registration, the state the issue of silent
    gradients started from (outputs that require grad, and backward giving None with a warning).
    Caught by test_not_differentiable_is_refused, on the public function and the overload alike.
    Not by test_opcheck: opcheck's registration check only catches backend kernels that build
    autograd graphs themselves, not a missing autograd kernel."""
    mutant = build_mutant("rlkernels/_public.py", LOGP_BACKWARD_WITHOUT_AUTOGRAD)
    outcomes = run_generated_tests(mutant.root, ["logp_backward"], ("test_opcheck", "test_not_differentiable", "test_accuracy"), tmp_path / "junit.xml")
    assert outcomes.failing == {"test_not_differentiable_is_refused"}, outcomes.output
    assert set(outcomes.of("test_not_differentiable_is_refused").values()) == {"failed"}


# ---------------------------------------------------------------------------- rope

ROPE_ROTATES_THE_OTHER_WAY = [
    (
        "  sincos_f32(mul_rn(static_cast<float>(p), inv_freq), s, c);",
        "  sincos_f32(-mul_rn(static_cast<float>(p), inv_freq), s, c);  // MUTANT: the angle negated",
    ),
]


def test_rope_that_rotates_the_other_way_is_caught(built, tmp_path):
    """The angles negated: still deterministic, batch-invariant and the same on every platform,
    and orthogonal too, so only the comparison with the reference can see it; it must, at every
    shape and dtype, in both pair layouts (the far positions the tests plant included)."""
    mutant = build_mutant("rope_rows.cpp", ROPE_ROTATES_THE_OTHER_WAY)
    assert "rope_rows.cpp" in mutant.compiled, f"ninja compiled {mutant.compiled}"
    outcomes = run_generated_tests(mutant.root, ["rope"], SELECT, tmp_path / "junit.xml")
    assert outcomes.failing == {"test_accuracy", "test_accuracy_at_other_settings"}, outcomes.output
    for function in outcomes.failing:
        assert set(outcomes.of(function).values()) == {"failed"}, f"{function}: {outcomes.of(function)}"
    assert set(outcomes.of("test_deterministic").values()) == {"passed"}


# ---------------------------------------------------------------------------- control


def test_the_real_kernels_pass(built, tmp_path):
    """Control: the generated tests the mutants fail pass on the real package."""
    ops = ["det_gemm", "embedding_backward", "linear_logp", "logp", "rms_norm", "rope"]
    outcomes = run_generated_tests(built, ops, SELECT, tmp_path / "junit.xml")
    attention = run_generated_tests(built, ["attention"], ATTENTION_SELECT, tmp_path / "attention.xml")
    assert attention.returncode == 0 and not attention.failing, attention.output
    paged = run_generated_tests(built, ["paged_attention"], PAGED_SELECT, tmp_path / "paged.xml")
    assert paged.returncode == 0 and not paged.failing, paged.output
    for function in (
        "test_paged_sequence_does_not_depend_on_block_placement",
        "test_paged_sequence_does_not_depend_on_block_size",
        "test_paged_sequence_does_not_depend_on_the_other_sequences",
        "test_paged_decode_and_chunked_prefill_give_the_bits_of_prefill",
        "test_paged_gives_the_bits_of_the_packed_op",
    ):
        assert "passed" in paged.of(function).values(), f"paged_attention: {function} did not run"
    for function in ("test_sequence_does_not_depend_on_what_is_packed_with_it", "test_chunked_prefill_gives_the_bits_of_one_pass", "test_decode_gives_the_bits_of_prefill"):
        assert "passed" in attention.of(function).values(), f"attention: {function} did not run"
    assert outcomes.returncode == 0 and not outcomes.failing, outcomes.output
    for op in ops:
        # embedding_backward's output has no batch axis, so it has no batch invariance to test.
        for function in ("test_accuracy", "test_deterministic", "test_batch_invariant")[: 2 if op == "embedding_backward" else 3]:
            assert "passed" in outcomes.of(function, op).values(), f"{op}: {function} did not run: {outcomes.tests}"
