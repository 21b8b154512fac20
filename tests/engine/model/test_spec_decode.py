"""Speculative decoding parts: n-gram lookup, greedy verification, and the rejection sampler's
output distribution, which must be the target's whatever the draft's."""

from __future__ import annotations

import numpy as np
import torch

from engine.model.rejection_sampler import greedy_verify, rejection_sample
from engine.model.spec_decode import ngram_lookup


def test_ngram_lookup_takes_the_latest_longest_match() -> None:
    tokens = np.array([1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3], dtype=np.int32)
    # Suffix [1, 2, 3] last occurred at index 4, followed by 7, 8, 5.
    assert ngram_lookup(tokens, 2, 3, 3) == [7, 8, 5]
    assert ngram_lookup(tokens, 2, 3, 1) == [7]
    assert ngram_lookup(np.array([4, 5, 6], dtype=np.int32), 1, 2, 3) == []


def test_ngram_lookup_never_matches_across_token_boundaries() -> None:
    # 256 = bytes 00 01 00 00 and 1 = 01 00 00 00: a byte search could match misaligned.
    tokens = np.array([256, 0, 1, 0, 5, 1, 0], dtype=np.int32)
    assert ngram_lookup(tokens, 2, 2, 1) == [5]


def test_greedy_verify_accepts_up_to_the_first_mismatch() -> None:
    assert greedy_verify([5, 6, 7, 8], [5, 6, 7]) == [5, 6, 7, 8]  # all accepted + bonus
    assert greedy_verify([5, 9, 7, 8], [5, 6, 7]) == [5, 9]
    assert greedy_verify([4, 6, 7, 8], [5, 6, 7]) == [4]


def test_rejection_sampler_output_follows_the_target() -> None:
    # A draft unlike the target; 20,000 draws of the first emitted token, chi-square against p.
    vocab, draws = 6, 20_000
    p = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03], dtype=torch.float64)
    q = torch.tensor([0.02, 0.05, 0.08, 0.15, 0.30, 0.40], dtype=torch.float64)
    g = torch.Generator().manual_seed(1234)
    counts = np.zeros(vocab)
    accepted = 0
    for _ in range(draws):
        d = int(torch.multinomial(q, 1, generator=g))
        out = rejection_sample(torch.stack([p, p]), [d], q[None], g)
        counts[out[0]] += 1
        accepted += len(out) == 2
    expected = p.numpy() * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 5 degrees of freedom: the 99.9th percentile of chi-square is 20.5.
    assert chi2 < 20.5, (counts, expected)
    # Acceptance probability is sum(min(p, q)) = 0.02+0.05+0.08+0.15+0.07+0.03 = 0.40.
    assert abs(accepted / draws - 0.40) < 0.02


def test_rejection_sampler_with_a_deterministic_draft() -> None:
    # n-gram drafts are one-hot: accept with p(d), else sample p without d.
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    g = torch.Generator().manual_seed(7)
    counts = np.zeros(3)
    for _ in range(20_000):
        counts[rejection_sample(torch.stack([p, p]), [0], None, g)[0]] += 1
    expected = p.numpy() * 20_000
    assert float(((counts - expected) ** 2 / expected).sum()) < 13.8  # 2 dof, 99.9%
