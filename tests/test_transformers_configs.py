"""rlkernels.transformers on tiny random-weight models built in-process from configs (no
downloads), float32: a packed row's sequences stay apart with an all-ones mask as without one.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the CPU package tests need torch (make test installs it)")
transformers = pytest.importorskip("transformers", reason="the transformers integration tests need transformers (make test installs it)")

from package_build import import_built

pytestmark = pytest.mark.slow  # the CPU package is built first

SIZES = {
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "intermediate_size": 96, "max_position_embeddings": 64, "initializer_range": 0.1, "attn_implementation": "sdpa",
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}


@pytest.fixture(scope="module")
def rlkt(request):
    import_built("cpu", request)
    import rlkernels.transformers as module

    return module


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.int32)


def test_packed_row_with_all_ones_mask_keeps_its_sequences_apart(rlkt):
    """Restarting position_ids define the sequences of a packed row with an all-ones mask, as
    without a mask: the attention and token_logprobs' labels both follow them, and each sequence
    gets the bits it has alone."""
    torch.manual_seed(0)
    model = rlkt.patch(transformers.LlamaForCausalLM(transformers.LlamaConfig(**SIZES)).eval())
    g = torch.Generator().manual_seed(2)
    first, second = torch.randint(3, 128, (9,), generator=g), torch.randint(3, 128, (12,), generator=g)
    ids = torch.cat([first, second])[None]
    positions = torch.cat([torch.arange(9), torch.arange(12)])[None]
    with torch.no_grad():
        ones = rlkt.token_logprobs(model, ids, torch.ones_like(ids), position_ids=positions)[0]
        bare = rlkt.token_logprobs(model, ids, position_ids=positions)[0]
        alone = [rlkt.token_logprobs(model, s[None])[0] for s in (first, second)]
        logits = model(ids, attention_mask=torch.ones_like(ids), position_ids=positions).logits[0]
        logits_alone = model(second[None]).logits[0]
    assert torch.equal(bits(ones), bits(bare))
    assert ones[8] == 0, "no label across the end of the first sequence"
    assert torch.equal(bits(ones[:8]), bits(alone[0][:8])) and torch.equal(bits(ones[9:]), bits(alone[1]))
    assert torch.equal(bits(logits[9:]), bits(logits_alone)), "the second sequence's logits saw the first"

