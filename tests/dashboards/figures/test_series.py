"""Binning, rates, interval averages and CDFs behind every timeline and distribution."""

from __future__ import annotations

import numpy as np
import pytest

from dashboards.figures.series import (
    bin_centers,
    bin_edges,
    bin_mean,
    bin_width_s,
    binned_rate,
    cdf_points,
    intervals_mean,
)


def test_bin_width_is_the_smallest_nice_width_within_the_bin_budget() -> None:
    assert bin_width_s(10.0, max_bins=100) == 0.1
    assert bin_width_s(11.0, max_bins=100) == 0.2
    assert bin_width_s(3600.0, max_bins=300) == 15.0
    assert bin_width_s(0.0) == 0.01
    assert bin_width_s(10 * 24 * 3600.0, max_bins=10) == 24 * 3600.0
    with pytest.raises(ValueError, match="max_bins"):
        bin_width_s(1.0, max_bins=0)


def test_edges_cover_the_end_and_centers_are_midpoints() -> None:
    edges = bin_edges(0.0, 1.05, 0.5)
    assert edges.tolist() == [0.0, 0.5, 1.0, 1.5]
    assert bin_centers(edges).tolist() == [0.25, 0.75, 1.25]
    assert bin_edges(0.0, 0.0, 1.0).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="width_s"):
        bin_edges(0.0, 1.0, 0.0)


def test_binned_rate_is_amount_per_second_and_keeps_the_last_edge() -> None:
    edges = np.array([0.0, 0.5, 1.0])
    rate = binned_rate(np.array([0.1, 0.2, 0.6, 1.0, 5.0]), np.array([1, 2, 3, 4, 100]), edges)
    # 3 tokens in the first half second, 3 + 4 in the second (1.0 is the last edge); 5.0 is out.
    assert rate.tolist() == [6.0, 14.0]


def test_bin_mean_leaves_empty_bins_as_gaps() -> None:
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    mean = bin_mean(np.array([0.5, 0.7, 2.5, 2.6]), np.array([1.0, 3.0, 5.0, np.nan]), edges)
    assert mean[0] == 2.0 and np.isnan(mean[1]) and mean[2] == 5.0


def test_intervals_mean_is_the_exact_time_average_of_open_intervals() -> None:
    edges = np.array([0.0, 1.0, 2.0, 3.0])
    # [0.5, 2.5) and [1.0, 1.25): bin 0 half covered; bin 1 one full + a quarter; bin 2 half.
    got = intervals_mean(np.array([0.5, 1.0]), np.array([2.5, 1.25]), edges)
    np.testing.assert_allclose(got, [0.5, 1.25, 0.5])
    # A request shorter than a bin still counts for its share of the bin.
    short = intervals_mean(np.array([0.1]), np.array([0.11]), np.array([0.0, 1.0]))
    np.testing.assert_allclose(short, [0.01])
    # NaN ends (never finished) are dropped; an end before the start counts as zero length.
    odd = intervals_mean(np.array([0.0, 0.5]), np.array([np.nan, 0.2]), np.array([0.0, 1.0]))
    np.testing.assert_allclose(odd, [0.0])
    with pytest.raises(ValueError, match="differ in length"):
        intervals_mean(np.array([0.0]), np.array([1.0, 2.0]), edges)


def test_intervals_mean_matches_a_brute_force_sampling() -> None:
    rng = np.random.default_rng(0)
    starts = rng.uniform(0, 10, 200)
    ends = starts + rng.exponential(1.0, 200)
    edges = np.linspace(0, 12, 13)
    fine = np.linspace(0, 12, 120_001)[:-1] + 0.00005
    counts = ((starts[None, :] <= fine[:, None]) & (ends[None, :] > fine[:, None])).sum(axis=1)
    brute = counts.reshape(12, -1).mean(axis=1)
    np.testing.assert_allclose(intervals_mean(starts, ends, edges), brute, atol=0.01)


def test_cdf_points_span_min_to_max_and_thin_to_the_budget() -> None:
    x, p = cdf_points(np.array([3.0, 1.0, np.nan, 2.0]))
    assert x.tolist() == [1.0, 2.0, 3.0]
    np.testing.assert_allclose(p, [1 / 3, 2 / 3, 1.0])
    values = np.arange(10_000, dtype=float)
    x, p = cdf_points(values, max_points=100)
    assert len(x) <= 100 and x[0] == 0.0 and x[-1] == 9999.0 and p[-1] == 1.0
    assert np.all(np.diff(x) > 0) and np.all(np.diff(p) > 0)
    empty_x, empty_p = cdf_points(np.array([]))
    assert empty_x.size == 0 and empty_p.size == 0
