"""rlkernels.trl: TRL's GRPOTrainer whose per-token log-probs come from token_logprobs.

Two GRPO steps of TRL 1.16 on a tiny Qwen2 (built from a config, with a word-level tokenizer made in
memory), run twice with other generation and per-device batch sizes: every sequence scored in both
runs gets the same per-token log-prob bits (greedy generation, so both runs score the same
sequences).  Stock TRL with its fused LM head, on the same runs, is not asked to (its log-probs are
not linear_logp's); building the trainer around a model rlkernels already patched works too.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the TRL tests need transformers (make test installs it)")
pytest.importorskip("trl", reason="the TRL tests need trl (make test installs it)")

from package_build import import_built

pytestmark = pytest.mark.slow

VOCAB = 128


@pytest.fixture(scope="module")
def rltrl(request):
    import_built("cpu", request)
    import rlkernels.trl as module

    return module


def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t2")


def model():
    config = transformers.Qwen2Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
        intermediate_size=128, max_position_embeddings=256, initializer_range=0.1, pad_token_id=0, eos_token_id=1,
    )
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(config).eval()


def train(rltrl, tmp_path, generation_batch: int, per_device: int, patched_first: bool) -> dict:
    """Two GRPO steps; returns {sequence ids: per-token log-prob bits} of every scored sequence."""
    import datasets
    import rlkernels.transformers as rlkt
    from trl import GRPOConfig

    seen: dict = {}

    class Recording(rltrl.GRPOTrainer):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
            out = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
            for row, mask, lp in zip(input_ids, attention_mask, out[0]):
                key = tuple(row[mask.bool()].tolist())
                seen.setdefault(key, []).append(tuple(lp.detach().contiguous().view(torch.int32).tolist()))
            return out

    prompts = [" ".join(f"t{3 + (7 * i + 5 * j) % (VOCAB - 3)}" for j in range(3 + i % 4)) for i in range(8)]
    m = model()
    if patched_first:
        rlkt.patch(m)
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, learning_rate=1e-2, num_generations=2, max_completion_length=5,
        per_device_train_batch_size=per_device, generation_batch_size=generation_batch, report_to=[], logging_steps=1,
        save_strategy="no", use_cpu=True, seed=0, temperature=1.0, generation_kwargs={"do_sample": False}, beta=0.0,
    )
    trainer = Recording(
        model=m, reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions], args=args,
        train_dataset=datasets.Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer(),
    )
    assert rlkt.is_patched(trainer.model)
    trainer.train()
    return seen


def test_grpo_steps_give_the_same_log_probs_whatever_the_batching(rltrl, tmp_path):
    a = train(rltrl, tmp_path / "a", generation_batch=8, per_device=4, patched_first=False)
    b = train(rltrl, tmp_path / "b", generation_batch=4, per_device=2, patched_first=True)
    common = set(a) & set(b)
    assert common, "the two runs scored no sequence in common"
    for key in common:
        first = a[key][0]
        assert all(bits == first for bits in a[key] + b[key]), key


def test_temperature_other_than_one_is_refused(rltrl, tmp_path):
    import datasets
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, num_generations=2, per_device_train_batch_size=2, report_to=[], use_cpu=True, temperature=0.7)
    with pytest.raises(ValueError, match="temperature must be 1.0"):
        rltrl.GRPOTrainer(
            model=model(), reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
            train_dataset=datasets.Dataset.from_dict({"prompt": ["t3 t4"] * 2}), processing_class=tokenizer(),
        )


def test_a_model_wrapped_for_several_processes_is_refused(rltrl):
    """Scoring goes through the unwrapped model, so a wrapper's forward never runs: for
    DistributedDataParallel, the one that averages the replicas' gradients.  Any wrapper but
    torch.compile's is refused before a log-prob is computed."""
    import rlkernels.transformers as rlkt

    inner = model()
    rlkt.patch(inner)

    class Wrapper(torch.nn.Module):  # stands for DistributedDataParallel, which needs a process group
        def __init__(self, module):
            super().__init__()
            self.module = module

    trainer = object.__new__(rltrl.GRPOTrainer)
    trainer.accelerator = type("Accelerator", (), {"unwrap_model": staticmethod(lambda wrapped: wrapped.module if isinstance(wrapped, Wrapper) else wrapped)})()
    ids = torch.randint(3, VOCAB, (2, 6))
    mask = torch.ones_like(ids)
    with pytest.raises(ValueError, match="is wrapped in Wrapper, whose forward the log-probs would bypass"):
        trainer._get_per_token_logps_and_entropies(Wrapper(inner), ids, mask, logits_to_keep=3)
    lp, _, _ = trainer._get_per_token_logps_and_entropies(inner, ids, mask, logits_to_keep=3)  # unwrapped: scored
    assert lp.shape == (2, 3)
