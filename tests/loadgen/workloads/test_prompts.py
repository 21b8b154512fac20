"""Length distributions and synthetic prompts of an exact token count."""

from __future__ import annotations

import numpy as np
import pytest

from bench.run.endpoint.tokenizer_source import resolve_tokenizer
from loadgen.workloads.prompts import _clean_token_pool, exact_length_prompt, synthetic_requests
from loadgen.workloads.spec import LengthDist, WorkloadError
from tests.support.tokenizers import make_tokenizer

DISTS = {
    "fixed": LengthDist("fixed", value=128),
    "uniform": LengthDist("uniform", low=96, high=160),
    "normal": LengthDist("normal", mean=100.0, std=30.0, min=10, max=200),
    "pareto": LengthDist("pareto", shape=1.5, scale=20.0, max=2000),
}


@pytest.mark.parametrize("kind", sorted(DISTS))
def test_samples_are_ints_within_bounds_and_seeded(kind: str) -> None:
    dist = DISTS[kind]
    a = dist.sample(np.random.default_rng(7), 5000)
    b = dist.sample(np.random.default_rng(7), 5000)
    c = dist.sample(np.random.default_rng(8), 5000)
    assert a.dtype == np.int64 and a.shape == (5000,)
    assert np.array_equal(a, b)
    assert kind == "fixed" or not np.array_equal(a, c)
    assert a.min() >= dist.min and (dist.max is None or a.max() <= dist.max)


def test_distribution_shapes() -> None:
    rng = np.random.default_rng(0)
    assert set(DISTS["fixed"].sample(rng, 10).tolist()) == {128}
    uniform = DISTS["uniform"].sample(rng, 20000)
    assert uniform.min() == 96 and uniform.max() == 160  # both ends inclusive
    normal = DISTS["normal"].sample(rng, 20000)
    assert abs(normal.mean() - 100) < 1.5 and abs(normal.std() - 30) < 1.5
    pareto = DISTS["pareto"].sample(rng, 20000)
    assert pareto.min() >= 20 and np.median(pareto) < pareto.mean()  # heavy right tail
    clipped = LengthDist("normal", mean=1.0, std=5.0).sample(rng, 100)
    assert clipped.min() == 1  # min defaults to 1: never a zero-length request


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "gamma"}, "kind"),
        ({"kind": "uniform", "low": 5}, "high"),
        ({"kind": "uniform", "low": 9, "high": 5}, r"high: must be >= low, got 5"),
        ({"kind": "fixed", "value": 12.5}, "value"),
        ({"kind": "fixed", "value": 0}, "value"),
        ({"kind": "normal", "mean": 10.0, "std": -1.0}, "std"),
        ({"kind": "pareto", "shape": 0.0, "scale": 1.0}, "shape"),
        ({"kind": "fixed", "value": 4, "min": 10, "max": 5}, "max"),
        ({"kind": "fixed", "value": "4"}, "value"),
    ],
)
def test_invalid_parameters_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(WorkloadError, match=match):
        LengthDist(**kwargs)


def test_from_dict_and_to_dict() -> None:
    dist = LengthDist.from_dict({"kind": "uniform", "low": 2, "high": 3}, "input_len")
    assert dist.to_dict() == {"kind": "uniform", "low": 2, "high": 3}  # min 1 is the default
    assert LengthDist.from_dict({**dist.to_dict(), "min": 2}).to_dict()["min"] == 2
    with pytest.raises(WorkloadError, match=r"input_len: unknown key\(s\) \['lo'\]"):
        LengthDist.from_dict({"kind": "uniform", "lo": 2}, "input_len")


def test_synthetic_prompts_re_encode_to_exactly_prompt_tokens() -> None:
    tok = make_tokenizer()
    specs = synthetic_requests(
        tok, 40, LengthDist("uniform", low=1, high=300), DISTS["uniform"], seed=3, api="chat"
    )
    assert len({s.request_id for s in specs}) == 40 and specs[0].request_id == "req-000000"
    for s in specs:
        assert len(tok.encode(s.prompt, add_special_tokens=False)) == s.prompt_tokens
        assert 96 <= s.max_tokens <= 160
        assert s.api == "chat" and s.ignore_eos
    assert len({s.prompt for s in specs}) == 40  # distinct: no accidental prefix-cache hits


def test_synthetic_requests_are_deterministic_in_the_seed() -> None:
    tok = make_tokenizer()
    args = (tok, 10, DISTS["uniform"], DISTS["fixed"])
    assert synthetic_requests(*args, seed=1) == synthetic_requests(*args, seed=1)
    assert synthetic_requests(*args, seed=1) != synthetic_requests(*args, seed=2)
    # Output lengths come from their own random stream: changing them leaves prompts alone.
    other = synthetic_requests(tok, 10, DISTS["uniform"], DISTS["pareto"], seed=1)
    assert [s.prompt for s in other] == [s.prompt for s in synthetic_requests(*args, seed=1)]


def test_a_draw_whose_fixup_cycles_is_drawn_again() -> None:
    # With the "tiny" preset's tokenizer, the ids seed 2892 draws first for a 100-token prompt
    # never re-encode to 100 tokens (the fix-up cycles): found among the 66,000 prompts of a
    # soak, which then failed. A fresh draw gives the prompt.
    tok = resolve_tokenizer("tiny").tokenizer
    pool = _clean_token_pool(tok, np.random.default_rng(0))
    text = exact_length_prompt(tok, 100, np.random.default_rng(2892), pool)
    assert len(tok.encode(text, add_special_tokens=False)) == 100
