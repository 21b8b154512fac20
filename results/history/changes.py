"""Change points in a metric's series: where its level moved, and how sure that is.

The method is E-divisive means as Hunter (Fleming et al., ICPE 2023) and Apache Otava run it
after MongoDB (Daly et al., ICPE 2020): a divisive search splits the series where the means on
either side differ most, each new split is kept only when a two-sided Student t-test between
the segments on either side finds them different (p below ``max_pvalue``), and a last pass
drops, weakest first, every change point that no longer passes against its neighbours'
segments. The search is ruptures' binary segmentation over the l2 cost (the energy statistic
at alpha = 2, a difference of means), the test scipy's; both come with the ``history`` extra
(docs/history.md says why not otava or signal-processing-algorithms, which pin numpy apart).

A change point at index ``i`` means run ``i`` is the first of the new level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_MAX_PVALUE", "DEFAULT_MIN_SIZE", "ChangePoint", "ChangePointsError", "find"]

# Hunter's defaults: p below 0.001 on a t-test, and no segment shorter than a few runs.
DEFAULT_MAX_PVALUE = 0.001
DEFAULT_MIN_SIZE = 3


class ChangePointsError(RuntimeError):
    """The change-point libraries are not installed; the message says how to install them."""


@dataclass(frozen=True)
class ChangePoint:
    """A level change at ``index`` (the first run of the new level): the means before and
    after (over the segments between its neighbouring change points), the change in percent
    of the mean before, and the t-test's p-value (confidence: 1 - p)."""

    index: int
    mean_before: float
    mean_after: float
    pvalue: float

    @property
    def change_pct(self) -> float:
        if self.mean_before == 0:
            return float("nan")
        return (self.mean_after / self.mean_before - 1.0) * 100.0


def _libraries():  # -> (ruptures, scipy.stats)
    try:
        # Imported here: the history extra is optional; only change points need it.
        import ruptures
        from scipy import stats
    except ImportError:
        raise ChangePointsError(
            "change points need the history extra: pip install 'llm-perf-lab[history]' "
            "(ruptures and scipy)"
        ) from None
    return ruptures, stats


def _test(values: np.ndarray, bounds: list[int], at: int, stats) -> ChangePoint:
    """The t-test of the change at ``bounds[at]`` between its neighbouring segments."""
    left = values[bounds[at - 1] : bounds[at]]
    right = values[bounds[at] : bounds[at + 1]]
    if len(left) < 2 or len(right) < 2 or (np.std(left) == 0 and np.std(right) == 0):
        differ = float(np.mean(left)) != float(np.mean(right))
        p = 0.0 if differ and len(left) + len(right) > 2 else 1.0
    else:
        p = float(stats.ttest_ind(left, right, equal_var=False).pvalue)
    return ChangePoint(bounds[at], float(np.mean(left)), float(np.mean(right)), p)


def find(
    series: Sequence[float],
    max_pvalue: float = DEFAULT_MAX_PVALUE,
    min_size: int = DEFAULT_MIN_SIZE,
) -> list[ChangePoint]:
    """The change points of ``series`` (module docstring), in index order.

    Raises ChangePointsError without the history extra.
    """
    ruptures, stats = _libraries()
    values = np.asarray(series, dtype=float)
    n = len(values)
    if n < 2 * min_size:
        return []
    search = ruptures.Binseg(model="l2", min_size=min_size, jump=1).fit(values.reshape(-1, 1))
    kept: list[int] = []
    for count in range(1, n // min_size):
        try:
            found = search.predict(n_bkps=count)[:-1]
        except ruptures.exceptions.BadSegmentationParameters:
            break
        new = sorted(set(found) - set(kept))
        if not new:
            break
        bounds = [0, *sorted([*kept, new[0]]), n]
        if _test(values, bounds, bounds.index(new[0]), stats).pvalue >= max_pvalue:
            break
        kept = sorted([*kept, new[0]])
    return _merge(values, kept, max_pvalue, stats)


def _merge(values: np.ndarray, kept: list[int], max_pvalue: float, stats) -> list[ChangePoint]:
    """Drop, weakest first, every change point that fails against its neighbours' segments."""
    while kept:
        bounds = [0, *kept, len(values)]
        tested = [_test(values, bounds, i, stats) for i in range(1, len(bounds) - 1)]
        weakest = max(tested, key=lambda c: c.pvalue)
        if weakest.pvalue < max_pvalue:
            return tested
        kept = [k for k in kept if k != weakest.index]
    return []
