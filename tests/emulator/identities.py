"""Identities between an emulated device package's own kernels, each run on the emulated device.

    python identities.py PACKAGE_DIR RESULTS   # PACKAGE_DIR built by compare_package.py build

tests/emulator/compare_package.py holds each device kernel to the CPU kernel of its own op; the
catalog also promises identities between ops, which a rollout engine relies on where it
computes what the trainer computes another way:

- logp of the logits det_linear gives (det_gemm_nt's simt kernel, out_fp32) is linear_logp's lp
  and lse, bit for bit (specs/ops/logp.yaml);
- paged_attention over a paged cache is attention over the same keys packed, bit for bit, for
  blocks of every size and in any place (specs/ops/paged_attention.yaml).

Every call here goes to the package's device dispatch key (the emulator); RESULTS gets one
verdict per case: "identical" or "DIFFERS ...".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EMULATOR = Path(__file__).resolve().parent


def main(package: Path, results_path: Path) -> int:
    import torch

    sys.path.insert(0, str(package))
    sys.path.insert(0, str(package / "tests"))  # the contract suite's helpers: bitwise
    sys.path.append(str(EMULATOR / "python"))  # stand-ins for vendor Python modules (torch_musa)
    import rlkernels
    from rlkernels._registry import BUILD_PLATFORM, PLATFORMS

    from bitwise import bits

    if rlkernels.NATIVE_ERROR is not None:
        raise SystemExit(f"the emulated native library did not load: {rlkernels.NATIVE_ERROR}")
    key = next(p.dispatch_key for p in PLATFORMS if p.name == BUILD_PLATFORM)
    device = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def on_device(op: str, kernel: str, *args: object) -> tuple[torch.Tensor, ...]:
        out = getattr(getattr(torch.ops.rlkernels, op), kernel).redispatch(device, *args)
        return out if isinstance(out, tuple) else (out,)

    def verdict(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], names: tuple[str, ...]) -> str:
        for name, g, w in zip(names, got, want):
            if g.shape != w.shape or g.dtype != w.dtype:
                return f"DIFFERS in {name}: {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}"
            differ = bits(g) != bits(w)
            if bool(differ.any()):
                return f"DIFFERS in {name}: {int(differ.sum())} of {g.numel()} elements"
            if g.is_floating_point() and name != "lp" and not bool(torch.isfinite(g).all()):
                return f"DIFFERS in {name}: a NaN or an infinity where every input is valid"
        return "identical"

    results: dict[str, list[dict[str, str]]] = {"logp_of_det_linear_is_linear_logp": [], "paged_attention_is_attention": []}
    generator = torch.Generator().manual_seed(0)

    # logp(det_linear(h, w, out_fp32=True), ids) against linear_logp(h, w, ids): V below and past
    # the 256 lanes, not a multiple of them, and past logp's device batch of 4096 terms; ignore_index
    # and ids outside [0, V) planted.
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n, h_dim, v_dim in ((7, 24, 50), (5, 16, 777), (3, 8, 4500)):
            h = torch.randn(n, h_dim, generator=generator).to(dtype)
            weight = torch.randn(v_dim, h_dim, generator=generator).to(dtype)
            ids = torch.randint(0, v_dim, (n,), generator=generator)
            ids[1], ids[2] = -100, v_dim
            # The emulated grid (3 blocks) takes 384 columns at a time; each column's sum is its own.
            z = torch.cat([on_device("det_gemm_nt", "simt", h, weight[c : c + 384], None, True)[0] for c in range(0, v_dim, 384)], dim=1)
            lp, lse = on_device("logp", "rows", z, ids, -100)
            want_lp, _, want_lse = on_device("linear_logp", "rows", h, weight, ids, -100)
            case = {"dtype": str(dtype).removeprefix("torch."), "shape": f"N{n}xH{h_dim}xV{v_dim}"}
            results["logp_of_det_linear_is_linear_logp"].append({**case, "verdict": verdict((lp, lse), (want_lp, want_lse), ("lp", "lse"))})
            print(case, results["logp_of_det_linear_is_linear_logp"][-1]["verdict"], flush=True)

    # paged_attention over sequences whose keys cross the block of 64 (a decode step, a prefill,
    # a chunk against its prefix, an empty sequence), in caches of blocks of 1, 16, 96 and 128
    # placed at random among unused NaN-filled blocks, against attention on the keys packed.
    heads, kv_heads, head_dim = 4, 2, 16
    keys = [1, 63, 0, 64, 65, 131]
    queries = [min(k, (k, 1, (k + 1) // 2)[i % 3]) for i, k in enumerate(keys)]
    for dtype in (torch.float32, torch.bfloat16):
        for causal, window in ((True, -1), (True, 70), (False, -1)):
            q = torch.randn(sum(queries), heads, head_dim, generator=generator).to(dtype)
            k = torch.randn(sum(keys), kv_heads, head_dim, generator=generator).to(dtype)
            v = torch.randn(sum(keys), kv_heads, head_dim, generator=generator).to(dtype)
            cu_q = torch.tensor([0, *queries]).cumsum(0).to(torch.int32)
            cu_k = torch.tensor([0, *keys]).cumsum(0).to(torch.int32)
            want = on_device("attention", "blocks", q, k, v, cu_q, cu_k, 0.0, causal, window)
            for block_size in (1, 16, 96, 128):
                counts = [-(-n // block_size) for n in keys]
                total = 2 * sum(counts) + 1
                order = torch.randperm(total, generator=generator)
                table = torch.zeros(len(keys), max(counts) + 1, dtype=torch.int32)
                k_cache = torch.full((total * block_size, kv_heads, head_dim), float("nan")).to(dtype)
                v_cache = torch.full((total * block_size, kv_heads, head_dim), float("nan")).to(dtype)
                used = 0
                for b, n in enumerate(keys):
                    ids = order[used : used + counts[b]]
                    table[b, : counts[b]] = ids.to(torch.int32)
                    table[b, counts[b] :] = int(order[-1])  # an unused block: entries past a sequence's keys
                    j = torch.arange(n)
                    rows = ids[j // block_size] * block_size + j % block_size
                    k_cache[rows] = k[int(cu_k[b]) : int(cu_k[b + 1])]
                    v_cache[rows] = v[int(cu_k[b]) : int(cu_k[b + 1])]
                    used += counts[b]
                got = on_device(
                    "paged_attention", "blocks", q, k_cache.reshape(total, block_size, kv_heads, head_dim),
                    v_cache.reshape(total, block_size, kv_heads, head_dim), table, torch.tensor(keys, dtype=torch.int32), cu_q, 0.0, causal, window,
                )
                case = {"dtype": str(dtype).removeprefix("torch."), "shape": f"BS{block_size}", "inputs": f"causal={causal} window={window}"}
                results["paged_attention_is_attention"].append({**case, "verdict": verdict(got, want, ("o", "lse"))})
                print(case, results["paged_attention_is_attention"][-1]["verdict"], flush=True)
    results_path.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
