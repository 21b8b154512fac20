"""Sampling: greedy, seeds, top-k, top-p, and the sampled distribution itself."""

from __future__ import annotations

import torch

from engine.core.request import SamplingParams
from engine.model.sampler import Sampler, row_argmax


def test_greedy_is_argmax() -> None:
    logits = torch.randn(5, 50)
    out = Sampler().sample(logits, [SamplingParams(temperature=0)] * 5, [None] * 5)
    assert out == logits.argmax(-1).tolist()


def test_seeded_request_is_reproducible_whatever_the_batch() -> None:
    torch.manual_seed(0)
    row = torch.randn(1, 100)
    p = SamplingParams(temperature=1.0, seed=42)

    def alone() -> list[int]:
        g = torch.Generator().manual_seed(42)
        return [Sampler(1).sample(row, [p], [g])[0] for _ in range(1)]

    g = torch.Generator().manual_seed(42)
    batch = torch.cat([torch.randn(3, 100), row])
    params = [SamplingParams(temperature=0.7)] * 3 + [p]
    in_batch = Sampler(2).sample(batch, params, [None, None, None, g])[3]
    assert alone() == [in_batch]


def test_top_k_only_draws_from_the_k_best() -> None:
    logits = torch.tensor([[5.0, 4.0, 3.0, 0.0, -1.0]]).repeat(400, 1)
    params = [SamplingParams(temperature=2.0, top_k=2)] * 400
    out = Sampler(0).sample(logits, params, [None] * 400)
    assert set(out) == {0, 1}


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log().repeat(400, 1)
    out = Sampler(0).sample(logits, [SamplingParams(top_p=0.8)] * 400, [None] * 400)
    assert set(out) == {0, 1}
    # p just above 0.8 needs the third token too.
    out = Sampler(0).sample(logits, [SamplingParams(top_p=0.81)] * 400, [None] * 400)
    assert set(out) == {0, 1, 2}


def test_sampled_frequencies_follow_the_distribution() -> None:
    probs = torch.tensor([0.6, 0.25, 0.1, 0.05])
    n = 20_000
    logits = probs.log().repeat(n, 1)
    out = torch.tensor(Sampler(3).sample(logits, [SamplingParams()] * n, [None] * n))
    freq = torch.bincount(out, minlength=4).float() / n
    # 4 standard errors of a binomial proportion at n=20,000 is under 0.014.
    assert torch.allclose(freq, probs, atol=0.014)


def test_row_argmax_equals_torch_argmax_ties_included() -> None:
    gen = torch.Generator().manual_seed(0)
    for vocab in (4096, 4097, 64, 640):
        x = torch.randn(33, vocab, generator=gen)
        x[0, 5] = x[0, 600 % vocab] = x[0].max() + 1  # a tie: the first index wins
        x[1, :] = 0.0  # all equal
        assert torch.equal(row_argmax(x), x.argmax(dim=-1)), vocab
