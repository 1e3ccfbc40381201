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


@pytest.mark.parametrize("op", ["mm", "log_softmax"])
def test_forward_mode_ad_through_a_route_is_refused_naming_the_op(aten, op):
    """A routed call on dual tensors raises naming the catalog's op; it never hands back a zero tangent."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(5))
    w = torch.randn(6, 3, generator=torch.Generator().manual_seed(6))
    fn = (lambda t: torch.mm(t, w)) if op == "mm" else (lambda t: torch.log_softmax(t, dim=-1))
    import torch.autograd.forward_ad as fwAD

    with aten.batch_invariant(), fwAD.dual_level(), pytest.raises(RuntimeError, match=r"rlkernels[.a-z_ ]*(det_gemm|logp).*forward-mode AD"):
        fn(fwAD.make_dual(x, torch.ones_like(x)))


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


def _watch_routes(aten, monkeypatch) -> list[str]:
    """The op of every route the mode runs from now on, in order."""
    ran: list[str] = []

    def watched(route):
        def run(*args, **kwargs):
            ran.append(route.op)
            return route.run(*args, **kwargs)

        return dataclasses.replace(route, run=run)

    monkeypatch.setattr(aten, "_ROUTES", tuple(watched(r) for r in aten._ROUTES))
    return ran


def _variants() -> dict[str, tuple[str, Callable[[], torch.Tensor], Callable[[], tuple[torch.Tensor, torch.Tensor]]]]:
    """Out= and in-place forms of the routed ops, by torch's API: name -> (the routed op it must
    run, the functional call, the variant returning (what it returned, the tensor it had to write))."""
    g = torch.Generator().manual_seed(6)
    a, w, bias, c = (torch.randn(shape, generator=g) for shape in ((ROWS, 700), (30, 700), (30,), (ROWS, 30)))
    q, k, x = torch.randn(3, ROWS, 32, generator=g), torch.randn(3, 41, 32, generator=g), torch.randn(ROWS, 50, generator=g) * 4

    def into(out: torch.Tensor, call: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return call(out), out

    def inplace(self: torch.Tensor, call: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return call(self), self

    return {
        "mm(out=)": ("mm", lambda: torch.mm(a, w.t()), lambda: into(torch.empty(ROWS, 30), lambda o: torch.mm(a, w.t(), out=o))),
        "matmul(out=) 2-D": ("mm", lambda: a @ w.t(), lambda: into(torch.empty(ROWS, 30), lambda o: torch.matmul(a, w.t(), out=o))),
        "matmul(out=) 3-D": ("bmm", lambda: q @ k.transpose(1, 2), lambda: into(torch.empty(0), lambda o: torch.matmul(q, k.transpose(1, 2), out=o))),
        "matmul(out=) 3-D by 2-D": ("mm", lambda: q @ w[:, :32].t(), lambda: into(torch.empty(3, ROWS, 30), lambda o: torch.matmul(q, w[:, :32].t(), out=o))),
        "bmm(out=)": ("bmm", lambda: torch.bmm(q, k.transpose(1, 2)), lambda: into(torch.empty(3, ROWS, 41), lambda o: torch.bmm(q, k.transpose(1, 2), out=o))),
        "addmm(out=)": ("addmm", lambda: torch.addmm(bias, a, w.t()), lambda: into(torch.empty(ROWS, 30), lambda o: torch.addmm(bias, a, w.t(), out=o))),
        "addmm_": ("addmm", lambda: torch.addmm(c, a, w.t(), beta=0.5, alpha=2), lambda: inplace(c.clone(), lambda s: s.addmm_(a, w.t(), beta=0.5, alpha=2))),
        "linear.out": ("linear", lambda: F.linear(a, w, bias), lambda: into(torch.empty(ROWS, 30), lambda o: torch.ops.aten.linear.out(a, w, bias, out=o))),
        "silu.out": ("silu", lambda: F.silu(x), lambda: into(torch.empty(ROWS, 50), lambda o: torch.ops.aten.silu.out(x, out=o))),
        "silu_": ("silu", lambda: F.silu(x), lambda: inplace(x.clone(), torch.ops.aten.silu_)),
        "F.silu(inplace=True)": ("silu", lambda: F.silu(x), lambda: inplace(x.clone(), lambda s: F.silu(s, inplace=True))),
        "_log_softmax.out": ("_log_softmax", lambda: torch.log_softmax(x, -1), lambda: into(torch.empty(ROWS, 50), lambda o: torch.ops.aten._log_softmax.out(x, -1, False, out=o))),
        "log_softmax(out=)": ("_log_softmax", lambda: torch.log_softmax(x, -1), lambda: into(torch.empty(ROWS, 50), lambda o: torch.log_softmax(x, -1, out=o))),
    }


@pytest.mark.parametrize("name", list(_variants()))
def test_out_and_inplace_forms_run_the_route_and_give_its_bits(aten, monkeypatch, name):
    """Each variant runs the routed op's route (watched) and writes the functional call's routed bits
    into its out or self, which it returns: none reaches torch's kernel unseen."""
    ran = _watch_routes(aten, monkeypatch)
    op, functional, variant = _variants()[name]
    with aten.batch_invariant():
        want = functional()
        ran.clear()
        returned, written = variant()
    assert ran == [op], f"{name} ran {ran}, not the route of {op}"
    assert returned is written
    assert written.shape == want.shape and torch.equal(bits(written), bits(want))


def test_every_overload_of_a_routed_op_reaches_the_mode(aten):
    """By torch's own list of overloads, not the mode's: each one of a routed op and of its in-place
    op is served by the mode's kernel at the autograd key (the decomposition key for the ops torch
    decomposes) and at the CPU key where torch has one there, and is a form the mode knows."""
    listed = []
    with aten.batch_invariant():
        for op in aten.ROUTED:
            for packet_name in (op, f"{op}_"):
                packet = getattr(torch.ops.aten, packet_name, None)
                for overload in [] if packet is None else packet.overloads():
                    qualname = f"aten::{packet_name}" + ("" if overload == "default" else f".{overload}")
                    listed.append(qualname)
                    assert "rlkernels/aten.py" in repr(torch.library.get_kernel(qualname, "AutogradCPU")), qualname
                    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU"):
                        assert "rlkernels/aten.py" in repr(torch.library.get_kernel(qualname, "CPU")), qualname
    forms = {f.qualname: f.kind for op in aten.ROUTED for f in aten._forms(op)}
    assert sorted(forms) == sorted(listed)
    outs = ("aten::mm.out", "aten::bmm.out", "aten::addmm.out", "aten::linear.out", "aten::silu.out", "aten::_log_softmax.out")
    assert {q: forms[q] for q in outs} == dict.fromkeys(outs, "out")
    assert forms["aten::addmm_"] == forms["aten::silu_"] == "inplace"
    assert forms["aten::mm.dtype"] == forms["aten::bmm.dtype_out"] == "refused"


def test_an_overload_with_no_route_is_refused(aten, rlkernels):
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    refusal = r"aten::mm.dtype cannot run batch-invariant here: argument 'out_dtype' must be absent \(no overload of aten::mm taking it is routed\), got float32"
    with aten.batch_invariant(), pytest.raises(rlkernels.UnsupportedError, match=refusal):
        torch.ops.aten.mm.dtype(a, b, torch.float32)
    # Without strict: a warning, then torch's own kernel (which has none for this overload on the host).
    with aten.batch_invariant(strict=False), pytest.warns(aten.BatchVariantWarning, match=refusal), pytest.raises(NotImplementedError):
        torch.ops.aten.mm.dtype(a, b, torch.float32)


def test_out_and_inplace_forms_keep_torchs_rules(aten, rlkernels):
    """What torch does with out= and in-place calls, the mode does: an out of another shape is resized
    (with torch's warning when it held elements), one that aliases an input gets the whole result,
    a strided one keeps its strides; another dtype, out= under autograd, an in-place self that
    cannot hold the result and a leaf that needs its gradient fail with torch's own errors; an
    in-place call's gradient is the functional call's."""
    g = torch.Generator().manual_seed(8)
    a, b, x = torch.randn(5, 40, generator=g), torch.randn(40, 3, generator=g), torch.randn(5, 7, generator=g)

    def torch_warning() -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.mm(a, b, out=torch.empty(2, 2))
        return str(caught[0].message).split(" (Triggered internally")[0]  # where in torch's C++ it came from

    torch_message = torch_warning()
    with aten.batch_invariant():
        want = torch.mm(a, b)
        assert aten.is_enabled() and torch_warning() == torch_message
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            empty = torch.empty(0)
            torch.mm(a, b, out=empty)
        strided = torch.empty(3, 5).t()
        torch.mm(a, b, out=strided)
        assert strided.stride() == (1, 5)
        square = torch.randn(6, 6, generator=g)
        want_square = torch.mm(square, square)
        torch.mm(square, square, out=square)
        for got, expected in ((empty, want), (strided, want), (square, want_square)):
            assert torch.equal(bits(got), bits(expected))
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got double"):
            torch.mm(a, b, out=torch.empty(5, 3, dtype=torch.float64))
        with pytest.raises(RuntimeError, match=r"out=\.\.\. arguments don't support automatic differentiation"):
            torch.mm(a.clone().requires_grad_(), b, out=torch.empty(5, 3))
        with pytest.raises(RuntimeError, match="Bad in-place call"):
            torch.randn(3).addmm_(a, b)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place operation"):
            F.silu(x.clone().requires_grad_(), inplace=True)
        leaf = x.clone().requires_grad_()
        F.silu(leaf * 3, inplace=True).sum().backward()
        inplace_grad, leaf.grad = leaf.grad, None
        F.silu(leaf * 3).sum().backward()
        assert torch.equal(bits(inplace_grad), bits(leaf.grad))
        with torch.inference_mode():  # below autograd, at the CPU key
            assert torch.equal(bits(torch.mm(a, b, out=torch.empty(5, 3))), bits(want))


def test_leaving_the_mode_gives_torch_back_also_when_nested_or_raising(aten, rlkernels):
    model, x = MLP(), inputs()
    torch_result = model(x)
    with aten.batch_invariant():
        inside = model(x)
        with aten.batch_invariant(strict=False):
            assert aten.is_enabled() and not aten.is_strict()
        assert aten.is_strict(), "the inner block's strictness ends with it"
        with aten.batch_invariant(False):
            assert not aten.is_enabled() and torch.equal(bits(model(x)), bits(torch_result))
        assert aten.is_enabled()
        with pytest.raises(KeyError), aten.batch_invariant(strict=False):
            raise KeyError("inside")
        assert aten.is_enabled() and aten.is_strict()
        aten.disable()  # inside a block: this block's state, which its end discards
        assert not aten.is_enabled()
    assert not aten.is_enabled()
    assert not torch.equal(bits(inside), bits(torch_result)), "the mode changed nothing: this test would prove nothing"
    assert torch.equal(bits(model(x)), bits(torch_result))
    aten.enable()
    assert torch.equal(bits(model(x)), bits(inside))
    with aten.batch_invariant(False):
        aten.enable(strict=False)
        assert aten.is_enabled() and not aten.is_strict()
    assert aten.is_enabled() and aten.is_strict(), "enable() outside every block is what a block's end comes back to"
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


def test_blocks_in_several_threads_ending_in_any_order_leave_the_state_set_outside_them(aten):
    """The mode is process-wide and the newest open block decides it: a block's end takes its own
    state away, not the state that was current when it began, so a block that began after another
    and ends before it leaves the mode to the other, and both ended leave it as before them."""
    import threading

    steps = {name: threading.Event() for name in ("a_in", "b_in", "a_out", "b_out")}
    seen: dict[str, tuple[bool, bool]] = {}

    def block(me: str, other: str, **mode: bool) -> None:
        with aten.batch_invariant(**mode):
            steps[f"{me}_in"].set()
            steps[f"{other}_in"].wait(10)
            if me == "b":
                steps["a_out"].wait(10)  # a ends first, b still open
                seen["after a"] = (aten.is_enabled(), aten.is_strict())
        steps[f"{me}_out"].set()

    first = threading.Thread(target=block, args=("a", "b"), kwargs={"strict": False})
    first.start()
    steps["a_in"].wait(10)
    second = threading.Thread(target=block, args=("b", "a"), kwargs={"enabled": True, "strict": True})
    second.start()
    first.join(10)
    second.join(10)
    assert seen == {"after a": (True, True)}, "the open block's state, not the one a's end brought back"
    assert not aten.is_enabled(), "both blocks ended: the mode is off, as before them"


def test_switching_the_mode_in_one_thread_never_breaks_a_call_in_another():
    """enable/disable in a loop beside a thread computing inside the mode: every call finishes, with
    either the routed bits or torch's (the state it started in), and the process does not crash.
    In a child process, so a crash is a failed test, bounded in time."""
    import subprocess
    import sys
    import textwrap

    from package_build import build_inplace

    script = textwrap.dedent(
        """
        import sys, threading, time
        import torch
        import torch.nn.functional as F
        from rlkernels import aten

        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(7)
        a, b, x = torch.randn(37, 700, generator=g), torch.randn(700, 30, generator=g), torch.randn(37, 50, generator=g)
        calls = {
            "mm": lambda: torch.mm(a, b),
            "mm(out=)": lambda: torch.mm(a, b, out=torch.empty(0)),
            "linear": lambda: F.linear(a, b.t()),
            "log_softmax": lambda: torch.log_softmax(x, -1),
        }
        with aten.batch_invariant():
            routed = {name: call() for name, call in calls.items()}
        plain = {name: call() for name, call in calls.items()}
        assert not torch.equal(routed["mm"], plain["mm"]), "the mode changed nothing: this would prove nothing"
        deadline, failures, counts = time.monotonic() + float(sys.argv[1]), [], [0, 0]

        def switch():
            while time.monotonic() < deadline and not failures and counts[0] < 20000:
                aten.enable()
                aten.disable()
                counts[0] += 1

        def compute():
            try:
                while time.monotonic() < deadline and not failures and counts[1] < 20000:
                    with aten.batch_invariant():
                        for name, call in calls.items():
                            got = call()
                            if not (torch.equal(got, routed[name]) or torch.equal(got, plain[name])):
                                failures.append(f"{name}: neither the routed bits nor torch's")
                    counts[1] += 1
            except BaseException as e:
                failures.append(repr(e))

        threads = [threading.Thread(target=switch), threading.Thread(target=compute)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("switches", counts[0], "rounds", counts[1], failures[:3] or "ok")
        """
    )
    root = build_inplace("cpu")
    result = subprocess.run([sys.executable, "-c", script, "4"], cwd=root, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0 and result.stdout.rstrip().endswith("ok"), (result.returncode, result.stdout[-2000:], result.stderr[-2000:])


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


def test_a_function_compiled_outside_the_mode_has_its_matrix_products_routed_inside_it(aten, monkeypatch):
    """inductor runs a matrix product as torch.mm(..., out=buffer), which is the mode's mm.out: routed
    while the mode is on, whenever the function was compiled."""
    ran = _watch_routes(aten, monkeypatch)
    g = torch.Generator().manual_seed(9)
    a, w = torch.randn(ROWS, 700, generator=g), torch.randn(700, 30, generator=g)
    compiled = torch.compile(lambda a, w: torch.mm(a, w) * 2, fullgraph=True)  # inductor
    outside = compiled(a, w)
    assert ran == []
    with aten.batch_invariant():
        inside = compiled(a, w)
        assert ran == ["mm"] and torch.equal(bits(inside), bits(torch.mm(a, w) * 2))
    assert not torch.equal(bits(inside), bits(outside)), "the mode changed nothing: this test would prove nothing"


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
