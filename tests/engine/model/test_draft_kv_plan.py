"""Speculation with a separate draft: the KV cache is sized for both models' blocks."""

from __future__ import annotations

import pytest
import torch

from engine.core.request import SamplingParams
from engine.model.model_runner import ModelRunner, kv_bytes_per_block
from engine.model.quantization.quantize import weight_bytes
from engine.model.spec_decode import DraftModelProposer
from tests.support.cuda import gpu
from tests.support.engine_fixtures import make_engine, ragged_workload, run

BUDGET = 3 * 1024**2  # bytes: small, so the block count is set by the budget


def _allocated(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _draft_engine(**overrides: object):  # type: ignore[no-untyped-def]
    return make_engine(
        speculative="draft",
        draft_model="tiny",
        num_speculative_tokens=2,
        kv_cache_memory_bytes=BUDGET,
        **overrides,
    )


def test_the_planned_kv_memory_of_target_and_draft_is_what_is_allocated() -> None:
    engine = _draft_engine()
    runner, proposer = engine.executor, engine.proposer
    assert isinstance(runner, ModelRunner) and isinstance(proposer, DraftModelProposer)
    assert runner.draft_model is proposer.model  # the draft loaded before sizing, not after
    n, block = runner.num_kv_blocks, engine.config.cache.block_size
    target_block = kv_bytes_per_block(engine.model_config, block, runner.kv_cache_dtype)
    draft_dtype = next(proposer.model.parameters()).dtype
    draft_block = kv_bytes_per_block(proposer.model.config, block, draft_dtype)
    planned = n * (target_block + draft_block)
    assert planned == _allocated(runner.kv_caches) + _allocated(proposer.kv_caches)
    assert planned <= BUDGET < (n + 1) * (target_block + draft_block)


def test_without_a_draft_the_same_budget_holds_more_blocks() -> None:
    plain = make_engine(kv_cache_memory_bytes=BUDGET)
    with_draft = _draft_engine()
    assert plain.executor.num_kv_blocks > with_draft.executor.num_kv_blocks
    runner = plain.executor
    assert isinstance(runner, ModelRunner) and runner.draft_model is None
    assert _allocated(runner.kv_caches) <= BUDGET


def test_a_budget_too_small_for_one_block_of_both_names_the_draft() -> None:
    with pytest.raises(ValueError, match="the draft's included"):
        make_engine(
            speculative="draft",
            draft_model="tiny",
            num_speculative_tokens=2,
            kv_cache_memory_bytes=1024,
        )


def test_greedy_tokens_with_the_draft_equal_those_without() -> None:
    workload = ragged_workload(4, seed=2)
    assert run(_draft_engine(), workload) == run(
        make_engine(kv_cache_memory_bytes=BUDGET), workload
    )


@gpu
def test_cuda_draft_and_target_caches_fit_the_memory_left_after_both_models() -> None:
    free_before, _ = torch.cuda.mem_get_info()
    engine = make_engine(speculative="draft", draft_model="tiny", num_speculative_tokens=2,
                         device="cuda")  # fmt: skip
    runner, proposer = engine.executor, engine.proposer
    assert isinstance(runner, ModelRunner) and isinstance(proposer, DraftModelProposer)
    kv = _allocated(runner.kv_caches) + _allocated(proposer.kv_caches)
    assert kv + runner.weight_bytes + weight_bytes(proposer.model) <= free_before
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    assert len(engine.generate([[5, 6, 7]], [params])[0]) == 4
