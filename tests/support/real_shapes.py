"""A real-shaped model cut to a few layers, for the tests of every switch that changes numbers.

The `tiny` preset (head_dim 32, hidden 64) hides what only real widths show: an fp8 cache, int8
and int4 weights were once judged "garbage" at Llama-3-8B shapes while every test ran tiny ones.
``cut_preset`` keeps Llama-3-8B's widths (hidden 4096, MLP 14336, 32 query and 8 KV heads of
128, its RoPE theta) and cuts the depth and the vocabulary, which change no per-layer shape:
2 layers of 32 and 32,000 tokens of 128,256 (the embedding and LM head then take 1 GiB in
float32, not 4). Registered under its own name in perfmodel's presets for the test's duration,
so that an engine is built from it by name like any preset.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from contextlib import contextmanager

from perfmodel import presets
from perfmodel.model_config import ModelConfig

REAL_SHAPED = "llama-3-8b-cut"
VOCAB = 32_000


def cut_preset(
    name: str = REAL_SHAPED, layers: int = 2, num_kv_heads: int | None = None
) -> ModelConfig:
    """Llama-3-8B's shapes with ``layers`` layers, VOCAB tokens and, where given,
    ``num_kv_heads`` KV heads (1: MQA; 32: MHA; the preset's 8: GQA)."""
    base = presets.get_preset("llama-3-8b")
    return dataclasses.replace(
        base, name=name, num_hidden_layers=layers, vocab_size=VOCAB,
        num_key_value_heads=num_kv_heads or base.num_key_value_heads,
        bos_token_id=1, eos_token_ids=(2,), max_position_embeddings=1024,
    )  # fmt: skip


@contextmanager
def registered(*configs: ModelConfig) -> Iterator[None]:
    """Make each of ``configs`` a preset by its name while the block runs."""
    saved = dict(presets.PRESETS)
    presets.PRESETS.update({c.name: c for c in configs})
    try:
        yield
    finally:
        presets.PRESETS.clear()
        presets.PRESETS.update(saved)


def switch_prompts(num: int = 4, length: int = 48, seed: int = 0) -> list[list[int]]:
    """``num`` prompts of ``length`` ids (>= 3: no special token): the second shares the
    first's first two 16-token blocks (prefix caching has something to reuse once the first
    is cached) and the third repeats an 8-token phrase (n-gram speculation finds drafts)."""
    rng = random.Random(seed)
    out = [[rng.randrange(3, VOCAB) for _ in range(length)] for _ in range(num)]
    if num > 1:
        out[1][:32] = out[0][:32]
    if num > 2:
        out[2] = (out[2][:8] * -(-length // 8))[:length]
    return out
