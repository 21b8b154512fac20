"""Sharing a request's output-token total among its streamed chunks.

A server may put several tokens in one SSE event (speculative decoding, detokenizer hold-back,
coalesced writes), and the usage total then differs from the number of content chunks. ITL is
defined per token, so each chunk needs its token count: we apportion the trusted total (usage, or
the tokenizer count of the whole text) over the chunks, weighted by the tokenizer count of each
chunk's text. This runs after the stream has ended, never on the per-chunk hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.protocols import TokenizerLike

__all__ = ["apportion_tokens", "chunk_token_weights", "largest_remainder"]


def largest_remainder(total: int, weights: Sequence[int]) -> list[int]:
    """Split ``total`` into non-negative ints proportional to ``weights`` (Hamilton's method).

    Contract: the result has ``len(weights)`` entries summing to ``total``; each entry is the
    floor of its exact quota or one more; leftover units go to the largest fractional remainders,
    ties to the earlier index. All-zero weights are treated as equal weights. Exact integer math,
    so there is no float rounding drift.

    Raises:
        ValueError: ``total`` < 0, a negative weight, or no weights for a positive total.
    """
    if total < 0:
        raise ValueError(f"largest_remainder total: expected an int >= 0, got {total}")
    if any(w < 0 for w in weights):
        raise ValueError(f"largest_remainder weights: expected ints >= 0, got {list(weights)}")
    n = len(weights)
    if n == 0:
        if total:
            raise ValueError(f"largest_remainder: cannot split {total} over no weights")
        return []
    weight_sum = sum(weights)
    if weight_sum == 0:
        weights = [1] * n
        weight_sum = n
    shares = [total * w // weight_sum for w in weights]
    remainders = [total * w % weight_sum for w in weights]
    leftover = total - sum(shares)
    # Largest remainder first; the index breaks ties so the result is deterministic.
    for i in sorted(range(n), key=lambda j: (-remainders[j], j))[:leftover]:
        shares[i] += 1
    return shares


def apportion_tokens(total_tokens: int, chunk_weights: Sequence[int]) -> list[int]:
    """Tokens per chunk: sums to ``total_tokens``, >= 1 each whenever ``total_tokens`` allows.

    Args:
        total_tokens: the request's output tokens (usage or tokenizer count), >= 0.
        chunk_weights: an estimate of each chunk's tokens (its tokenizer count), >= 0 each.

    Contract:
        * ``total_tokens == len(chunk_weights)``: one token per chunk (the common case of one
          token per event), whatever the weights say.
        * ``total_tokens > len(chunk_weights)``: every chunk gets 1, and the surplus goes by
          largest remainder in proportion to each chunk's weight above 1, so that weights that
          already sum to the total are reproduced exactly.
        * ``total_tokens < len(chunk_weights)``: the server sent more content chunks than tokens
          (e.g. a token's text flushed in two events); the total is split by weight and some
          chunks carry 0, because the sum must stay equal to the total.
    """
    n = len(chunk_weights)
    if total_tokens < 0:
        raise ValueError(f"apportion_tokens total_tokens: expected >= 0, got {total_tokens}")
    if n == 0:
        return []
    if total_tokens == n:
        return [1] * n
    if total_tokens < n:
        return largest_remainder(total_tokens, chunk_weights)
    surplus_weights = [max(w - 1, 0) for w in chunk_weights]
    if not any(surplus_weights):
        surplus_weights = list(chunk_weights)  # all weights <= 1: fall back to plain weights
    surplus = largest_remainder(total_tokens - n, surplus_weights)
    return [1 + s for s in surplus]


def chunk_token_weights(tokenizer: TokenizerLike | None, texts: Sequence[str]) -> list[int]:
    """The tokenizer count of each chunk's text, or equal weights without a tokenizer.

    A chunk's text tokenized alone may count differently from inside the whole output (merges
    across chunk boundaries); that is why these are only weights for :func:`apportion_tokens`.
    """
    if tokenizer is None:
        return [1] * len(texts)
    return [len(tokenizer.encode(text, add_special_tokens=False)) for text in texts]
