"""Numeric helpers that turn tables into few enough points to draw: bins, rates, CDFs.

All times are seconds on the run's clock. Binning keeps a figure's size independent of a run's
length: an hour of tokens becomes a few hundred points, not millions.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "bin_centers",
    "bin_edges",
    "bin_mean",
    "bin_width_s",
    "binned_rate",
    "cdf_points",
    "intervals_mean",
]

# Bin widths a reader can name ("half-second bins"), seconds.
_NICE_WIDTHS_S: tuple[float, ...] = (
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.25,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    15.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    900.0,
    1800.0,
    3600.0,
)


def bin_width_s(duration_s: float, max_bins: int = 300) -> float:
    """The smallest nice width (seconds) that cuts ``duration_s`` into at most ``max_bins``."""
    if max_bins < 1:
        raise ValueError(f"max_bins must be >= 1, got {max_bins}")
    wanted = max(duration_s, 0.0) / max_bins
    for width in _NICE_WIDTHS_S:
        if width >= wanted:
            return width
    return float(np.ceil(wanted / 3600.0) * 3600.0)


def bin_edges(start_s: float, end_s: float, width_s: float) -> np.ndarray:
    """Edges from ``start_s`` in steps of ``width_s`` covering ``end_s`` (at least one bin)."""
    if width_s <= 0:
        raise ValueError(f"width_s must be > 0, got {width_s}")
    n = max(1, int(np.ceil((end_s - start_s) / width_s - 1e-9)))
    return start_s + width_s * np.arange(n + 1, dtype=np.float64)


def bin_centers(edges: np.ndarray) -> np.ndarray:
    """Midpoints of consecutive edges."""
    return (edges[:-1] + edges[1:]) / 2.0


def binned_rate(t_s: np.ndarray, amounts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Sum of ``amounts`` of the events falling in each bin, per second of the bin.

    Events on the last edge count in the last bin; events outside the edges are left out.
    """
    t_s = np.asarray(t_s, dtype=np.float64)
    amounts = np.asarray(amounts, dtype=np.float64)
    idx = np.searchsorted(edges, t_s, side="right") - 1
    idx[t_s == edges[-1]] = len(edges) - 2
    keep = (idx >= 0) & (idx < len(edges) - 1)
    sums = np.bincount(idx[keep], weights=amounts[keep], minlength=len(edges) - 1)
    return sums / np.diff(edges)


def bin_mean(t_s: np.ndarray, values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of the samples in each bin; NaN for a bin without samples (a gap, drawn as one)."""
    t_s = np.asarray(t_s, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    ok = ~np.isnan(values)
    t_s, values = t_s[ok], values[ok]
    idx = np.searchsorted(edges, t_s, side="right") - 1
    idx[t_s == edges[-1]] = len(edges) - 2
    keep = (idx >= 0) & (idx < len(edges) - 1)
    n_bins = len(edges) - 1
    sums = np.bincount(idx[keep], weights=values[keep], minlength=n_bins)
    counts = np.bincount(idx[keep], minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _integral_of_count(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    """∫_-inf^t (number of intervals [s, e) containing u) du, for each t in ``at``."""
    s = np.sort(starts)
    e = np.sort(ends)
    cs = np.concatenate([[0.0], np.cumsum(s)])
    ce = np.concatenate([[0.0], np.cumsum(e)])
    ks = np.searchsorted(s, at, side="left")
    ke = np.searchsorted(e, at, side="left")
    return (ks * at - cs[ks]) - (ke * at - ce[ke])


def intervals_mean(starts_s: np.ndarray, ends_s: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of intervals ``[start, end)`` open during each bin.

    Exact (the integral of the step function over the bin, divided by its width), so a bin
    never misses a request that opened and closed inside it.
    """
    starts = np.asarray(starts_s, dtype=np.float64)
    ends = np.asarray(ends_s, dtype=np.float64)
    if starts.shape != ends.shape:
        raise ValueError(f"starts and ends differ in length: {starts.size} vs {ends.size}")
    ok = ~(np.isnan(starts) | np.isnan(ends))
    starts, ends = starts[ok], np.maximum(ends[ok], starts[ok])
    integral = _integral_of_count(starts, ends, np.asarray(edges, dtype=np.float64))
    return np.diff(integral) / np.diff(edges)


def cdf_points(values: np.ndarray, max_points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """An empirical CDF as (sorted values, fraction <= value), thinned to ``max_points``.

    The first and last points are always kept, so the curve spans min to max exactly.
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    v = v[~np.isnan(v)]
    n = v.size
    if n == 0:
        return v, v.copy()
    p = np.arange(1, n + 1, dtype=np.float64) / n
    if n > max_points:
        idx = np.unique(np.round(np.linspace(0, n - 1, max_points)).astype(np.int64))
        v, p = v[idx], p[idx]
    return v, p
