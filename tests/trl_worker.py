"""Two GRPO steps of TRL's colocated vLLM mode with rlkernels.trl, in a process of its own (vLLM's
in-process engine sets up torch.distributed and its own state, as in a user's training script):
run by tests/test_trl_integration.py.

    python tests/trl_worker.py JOB.json RESULT.json

JOB: {"model": dir (a saved model and its tokenizer), "dtype": "float32" | "bfloat16",
"temperature": float, "steps": int, "engine": "plugin" | "vllm" (``vllm``: the plugin's kernels, but
vLLM's own processed log-probs, log_softmax of its logits divided in place: what the test must see
fail)}.  RESULT: per rollout, the per-token log-probs TRL received from vLLM (``sampling``), the
trainer's old ones (``old``), the importance ratio TRL computed (``ratio``), TRL's own arithmetic on
the patched model (``trl``: its logits divided by the temperature in Python, then log_softmax;
what the test must see fail too), each as float32 bits over the completion's tokens; per loss
call, the trainer's current per-token log-probs (``current``) and the old ones the loss compares
them with; the dtype vLLM ran in; whether training changed the weights; the seconds the run took.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import torch


def _bits(t: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    """Each row's float32 bits where ``mask`` is set."""
    t = t.detach().float().contiguous()
    return [row.view(torch.int32)[m.bool()].tolist() for row, m in zip(t, mask)]


def main(job_path: str, result_path: str) -> None:
    with open(job_path, encoding="utf-8") as f:
        job = json.load(f)
    started = time.perf_counter()
    import datasets
    import rlkernels.trl as rltrl
    import transformers
    from trl import GRPOConfig
    from trl.generation import vllm_generation

    # vLLM's CPU defaults are a GPU's: a KV cache of GiBs and compiled graphs, which take minutes to
    # set up on two cores.  Neither changes an op (the plugin routes every one of them).
    stock_llm = vllm_generation.LLM
    engines: list[Any] = []

    def small_llm(*args: Any, **kwargs: Any) -> Any:
        llm = stock_llm(*args, **{**kwargs, "enforce_eager": True, "kv_cache_memory_bytes": 64 << 20})
        engines.append(llm)
        return llm

    vllm_generation.LLM = small_llm

    dtype = getattr(torch, job["dtype"])
    model = transformers.AutoModelForCausalLM.from_pretrained(job["model"], dtype=dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(job["model"])
    vocab = model.config.vocab_size
    prompts = [" ".join(f"t{3 + (7 * i + 5 * j) % (vocab - 3)}" for j in range(3 + i % 4)) for i in range(4)]
    args = GRPOConfig(
        output_dir=job["output_dir"], max_steps=job["steps"], learning_rate=1e-2, num_generations=2, max_completion_length=6,
        per_device_train_batch_size=4, report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, bf16=False, seed=0,
        temperature=job["temperature"], beta=0.0, use_vllm=True, vllm_mode="colocate", vllm_max_model_length=128,
    )
    record: dict[str, list[Any]] = {"rollouts": [], "losses": []}
    if job.get("engine", "plugin") == "vllm":
        import rlkernels.vllm as rlkv

        def raw_only(sampler: Any) -> None:  # the plugin's raw log-probs, vLLM's processed ones
            sampler.compute_logprobs = staticmethod(rlkv.log_probs)

        rlkv._install_sampler = raw_only

    def trl_scoring(model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int) -> Any:
        hidden = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = model.lm_head(hidden[:, -logits_to_keep - 1 : -1]).float()
        return torch.log_softmax(logits / job["temperature"], dim=-1).gather(-1, input_ids[:, -logits_to_keep:, None])[..., 0]

    class Recording(rltrl.GRPOTrainer):
        def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *a: Any, **kw: Any) -> Any:
            out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *a, **kw)
            if torch.is_grad_enabled():
                self._current = out[0]
            return out

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            out = super()._generate_and_score_completions(inputs)
            mask = out["completion_mask"]
            with torch.no_grad():
                trl = trl_scoring(
                    self.accelerator.unwrap_model(self.model), torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1),
                    torch.cat([out["prompt_mask"], mask], dim=1), out["completion_ids"].shape[1],
                )
            record["rollouts"].append(
                {
                    "completion_ids": [row[m.bool()].tolist() for row, m in zip(out["completion_ids"], mask)],
                    "sampling": _bits(out["sampling_per_token_logps"], mask),
                    "old": _bits(out["old_per_token_logps"], mask),
                    "trl": _bits(trl, mask),
                    # [B, T] per token, or [B, 1] per sequence (TRL's vllm_importance_sampling_mode)
                    "ratio": _bits(out["importance_sampling_ratio"], mask if out["importance_sampling_ratio"].shape == mask.shape else torch.ones_like(out["importance_sampling_ratio"])),
                }
            )
            return out

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            loss = super()._compute_loss(model, inputs)
            mask = inputs["completion_mask"]
            record["losses"].append({"current": _bits(self._current, mask), "old": _bits(inputs["old_per_token_logps"], mask)})
            return loss

    def reward(completions: list[str], completion_ids: list[list[int]], **kw: Any) -> list[float]:  # varies, so the policy moves
        return [float(sum(ids) % 7) for ids in completion_ids]

    before = [p.detach().clone() for p in model.parameters()]
    trainer = Recording(
        model=model, reward_funcs=reward, args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
    )
    trainer.train()
    moved = any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
    engine_dtype = str(engines[0].llm_engine.model_config.dtype).removeprefix("torch.")
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump({**record, "engine_dtype": engine_dtype, "weights_changed": moved, "seconds": time.perf_counter() - started}, f)
    os._exit(0)  # vLLM's in-process engine and torch.distributed's group need no orderly shutdown here


if __name__ == "__main__":
    main(*sys.argv[1:])
