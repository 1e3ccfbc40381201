"""rlkernels.aten: plain PyTorch code made batch-invariant by routing aten ops to the package's kernels.

Bitwise means the integer views of the bits (a NaN equals only the same NaN, -0.0 is not +0.0)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator

import pytest

torch = pytest.importorskip("torch", reason="the aten mode tests need torch (make test installs it)")
import torch.nn.functional as F

from bitwise import bits
from package_build import import_built

pytestmark = pytest.mark.slow

ROWS = 37  # past the det_gemm tiles of 24 rows, short of 48: a partial tile in every batch
PICKED = (0, 17, ROWS - 1)


@pytest.fixture(scope="module")
def rlkernels(request):
    return import_built("cpu", request)


@pytest.fixture
def aten(rlkernels) -> Iterator[object]:
    """The mode's module, with the mode off and torch.compile's caches empty before and after."""
    module = rlkernels.aten
    module.disable()
    torch.compiler.reset()
    yield module
    module.disable()
    torch.compiler.reset()


class MLP(torch.nn.Module):
    """Plain PyTorch: linear (aten::linear), silu, rms_norm, a matmul with a weight (aten::mm) and
    log_softmax, every one of them batch-variant in torch's own kernels."""

    def __init__(self, width: int = 64, hidden: int = 96, vocab: int = 50) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, hidden)
        self.norm = torch.nn.Parameter(torch.empty(hidden))
        self.mix = torch.nn.Parameter(torch.empty(hidden, hidden))
        self.head = torch.nn.Linear(hidden, vocab)
        g = torch.Generator().manual_seed(0)  # the same parameters in every instance
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            self.norm.add_(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.up(x))
        h = F.rms_norm(h, (h.shape[-1],), self.norm, 1e-6)
        return torch.log_softmax(self.head(h @ self.mix), dim=-1)


def inputs(dtype: torch.dtype = torch.float32, rows: int = ROWS, width: int = 64) -> torch.Tensor:
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(1)).to(dtype)


def batch_dependent_rows(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[int]:
    """The picked rows whose bits computed alone differ from their bits inside the whole batch."""
    full = bits(f(x))
    return [i for i in PICKED if not torch.equal(bits(f(x[i : i + 1]))[0], full[i])]


def input_grad_dependent_rows(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[int]:
    """As batch_dependent_rows, for the gradient of every row's log-probability of token 3."""

    def grad(rows: torch.Tensor) -> torch.Tensor:
        rows = rows.clone().requires_grad_()
        f(rows)[:, 3].sum().backward()
        assert rows.grad is not None
        return rows.grad

    full = bits(grad(x))
    return [i for i in PICKED if not torch.equal(bits(grad(x[i : i + 1]))[0], full[i])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_alone_gives_the_bits_it_gets_in_a_batch(aten, dtype):
    model, x = MLP().to(dtype), inputs(dtype)
    with aten.batch_invariant():
        assert batch_dependent_rows(model, x) == []
        three_d = model(x.reshape(1, ROWS, -1))[0]  # leading dimensions: linear flattens them
        assert torch.equal(bits(three_d), bits(model(x)))
    with torch.no_grad():
        reference = MLP().double()(inputs(torch.float64))
    atol = 1e-4 if dtype == torch.float32 else 1e-1
    torch.testing.assert_close(model(x).double(), reference, atol=atol, rtol=0)  # computed outside the mode


def test_input_gradients_do_not_depend_on_the_batch_and_parameter_gradients_are_deterministic(aten):
    model, x = MLP(), inputs()
    with aten.batch_invariant():
        assert input_grad_dependent_rows(model, x) == []
        grads = []
        for _ in range(2):
            model.zero_grad()
            model(x)[:, 3].sum().backward()
            grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
    model.zero_grad()
    model(x)[:, 3].sum().backward()  # torch's own kernels, outside the mode
    for name, p in model.named_parameters():
        assert torch.equal(bits(grads[0][name]), bits(grads[1][name])), f"{name}: run to run"
        torch.testing.assert_close(grads[0][name], p.grad, atol=1e-4, rtol=1e-4, msg=f"{name} against torch")


def test_backward_runs_the_packages_kernels(aten, rlkernels):
    """The gradients of a routed mm and linear are those of det_gemm_nt, det_gemm_tn and column_sum,
    bit for bit: the backward is routed too, not torch's derivative formulas over its own GEMM."""
    g = torch.Generator().manual_seed(2)
    a, w, bias = torch.randn(ROWS, 80, generator=g), torch.randn(80, 30, generator=g), torch.randn(30, generator=g)
    grad = torch.randn(ROWS, 30, generator=g)
    a.requires_grad_(), w.requires_grad_(), bias.requires_grad_()
    with aten.batch_invariant():
        torch.mm(a, w).backward(grad)
    assert torch.equal(bits(a.grad), bits(rlkernels.det_gemm_nt(grad, w.detach()))), "mm: grad of self"
    assert torch.equal(bits(w.grad), bits(rlkernels.det_gemm_tn(a.detach(), grad))), "mm: grad of mat2"
    weight = w.detach().t().contiguous().requires_grad_()
    a.grad = None
    with aten.batch_invariant():
        F.linear(a, weight, bias).backward(grad)
    assert torch.equal(bits(a.grad), bits(rlkernels.det_gemm(grad, weight.detach()))), "linear: grad of input"
    assert torch.equal(bits(weight.grad), bits(rlkernels.det_gemm_tn(grad, a.detach()))), "linear: grad of weight"
    assert torch.equal(bits(bias.grad), bits(rlkernels.column_sum(grad))), "linear: grad of bias"


def test_log_softmax_over_any_axis_matches_torch_and_its_rows_do_not_depend_on_the_batch(aten):
    x = torch.randn(ROWS, 700, generator=torch.Generator().manual_seed(3)) * 4
    expected = torch.log_softmax(x.double(), dim=-1)
    expected_grad = torch.func.grad(lambda t: (torch.log_softmax(t, -1) * torch.linspace(-1, 1, 700, dtype=t.dtype)).sum())(x.double())
    with aten.batch_invariant():
        torch.testing.assert_close(torch.log_softmax(x, dim=-1).double(), expected, atol=2e-5, rtol=0)
        torch.testing.assert_close(torch.log_softmax(x.t(), dim=0).t().double(), expected, atol=2e-5, rtol=0)
        assert batch_dependent_rows(lambda t: torch.log_softmax(t, dim=-1), x) == []
        leaf = x.clone().requires_grad_()
        (torch.log_softmax(leaf, -1) * torch.linspace(-1, 1, 700)).sum().backward()
        torch.testing.assert_close(leaf.grad.double(), expected_grad, atol=1e-5, rtol=0)
        assert input_grad_dependent_rows(lambda t: torch.log_softmax(t, dim=-1), x) == []


def test_bmm_gives_each_matrix_the_bits_it_has_alone(aten):
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(6, 29, 32, generator=g), torch.randn(6, 41, 32, generator=g)
    with aten.batch_invariant():
        scores = q @ k.transpose(1, 2)  # matmul → bmm, with a transposed right operand
        for i in (0, 5):
            assert torch.equal(bits(scores[i]), bits(q[i : i + 1] @ k[i : i + 1].transpose(1, 2))[0]), f"matrix {i}"
            assert torch.equal(bits(scores[i, 3]), bits(q[i, 3:4] @ k[i].t())[0]), f"a row of matrix {i}"


@pytest.mark.parametrize("bias_shape, beta, alpha", [((30,), 1, 1), ((ROWS, 1), 1, 1), ((ROWS, 30), 0.5, 2.0), ((30,), 0, 1)])
def test_addmm_rows_do_not_depend_on_the_batch_whatever_the_bias(aten, bias_shape, beta, alpha):
    g = torch.Generator().manual_seed(5)
    a, w, bias = torch.randn(ROWS, 80, generator=g), torch.randn(30, 80, generator=g), torch.randn(bias_shape, generator=g)

    expected = torch.addmm(bias.double(), a.double(), w.double().t(), beta=beta, alpha=alpha)
    with aten.batch_invariant():
        full = bits(torch.addmm(bias, a, w.t(), beta=beta, alpha=alpha))
        for i in PICKED:
            own = bias if bias.dim() == 1 else bias[i : i + 1]  # a row's own bias row, where it has one
            alone = torch.addmm(own, a[i : i + 1], w.t(), beta=beta, alpha=alpha)
            assert torch.equal(bits(alone)[0], full[i]), f"row {i}"
        torch.testing.assert_close(torch.addmm(bias, a, w.t(), beta=beta, alpha=alpha).double(), expected, atol=1e-4, rtol=1e-4)


def test_addmm_with_alpha_zero_ignores_the_product_as_torch_does(aten):
    """alpha = 0 takes nothing of mat1 @ mat2, an infinite or NaN product included (as beta = 0
    takes nothing of the input)."""
    a, w, bias = torch.randn(4, 8), torch.randn(3, 8), torch.randn(3)
    a[0, 0] = float("inf")
    want = torch.addmm(bias, a, w.t(), alpha=0, beta=0.5)
    with aten.batch_invariant():
        got = torch.addmm(bias, a, w.t(), alpha=0, beta=0.5)
    assert torch.equal(bits(got), bits(want)), (got, want)


def test_strict_mode_refuses_what_it_cannot_route_naming_op_argument_expected_and_got(aten, rlkernels):
    a, b = torch.randn(4, 8, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64)
    with aten.batch_invariant():
        with pytest.raises(rlkernels.UnsupportedError, match=r"aten::mm .*argument 'self' must be dtype float32, float16 or bfloat16, got float64"):
            torch.mm(a, b)
        with pytest.raises(rlkernels.UnsupportedError, match=r"aten::linear .*argument 'input' must be dtype .*, got float64"):
            F.linear(a, b.t())
        with pytest.raises(rlkernels.UnsupportedError, match=r"aten::silu .*argument 'self' must be dtype .*, got float64"):
            F.silu(a)
        with torch.inference_mode(), pytest.raises(rlkernels.UnsupportedError, match=r"aten::_log_softmax .*got float64"):
            torch.log_softmax(a, -1)  # below autograd, at the CPU key
        with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
            torch.mm(a.float(), a.float())  # what torch itself rejects fails with torch's own error


def test_strict_mode_refuses_tensors_of_a_platform_the_build_does_not_carry(aten, rlkernels, monkeypatch):
    """As a CPU tensor would be refused by a build carrying only CUDA kernels (and a CUDA tensor by this one)."""
    monkeypatch.setattr(aten, "CARRIED_PLATFORMS", ("cuda",))
    refusal = r"aten::bmm .*argument 'self' must be a tensor on a device this build carries kernels for \(cuda\), got a cpu tensor"
    with aten.batch_invariant(), pytest.raises(rlkernels.UnsupportedError, match=refusal):
        torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 5))


def test_without_strict_it_warns_once_per_call_and_runs_torchs_kernel(aten):
    a, b = torch.randn(4, 8, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64)
    expected = torch.mm(a, b)
    with aten.batch_invariant(strict=False), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.mm(a, b)
    assert [str(w.message) for w in caught if issubclass(w.category, aten.BatchVariantWarning)] == [
        (
            "rlkernels.aten: aten::mm cannot run batch-invariant here: argument 'self' must be dtype float32, float16 or bfloat16, "
            "got float64; running torch's own kernel, whose rows may depend on the batch"
        )
    ]
    assert torch.equal(bits(got), bits(expected))


def _kernels() -> dict[tuple[str, str], str]:
    """What the dispatcher runs for each routed op, at the keys the mode overrides."""
    return {
        (op, key): repr(torch.library.get_kernel(f"aten::{op}", key))
        for op in ("mm", "addmm", "bmm", "linear", "_log_softmax", "rms_norm", "silu")
        for key in ("AutogradCPU", "CPU")
    }


def test_leaving_the_mode_gives_torch_back_also_when_nested_or_raising(aten, rlkernels):
    model, x = MLP(), inputs()
    torch_kernels, torch_result = _kernels(), model(x)
    with aten.batch_invariant():
        inside = model(x)
        assert _kernels() != torch_kernels
        with aten.batch_invariant(strict=False):
            assert aten.is_enabled() and not aten.is_strict()
        assert aten.is_strict(), "the inner block's strictness ends with it"
        with aten.batch_invariant(False):
            assert not aten.is_enabled() and torch.equal(bits(model(x)), bits(torch_result))
        assert aten.is_enabled()
        with pytest.raises(KeyError), aten.batch_invariant(strict=False):
            raise KeyError("inside")
        assert aten.is_enabled() and aten.is_strict()
    assert not aten.is_enabled() and _kernels() == torch_kernels
    assert not torch.equal(bits(inside), bits(torch_result)), "the mode changed nothing: this test would prove nothing"
    assert torch.equal(bits(model(x)), bits(torch_result))
    aten.enable()
    assert torch.equal(bits(model(x)), bits(inside))
    aten.disable()
    assert torch.equal(bits(model(x)), bits(torch_result))


def test_the_mode_is_process_wide(aten):
    """The dispatcher is global: a thread other than the one that turned the mode on is routed too."""
    import threading

    model, x = MLP(), inputs()
    results: dict[str, torch.Tensor] = {}
    with aten.batch_invariant():
        expected = model(x)
        worker = threading.Thread(target=lambda: results.update(out=model(x)))
        worker.start()
        worker.join()
    assert torch.equal(bits(results["out"]), bits(expected))


def test_inference_mode_calls_are_routed_below_autograd(aten):
    model, x = MLP(), inputs()
    with aten.batch_invariant():
        expected = model(x)
        with torch.inference_mode():
            assert torch.equal(bits(model(x)), bits(expected))
            assert batch_dependent_rows(model, x) == []


def test_autocast_casts_first_then_the_cast_call_is_routed(aten):
    model, x = MLP(), inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch_dtype = model(x).dtype
        with aten.batch_invariant():
            assert model(x).dtype == torch_dtype
            assert batch_dependent_rows(model, x) == []
            assert input_grad_dependent_rows(model, x) == []


def _aten_targets(graphs: list[torch.fx.GraphModule]) -> set[str]:
    return {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}


def test_torch_compile_traces_the_packages_ops_into_the_graph_without_breaks_or_warnings(aten):
    """fullgraph=True fails on a graph break.  The graphs AOTAutograd hands to a compiler backend hold
    the package's ops and none of the routed aten ops, so no backend (inductor decomposes
    _log_softmax and silu itself) can put torch's kernels back."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: object) -> Callable[..., object]:
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    model, x = MLP(), inputs()
    with aten.batch_invariant():
        eager = model(x)
        eager_grad = torch.autograd.grad(model(x)[:, 3].sum(), model.mix)[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(model, backend=aot_autograd(fw_compiler=keep, bw_compiler=keep), fullgraph=True)
            out = compiled(x)
            grad = torch.autograd.grad(out[:, 3].sum(), model.mix)[0]
            assert batch_dependent_rows(compiled, x) == []
            plain = torch.compile(model, backend="aot_eager", fullgraph=True)
            assert torch.equal(bits(plain(x)), bits(eager))
        assert [str(w.message) for w in caught] == []
    assert torch.equal(bits(out), bits(eager)) and torch.equal(bits(grad), bits(eager_grad))
    # torch.compile does not see the mode: what it traced inside the mode stays after it ends.
    assert not aten.is_enabled() and torch.equal(bits(plain(x)), bits(eager))
    targets = _aten_targets(graphs)
    routed = {f"aten.{op}.default" for op in ("mm", "addmm", "bmm", "linear", "_log_softmax", "rms_norm", "silu")}
    backward = {"aten.silu_backward.default", "aten._log_softmax_backward_data.default"}
    assert not targets & (routed | backward), sorted(targets & (routed | backward))
    assert {"rlkernels.det_gemm_nt.simt", "rlkernels.silu.elementwise", "rlkernels.rms_norm.rows", "rlkernels.logp.rows"} <= targets
    assert {"rlkernels.det_gemm_tn.simt", "rlkernels.logp_backward.rows", "rlkernels.column_sum.columns"} <= targets


def test_inductor_runs_the_routed_graph(aten):
    model, x = MLP(), inputs()
    with aten.batch_invariant():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True)  # inductor
        assert torch.equal(bits(compiled(x)), bits(eager))


def test_a_route_whose_bits_follow_the_batch_is_caught(aten, monkeypatch):
    """The checks above can fail: linear routed to a product whose summation depends on the number of
    rows (float64 for a batch, the package's kernel for one row) is found out by the same helpers."""

    def batch_dependent_linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if input.shape[0] == 1:
            return aten._linear(input, weight, bias)
        # Products and sums that no routed op computes, so the mutant reaches no route of its own.
        wide = (input.double()[:, None, :] * weight.double()[None, :, :]).sum(-1)
        return (wide if bias is None else wide + bias.double()).to(input.dtype)

    mutant = tuple(dataclasses.replace(r, run=batch_dependent_linear) if r.op == "linear" else r for r in aten._ROUTES)
    monkeypatch.setattr(aten, "_ROUTES", mutant)
    model, x = MLP(), inputs()
    with aten.batch_invariant():
        assert batch_dependent_rows(model, x) != []
        assert input_grad_dependent_rows(model, x) != []
