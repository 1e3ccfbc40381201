"""One vLLM engine, many rollouts: run by tests/test_vllm_plugin.py (and tools/bench) in a process of
its own, as a user's rollout script runs.

    python tests/vllm_worker.py JOB.json RESULT.json

JOB: {"model": dir, "dtype": "float32" | "bfloat16", "engine": {extra vllm.LLM arguments},
"runs": [{"name": str, "prompts": [[ids]], "temperature": float, "seeds": [int] | null,
"max_tokens": int, "reset_prefix_cache": bool}]}.  RESULT: per run, per prompt, the prompt and
completion ids, the float32 bits of the log-prob vLLM reports for every prompt token (after the
first) and every sampled token, and how many prompt tokens came from the prefix cache.  Whether the
plugin is on is the environment's RLKERNELS_VLLM, as for any vLLM process.
"""

from __future__ import annotations

import json
import struct
import sys
import time


def _bits(value: float) -> int:
    """The float32 bits of a log-prob vLLM reports (a float32 widened to a Python float, exactly)."""
    return int(struct.unpack("<i", struct.pack("<f", value))[0])


def main(job_path: str, result_path: str) -> None:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    import vllm
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    llm = vllm.LLM(
        model=job["model"],
        dtype=job["dtype"],
        skip_tokenizer_init=True,
        seed=0,
        **job.get("engine", {}),
    )
    startup = time.perf_counter() - started
    runs = []
    for run in job["runs"]:
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in run["prompts"]]
        seeds = run.get("seeds") or [None] * len(prompts)
        params = [
            vllm.SamplingParams(
                temperature=run["temperature"],
                seed=seed,
                max_tokens=run["max_tokens"],
                min_tokens=run["max_tokens"],
                logprobs=0 if run.get("logprobs", True) else None,
                prompt_logprobs=0 if run.get("logprobs", True) else None,
                detokenize=False,
                ignore_eos=True,
            )
            for seed in seeds
        ]
        if run.get("reset_prefix_cache"):
            llm.reset_prefix_cache()
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - t0
        results = []
        for ids, out in zip(run["prompts"], outputs):
            completion = out.outputs[0]
            prompt_lp = [] if out.prompt_logprobs is None else [_bits(d[t].logprob) for d, t in zip(out.prompt_logprobs[1:], ids[1:])]
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
        runs.append({"name": run["name"], "seconds": seconds, "outputs": results})
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump({"startup_seconds": startup, "runs": runs}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
