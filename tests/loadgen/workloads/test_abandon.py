"""The [abandon] share: which requests carry the rule, drawn from the seed."""

from __future__ import annotations

import pytest

from loadgen.request_spec import Abandon, RequestSpec
from loadgen.workloads.abandon import AbandonShare
from loadgen.workloads.spec import ParameterError


def sessions(n: int) -> list[list[RequestSpec]]:
    return [[RequestSpec(f"r{i}", "x", 1, 4)] for i in range(n)]


def test_share_is_drawn_from_the_seed() -> None:
    rule = AbandonShare(share=0.3, after_tokens=5)
    first = rule.apply(sessions(400), seed=1)
    picked = [s[0].request_id for s in first if s[0].abandon is not None]
    assert 0.2 < len(picked) / 400 < 0.4
    assert all(s[0].abandon == Abandon(5, None) for s in first if s[0].abandon is not None)
    again = [s[0].request_id for s in rule.apply(sessions(400), seed=1) if s[0].abandon]
    other = [s[0].request_id for s in rule.apply(sessions(400), seed=2) if s[0].abandon]
    assert again == picked and other != picked
    assert all(s[0].abandon for s in AbandonShare(1.0, after_s=0.5).apply(sessions(5), 0))
    assert not any(s[0].abandon for s in AbandonShare(0.0, after_s=0.5).apply(sessions(5), 0))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"share": 1.5, "after_tokens": 3}, "share"),
        ({"share": 0.5}, "after_tokens"),
        ({"share": 0.5, "after_tokens": 0}, "after_tokens"),
        ({"share": 0.5, "after_s": 0.0}, "after_s"),
    ],
)
def test_bad_parameters_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ParameterError) as info:
        AbandonShare(**kwargs)
    assert info.value.field == field
