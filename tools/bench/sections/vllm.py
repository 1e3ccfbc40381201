"""Rollouts with vLLM: generated tokens per second with the rlkernels plugin (RLKERNELS_VLLM=1)
against stock vLLM, and the plugin's decode time per token at a short and a long context.

Two engines of the same model, each in a worker process of its own (tests/vllm_worker.py --serve:
the plugin's switch is the environment of the process that starts vLLM), both started once; the
runs alternate between them, the plugin's first in even pairs, stock vLLM's in odd ones.  In
``make bench``'s default set: about a minute and a half on 2 cores, engines' start-up included.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..core import BUILD, ROOT, Context, Formatted, OneTable, yes

WORKER = ROOT / "tests" / "vllm_worker.py"
REPLY = "rlkernels-vllm-worker:"  # tests/vllm_worker.py's REPLY: the start of each answer line


@dataclass(frozen=True)
class VllmModel:
    """A random-initialised Qwen2 written to a temporary folder: hidden H, layers, heads over KV
    heads, MLP width I, vocabulary V (about 20M parameters, the LM head untied)."""

    hidden: int = 512
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2
    intermediate: int = 1408
    vocab: int = 8192

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def parameters(self) -> int:
        h, kv = self.hidden, self.kv_heads * self.head_dim
        attention = h * h * 2 + h * kv * 2 + h + 2 * kv  # q, o; k, v; the q/k/v biases
        layer = attention + 3 * h * self.intermediate + 2 * h
        return 2 * self.vocab * h + self.layers * layer + h

    def decode_flops(self, context: int) -> tuple[int, int]:
        """(the projections' and LM head's, attention's) floating-point operations of one decode token at ``context`` keys."""
        matmul = 2 * (self.parameters - self.vocab * self.hidden)  # every weight once but the embedding's
        attention = self.layers * self.heads * context * self.head_dim * 4  # q·k and p·v
        return matmul, attention


@dataclass(frozen=True)
class VllmSettings:
    """What the section runs: ``prompts`` prompts of ``lengths`` tokens (drawn uniformly), ``tokens``
    greedy tokens each; then one prompt at each of ``contexts`` tokens, decoding ``decode_tokens``."""

    prompts: int
    lengths: tuple[int, int]
    tokens: int
    contexts: tuple[int, ...]
    decode_tokens: int
    pairs: int
    dtype: str = "bfloat16"
    block: int = 32  # stock vLLM's CPU attention takes blocks of a multiple of 32 tokens
    batched_tokens: int = 4096  # a step's token budget: every prompt prefilled in one step


FULL = VllmSettings(prompts=8, lengths=(3, 400), tokens=32, contexts=(128, 1024), decode_tokens=32, pairs=5)
QUICK = VllmSettings(prompts=2, lengths=(3, 40), tokens=4, contexts=(32, 64), decode_tokens=4, pairs=1)
MODEL = VllmModel()

HEADER = [
    "| what | workload | dtype | threads | plugin | stock vLLM | plugin / stock speed | plugin per token vs shortest context (stock's) | runs | plugin's log-prob bits every repeat |",
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
]


@dataclass
class VllmRow:
    what: str
    """"generate" (tokens per second of a batch of rollouts) or "decode" (ms per token at one context)."""
    workload: str
    dtype: str
    threads: int
    plugin: float
    """Generated tokens per second ("generate") or ms per decode token ("decode")."""
    stock: float
    ratio: float
    """Median of the paired speed ratios, plugin / stock (above 1: the plugin was faster)."""
    growth: float
    """A decode row's plugin ms per token over the plugin's at the shortest context (0 for "generate")."""
    stock_growth: float
    reps: int
    same_bits: bool
    """The plugin's sampled tokens and their log-prob bits were the same in every repeat."""


# ---------------------------------------------------------------- the engines


def make_model(model: VllmModel, dtype: str, folder: Path) -> Path:
    import torch
    import transformers

    config = transformers.Qwen2Config(
        hidden_size=model.hidden, num_hidden_layers=model.layers, num_attention_heads=model.heads, num_key_value_heads=model.kv_heads,
        intermediate_size=model.intermediate, vocab_size=model.vocab, max_position_embeddings=4096, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    path = folder / f"qwen2-{dtype}"
    transformers.Qwen2ForCausalLM(config).to(getattr(torch, dtype)).eval().save_pretrained(path)
    return path


class Engine:
    """One engine in a worker process of its own (tests/vllm_worker.py --serve), answering runs."""

    def __init__(self, name: str, spec: dict[str, Any], folder: Path, package: Path, plugin: bool) -> None:
        self.name = name
        spec_path = folder / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if k not in ("RLKERNELS_VLLM", "RLK_NUM_THREADS")}
        # vLLM's engine core and worker in the worker process (the uni executor), on the threads each run names.
        env.update(PYTHONPATH=os.pathsep.join([str(package), env.get("PYTHONPATH", "")]), VLLM_CPU_OMP_THREADS_BIND="0",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0")
        if plugin:
            env["RLKERNELS_VLLM"] = "1"
        self.log: IO[str] = (folder / f"{name}.log").open("w+", encoding="utf-8")
        self.process = subprocess.Popen([sys.executable, str(WORKER), "--serve", str(spec_path)], env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self._reply()  # {"ready": true}: the engine has started

    def _reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return dict(json.loads(line[len(REPLY):]))
        self.log.seek(0)
        sys.exit(f"bench: the {self.name} vLLM engine exited ({self.process.wait()}):\n{self.log.read()[-6000:]}")

    def run(self, run: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(run) + "\n")
        self.process.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@contextmanager
def engines(settings: VllmSettings, package: Path) -> Iterator[tuple[Engine, Engine]]:
    """The plugin's engine and stock vLLM's, on the same model and engine settings."""
    with tempfile.TemporaryDirectory(prefix="rlk-bench-vllm-") as tmp:
        folder = Path(tmp)
        model = make_model(MODEL, settings.dtype, folder)
        spec = {
            "model": str(model), "dtype": settings.dtype, "threads": 1, "runs": [],
            "engine": {
                "enforce_eager": True, "max_model_len": max(*settings.contexts, settings.lengths[1]) + max(settings.tokens, settings.decode_tokens) + 8,
                "max_num_batched_tokens": settings.batched_tokens, "max_num_seqs": max(settings.prompts, 8), "block_size": settings.block,
                "enable_prefix_caching": True, "kv_cache_memory_bytes": 64 << 20,
            },
        }
        started: list[Engine] = []
        try:
            started.append(Engine("plugin", spec, folder, package, plugin=True))
            started.append(Engine("stock", spec, folder, package, plugin=False))
            yield started[0], started[1]
        finally:
            for engine in started:
                engine.close()


# ---------------------------------------------------------------- the runs


def draw_prompts(count: int, lengths: tuple[int, int], vocab: int, seed: int) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(lengths[0], lengths[1] + 1, (count,), generator=g).tolist()
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in sizes]


def signature(result: dict[str, Any]) -> list[tuple[list[int], list[int]]]:
    """A run's sampled tokens and the bits of their log-probs, per prompt."""
    return [(out["completion"], out["sampled_logprobs"]) for out in result["outputs"]]


def alternately(plugin: Engine, stock: Engine, pairs: int, measure: Any) -> tuple[list[float], list[float], bool]:
    """``measure(engine)`` -> (seconds, signature), on each engine in turn, ``pairs`` times after one
    warm-up each, alternating which goes first; returns both engines' times and whether the plugin's
    signature was the same every time."""
    first = measure(plugin)[1]
    measure(stock)
    times: dict[str, list[float]] = {"plugin": [], "stock": []}
    same = True
    for rep in range(pairs):
        for engine in (plugin, stock) if rep % 2 == 0 else (stock, plugin):
            seconds, sig = measure(engine)
            times[engine.name].append(seconds)
            if engine is plugin:
                same = same and sig == first
    return times["plugin"], times["stock"], same


def paired_ratio(plugin_s: Sequence[float], stock_s: Sequence[float]) -> float:
    """Median of the paired ratios stock time / plugin time: the plugin's speed over stock's."""
    return statistics.median(s / p for p, s in zip(plugin_s, stock_s))


def generate_row(plugin: Engine, stock: Engine, settings: VllmSettings, threads: int) -> VllmRow:
    prompts = draw_prompts(settings.prompts, settings.lengths, MODEL.vocab, seed=1)
    run = {"name": "generate", "prompts": prompts, "temperature": 0.0, "max_tokens": settings.tokens, "reset_prefix_cache": True,
           "logprobs": True, "prompt_logprobs": False, "threads": threads}

    def measure(engine: Engine) -> tuple[float, Any]:
        result = engine.run(run)
        return float(result["seconds"]), signature(result)

    plugin_s, stock_s, same = alternately(plugin, stock, settings.pairs, measure)
    generated = settings.prompts * settings.tokens
    return VllmRow(
        what="generate", workload=f"{settings.prompts} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, {settings.tokens} greedy tokens each",
        dtype=settings.dtype, threads=threads, plugin=generated / statistics.median(plugin_s), stock=generated / statistics.median(stock_s),
        ratio=paired_ratio(plugin_s, stock_s), growth=0.0, stock_growth=0.0, reps=len(plugin_s), same_bits=same,
    )


def decode_rows(plugin: Engine, stock: Engine, settings: VllmSettings, threads: int) -> list[VllmRow]:
    """ms per decode token at each context: one prompt of that many tokens, its blocks in the prefix
    cache (prefilled once, before the timed runs), 1 + N greedy tokens minus 1, over N."""
    rows: list[VllmRow] = []
    for context in settings.contexts:
        (prompt,) = draw_prompts(1, (context, context), MODEL.vocab, seed=context)
        base = {"prompts": [prompt], "temperature": 0.0, "reset_prefix_cache": False, "logprobs": True, "prompt_logprobs": False, "threads": threads}
        for engine in (plugin, stock):
            engine.run({**base, "name": "prefill", "max_tokens": 1})

        def measure(engine: Engine, base: dict[str, Any] = base, context: int = context) -> tuple[float, Any]:
            short = engine.run({**base, "name": "one", "max_tokens": 1})
            long = engine.run({**base, "name": "many", "max_tokens": 1 + settings.decode_tokens})
            for result in (short, long):
                cached = result["outputs"][0]["cached_tokens"]
                if cached < context - settings.block:
                    sys.exit(f"bench: the {engine.name} engine read {cached} of {context} prompt tokens from the prefix cache; the decode rows need it")
            return (long["seconds"] - short["seconds"]) / settings.decode_tokens, signature(long)

        plugin_s, stock_s, same = alternately(plugin, stock, settings.pairs, measure)
        plugin_ms, stock_ms = statistics.median(plugin_s) * 1e3, statistics.median(stock_s) * 1e3
        shortest = rows[0] if rows else None
        rows.append(VllmRow(
            what="decode", workload=f"1 prompt at context {context}, {settings.decode_tokens} greedy tokens", dtype=settings.dtype, threads=threads,
            plugin=plugin_ms, stock=stock_ms, ratio=paired_ratio(plugin_s, stock_s),
            growth=plugin_ms / shortest.plugin if shortest else 1.0, stock_growth=stock_ms / shortest.stock if shortest else 1.0,
            reps=len(plugin_s), same_bits=same,
        ))
    return rows


def package_with_entry_point(context: Context) -> Path:
    """The bench's CPU package, with the metadata (the vllm.general_plugins entry point) vLLM finds
    the plugin by, as after pip install."""
    context.package()
    done = subprocess.run([sys.executable, "setup.py", "-q", "egg_info"], cwd=BUILD, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench: setup.py egg_info in {BUILD} failed:\n{done.stderr[-3000:]}")
    return BUILD


class VllmSection(OneTable):
    name = "vllm"
    title = "Rollouts with vLLM: the plugin vs stock vLLM"
    row_type = VllmRow

    def __init__(self, full: VllmSettings = FULL, quick: VllmSettings = QUICK) -> None:
        self.full, self.quick = full, quick

    def run(self, context: Context) -> list[VllmRow]:
        for module in ("transformers", "vllm"):
            try:
                __import__(module)
            except ImportError:
                sys.exit(f"bench: the vllm section needs {module} (pip install 'rlkernels[vllm]' 'rlkernels[transformers]')")
        settings = self.quick if context.quick else self.full
        package = package_with_entry_point(context)
        rows: list[VllmRow] = []
        with engines(settings, package) as (plugin, stock):
            for threads in context.threads():
                for row in [generate_row(plugin, stock, settings, threads), *decode_rows(plugin, stock, settings, threads)]:
                    context.emit(self, row)
                    rows.append(row)
        return rows

    def format(self, rows: Sequence[VllmRow]) -> Formatted:
        lines = []
        for r in rows:
            if r.what == "generate":
                values, growth = f"{r.plugin:.1f} tokens/s | {r.stock:.1f} tokens/s", "—"
            else:
                values, growth = f"{r.plugin:.2f} ms/token | {r.stock:.2f} ms/token", f"{r.growth:.2f} ({r.stock_growth:.2f})"
            lines.append(f"| {r.what} | {r.workload} | {r.dtype} | {r.threads} | {values} | **{r.ratio:.2f}** | {growth} | {r.reps} | {yes(r.same_bits)} |")
        return Formatted([*HEADER, *lines], self.notes())

    def notes(self) -> str:
        m, s = MODEL, self.full
        shares = ", ".join(
            f"{100 * attention / (matmul + attention):.0f}% at context {c}" for c in s.contexts for matmul, attention in [m.decode_flops(c)]
        )
        return f"""\
* In `make bench`'s default set (about a minute and a half on 2 cores; it needs vLLM's CPU build,
  `rlkernels[vllm]`, which `make test` installs): `python -m tools.bench vllm` alone; `--quick` runs {self.quick.prompts} short prompts, {self.quick.tokens} tokens and contexts
  {" and ".join(map(str, self.quick.contexts))}, one pair.
* Model: a random-initialised Qwen2 written to a temporary folder (H = {m.hidden}, {m.layers} layers, {m.heads} query / {m.kv_heads} KV
  heads of {m.head_dim}, I = {m.intermediate}, V = {m.vocab}, untied head: {m.parameters / 1e6:.1f}M parameters), in the row's dtype.
* Two engines of it, each in a process of its own (`tests/vllm_worker.py --serve`, vLLM's uni executor,
  `enforce_eager`, blocks of {s.block} tokens, a step budget of {s.batched_tokens} tokens, prefix caching on): the plugin
  (`RLKERNELS_VLLM=1`) and stock vLLM (unset). Each row runs on both, alternately, after a warm-up each;
  the speed ratio is the median of the paired ratios (above 1: the plugin was faster; the goal is at least 0.7).
  Every run asks for the sampled tokens' log-probs, as a rollout for training does (not the prompt's).
* generate: `llm.generate` of {s.prompts} prompts of {s.lengths[0]}-{s.lengths[1]} random tokens, {s.tokens} greedy tokens each
  (`ignore_eos`), the prefix cache reset first: generated tokens over the call's wall time, prefill included.
* decode: one prompt of the row's context, its blocks in the prefix cache (prefilled before the timed
  runs); (time of 1 + {s.decode_tokens} tokens - time of 1 token) / {s.decode_tokens}. The growth column is the plugin's
  time per token over its own at context {s.contexts[0]} (stock vLLM's over stock's in brackets): decode work
  that does not grow with the context stays, and attention's share of a decode token's arithmetic is
  {shares}. A copy of the whole context every step would grow with it.
* Last column: the plugin's sampled tokens and the bits of their log-probs were the same in every run of the row."""
