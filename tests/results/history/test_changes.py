"""Change points: E-divisive means with the t-test, on series whose steps are known."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from results.history.changes import find
from results.history.query import QueryError, parse_since

pytest.importorskip("ruptures", reason="change points need the history extra (ruptures)")


def noisy(levels: list[tuple[int, float]], sd: float = 0.02, seed: int = 0) -> np.ndarray:
    """Runs at each (count, level) in turn, times a lognormal noise of log-sd ``sd``."""
    rng = np.random.default_rng(seed)
    level = np.concatenate([np.full(n, v) for n, v in levels])
    return level * np.exp(rng.normal(0.0, sd, len(level)))


def test_a_step_is_found_at_its_run_with_its_size() -> None:
    (point,) = find(noisy([(30, 100.0), (20, 110.0)], sd=0.01, seed=1))
    assert point.index == 30
    assert point.change_pct == pytest.approx(10.0, abs=1.0)
    assert point.pvalue < 1e-6 and point.mean_before == pytest.approx(100.0, rel=0.02)


def test_two_steps_are_both_found() -> None:
    points = find(noisy([(20, 100.0), (20, 90.0), (20, 100.0)], seed=1))
    assert [p.index for p in points] == [20, 40]
    assert points[0].change_pct < 0 < points[1].change_pct


def test_noise_alone_and_short_series_give_none() -> None:
    for seed in range(5):
        assert find(noisy([(60, 100.0)], sd=0.05, seed=seed)) == []
    assert find([1.0, 2.0, 3.0, 4.0, 5.0]) == []  # fewer than two segments of three runs


def test_since_takes_a_date_a_time_or_an_age() -> None:
    assert parse_since("2026-12-01") == datetime(2026, 12, 1)
    assert parse_since("2026-12-01T04:00+01:00") == datetime(2026, 12, 1, 3, 0)
    age = parse_since("7d")
    assert age is not None and (datetime.now(UTC).replace(tzinfo=None) - age).days == 7
    with pytest.raises(QueryError, match="--since 'last week'"):
        parse_since("last week")
