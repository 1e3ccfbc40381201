"""Runs every device kernel of an emulated device package against the same package's CPU kernels.

    python compare_package.py build   PACKAGE_DIR BUILD_DIR   # compile csrc/ into PACKAGE_DIR/rlkernels/_C.so
    python compare_package.py compare PACKAGE_DIR RESULTS [--contracts]   # run the comparisons, write RESULTS (JSON)

PACKAGE_DIR is a generated device package (cuda, rocm or musa) whose csrc/ the caller
prepared for the emulator (tests/test_device_emulated.py).  Each step runs in its own process: importing the package
registers torch.ops.rlkernels, which a process can do once.

For every op, every native kernel registered for the package's device dispatch key is
called through that key on CPU tensors (the emulator runs it), on the shapes, dtypes and inputs of the op's
contract tests (the package's tests/cases.py), and once more with a NaN and infinities in its first float input.
A kernel that declares `portable`, paired with a CPU kernel that does too, must give the CPU
kernel's bits; any other must be as accurate as the op's tolerance class asks.

With --contracts, each device kernel that is not portable (whose bits nothing else pins down:
the tensor-core kernels) also runs the contract tests of its deterministic and batch_invariant
claims on the sizes its tiles call for (batches across tile boundaries, a reduction through
more than stages + 1 steps), in the last of the op's dtypes (the 16-bit path), each call sent
to the emulator; a case's verdict is then "holds" or "BROKEN ...".
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import types
from pathlib import Path

EMULATOR = Path(__file__).resolve().parent
FLAGS = ["-O1", "-DRLK_EMULATOR", "-ffp-contract=off", "-Wno-unknown-pragmas"]


def _arch_macros() -> list[str]:
    """The macros of the platforms' arch-specific targets (build.arch_macros), defined as their own
    compilation defines them: a kernel that needs one (det_gemm's wgmma) runs its own body here, on
    the emulator's device (a 9.0 unless RLK_EMU_ARCH says otherwise), not the kernel it hands other
    devices to."""
    import yaml

    specs = EMULATOR.parent.parent / "specs" / "platforms"
    return sorted({f"-D{macro}" for path in specs.glob("*.yaml") for macro in ((yaml.safe_load(path.read_text()).get("build") or {}).get("arch_macros") or {}).values()})


def build(package: Path, build_dir: Path) -> None:
    from torch.utils import cpp_extension

    csrc = package / "csrc"
    sources = [csrc / "bindings.cpp", *sorted((csrc / "kernels").rglob("*.cpp"))]
    module = cpp_extension.load(
        name="_C",
        sources=[str(s) for s in sources],
        extra_cflags=[*FLAGS, *_arch_macros()],
        extra_include_paths=[str(EMULATOR / "include"), str(EMULATOR), str(csrc)],
        build_directory=str(build_dir),
        verbose=False,
    )
    shutil.copy(module.__file__, package / "rlkernels" / "_C.so")


def _contract_suite(package: Path):
    """The package's contract suite: its cases (one per op) and the helpers its tests share
    (``cases``), its invariance tests (``test_invariance``) and its bitwise comparison."""
    sys.path.insert(0, str(package / "tests"))
    cases = importlib.import_module("cases")
    invariance = importlib.import_module("test_invariance")
    bitwise = importlib.import_module("bitwise")
    return types.SimpleNamespace(
        CASES=cases.CASES,
        empty_cases=cases.empty_cases,
        make_empty_inputs=cases.make_empty_inputs,
        test_deterministic=invariance.test_deterministic,
        test_batch_invariant=invariance.test_batch_invariant,
        bits=bitwise.bits,
    )


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _with_nonfinite(inputs):
    """The inputs with NaN, +inf and -inf at the start of the first float tensor."""

    out = [t.clone() if t is not None else None for t in inputs]
    for t in out:
        if t is not None and t.is_floating_point() and t.numel() >= 3:
            flat = t.view(-1)
            flat[0], flat[1], flat[2] = float("nan"), float("inf"), float("-inf")
            break
    return out


def _offsets_arguments(tests) -> list[str]:
    """The arguments holding packed sequences' offsets: the packed ones, and a paged cache's queries'."""
    return [*tests.offsets.values(), *([tests.paged.query_offsets] if tests.paged is not None else [])]


def _with_offsets_out_of_order(tests, inputs):
    """The inputs with two neighbouring entries of each offsets argument swapped where they differ
    (the first such pair): no row has a sequence, and every packed row must be NaN on both sides."""
    names = [name for name, *_ in tests.args]
    out = list(inputs)
    for arg in _offsets_arguments(tests):
        t = out[names.index(arg)].clone()
        pairs = [i for i in range(t.numel() - 1) if int(t[i]) != int(t[i + 1])]
        if not pairs:
            raise ValueError(f"{arg} = {t.tolist()}: no two neighbouring entries differ, nothing to put out of order")
        t[[pairs[0], pairs[0] + 1]] = t[[pairs[0] + 1, pairs[0]]]
        out[names.index(arg)] = t
    return out


def compare(package: Path, results_path: Path, contracts: bool = False) -> int:
    import torch

    sys.path.insert(0, str(package))
    sys.path.append(str(EMULATOR / "python"))  # stand-ins for vendor Python modules (torch_musa)
    import rlkernels
    from rlkernels._registry import BUILD_PLATFORM, OPS, PLATFORMS

    if rlkernels.NATIVE_ERROR is not None:
        raise SystemExit(f"the emulated native library did not load: {rlkernels.NATIVE_ERROR}")
    # New tensors (outputs included) start filled with NaN, so an element a kernel never
    # writes cannot pass for right by holding a value left over from an earlier case.
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    key = next(p.dispatch_key for p in PLATFORMS if p.name == BUILD_PLATFORM)
    device = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
    suite = _contract_suite(package)
    results: dict[str, list[dict[str, str]]] = {}
    for name, op in OPS.items():
        tests = suite.CASES[name]
        cpu_kernel = next(k for k in op.backends.get("cpu", ()) if op.kernels[k].kind == "native")
        packet = getattr(torch.ops.rlkernels, name)
        rows = results.setdefault(name, [])
        for kernel in (k for k in op.backends.get(BUILD_PLATFORM, ()) if op.kernels[k].kind == "native"):
            portable = "portable" in op.kernels[kernel].guarantees and "portable" in op.kernels[cpu_kernel].guarantees
            cases = [(dtype, shape, seed, "random", {}) for seed, shape in enumerate(tests.shapes) for dtype in tests.dtypes]
            # Bool attributes that change what is computed (rope's layout), at their other setting.
            for flag in tests.flags:
                cases += [(dtype, shape, seed, "random", flag.values[0]) for seed, shape in enumerate(tests.shapes) for dtype in tests.dtypes]
            if portable:
                cases += [(dtype, tests.shapes[0], 0, "nan/inf", {}) for dtype in tests.dtypes]
            if portable and _offsets_arguments(tests):
                cases += [(dtype, tests.shapes[0], 0, "offsets out of order", {}) for dtype in tests.dtypes]
            # Zero-size dimensions and masks with no true entry: every output element must be written.
            for _, (dims, none_kept), _ in suite.empty_cases(tests):
                cases += [(dtype, dims, 16, "none kept" if none_kept else "empty", {}) for dtype in tests.dtypes]
            for dtype, shape, seed, kind, attrs in cases:
                case = {"kernel": kernel, "dtype": dtype, "shape": "x".join(f"{k}{v}" for k, v in sorted(shape.items())), "inputs": f"{kind} {attrs or ''}".strip()}
                if "/" in dtype:  # a case of several dtype variables counts under the first one's dtype
                    case["dtype"], case["dtypes"] = dtype.split("/")[0], dtype
                try:
                    if kind in ("empty", "none kept"):
                        inputs = suite.make_empty_inputs(tests, shape, dtype, "cpu", none_kept=kind == "none kept", seed=seed)
                    else:
                        inputs = tests.make_inputs(shape, dtype, "cpu", seed=seed)
                    if kind == "nan/inf":
                        inputs = _with_nonfinite(inputs)
                    if kind == "offsets out of order":
                        inputs = _with_offsets_out_of_order(tests, inputs)
                    got = _as_tuple(getattr(packet, kernel).redispatch(device, *inputs, **{**tests.attrs, **attrs}))
                    if portable:
                        want = _as_tuple(getattr(packet, cpu_kernel)(*inputs, **{**tests.attrs, **attrs}))
                        diffs = [i for i, (g, w) in enumerate(zip(got, want)) if g.shape != w.shape or g.dtype != w.dtype or not torch.equal(suite.bits(g), suite.bits(w))]
                        case["verdict"] = "identical" if not diffs else f"DIFFERS from cpu/{cpu_kernel} in output {diffs[0]}: " + _describe(got[diffs[0]], want[diffs[0]])
                    else:
                        want = tests.reference(*inputs, **attrs)
                        atol, rtol = tests.tolerance(dtype)
                        for g, w in zip(got, want):
                            if g.is_floating_point():
                                torch.testing.assert_close(g.float(), w.float(), atol=atol, rtol=rtol)
                            else:
                                assert torch.equal(g, w.to(g.dtype)), "integer output differs from the reference"
                        case["verdict"] = "accurate"
                except Exception as exc:  # noqa: BLE001  every case is reported
                    case["verdict"] = f"ERROR {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
                rows.append(case)
                print(name, case, flush=True)
            if contracts and not portable:
                for case in _contract_cases(suite, tests, packet, device, kernel):
                    rows.append(case)
                    print(name, case, flush=True)
    results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


def _contract_cases(suite, tests, packet, device, kernel):
    """The contract tests of the kernel's deterministic and batch_invariant claims, on the sizes
    its tiles call for, with every call sent to the device dispatch key (the emulator)."""
    import pytest
    from rlkernels._registry import BUILD_PLATFORM

    def on_device(name, *args, **attrs):
        return _as_tuple(getattr(packet, name).redispatch(device, *args, **{**tests.attrs, **attrs}))

    # The case's own calls and sizes, pointed at the emulated device: the tests read both through it.
    tests.run_kernel = on_device
    tests.facts = lambda _device, name: tests.kernels[BUILD_PLATFORM][name]
    own = tests.kernels[BUILD_PLATFORM][kernel]
    checks = [c for c in ("deterministic", "batch_invariant") if c in own.guarantees and (c != "batch_invariant" or tests.batch_dim is not None)]
    for check in checks:
        for dtype in tests.dtypes[-1:]:  # emulated tensor cores are slow: the 16-bit path, once
            for variant in tests.variants:
                attrs = variant.values[0]
                dims = tests.contract_dims("cpu", kernel)
                case = {"kernel": kernel, "dtype": dtype, "shape": "x".join(f"{k}{v}" for k, v in sorted(dims.items())), "inputs": f"{check} {attrs or ''}".strip()}
                if "/" in dtype:
                    case["dtype"], case["dtypes"] = dtype.split("/")[0], dtype
                try:
                    getattr(suite, f"test_{check}")(tests, "cpu", kernel, dtype, attrs)
                    case["verdict"] = "holds"
                except (AssertionError, pytest.fail.Exception) as exc:
                    case["verdict"] = f"BROKEN {check}: {str(exc).strip().splitlines()[0][:300]}"
                except Exception as exc:  # noqa: BLE001  every case is reported
                    case["verdict"] = f"ERROR {type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
                yield case


def _describe(got, want) -> str:
    from bitwise import bits  # the package's contract suite's own (its tests/ is on sys.path)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}"
    mismatched = int((bits(got) != bits(want)).sum())
    index = int((bits(got) != bits(want)).view(-1).nonzero()[0])
    return f"{mismatched}/{got.numel()} elements, first at flat index {index}: {got.reshape(-1)[index].item()!r} vs {want.reshape(-1)[index].item()!r}"


def main(argv: list[str]) -> int:
    command, package, path = argv[1], Path(argv[2]), Path(argv[3])
    os.environ.setdefault("MAX_JOBS", "2")
    if command == "build":
        build(package, path)
        return 0
    return compare(package, path, contracts="--contracts" in argv[4:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
