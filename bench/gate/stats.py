"""Hierarchical bootstrap resampling of a metric over a group of runs, and its statistics.

What is resampled. A group (the baseline, or the candidate) is R runs; run r has n_r *units*:
requests for per-request metrics (TTFT, TPOT, E2EL, ...), requests again for ITL (a request's
ITL values move together, since tokens of one request share its batch and its stalls), and time
windows for throughput. Runs are the independent unit: each starts its own engine on a machine
whose state (clocks, neighbours, caches, memory layout) drifts between runs, so values within a
run are correlated and their spread alone understates run-to-run noise. One bootstrap resample
therefore (1) draws R runs with replacement, then (2) for each drawn run, draws n_r units with
replacement from it (the two-stage "hierarchical" bootstrap). Stage 2 keeps within-run noise;
stage 1 adds between-run noise, so more runs per side make the interval both honest and narrower.
With one run per side stage 1 is void and the interval covers within-run noise only: rules must
then allow for run-to-run drift, which is why `bench run --repeat N` exists.

Implementation: a resample is a row of counts (how often each unit was drawn), built for all B
resamples at once from uniform draws (R run picks, then n_r unit picks per picked run).
Statistics are weighted by the counts: a mean is a weighted mean; a percentile is numpy's
default ("linear") percentile of the multiset the counts describe, computed exactly from
cumulative weights; a throughput is sum(amount) / sum(seconds) over the drawn windows.

The interval built from these resamples is bench.gate.interval's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "UnitData",
    "bootstrap",
    "count_chunks",
    "hierarchical_counts",
    "per_run_estimates",
    "point_estimate",
    "run_slices",
    "statistic",
    "weighted_percentile",
]

# Rows of the (resamples x values) weight matrix processed at once: bounds memory to ~32 MB.
_CHUNK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class UnitData:
    """One group's data for one metric, flattened over its runs.

    ``units_per_run[r]`` units belong to run r, in order. For ``kind`` "mean"/"percentile",
    ``values`` are the pooled sample values and ``value_unit[i]`` the unit that ``values[i]``
    belongs to (a request owns one value, or several for ITL). For "ratio", ``numerator`` and
    ``denominator`` hold one number per unit (e.g. tokens and seconds of a window).
    """

    kind: str
    units_per_run: tuple[int, ...]
    values: np.ndarray | None = None
    value_unit: np.ndarray | None = None
    numerator: np.ndarray | None = None
    denominator: np.ndarray | None = None
    percentile: float | None = None

    @property
    def num_units(self) -> int:
        return int(sum(self.units_per_run))

    @property
    def num_values(self) -> int:
        return self.num_units if self.values is None else int(self.values.size)


def hierarchical_counts(
    units_per_run: Sequence[int], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Counts (resamples x units): runs drawn with replacement, then units within each draw."""
    return np.concatenate(list(count_chunks(units_per_run, resamples, rng)))


def count_chunks(
    units_per_run: Sequence[int], resamples: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """:func:`hierarchical_counts`' rows a chunk at a time (the same draws, so the same rows),
    each chunk of about ``_CHUNK_ELEMENTS`` counts: memory holds one chunk, however many units
    a run has (a run of 10^6 requests would need 16 GB for all 2,000 rows at once)."""
    sizes = np.array([int(n) for n in units_per_run], dtype=np.int64)
    runs = sizes.size
    if runs == 0 or sizes.min() < 1:
        raise ValueError(f"every run needs at least one unit, got {sizes.tolist()}")
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total, longest = int(sizes.sum()), int(sizes.max())
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // (runs * longest))
    slot = np.arange(longest)
    for start in range(0, resamples, rows_per_chunk):
        rows = min(rows_per_chunk, resamples - start)
        picked = rng.integers(0, runs, size=(rows, runs))  # stage 1: R runs, with replacement
        n = sizes[picked][..., None]
        # Stage 2: n_r units of each picked run, with replacement (slots past n_r unused).
        unit = (rng.random((rows, runs, longest), dtype=np.float32) * n).astype(np.int64)
        np.minimum(unit, n - 1, out=unit)  # float32 rounding may reach n itself
        flat = np.arange(rows)[:, None, None] * total + offsets[picked][..., None] + unit
        yield np.bincount(flat[slot < n], minlength=rows * total).reshape(rows, total)


def bootstrap(data: UnitData, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """The statistic under each of ``resamples`` hierarchical resamples of ``data``'s units
    (:func:`statistic` of :func:`hierarchical_counts`' rows), one chunk of rows at a time."""
    chunks = count_chunks(data.units_per_run, resamples, rng)
    return np.concatenate([statistic(data, counts) for counts in chunks])


def _locate(
    k: np.ndarray, weights: np.ndarray, block_cum: np.ndarray, block_len: int
) -> np.ndarray:
    """Per row, the index of the sorted value holding multiset index ``k``: the first value
    whose cumulative weight exceeds k. Its block first, then its place inside the block."""
    size, blocks = weights.shape[1], block_cum.shape[1]
    rows = np.arange(weights.shape[0])
    block = np.minimum((block_cum <= k[:, None]).sum(axis=1), blocks - 1)
    before = np.where(block > 0, block_cum[rows, block - 1], 0)
    index = block[:, None] * block_len + np.arange(block_len)
    inside_weights = weights[rows[:, None], np.minimum(index, size - 1)] * (index < size)
    inside = ((before[:, None] + np.cumsum(inside_weights, axis=1)) <= k[:, None]).sum(axis=1)
    return np.minimum(block * block_len + inside, size - 1)


def weighted_percentile(
    sorted_values: np.ndarray,
    counts: np.ndarray,
    value_unit: np.ndarray,
    percentile: float,
) -> np.ndarray:
    """Per row of ``counts`` (rows x units), numpy's linear percentile of the multiset holding
    sorted_values[j] counts[row, value_unit[j]] times. NaN for rows of zero weight.

    ``sorted_values`` must be ascending; ``value_unit`` maps each value to its unit. Exact: a
    row's weight of each value is its unit's count; the values are cut into ~sqrt(T)
    consecutive blocks whose weights are summed, and only the block holding the wanted
    multiset index is searched value by value. Memory holds about ``_CHUNK_ELEMENTS`` weights
    (rows x values) at a time, whatever the number of units.
    """
    size = sorted_values.size
    out = np.full(counts.shape[0], np.nan)
    if size == 0:
        return out
    block_len = max(1, int(np.ceil(np.sqrt(size))))
    starts = np.arange(0, size, block_len)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // size)
    for start in range(0, counts.shape[0], rows_per_chunk):
        weights = counts[start : start + rows_per_chunk][:, value_unit]
        block_cum = np.cumsum(np.add.reduceat(weights, starts, axis=1), axis=1)
        total = block_cum[:, -1]
        position = (total - 1) * (percentile / 100.0)
        low = np.floor(position)
        i_low = _locate(low, weights, block_cum, block_len)
        i_high = _locate(np.minimum(low + 1, total - 1), weights, block_cum, block_len)
        low_value = sorted_values[i_low]
        value = low_value + (position - low) * (sorted_values[i_high] - low_value)
        out[start : start + weights.shape[0]] = np.where(total > 0, value, np.nan)
    return out


def statistic(data: UnitData, counts: np.ndarray) -> np.ndarray:
    """The statistic under each row of unit counts (resamples x units)."""
    if data.kind == "ratio":
        assert data.numerator is not None and data.denominator is not None
        with np.errstate(invalid="ignore", divide="ignore"):
            return (counts @ data.numerator) / (counts @ data.denominator)
    assert data.values is not None and data.value_unit is not None
    if data.kind == "mean":
        sums = np.bincount(data.value_unit, weights=data.values, minlength=data.num_units)
        sizes = np.bincount(data.value_unit, minlength=data.num_units).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (counts @ sums) / (counts @ sizes)
    if data.kind == "percentile":
        assert data.percentile is not None
        order = np.argsort(data.values, kind="mergesort")
        return weighted_percentile(
            data.values[order], counts, data.value_unit[order], data.percentile
        )
    raise ValueError(f"unknown statistic kind {data.kind!r}")


def point_estimate(data: UnitData) -> float:
    """The statistic over every unit once: the pooled value of all runs (NaN without units)."""
    if data.num_units == 0:
        return float("nan")
    return float(statistic(data, np.ones((1, data.num_units)))[0])


def per_run_estimates(data: UnitData) -> np.ndarray:
    """The statistic of each run alone (runs in order)."""
    indicator = np.zeros((len(data.units_per_run), data.num_units), dtype=np.int64)
    start = 0
    for run, size in enumerate(data.units_per_run):
        indicator[run, start : start + size] = 1
        start += size
    return statistic(data, indicator)


def run_slices(data: UnitData) -> list[UnitData]:
    """One UnitData per run."""
    out, start = [], 0
    for size in data.units_per_run:
        stop = start + size
        if data.kind == "ratio":
            assert data.numerator is not None and data.denominator is not None
            out.append(
                UnitData(
                    "ratio",
                    (size,),
                    numerator=data.numerator[start:stop],
                    denominator=data.denominator[start:stop],
                )
            )
        else:
            assert data.values is not None and data.value_unit is not None
            mine = (data.value_unit >= start) & (data.value_unit < stop)
            out.append(
                UnitData(
                    data.kind,
                    (size,),
                    values=data.values[mine],
                    value_unit=data.value_unit[mine] - start,
                    percentile=data.percentile,
                )
            )
        start = stop
    return out
