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


def test_temperature_scores_the_tempered_logits(rltrl):
    """At TRL's temperature t the trainer scores softmax(logits / t), TRL's distribution: the bits of
    token_logprobs(temperature=t), within float32 error of float64 log_softmax(logits / t), and
    other than the untempered ones."""
    import rlkernels.transformers as rlkt

    m = model()
    rlkt.patch(m)
    ids = torch.randint(3, VOCAB, (3, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    trainer = object.__new__(rltrl.GRPOTrainer)
    trainer.accelerator = type("Accelerator", (), {"unwrap_model": staticmethod(lambda wrapped: wrapped)})()
    trainer.temperature = 0.7
    with torch.no_grad():
        lp, _, _ = trainer._get_per_token_logps_and_entropies(m, ids, mask, logits_to_keep=4)
        want = rlkt.token_logprobs(m, ids, mask, temperature=0.7)[:, -5:-1]
        plain = rlkt.token_logprobs(m, ids, mask)[:, -5:-1]
        z = m.lm_head(m.model(input_ids=ids).last_hidden_state).double()
    ref = torch.log_softmax(z / 0.7, dim=-1)[:, :-1].gather(-1, ids[:, 1:, None])[..., 0][:, -4:]
    assert torch.equal(lp.view(torch.int32), want.view(torch.int32))
    torch.testing.assert_close(lp.double(), ref, rtol=1e-5, atol=1e-5)
    assert not torch.equal(lp, plain)


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
    trainer.temperature = 1.0
    ids = torch.randint(3, VOCAB, (2, 6))
    mask = torch.ones_like(ids)
    with pytest.raises(ValueError, match="is wrapped in Wrapper, whose forward the log-probs would bypass"):
        trainer._get_per_token_logps_and_entropies(Wrapper(inner), ids, mask, logits_to_keep=3)
    lp, _, _ = trainer._get_per_token_logps_and_entropies(inner, ids, mask, logits_to_keep=3)  # unwrapped: scored
    assert lp.shape == (2, 3)


# ---------------------------------------------------------------------------- TRL's colocated vLLM
#
# TRL 1.16's colocated engine asks vLLM for processed log-probs (after temperature), samples at
# TRL's temperature, and corrects the loss by exp(old - sampling) per token.  With rlkernels.trl and
# the plugin the two are one arithmetic: the ratio is exactly 1.

COLOCATE_TEMPERATURE = 0.7
COLOCATE_SIZES = {  # test_vllm_plugin.py's SIZES: head_dim 32
    "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "intermediate_size": 352, "max_position_embeddings": 1024, "initializer_range": 0.1, "pad_token_id": 0, "eos_token_id": 1,
}


def saved_model(folder, dtype: str):
    """A tiny Qwen2 in ``dtype`` and a word-level tokenizer over its vocabulary, saved as vLLM loads them."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = COLOCATE_SIZES["vocab_size"]
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1", unk_token="t2")
    torch.manual_seed(0)
    m = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**COLOCATE_SIZES)).to(getattr(torch, dtype)).eval()
    path = folder / f"qwen2-{dtype}"
    m.save_pretrained(path)
    fast.save_pretrained(path)
    return path


def start_colocated(package_root, folder, dtype: str, engine: str = "plugin", steps: int = 2):
    """The worker process of one colocated run (tests/trl_worker.py), started; ``finish`` waits for it."""
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    folder.mkdir(parents=True, exist_ok=True)
    job, result = folder / "job.json", folder / "result.json"
    job.write_text(json.dumps({"model": str(saved_model(folder, dtype)), "dtype": dtype, "temperature": COLOCATE_TEMPERATURE, "steps": steps,
                               "engine": engine, "output_dir": str(folder / "out")}))
    env = {k: v for k, v in os.environ.items() if k not in ("RLKERNELS_VLLM", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(PYTHONPATH=os.pathsep.join([str(package_root), env.get("PYTHONPATH", "")]), VLLM_CPU_OMP_THREADS_BIND="0", OMP_NUM_THREADS="1")
    # torch.distributed's rendezvous (TRL's colocated engine sets one up): a port of each run's own.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(probe.getsockname()[1]))
    worker = Path(__file__).with_name("trl_worker.py")
    process = subprocess.Popen([sys.executable, str(worker), str(job), str(result)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return process, result, f"{dtype}, {engine}'s processed log-probs"


def finish(started) -> dict:
    import json

    process, result, what = started
    output, _ = process.communicate(timeout=900)
    assert process.returncode == 0 and result.exists(), f"the TRL worker ({what}) failed:\n{output[-8000:]}"
    out = json.loads(result.read_text())
    print(f"TRL colocated GRPO, {what}: {out['seconds']:.1f} s")
    return out


ONE = 0x3F800000  # the bits of 1.0f


@pytest.fixture(scope="module")
def colocated(rltrl, tmp_path_factory) -> dict:
    """The colocated runs, their worker processes side by side: float32 and bfloat16 on the plugin,
    and float32 (one step) with vLLM's own processed log-probs ("vllm")."""
    from package_build import CACHE

    root, folder = CACHE / "inplace-cpu", tmp_path_factory.mktemp("colocate")
    started = {
        "float32": start_colocated(root, folder / "float32", "float32"),
        "bfloat16": start_colocated(root, folder / "bfloat16", "bfloat16"),
        "vllm": start_colocated(root, folder / "vllm", "float32", engine="vllm", steps=1),
    }
    return {key: finish(run) for key, run in started.items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_colocated_vllm_rollout_log_probs_are_the_losss_bit_for_bit(colocated, dtype):
    """Two GRPO steps of TRL's colocated mode at temperature 0.7 with rlkernels.trl: vLLM runs in the
    trainer model's dtype, and every completion token's log-prob TRL received from it equals the
    trainer's old log-prob and the loss's current one bit for bit (integer views), so TRL's
    importance ratio is exactly 1 -- on the rollouts of both steps, the second after the trainer's
    first update was loaded into the engine."""
    out = colocated[dtype]
    assert out["engine_dtype"] == dtype
    assert out["weights_changed"], "the first step did not change the weights the second step's rollouts come from"
    assert len(out["rollouts"]) == 2 and len(out["losses"]) == 2
    tokens = 0
    for step, (rollout, loss) in enumerate(zip(out["rollouts"], out["losses"])):
        for row, (sampling, old, ratio) in enumerate(zip(rollout["sampling"], rollout["old"], rollout["ratio"])):
            where = f"step {step} completion {row} ({rollout['completion_ids'][row]})"
            assert sampling == old, f"{where}: vLLM's log-probs {sampling} are not the trainer's {old}"
            assert ratio == [ONE] * len(ratio), f"{where}: importance ratio {ratio}"
            tokens += len(sampling)
        # The loss sees the rollout's rows shuffled (TRL's _prepare_inputs): the same rows, and its
        # current log-probs are the old ones, so exp(current - old) is exactly 1.
        assert sorted(loss["old"]) == sorted(rollout["old"]), f"step {step}: the loss's rows are not the rollout's"
        for row, (current, old) in enumerate(zip(loss["current"], loss["old"])):
            assert current == old, f"step {step} loss row {row}: the current log-probs {current} are not the old ones {old}"
    assert tokens >= 16, "too few completion tokens were compared"
    assert len({lp for r in out["rollouts"] for row in r["sampling"] for lp in row}) > 8, "the log-probs are not varied"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_colocated_comparison_fails_for_trls_own_scoring(colocated, dtype):
    """The comparison above can fail on the trainer's side: TRL's own arithmetic on the same patched
    model (its logits divided by the temperature in Python, then log_softmax) does not give the
    bits vLLM reported for the same tokens."""
    pairs = [(s, t) for r in colocated[dtype]["rollouts"] for srow, trow in zip(r["sampling"], r["trl"]) for s, t in zip(srow, trow)]
    assert pairs and any(s != t for s, t in pairs), "TRL's own scoring matched vLLM bit for bit"


def test_colocated_comparison_fails_for_vllms_own_processed_log_probs(colocated):
    """... and on the engine's: with vLLM's own processed log-probs (the plugin's kernels for every
    op, but log_softmax of the logits vLLM divided), the log-probs TRL receives are not the trainer's."""
    out = colocated["vllm"]
    pairs = [(s, o) for r in out["rollouts"] for srow, orow in zip(r["sampling"], r["old"]) for s, o in zip(srow, orow)]
    assert pairs and any(s != o for s, o in pairs), "vLLM's own processed log-probs matched the trainer's bit for bit"


# ---------------------------------------------------------------------------- the sampler's hook


class _Processor:
    """A stand-in for one of vLLM's built-in logits processors, active or not."""

    def __init__(self, name: str, state: str, value):
        self.__class__ = type(name, (_Processor,), {})
        setattr(self, state, value)

    def apply(self, logits):
        return logits


def _metadata(temperature, **changes):
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    n = temperature.shape[0]
    fields = {
        "temperature": temperature, "all_greedy": False, "all_random": bool((temperature >= 1e-5).all()), "top_p": None, "top_k": None,
        "generators": {}, "max_num_logprobs": 0, "no_penalties": True, "prompt_token_ids": None,
        "frequency_penalties": torch.zeros(n), "presence_penalties": torch.zeros(n), "repetition_penalties": torch.ones(n),
        "output_token_ids": [[] for _ in range(n)], "allowed_token_ids_mask": None, "bad_words_token_ids": {},
        "logitsprocs": LogitsProcessors(),
    }
    fields.update(changes)
    return SamplingMetadata(**fields)


@pytest.fixture
def sampler(rltrl, monkeypatch):
    """vLLM's Sampler in processed_logprobs mode with the plugin's hook (restored afterwards)."""
    import rlkernels.vllm as rlkv
    from vllm.v1.sample.sampler import Sampler

    monkeypatch.setattr(Sampler, "sample", Sampler.sample)
    monkeypatch.setattr(Sampler, "compute_logprobs", Sampler.compute_logprobs)
    rlkv._install_sampler(Sampler)
    return Sampler(logprobs_mode="processed_logprobs")


def test_sampler_processed_log_probs_are_token_logprobs_at_each_rows_temperature(rltrl, sampler):
    """vLLM's Sampler (its forward, as the engine calls it) with the plugin: rows at temperatures
    0.7, 1.3, 1 and 0 (greedy, taken at 1 as vLLM takes it) in one batch; each sampled token's
    processed log-prob is linear_logp's at the row's temperature bit for bit (the trainer's
    token_logprobs), and the top-k ones are z / t - lse."""
    import rlkernels

    g = torch.Generator().manual_seed(11)
    h = torch.randn(4, 48, generator=g)
    weight = torch.randn(700, 48, generator=g) * 0.3
    z = rlkernels.det_linear(h, weight, out_fp32=True)
    temps = torch.tensor([0.7, 1.3, 1.0, 0.0])
    out = sampler(z.clone(), _metadata(temps, max_num_logprobs=3))
    sampled = out.sampled_token_ids[:, 0].long()
    got = out.logprobs_tensors.logprobs
    for row, t in enumerate([0.7, 1.3, 1.0, 1.0]):
        want = rlkernels.linear_logp(h[row : row + 1], weight, sampled[row : row + 1], temperature=t)[0]
        assert got[row, 0].view(torch.int32) == want[0].view(torch.int32), f"row {row} at temperature {t}"
    assert torch.equal(sampled[3], z[3].argmax())  # the greedy row is greedy
    lse = torch.stack([rlkernels.logp(z[r : r + 1], torch.zeros(1, dtype=torch.int64), temperature=t)[1][0] for r, t in enumerate([0.7, 1.3, 1.0, 1.0])])
    top = (z / torch.tensor([0.7, 1.3, 1.0, 1.0])[:, None] - lse[:, None]).topk(3, dim=-1).values
    assert torch.equal(got[:, 1:].view(torch.int32), top.view(torch.int32))


def test_sampler_comparison_fails_with_a_reciprocal_multiply(rltrl, sampler, monkeypatch):
    """The comparison above can fail: an engine that multiplied by 1 / t instead of dividing (as
    torch on CUDA does for a Python-number divisor) reports other bits for some tokens."""
    import rlkernels
    import rlkernels.vllm as rlkv

    def by_reciprocal(z, temperature=None):
        t = float(temperature[0])
        lse = rlkernels.logp(z, torch.zeros(z.shape[0], dtype=torch.int64), temperature=t)[1]
        return z * (1.0 / temperature[:, None]) - lse[:, None]

    monkeypatch.setattr(rlkv, "log_probs", by_reciprocal)
    g = torch.Generator().manual_seed(12)
    h = torch.randn(64, 48, generator=g)
    weight = torch.randn(700, 48, generator=g) * 0.3
    z = rlkernels.det_linear(h, weight, out_fp32=True)
    out = sampler(z.clone(), _metadata(torch.full((64,), 0.7), max_num_logprobs=0))
    sampled = out.sampled_token_ids[:, 0].long()
    want = rlkernels.linear_logp(h, weight, sampled, temperature=0.7)[0]
    assert not torch.equal(out.logprobs_tensors.logprobs[:, 0].view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({}, None),
        ({"max_num_logprobs": None, "top_p": torch.full((2,), 0.9)}, None),  # no log-probs asked for: sampled as vLLM samples
        ({"top_p": torch.full((2,), 0.9)}, "top_p"),
        ({"top_k": torch.full((2,), 5)}, "top_k"),
        ({"no_penalties": False, "prompt_token_ids": torch.zeros(2, 3, dtype=torch.int64), "repetition_penalties": torch.full((2,), 1.2)}, "penalties"),
        ({"bad_words_token_ids": {0: [[3]]}}, "bad_words"),
        ({"logitsprocs": "min_p"}, "min_p"),
        ({"logitsprocs": "logit_bias"}, "logit_bias"),
        ({"logitsprocs": "inactive"}, None),
        ({"logitsprocs": "custom"}, "logits processor Custom"),
    ],
)
def test_sampler_refuses_processed_log_probs_after_other_processors(rltrl, sampler, changes, why):
    import rlkernels.vllm as rlkv
    from vllm.v1.sample.logits_processor import LogitsProcessors

    procs = {
        "min_p": [_Processor("MinPLogitsProcessor", "min_p_count", 1)],
        "logit_bias": [_Processor("LogitBiasLogitsProcessor", "biases", {0: {3: 1.0}})],
        "inactive": [_Processor("MinPLogitsProcessor", "min_p_count", 0), _Processor("LogitBiasLogitsProcessor", "biases", {}),
                     _Processor("MinTokensLogitsProcessor", "min_toks", {})],
        "custom": [_Processor("Custom", "x", 0)],
    }
    if "logitsprocs" in changes:
        lp = LogitsProcessors()
        lp.argmax_invariant = procs[changes["logitsprocs"]]
        changes = {**changes, "logitsprocs": lp}
    z = torch.randn(2, 50)
    metadata = _metadata(torch.full((2,), 0.7), **changes)
    if why is None:
        sampler(z, metadata)
    else:
        with pytest.raises(rlkv.RefusedError, match=why):
            sampler(z, metadata)
