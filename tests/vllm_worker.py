"""vLLM engines, many rollouts: run by tests/test_vllm_plugin.py and tools/bench in a process of its
own, as a user's rollout script runs.

    python tests/vllm_worker.py JOB.json RESULT.json   # every engine of JOB, one after another
    python tests/vllm_worker.py --serve ENGINE.json    # one engine; runs read from stdin, one JSON line each

JOB: {"engines": [ENGINE, ...]}.  ENGINE: {"model": dir, "dtype": "float32" | "bfloat16" | "auto",
"threads": int, "engine": {extra vllm.LLM arguments}, "runs": [RUN, ...], "fails": bool, "config_only": bool}.  RUN:
{"name": str, "prompts": [[ids]], "temperature": float, "seeds": [int] | null, "max_tokens": int,
"reset_prefix_cache": bool, "logprobs": bool, "prompt_logprobs": bool, "threads": int, "load_weights": dir, "n": int,
"record_routing": bool} (the
log-probs of the sampled tokens and of the prompt's, both by default; vLLM reads no prefix cache for
a request that asks for the prompt's; "load_weights": first load that model folder's weights into
the running engine, as TRL's colocated trainer does between steps, through the model's
load_weights, and reset the prefix cache).  RESULT: per engine, its start-up time, its compilation
mode ("NONE" eager, else "<mode>/<backend>") and per run,
per prompt (per sample of it, with "n"), the prompt and completion ids, the float32 bits of the log-prob vLLM reports for every
prompt token (after the first) and every sampled token, and how many prompt tokens came from the
prefix cache, and the threads the run had (with "record_routing", an in-process engine's run also gives the experts
its tokens chose in each sparse block the plugin ran, in the order they ran: rlkernels.moe.record_routing); an engine with "fails" must not start, and its error is recorded instead; with
"config_only", only the engine's config is built (vllm.EngineArgs.create_engine_config, as vllm.LLM builds it), and its
dtype or its error is recorded.  With
--serve, each RUN line on stdin is answered with its result on one line of stdout that starts with
REPLY (vLLM logs to stdout too).

Whether the plugin is on is the environment's RLKERNELS_VLLM, as for any vLLM process.  Where the
environment sets VLLM_ENABLE_V1_MULTIPROCESSING=0, the engine core and its worker run in this
process (the "uni" executor): vLLM is imported once and each engine starts in seconds, not in
two new processes that import it again; otherwise vLLM starts them as a user's script gets them.
"""

from __future__ import annotations

import gc
import json
import os
import struct
import sys
import time
import traceback
from typing import Any

import torch

REPLY = "rlkernels-vllm-worker:"

# vLLM's CPU worker replaces torch.set_num_threads with a no-op once it has bound its threads; an
# in-process engine binds none, and each engine here runs on the threads its job names.
_set_num_threads = torch.set_num_threads


def _bits(value: float) -> int:
    """The float32 bits of a log-prob vLLM reports (a float32 widened to a Python float, exactly)."""
    return int(struct.unpack("<i", struct.pack("<f", value))[0])


def _in_process() -> bool:
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"


def start(spec: dict[str, Any]) -> Any:
    import vllm

    if _in_process():
        _set_num_threads(int(spec.get("threads", 1)))
    extra = {"distributed_executor_backend": "uni"} if _in_process() else {}
    args = {"model": spec["model"], "dtype": spec["dtype"], "skip_tokenizer_init": True, "seed": 0, **extra, **spec.get("engine", {})}
    if spec.get("config_only"):  # the engine's config, built as vllm.LLM builds it, and no engine
        return vllm.EngineArgs(**args).create_engine_config()
    return vllm.LLM(**args)


def rollout(llm: Any, run: dict[str, Any]) -> dict[str, Any]:
    import vllm
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=ids) for ids in run["prompts"]]
    seeds = run.get("seeds") or [None] * len(prompts)
    sampled = run.get("logprobs", True)
    params = [
        vllm.SamplingParams(
            temperature=run["temperature"],
            seed=seed,
            max_tokens=run["max_tokens"],
            min_tokens=run["max_tokens"],
            logprobs=0 if sampled else None,
            prompt_logprobs=0 if run.get("prompt_logprobs", sampled) else None,
            detokenize=False,
            ignore_eos=True,
            n=int(run.get("n", 1)),
        )
        for seed in seeds
    ]
    if run.get("threads") and _in_process():
        _set_num_threads(int(run["threads"]))
    if run.get("load_weights"):
        load_weights(llm, run["load_weights"])
    if run.get("reset_prefix_cache"):
        llm.reset_prefix_cache()
    routing: list[Any] | None = None
    t0 = time.perf_counter()
    if run.get("record_routing"):
        if not _in_process():
            raise SystemExit("vllm_worker: record_routing needs the engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
        from rlkernels import moe

        with moe.record_routing() as chosen:
            outputs = llm.generate(prompts, params, use_tqdm=False)
        routing = [c.tolist() for c in chosen]
    else:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - t0
    results = []
    for ids, out in zip(run["prompts"], outputs):
        prompt_lp = [] if out.prompt_logprobs is None else [_bits(d[t].logprob) for d, t in zip(out.prompt_logprobs[1:], ids[1:])]
        for completion in out.outputs:  # n of them: one result each, in vLLM's order
            sampled_lp = [] if completion.logprobs is None else [_bits(d[t].logprob) for d, t in zip(completion.logprobs, completion.token_ids)]
            results.append(
                {
                    "prompt": list(ids),
                    "completion": list(completion.token_ids),
                    "prompt_logprobs": prompt_lp,
                    "sampled_logprobs": sampled_lp,
                    "cached_tokens": int(out.num_cached_tokens or 0),
                }
            )
    return {"name": run["name"], "seconds": seconds, "threads": torch.get_num_threads(), "outputs": results, "routing": routing}


def load_weights(llm: Any, folder: str) -> None:
    """The weights of the model saved in ``folder``, loaded into the running engine the way TRL's
    colocated GRPO trainer syncs its weights (the model's load_weights, in this process: the uni
    executor); the prefix cache holds keys of the old weights, so it is reset."""
    from safetensors.torch import load_file

    if not _in_process():
        raise SystemExit("vllm_worker: load_weights needs the engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
    state = load_file(os.path.join(folder, "model.safetensors"))
    llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights(iter(state.items()))
    llm.reset_prefix_cache()


def run_engine(spec: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    if spec.get("fails") or spec.get("config_only"):
        try:
            made = start(spec)
        except RuntimeError:  # the refusal under test (RefusedError, or vLLM's own when a worker process refused): its text is the result
            return {"failed": True, "error": traceback.format_exc()}
        dtype = made.model_config.dtype if spec.get("config_only") else None
        return {"failed": False, "error": "", "dtype": str(dtype)}
    llm = start(spec)
    startup = time.perf_counter() - started
    compilation = llm.llm_engine.vllm_config.compilation_config
    mode = compilation.mode.name if compilation.mode.name == "NONE" else f"{compilation.mode.name}/{compilation.backend}"
    runs = [rollout(llm, run) for run in spec["runs"]]
    del llm
    gc.collect()
    return {"startup_seconds": startup, "compilation": mode, "runs": runs}


def serve(spec: dict[str, Any]) -> None:
    llm = start(spec)
    print(REPLY, json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip():
            print(REPLY, json.dumps(rollout(llm, json.loads(line))), flush=True)


def main(argv: list[str]) -> None:
    if argv[0] == "--serve":
        with open(argv[1], encoding="utf-8") as f:
            serve(json.load(f))
        return
    with open(argv[0], encoding="utf-8") as f:
        job = json.load(f)
    t0 = time.perf_counter()
    import vllm  # noqa: F401  (once, before the first engine: its start-up time is the engine's own)

    imported = time.perf_counter() - t0
    engines = [run_engine(spec) for spec in job["engines"]]
    with open(argv[1], "w", encoding="utf-8") as f:
        json.dump({"import_seconds": imported, "engines": engines}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
