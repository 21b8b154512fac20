"""Sampling where the logits are: only token ids come back to the host."""

from __future__ import annotations

import pytest
import torch

from engine.core.request import SamplingParams
from engine.model.sampler import Sampler
from tests.support.cuda import gpu
from tests.support.engine_fixtures import make_engine

PARAMS = {
    "greedy": SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True),
    "temperature": SamplingParams(temperature=0.8, max_tokens=6, ignore_eos=True),
    "top_k_top_p": SamplingParams(
        temperature=1.0, top_k=20, top_p=0.9, max_tokens=6, ignore_eos=True
    ),
    "seeded": SamplingParams(temperature=1.0, seed=3, max_tokens=6, ignore_eos=True),
}


@pytest.mark.parametrize("kind", list(PARAMS))
def test_no_vocabulary_sized_tensor_is_read_back_during_sampling(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine()
    vocab = engine.model_config.vocab_size
    read_back: list[int] = []
    for name in ("cpu", "tolist", "numpy", "item"):
        original = getattr(torch.Tensor, name)

        def spy(self: torch.Tensor, *args: object, _original=original, **kwargs: object):  # type: ignore[no-untyped-def]
            read_back.append(self.numel())
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, spy)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    outputs = engine.generate(prompts, [PARAMS[kind]] * 2)
    assert [len(o) for o in outputs] == [6, 6]
    assert read_back and max(read_back) < vocab  # token ids, never a row of logits


def test_the_cpu_sampler_uses_one_generator_for_host_and_device_draws() -> None:
    sampler = Sampler(5)
    assert sampler.device_generator is sampler.generator
    logits = torch.randn(3, 64, generator=torch.Generator().manual_seed(1))
    params = [SamplingParams(temperature=0.9)] * 3
    again = Sampler(5).sample(logits, params, [None] * 3)
    assert sampler.sample(logits, params, [None] * 3) == again


@gpu
def test_cuda_sampling_matches_the_cpu_for_greedy_and_seeded_rows() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 512, generator=gen) * 4
    params = [SamplingParams(temperature=0.0)] * 3 + [SamplingParams(temperature=1.0, seed=9)] * 3
    cpu = Sampler(0).sample(
        logits, params, [None] * 3 + [torch.Generator().manual_seed(9) for _ in range(3)]
    )
    cuda = Sampler(0, "cuda").sample(
        logits.cuda(), params, [None] * 3 + [torch.Generator().manual_seed(9) for _ in range(3)]
    )
    assert cuda == cpu  # greedy: argmax; seeded: the same host noise on both devices


@gpu
def test_cuda_engine_samples_unseeded_rows_on_the_device() -> None:
    engine = make_engine(device="cuda")
    outputs = engine.generate([[5, 6, 7, 8]] * 2, [PARAMS["top_k_top_p"]] * 2)
    assert [len(o) for o in outputs] == [6, 6]
    assert all(0 <= t < engine.model_config.vocab_size for o in outputs for t in o)
