"""A finished stream's token counts: the output total, its reasoning part, and each chunk's share.

Reasoning models stream their thinking as ``delta.reasoning_content`` (vLLM's reasoning
parsers, DeepSeek's API) or ``delta.reasoning`` (newer vLLM, OpenRouter) before the answer's
``content``. Both are generated tokens: they count in ``output_tokens`` (so TTFT, ITL and TPOT
keep meaning the engine's generation), and the reasoning part is counted beside it.

Where the counts come from, most trusted first:
    * the output total: ``usage.completion_tokens``, else the tokenizer (reasoning text and
      answer text encoded apart, then added), else one token per chunk;
    * the reasoning part: ``usage.completion_tokens_details.reasoning_tokens`` when the server
      reports it, else counted from the stream: the total shared among the chunks (by tokenizer
      weight, see :mod:`loadgen.client.apportion`) and the reasoning chunks' shares added.
      A reported 0 while reasoning chunks streamed is taken for a server that does not fill
      the field (not for a count), and the stream is counted instead.
Each chunk's share sums to the total; with a reported reasoning count the reasoning chunks
share exactly that count and the answer chunks the rest, so tokens.parquet agrees with usage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.client.apportion import apportion_tokens, chunk_token_weights
from loadgen.protocols import TokenizerLike
from perfmodel.files import JSONView
from results.folder.records import TokenSource

__all__ = ["StreamTokens", "count_stream_tokens", "recount_output_tokens", "usage_int"]


@dataclass(frozen=True, slots=True)
class StreamTokens:
    """The token counts of one stream (module docstring).

    Attributes:
        per_chunk: tokens of each chunk, in chunk order; sums to ``output_tokens``.
        output_tokens: every generated token, reasoning included.
        source: where ``output_tokens`` came from.
        reasoning_tokens: the reasoning part of ``output_tokens`` (0 without reasoning).
        reasoning_source: where ``reasoning_tokens`` came from; None without reasoning.
    """

    per_chunk: list[int]
    output_tokens: int
    source: TokenSource
    reasoning_tokens: int
    reasoning_source: TokenSource | None


def usage_int(usage: JSONView | None, *path: str) -> int | None:
    """The non-negative int at ``path`` inside ``usage`` (e.g. ``"completion_tokens"``), or None
    when absent, null or not such an int (a bool is not a count)."""
    value: Any = usage
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _encode_len(tokenizer: TokenizerLike, texts: Sequence[str]) -> int:
    return len(tokenizer.encode("".join(texts), add_special_tokens=False)) if texts else 0


def _share(total: int, picked: Sequence[int], weights: Sequence[int], per_chunk: list[int]) -> None:
    """Write into ``per_chunk`` the chunks ``picked``'s shares of ``total``, by ``weights``."""
    for i, n in zip(picked, apportion_tokens(total, [weights[i] for i in picked]), strict=True):
        per_chunk[i] = n


def recount_output_tokens(
    texts: Sequence[str], reasoning: Sequence[bool], tokenizer: TokenizerLike | None
) -> int | None:
    """The stream's text re-encoded with ``tokenizer``, reasoning and answer apart (each part's
    text joined, so a token split across chunks counts once), or None without a tokenizer: the
    client's side of results.validity.token_reconciliation."""
    if tokenizer is None:
        return None
    thinking = [t for t, r in zip(texts, reasoning, strict=True) if r]
    answer = [t for t, r in zip(texts, reasoning, strict=True) if not r]
    return _encode_len(tokenizer, thinking) + _encode_len(tokenizer, answer)


def count_stream_tokens(
    texts: Sequence[str],
    reasoning: Sequence[bool],
    usage: JSONView | None,
    tokenizer: TokenizerLike | None,
) -> StreamTokens:
    """Count a finished stream: ``texts`` are its chunks' texts, ``reasoning`` says which of
    them are reasoning, ``usage`` is the server's last usage object (or None). The tokenizer
    runs only where the server's counts leave something to count (module docstring)."""
    n = len(texts)
    thinking = [i for i in range(n) if reasoning[i]]
    answer = [i for i in range(n) if not reasoning[i]]
    completion = usage_int(usage, "completion_tokens")
    reported = usage_int(usage, "completion_tokens_details", "reasoning_tokens")
    if reported == 0 and thinking:
        reported = None  # a placeholder 0 beside streamed reasoning: count the stream instead
    source: TokenSource
    if completion is not None:
        total, source = completion, "usage"
    elif tokenizer is not None:
        reasoning_texts = [texts[i] for i in thinking]
        answer_texts = [texts[i] for i in answer]
        total = _encode_len(tokenizer, reasoning_texts) + _encode_len(tokenizer, answer_texts)
        source = "tokenizer"
    else:
        total, source = n, "chunks"
    if reported is not None:
        reported = min(reported, total)

    weights = [1] * n if total == n else chunk_token_weights(tokenizer, texts)
    per_chunk = [0] * n
    # A reported count with reasoning chunks to carry it (and answer chunks for the rest).
    if reported is not None and thinking and (answer or reported == total):
        _share(reported, thinking, weights, per_chunk)
        _share(total - reported, answer, weights, per_chunk)
    elif source == "tokenizer" and thinking and answer:
        # Each part was encoded on its own: share each part among its own chunks.
        assert tokenizer is not None
        _share(_encode_len(tokenizer, [texts[i] for i in thinking]), thinking, weights, per_chunk)
        _share(_encode_len(tokenizer, [texts[i] for i in answer]), answer, weights, per_chunk)
    else:
        per_chunk = apportion_tokens(total, weights) if n else []

    reasoning_source: TokenSource | None
    if reported is not None:
        reasoning_tokens, reasoning_source = reported, "usage"
    elif thinking:
        reasoning_tokens = sum(per_chunk[i] for i in thinking)
        weighed = tokenizer is not None and (source == "tokenizer" or total != n)
        reasoning_source = "tokenizer" if weighed else "chunks"
    else:
        reasoning_tokens, reasoning_source = 0, None
    if reasoning_tokens == 0 and not thinking:
        reasoning_source = None  # usage said 0 and nothing reasoned: no reasoning to source
    return StreamTokens(per_chunk, total, source, reasoning_tokens, reasoning_source)
