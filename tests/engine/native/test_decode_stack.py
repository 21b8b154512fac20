"""The C decoder stack (engine/model/decode_stack.py) against the torch model it replaces for
decode steps of 1..4 sequences, and the engine's choice of when to take it."""

from __future__ import annotations

import random

import pytest
import torch

from engine.model.attention import AttentionMetadata
from engine.model.decode_stack import DecodeStack, why_not
from engine.model.model_runner import ModelRunner
from engine.native import lib as native_lib
from tests.support.engine_fixtures import make_engine, ragged_workload

WHY = native_lib.available()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"native kernels unavailable: {WHY}")


def _decode_step(runner: ModelRunner, rows: int, seed: int):
    """A decode step of `rows` sequences of 1..70 tokens of context over shuffled blocks of a
    cache filled with random K/V: (input_ids, positions, meta)."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for cache in runner.kv_caches:
        cache.copy_(torch.randn(cache.shape, generator=gen).to(cache.dtype))
    lens = [rng.randint(1, 70) for _ in range(rows)]
    blocks = list(range(runner.num_kv_blocks))
    rng.shuffle(blocks)
    tables = [[blocks.pop() for _ in range(-(-n // runner.block_size))] for n in lens]
    meta = AttentionMetadata.build([1] * rows, lens, tables, runner.block_size, rows)
    meta.native_decode = True
    input_ids = torch.tensor([rng.randrange(4096) for _ in range(rows)], dtype=torch.int64)
    positions = torch.tensor([n - 1 for n in lens], dtype=torch.int64)
    return input_ids, positions, meta


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_stack_matches_the_torch_model(dtype: str, rows: int) -> None:
    """The same hidden states and the same K/V written, bit for bit, as the model's forward on
    the same native kernels (the stack rounds RoPE and the K/V write as torch does)."""
    runner = make_engine(dtype=dtype, kv_cache_memory_bytes=8 * 2**20).executor
    assert isinstance(runner, ModelRunner) and runner.decode_stack is not None
    input_ids, positions, meta = _decode_step(runner, rows, seed=rows)
    before = [c.clone() for c in runner.kv_caches]
    ours = runner.decode_stack(input_ids, positions, meta)
    ours_caches = [c.clone() for c in runner.kv_caches]
    for cache, saved in zip(runner.kv_caches, before, strict=True):
        cache.copy_(saved)
    with torch.inference_mode():
        ref = runner.model(input_ids, positions, runner.kv_caches, meta)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert torch.equal(ours, ref)
    for a, b in zip(ours_caches, runner.kv_caches, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_engine_tokens_match_with_and_without_the_stack(dtype: str) -> None:
    """Greedy tokens of 4 ragged streams (steps of 1..4 decodes, and mixed steps that take the
    torch model) are the same either way, and the stack did run."""
    workload = ragged_workload(4, seed=3)
    outputs, calls = {}, []
    for use_stack in (True, False):
        engine = make_engine(dtype=dtype)
        runner = engine.executor
        assert isinstance(runner, ModelRunner)
        if use_stack:
            stack = runner.decode_stack
            assert stack is not None

            def counted(*args, _stack=stack):
                calls.append(args[0].shape[0])
                return _stack(*args)

            runner.decode_stack = counted  # type: ignore[assignment]
            counted.covers = stack.covers  # type: ignore[attr-defined]
        else:
            runner.decode_stack = None
        outputs[use_stack] = engine.generate([p for p, _ in workload], [s for _, s in workload])
    assert outputs[True] == outputs[False]
    assert set(calls) >= {1, 4}  # every batch width the workload passes through


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"quantization": "int8"}, "quantized"),
        ({"kv_cache_dtype": "fp8"}, None),  # attention falls back to torch: no stack
        ({"custom_ops": "torch"}, None),
        ({"attention_backend": "torch"}, None),
    ],
)
def test_engine_keeps_the_torch_model_where_the_stack_does_not_cover(
    overrides: dict, reason: str | None
) -> None:
    engine = make_engine(**overrides)
    runner = engine.executor
    assert isinstance(runner, ModelRunner) and runner.decode_stack is None
    if reason is not None:
        assert reason in (why_not(runner.model, runner.kv_caches) or "")
    out = engine.generate([[5, 6, 7]], ragged_workload(1)[0][1])
    assert len(out[0]) >= 1


def test_a_token_id_past_the_vocabulary_raises_instead_of_reading_past_the_table() -> None:
    runner = make_engine(kv_cache_memory_bytes=8 * 2**20).executor
    assert isinstance(runner, ModelRunner) and runner.decode_stack is not None
    input_ids, positions, meta = _decode_step(runner, 1, seed=0)
    with pytest.raises(IndexError, match="vocabulary"):
        runner.decode_stack(torch.tensor([4096]), positions, meta)
    assert DecodeStack.covers(input_ids, meta)
    meta.native_decode = False
    assert not DecodeStack.covers(input_ids, meta)
