"""Tensor-parallel layers whose bits do not depend on the layout: rlkernels.distributed on gloo.

A tiny bf16 decoder (tp_worker: 2 layers, hidden 64, 4 heads, FFN 256, vocabulary 512) runs one
GRPO step -- linear_logp → ratio_kl → grpo_loss → backward -- on 1, 2 and 4 ranks (process groups
of one launch of 4 spawned processes on this machine, gloo), its linears column- and row-parallel, its LM head vocabulary-parallel.  The log-probs,
the entropy, the loss and every weight's gradient (the parts gathered back into whole weights)
must have the same bits at every world size: the integer views of the bits are compared.  The
same layers with torch.distributed's all_reduce in place of the fixed-order combine give other
bits at 4 ranks, which shows the comparison can fail.  Ranks 0 and 1, as a group of two, then
hold what no rank can see is wrong alone -- parts of other sizes, other bits of a replicated input,
parts of other full weights -- and every rank must refuse it, naming what differs where.  Every
launch is bounded: a hang fails.  The same launch runs a sparse MoE block with its experts sharded
over the same groups (rlkernels.distributed.expert_parallel_experts): its output and every
gradient have one device's bits at every size, and an all_reduce of per-rank partial outputs does
not.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the tensor-parallel tests need torch (make test installs it)")
dist = pytest.importorskip("torch.distributed", reason="the tensor-parallel tests need torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available in this torch build", allow_module_level=True)

import tp_worker
from bitwise import bits
from package_build import build_inplace

pytestmark = pytest.mark.slow

LAYOUTS = (1, 2, 4)  # tensor-parallel sizes: process groups of ranks 0, 0-1 and 0-3 of one launch
LAUNCH_TIMEOUT_S = 180.0  # the whole launch; each collective also times out after 120 s


def launch(root: Path, out: Path) -> float:
    """tp_worker.main on 4 spawned processes (rendezvous through a file in ``out``), joined by a
    deadline; a rank that fails, or one still running then (a hang), fails the test with the
    ranks' tracebacks.  Returns the wall time."""
    context = torch.multiprocessing.get_context("spawn")
    world = max(LAYOUTS)
    began = time.monotonic()
    procs = [context.Process(target=tp_worker.main, args=(rank, world, str(out / "rendezvous"), str(root), str(out), LAYOUTS)) for rank in range(world)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(max(0.0, began + LAUNCH_TIMEOUT_S - time.monotonic()))
    hung = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    codes = [proc.exitcode for proc in procs]
    errors = "\n".join(p.read_text() for p in sorted(out.glob("error-rank*.txt")))
    assert not hung, f"ranks {hung} still running after {LAUNCH_TIMEOUT_S:.0f} s (a hang)\n{errors}"
    assert codes == [0] * world, f"exit codes {codes}\n{errors}"
    return time.monotonic() - began


def whole(world: int, out: Path, reduce: str) -> dict[str, torch.Tensor]:
    """The ranks' results as one model's: log-probs, entropy, loss, and every weight's gradient
    with the parts concatenated along their split; replicated gradients must agree across ranks."""
    ranks = [torch.load(out / f"tp{world}-{reduce}-rank{rank}.pt") for rank in range(world)]
    result = {name: ranks[0][name] for name in ("lp", "entropy", "loss")} | whole_grads(ranks, tp_worker.split_of)
    for name in ("lp", "entropy", "loss"):
        for rank, r in enumerate(ranks[1:], 1):
            assert torch.equal(bits(r[name]), bits(result[name])), f"{name}: rank {rank} differs from rank 0"
    return result


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, int]:
    """Per result, how many elements' bits differ (only those that differ)."""
    assert a.keys() == b.keys()
    counts = {name: int((bits(a[name]) != bits(b[name])).sum()) for name in a}
    return {name: n for name, n in counts.items() if n}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, object]:
    root = build_inplace("cpu")
    out = tmp_path_factory.mktemp("tp")
    results: dict[object, object] = {"seconds": round(launch(root, out), 1)}
    results["ranks"] = [(out / f"seconds-rank{rank}.txt").read_text() for rank in range(max(LAYOUTS))]
    for world in LAYOUTS:
        for reduce in ("tree", "all_reduce") if world == max(LAYOUTS) else ("tree",):
            results[(world, reduce)] = whole(world, out, reduce)
    for world in LAYOUTS:
        results[(world, "helpers")] = [torch.load(out / f"tp{world}-helpers-rank{rank}.pt") for rank in range(world)]
    results["refusals"] = torch.load(out / "refusals.pt")
    results["disagreements"] = [torch.load(out / f"tp2-disagreements-rank{rank}.pt") for rank in range(2)]
    results["single"] = torch.load(out / "single.pt")
    for world in LAYOUTS:
        for combine in ("gather", "all_reduce") if world == max(LAYOUTS) else ("gather",):
            results[(world, f"ep-{combine}")] = whole_experts(world, out, combine)
    results["moe single"] = torch.load(out / "moe-single.pt")
    return results


def whole_experts(world: int, out: Path, combine: str) -> dict[str, torch.Tensor]:
    """The sparse block's ranks as one device's: its output (the same on every rank) and every
    tensor's gradient, the experts' weights' parts concatenated."""
    ranks = [torch.load(out / f"ep{world}-{combine}-rank{rank}.pt") for rank in range(world)]
    for rank, r in enumerate(ranks[1:], 1):
        assert torch.equal(bits(r["y"]), bits(ranks[0]["y"])), f"expert parallelism at {world}: rank {rank}'s output differs from rank 0's"
    return {"y": ranks[0]["y"]} | whole_grads(ranks, tp_worker.MOE_SPLIT.get)


def whole_grads(ranks: list[dict], split_of) -> dict[str, torch.Tensor]:
    """Every tensor's gradient as one device's ("grad <name>"): the parts concatenated along their
    split (``split_of(name)``), a replicated one checked to be the same on every rank."""
    result = {}
    for name in ranks[0]["grads"]:
        parts = [r["grads"][name] for r in ranks]
        dim = split_of(name)
        if dim is None:
            for rank, part in enumerate(parts[1:], 1):
                assert torch.equal(bits(part), bits(parts[0])), f"replicated gradient {name}: rank {rank} differs from rank 0"
            result[f"grad {name}"] = parts[0]
        else:
            result[f"grad {name}"] = torch.cat(parts, dim=dim)
    return result


def test_results_are_finite_and_nontrivial(runs):
    one = runs[(1, "tree")]
    assert torch.isfinite(one["lp"]).all() and (one["lp"] < 0).all()
    assert torch.isfinite(one["loss"]) and one["loss"] != 0
    for name, value in one.items():
        if name.startswith("grad "):
            assert torch.isfinite(value.float()).all(), name
            assert value.abs().sum() > 0, f"{name} is all zeros"


@pytest.mark.parametrize("world", [w for w in LAYOUTS if w > 1])
def test_grpo_step_is_bitwise_layout_invariant(runs, world):
    assert differing(runs[(world, "tree")], runs[(1, "tree")]) == {}


def test_plain_all_reduce_is_not_layout_invariant(runs):
    """The same layers and partial products, combined by the backend's all_reduce: other bits."""
    diff = differing(runs[(max(LAYOUTS), "all_reduce")], runs[(1, "tree")])
    assert diff, "all_reduce gave the fixed-order combine's bits everywhere: the comparison shows nothing"
    assert "lp" in diff, f"the log-probs kept their bits under all_reduce (differing: {diff})"


@pytest.mark.parametrize("world", LAYOUTS)
def test_expert_parallel_moe_has_one_devices_bits(runs, world):
    """A sparse block (8 experts, top 2, 24 tokens) with its experts sharded over 1, 2 and 4 ranks:
    the output and every gradient (tokens, router, each expert's weights) have the bits of
    rlkernels.moe.experts_forward on one device."""
    single = runs["moe single"]
    want = {"y": single["y"], **{f"grad {name}": g for name, g in single["grads"].items()}}
    got = runs[(world, "ep-gather")]
    assert got.keys() == want.keys()
    assert differing(got, want) == {}, f"expert parallelism at {world} ranks differs from one device"
    assert all(bool(g.abs().sum() > 0) for name, g in got.items() if name.startswith("grad")), "a gradient is all zeros"


def test_expert_parallel_all_reduce_is_not_layout_invariant(runs):
    """The negative control: each rank's experts combined into a partial output, summed by all_reduce."""
    assert differing({"y": runs[(4, "ep-all_reduce")]["y"]}, {"y": runs[(1, "ep-gather")]["y"]}), "all_reduce gave one device's bits"


def test_linear_logp_agrees_with_the_single_device_op(runs):
    """The vocabulary-parallel log-probs, entropy and gradients are linear_logp's, within rounding
    (not bitwise: other summation orders, and bf16 K-tree products in the backward)."""
    ours, theirs = runs["single"]["distributed"], runs["single"]["single"]
    assert ours["lp"][3] == 0 and ours["entropy"][3] == 0 and (ours["grad h"][3] == 0).all()  # ignore_index
    torch.testing.assert_close(ours["lp"], theirs["lp"], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(ours["entropy"], theirs["entropy"], atol=1e-4, rtol=1e-5)
    for name in ("grad h", "grad weight"):
        torch.testing.assert_close(ours[name].float(), theirs[name].float(), atol=2e-2, rtol=2e-2, msg=lambda m, n=name: f"{n}: {m}")


def test_an_unused_entropy_adds_nothing_to_the_gradients(runs):
    """With the entropy a metric, its output's gradient is absent, not zeros: a row whose logit
    overflows to -inf (probability 0; the entropy's terms 0 * inf = NaN as written) keeps a finite
    entropy and finite gradients, those of the float64 reference."""
    got = runs["single"]["lp only"]
    reference = got["reference"]
    assert got["overflowed"], "the case no longer overflows a logit: it shows nothing"
    torch.testing.assert_close(got["lp"].double(), reference["lp"], atol=1e-4, rtol=1e-5)
    assert torch.isfinite(got["entropy"]).all(), f"entropy {got['entropy'].tolist()}: the -inf logit's 0 * inf reached it"
    torch.testing.assert_close(got["entropy"].double(), reference["entropy"], atol=1e-4, rtol=1e-5)
    for name in ("grad h", "grad weight"):
        assert torch.isfinite(got[name].float()).all(), f"{name} is not finite: the unused entropy's term reached it"
        torch.testing.assert_close(got[name].double(), reference[name], atol=2e-2, rtol=2e-2, msg=lambda m, n=name: f"{n}: {m}")


def test_logits_kept_for_the_backward_or_computed_again_give_the_same_bits(runs):
    """linear_logp keeps a rank's logits from its forward for its backward up to KEEP_LOGITS_BYTES and
    computes them again above: the same log-probs, entropy and gradients either way."""
    kept, again = runs["single"]["distributed"], runs["single"]["recomputed"]
    assert differing(kept, again) == {}


@pytest.mark.parametrize("world", LAYOUTS)
def test_scatter_and_gather_move_parts_and_gradients(runs, world):
    x = torch.arange(4 * 64, dtype=torch.float32).view(4, 64)
    grad = 3 * torch.linspace(-1, 1, 64).expand(4, 64)
    size = 64 // world
    for rank, got in enumerate(runs[(world, "helpers")]):
        assert torch.equal(got["part"], x[:, rank * size : (rank + 1) * size]), f"rank {rank}: scatter_last_dim's part"
        assert torch.equal(got["back"], 3 * x), f"rank {rank}: gather_last_dim"
        assert torch.equal(got["grad"], grad), f"rank {rank}: the gradient through both"


@pytest.mark.parametrize(
    "case, message",
    [
        ("float32", "LayoutError: x: expected dtype torch.bfloat16"),
        ("ragged", ("LayoutError: weight: expected the columns of each rank's part (in / world) to be the same on every rank and a positive "
                   "multiple of 32 (whole leaves of the tree), got 48 on rank 0 (rank 0 holds no whole number of leaves)")),
        ("features", "LayoutError: x: expected a last dimension of 96, got shape (4, 64)"),
        ("reduce", "ValueError: reduce: expected 'tree' or 'all_reduce', got 'ring'"),
        ("vocab", ("LayoutError: weight: expected the rows of each rank's part (V / world) to be the same on every rank and a positive "
                  "multiple of 32 (whole leaves of the tree), got 40 on rank 0 (rank 0 holds no whole number of leaves)")),
        ("group", "LayoutError: group: expected a power-of-two number of ranks (1, 2, 4, 8, ...: the K-tree's pairwise combine), got 3"),
        ("ids", "LayoutError: ids: expected an int64 tensor, got torch.int32"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(runs, case, message):
    assert runs["refusals"][case].startswith(message), runs["refusals"][case]


WHOLE_LEAVES = "to be the same on every rank and a positive multiple of 32 (whole leaves of the tree), got"
BF16 = "(the K-tree product is bf16 in and out; no float32 product here is layout-invariant), got torch.float32"
SAME_BITS = "LayoutError: {}: expected the same bits on every rank ({}), got bits on rank 1 that differ from rank 0's (checksums"
# Per case of tp_worker.disagreements: the start of what ranks 0 and 1 raise (one string: both).
REFUSED = {
    "uneven vocabulary": f"LayoutError: weight: expected the rows of each rank's part (V / world) {WHOLE_LEAVES} 512 on rank 0, 384 on rank 1 "
                         "(rank 1 differs from rank 0)",
    "partial leaves on one rank": f"LayoutError: weight: expected the rows of each rank's part (V / world) {WHOLE_LEAVES} 48 on rank 0, 64 on "
                                  "rank 1 (rank 1 differs from rank 0; rank 0 holds no whole number of leaves)",
    "uneven column-parallel": f"LayoutError: weight: expected the rows of each rank's part (out / world) {WHOLE_LEAVES} 160 on rank 0, 96 on rank 1",
    "uneven row-parallel": f"LayoutError: weight: expected the columns of each rank's part (in / world) {WHOLE_LEAVES} 160 on rank 0, 96 on rank 1",
    "uneven modules": f"LayoutError: weight: expected the rows of each rank's part (out / world) {WHOLE_LEAVES} 160 on rank 0, 96 on rank 1",
    "uneven gather": "LayoutError: x: expected its last dimension to be the same on every rank, got 160 on rank 0, 96 on rank 1",
    "other dtype gathered": "LayoutError: x: expected its dtype to be the same on every rank, got 'bfloat16' on rank 0, 'float16' on rank 1",
    "x's gradient on one rank": "LayoutError: x: expected whether its gradient is computed (requires_grad, under grad mode) to be the same on every "
                                "rank, got 'yes' on rank 0, 'no' on rank 1",
    "other reduce": "LayoutError: reduce: expected the combine to be the same on every rank, got 'tree' on rank 0, 'all_reduce' on rank 1",
    "other ignore_index": "LayoutError: ignore_index: expected its value to be the same on every rank, got -100 on rank 0, -200 on rank 1",
    "one rank's float32": ("LayoutError: row_parallel_linear: rank 1 refused its own inputs (see the error raised there); every rank stops",
                           f"LayoutError: x: expected dtype torch.bfloat16 {BF16}"),
    "bad check": "ValueError: check: expected one of 'first', 'every', 'layout', got 'sometimes'",
    "other check": "LayoutError: check: expected the check mode to be the same on every rank, got 'first' on rank 0, 'layout' on rank 1",
    "other call": tuple(f"LayoutError: {call}: expected every rank in the same call, got column_parallel_linear on rank 0, row_parallel_linear on rank 1"
                        for call in ("column_parallel_linear", "row_parallel_linear")),
    "other x": SAME_BITS.format("x", "a column-parallel layer's input is replicated"),
    "other h": SAME_BITS.format("h", "the hidden states of a vocabulary-parallel head are replicated"),
    "other ids": SAME_BITS.format("ids", "every rank scores the same tokens"),
    "other scattered x": SAME_BITS.format("x", "scatter_last_dim cuts a replicated tensor"),
    "other full weights": "LayoutError: weight: expected every rank's part cut from the same full weight, got parts of another full weight on "
                          "rank 1 than on rank 0 (checksums of the full weights:",
    "other full weights loaded": "LayoutError: weight: expected every rank's part cut from the same full weight, got parts of another full "
                                 "weight on rank 1 than on rank 0",
    "parts of another group": "LayoutError: weight: expected rank r to hold part r of 2 along dim 0 (cut by shard in this group), got part 0 of 4 "
                              "along dim 0 on rank 0, part 1 of 4 along dim 0 on rank 1",
    "own part on one rank": "LayoutError: weight: expected every rank's part cut the same way, got parts cut by shard or load_full on rank 0 and "
                            "parts of their own on rank 1",
    "load_full float32": f"LayoutError: weight: expected dtype torch.bfloat16 {BF16}",
    "load_full shape": "LayoutError: weight: expected the full weight's shape (64, 256) [out_features, in_features], got (256, 64)",
    "other x on a second call, check=every": SAME_BITS.format("x", "a column-parallel layer's input is replicated"),
    "uneven experts": "LayoutError: gate_up: expected the experts each rank holds (E / world) to be the same on every rank, got 3 on rank 0, 5 on rank 1",
    "other full experts": "LayoutError: gate_up: expected every rank's part cut from the same full weight, got parts of another full weight on "
                          "rank 1 than on rank 0",
    "other tokens": SAME_BITS.format("x", "the tokens are replicated"),
    "too few experts": "LayoutError: gate_up: expected E / world = 8 / 2 experts on each rank (the logits' E over the ranks), got 2",
}
# Cases the check switch lets through: the comparison is off, or only on a layer's first call.
ACCEPTED = ("other x, check=layout", "other x, CHECK=layout", "other x on a second call, check=first")


def test_every_disagreement_case_is_tested(runs):
    assert sorted(runs["disagreements"][0]) == sorted([*REFUSED, *ACCEPTED])


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_ranks_that_disagree_all_refuse_naming_what_differs_where(runs, case):
    """Each rank alone sees nothing wrong, or only its own input: every rank of the group must raise
    (none left waiting in a collective), naming the argument and what each rank holds."""
    expected = REFUSED[case] if isinstance(REFUSED[case], tuple) else (REFUSED[case],) * 2
    for rank in (0, 1):
        got = runs["disagreements"][rank][case]
        assert got.startswith(expected[rank]), f"rank {rank}: {got}"


@pytest.mark.parametrize("case", ACCEPTED)
def test_the_check_switch_lets_replicated_inputs_go_unchecked(runs, case):
    for rank in (0, 1):
        assert runs["disagreements"][rank][case] == "accepted", f"rank {rank}: {runs['disagreements'][rank][case]}"


def test_launch_times(runs, capsys):
    with capsys.disabled():
        print(f"\ntensor-parallel launch of 4 processes (spawn, import, GRPO steps at 1, 2 and 4 ranks): {runs['seconds']} s; per rank: {runs['ranks']}")
