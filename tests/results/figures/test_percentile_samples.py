"""The one rule for how many samples a percentile needs."""

from __future__ import annotations

import pytest

from results.figures.percentile_samples import min_samples, thin_percentile


@pytest.mark.parametrize(("p", "n"), [(50, 2), (90, 10), (95, 20), (99, 100), (99.9, 1000)])
def test_a_percentile_needs_one_sample_beyond_it(p: float, n: int) -> None:
    assert min_samples(p) == n


def test_thin_percentiles_are_named_and_others_are_not() -> None:
    assert thin_percentile("p99", 3) is not None and "needs >= 100" in thin_percentile("p99", 3)
    assert thin_percentile("p99", 100) is None
    assert thin_percentile("p99.9", 999) is not None
    assert thin_percentile("mean", 1) is None and thin_percentile("max", 0) is None
    with pytest.raises(ValueError, match="percentile"):
        min_samples(100)
