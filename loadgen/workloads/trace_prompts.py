"""A trace's requests: prompts of the trace's lengths, whose blocks with equal hash ids are equal.

A Mooncake trace names each prompt's blocks of ``block_tokens`` tokens by hash id, in order;
requests with the same ids at the start share that prefix in production, which is what a
prefix cache reuses. To reproduce it, every hash id gets one text of ``block_tokens`` tokens
(built from the seed and the id alone, so it is the same in every request and every run), and a
prompt is its blocks' texts in order: the last block, when the input length is not a multiple,
is a text of the remaining tokens (built from the same id, so equal ids with equal lengths stay
equal). A prompt longer than its ids cover gets fresh text for the rest, and one without ids
(Azure, or a JSONL without ``hash_ids``) is fresh text of exactly its length, shared with none.

Block texts are built to an exact token count each; joined, a merge across a block boundary can
change the count by a token or so. ``prompt_tokens`` is then the joined text's true count, so a
prompt is never mislabelled.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from loadgen.workloads.prompts import _clean_token_pool, exact_length_prompt
from loadgen.workloads.trace import MOONCAKE_BLOCK_TOKENS, TraceEntry
from results.schema.api_kinds import Api

__all__ = ["BlockTexts", "trace_requests"]


class BlockTexts:
    """The text of each (hash id, token count), built once from ``seed`` and the id."""

    def __init__(self, tokenizer: TokenizerLike, seed: int, pool: np.ndarray) -> None:
        self._tokenizer = tokenizer
        self._seed = seed
        self._pool = pool
        self._texts: dict[tuple[int, int], str] = {}

    def text(self, hash_id: int, n_tokens: int) -> str:
        key = (hash_id, n_tokens)
        if key not in self._texts:
            # SeedSequence takes non-negative words only; an id's sign is a word of its own.
            words = [self._seed, 0xB10C, int(hash_id < 0), abs(hash_id), n_tokens]
            rng = np.random.default_rng(np.random.SeedSequence(words))
            self._texts[key] = exact_length_prompt(self._tokenizer, n_tokens, rng, self._pool)
        return self._texts[key]


def _prompt(
    entry: TraceEntry,
    block_tokens: int,
    blocks: BlockTexts,
    tokenizer: TokenizerLike,
    rng: np.random.Generator,
    pool: np.ndarray,
) -> tuple[str, int]:
    """The prompt text of ``entry`` and its true token count (module docstring)."""
    if not entry.hash_ids:
        return exact_length_prompt(tokenizer, entry.input_length, rng, pool), entry.input_length
    parts: list[str] = []
    num_blocks = math.ceil(entry.input_length / block_tokens)
    for j in range(num_blocks):
        n = min(block_tokens, entry.input_length - j * block_tokens)
        if j < len(entry.hash_ids):
            parts.append(blocks.text(entry.hash_ids[j], n))
        else:
            parts.append(exact_length_prompt(tokenizer, n, rng, pool))
    text = "".join(parts)
    return text, len(tokenizer.encode(text, add_special_tokens=False))


def trace_requests(
    entries: list[TraceEntry],
    tokenizer: TokenizerLike,
    seed: int,
    api: Api = "completions",
    ignore_eos: bool = True,
    temperature: float = 0.0,
    *,
    max_requests: int | None = None,
    id_prefix: str = "req",
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> tuple[list[RequestSpec], np.ndarray]:
    """The requests of ``entries`` (the first ``max_requests``) and their schedule (s from 0).

    Request ``i`` has id ``f"{id_prefix}-{i:06d}"``, ``max_tokens`` its entry's
    ``output_length`` and a prompt of its ``input_length`` built from its hash ids of
    ``block_tokens`` tokens each (module docstring).
    """
    chosen = entries if max_requests is None else entries[:max_requests]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7ACE]))
    pool = _clean_token_pool(tokenizer, rng) if chosen else np.zeros(0, dtype=np.int64)
    blocks = BlockTexts(tokenizer, seed, pool)
    specs = []
    for i, e in enumerate(chosen):
        prompt, count = _prompt(e, block_tokens, blocks, tokenizer, rng, pool)
        specs.append(
            RequestSpec(
                request_id=f"{id_prefix}-{i:06d}", prompt=prompt, prompt_tokens=count,
                max_tokens=e.output_length, api=api, ignore_eos=ignore_eos,
                temperature=temperature,
            )
        )  # fmt: skip
    return specs, np.asarray([e.t_s for e in chosen], dtype=np.float64)
