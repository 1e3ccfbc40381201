"""Benchmarks, as ratios against baselines measured in the same process (`make bench`).

    python -m tools.bench [kernel] [model] [transformers] [transformers-moe] [tp] [vllm] [generator]   (make bench: all seven)
    python -m tools.bench gemm                              (the GEMMs' rows of kernel only)
    python -m tools.bench transformers-large                (not in make bench: minutes per row)
    python -m tools.bench model --op swiglu --op logp       (some rows of the model table)
    python -m tools.bench --quick [sections]                (each at its smallest settings, no report)

One module per section (tools/bench/sections/), each a ``Section`` (core.py): a name, a run that
returns rows, and a format that turns rows into a Markdown table and its notes.  The runner
(runner.py) prints what the run used and each row as it is measured; the report (report.py)
records the rows in docs/performance.json and renders docs/performance.md from them.

  * gemm: the CPU det_gemm kernel (float32 and bfloat16 inputs) and det_gemm_ktree (bfloat16, also
    at the tensor-parallel step's shapes) against torch.matmul on the same tensors, on one thread
    and on all of them, with the GFLOP/s each achieved and whether the kernel's outputs were bitwise
    deterministic and batch-invariant in the run (a table per code path -- AVX-512, AVX2, portable
    -- each from the last run that took it);
  * ops (with gemm, "kernel"): logp and rms_norm against the PyTorch code they replace, the same way;
  * model: every op of one layer of a small model (det_linear projections, swiglu, silu,
    rms_norm, logp, ...) at its shapes, against the PyTorch code it replaces;
  * transformers: a tiny but realistic Qwen2 patched with rlkernels.transformers against the same
    model unpatched (sdpa, full logits, log_softmax), forward and forward+backward;
  * transformers-moe: the same for a Qwen3-MoE (8 experts, top 2, every layer sparse): rlkernels.moe's
    rule against transformers' own experts;
  * transformers-large: the same at H = 1024, 8 layers, 4 × 512 tokens, where the products
    dominate: forward+backward in bfloat16 and float32 only, named on the command line to run;
  * tp: rlkernels.distributed's fixed-order combine against torch.distributed's all_reduce, on 2
    and 4 gloo ranks spawned on this machine, alone and inside a row-parallel linear; and one
    training step of an MLP and a vocabulary head through rlkernels.distributed against the same
    step with torch's bf16 matmuls and all_reduce, on 1 and 2 ranks;
  * vllm: generated tokens per second of vLLM with the rlkernels plugin against stock vLLM, two
    engines of a 20M-parameter Qwen2 each in a worker process of its own, runs alternating between
    them; and the plugin's decode time per token at a short and a long context;
  * generator: a full generate of the catalog, a no-op generate (which must write nothing)
    recognised as such and one rendered all the same (--full), and synthetic catalogs of 100, 300
    and 1,000 copies of det_gemm; then its two goals against what it measured.

The sizes and baselines of the gemm, ops and model tables are data of the op specs (their
``bench`` sections): specs.py reads them, cases.py draws inputs from the signatures, baselines.py
holds the closed vocabulary of PyTorch code a spec may name.

The CPU package is built from generated/cpu in .build/bench-cpu (copied files keep their mtimes
when unchanged, so the build is incremental).
"""
