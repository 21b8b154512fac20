"""Apportioning a request's token total over its chunks."""

from __future__ import annotations

import random

import pytest

from loadgen.client.apportion import apportion_tokens, chunk_token_weights, largest_remainder
from tests.support.tokenizers import make_tokenizer


def test_one_token_per_chunk_when_totals_match() -> None:
    assert apportion_tokens(4, [3, 0, 9, 1]) == [1, 1, 1, 1]


def test_weights_that_sum_to_the_total_are_reproduced() -> None:
    assert apportion_tokens(6, [1, 3, 1, 1]) == [1, 3, 1, 1]


def test_surplus_goes_by_weight_above_one() -> None:
    assert apportion_tokens(10, [1, 4, 1, 2]) == [1, 6, 1, 2]


def test_all_unit_weights_share_the_surplus_evenly_earliest_first() -> None:
    assert apportion_tokens(6, [1, 1, 1, 1]) == [2, 2, 1, 1]


def test_fewer_tokens_than_chunks_leaves_zeros_but_keeps_the_sum() -> None:
    assert apportion_tokens(2, [1, 1, 1]) == [1, 1, 0]
    assert apportion_tokens(0, [1, 2]) == [0, 0]


def test_random_cases_sum_and_bounds() -> None:
    rng = random.Random(0)
    for _ in range(500):
        weights = [rng.randint(0, 6) for _ in range(rng.randint(1, 12))]
        total = rng.randint(0, 40)
        shares = apportion_tokens(total, weights)
        assert sum(shares) == total and len(shares) == len(weights)
        assert min(shares) >= (1 if total >= len(weights) else 0)


def test_largest_remainder_contract() -> None:
    assert largest_remainder(10, [1, 1, 1]) == [4, 3, 3]
    assert largest_remainder(5, [0, 0]) == [3, 2]
    assert largest_remainder(0, []) == []
    with pytest.raises(ValueError, match="total"):
        largest_remainder(-1, [1])
    with pytest.raises(ValueError, match="weights"):
        largest_remainder(1, [-1])


def test_chunk_token_weights() -> None:
    tok = make_tokenizer()
    texts = ["kalo", " strings tra ka"]
    assert chunk_token_weights(tok, texts) == [len(tok.encode(t)) for t in texts]
    assert chunk_token_weights(None, texts) == [1, 1]
