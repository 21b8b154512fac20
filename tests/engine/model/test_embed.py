"""Embeddings from the model's own forward (ModelRunner.embed, LLMEngine.embed): mean-pooled,
L2-normalized final hidden states, the same whether prompts come alone or together and
whichever attention computes them, and refused where no weights exist."""

from __future__ import annotations

import math

import pytest
import torch

from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from tests.support.engine_fixtures import make_engine

PROMPTS = [[5, 17, 230, 9], [40] * 37, [3, 3, 1000]]


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return make_engine()


def test_each_embedding_is_a_unit_vector_of_the_hidden_size(engine: LLMEngine) -> None:
    vectors = engine.embed(PROMPTS)
    assert len(vectors) == len(PROMPTS)
    for v in vectors:
        assert len(v) == engine.model_config.hidden_size
        assert math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-5)
    assert vectors[0] != vectors[1]


def test_prompts_together_embed_as_each_alone(engine: LLMEngine) -> None:
    together = torch.tensor(engine.embed(PROMPTS))
    alone = torch.tensor([engine.embed([p])[0] for p in PROMPTS])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_the_unfused_attention_gives_the_same_embeddings(engine: LLMEngine) -> None:
    naive = make_engine(attention_backend="naive")
    torch.testing.assert_close(
        torch.tensor(naive.embed(PROMPTS)), torch.tensor(engine.embed(PROMPTS)),
        atol=1e-4, rtol=1e-4,
    )  # fmt: skip


def test_embedding_leaves_generation_as_it_was(engine: LLMEngine) -> None:
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    before = engine.generate([PROMPTS[1]], params)
    engine.embed(PROMPTS)
    assert engine.generate([PROMPTS[1]], params) == before


def test_a_prompt_past_the_context_is_refused(engine: LLMEngine) -> None:
    with pytest.raises(ValueError, match="more than the model's context"):
        engine.embed([[1] * (engine.max_model_len + 1)])


def test_the_simulated_device_has_no_embeddings() -> None:
    sim = make_engine(device="sim", model="llama-3-8b", gpu="a100-80gb")
    with pytest.raises(ValueError, match="no weights"):
        sim.embed([[1, 2, 3]])
