"""The gate's statistics: exact weighted percentiles, hierarchical resampling, the CI."""

from __future__ import annotations

import numpy as np
import pytest

from bench.gate.interval import between_run_log_sd, bootstrap_change, student_t_quantile
from bench.gate.stats import UnitData, hierarchical_counts, per_run_estimates, weighted_percentile


def per_request(runs: list[np.ndarray], percentile: float | None = 50.0) -> UnitData:
    values = np.concatenate(runs)
    return UnitData(
        "percentile" if percentile is not None else "mean",
        tuple(r.size for r in runs),
        values=values,
        value_unit=np.arange(values.size),
        percentile=percentile,
    )


def test_weighted_percentile_equals_numpy_on_the_expanded_multiset() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        size = int(rng.integers(1, 80))
        units = int(rng.integers(1, size + 1))
        values = np.sort(rng.normal(size=size))
        value_unit = rng.integers(0, units, size=size)
        counts = rng.integers(0, 4, size=(3, units))
        q = float(rng.choice([0.0, 100.0, rng.uniform(0, 100)]))
        got = weighted_percentile(values, counts, value_unit, q)
        for row in range(3):
            weights = counts[row, value_unit]
            if weights.sum() == 0:
                assert np.isnan(got[row])
            else:
                assert got[row] == pytest.approx(np.percentile(np.repeat(values, weights), q))


def test_hierarchical_counts_draw_runs_then_units() -> None:
    rng = np.random.default_rng(1)
    counts = hierarchical_counts([3, 5, 2], 20_000, rng)
    assert counts.shape == (20_000, 10) and counts.dtype == np.int64
    # Each unit is drawn once per resample on average.
    assert counts.mean(axis=0) == pytest.approx(np.ones(10), abs=0.03)
    # A run's total is n_r times how often the run was picked: Binomial(3, 1/3) picks.
    picks = counts[:, :3].sum(axis=1) / 3
    assert set(np.unique(picks)) <= {0, 1, 2, 3}
    assert picks.var() == pytest.approx(3 * (1 / 3) * (2 / 3), rel=0.05)
    with pytest.raises(ValueError, match="at least one unit"):
        hierarchical_counts([3, 0], 10, rng)


def test_identical_groups_give_a_ci_around_zero_and_are_reproducible() -> None:
    rng = np.random.default_rng(2)
    runs = [rng.lognormal(3.0, 0.3, 200) for _ in range(3)]
    data = per_request(runs)
    first = bootstrap_change(data, data, 0.95, 1000, seed=7)
    again = bootstrap_change(data, data, 0.95, 1000, seed=7)
    assert first == again
    assert first.change == 0.0 and first.ci_low < 0 < first.ci_high
    other_seed = bootstrap_change(data, data, 0.95, 1000, seed=8)
    assert other_seed.ci_low != first.ci_low


def test_ci_covers_the_true_ratio_about_as_often_as_its_level() -> None:
    # One run per side of iid values: the hierarchical bootstrap is the plain bootstrap, whose
    # percentile interval for a median should cover the true ratio (1.0) ~95% of the time.
    rng = np.random.default_rng(3)
    covered = 0
    trials = 200
    for trial in range(trials):
        base = per_request([rng.lognormal(3.0, 0.5, 300)])
        cand = per_request([rng.lognormal(3.0, 0.5, 300)])
        est = bootstrap_change(base, cand, 0.95, 500, seed=trial, session_drift=False)
        covered += est.ci_low <= 0.0 <= est.ci_high
    assert 0.89 <= covered / trials <= 0.99


def test_ratio_and_mean_statistics() -> None:
    windows = UnitData(
        "ratio",
        (2, 2),
        numerator=np.array([10.0, 30, 20, 20]),
        denominator=np.array([1.0, 1, 1, 1]),
    )
    assert per_run_estimates(windows) == pytest.approx([20.0, 20.0])
    doubled = UnitData(
        "ratio", (2,), numerator=np.array([40.0, 40]), denominator=np.array([1.0, 1])
    )
    est = bootstrap_change(windows, doubled, 0.95, 500, seed=0)
    assert est.baseline == 20.0 and est.candidate == 40.0 and est.change == pytest.approx(1.0)
    # ITL-like clusters: the mean weighs every value, not every unit.
    clusters = UnitData(
        "mean", (2,), values=np.array([1.0, 1, 1, 5]), value_unit=np.array([0, 0, 0, 1])
    )
    assert per_run_estimates(clusters) == pytest.approx([2.0])


def test_session_drift_widens_the_ci_by_the_between_run_spread() -> None:
    rng = np.random.default_rng(4)
    # Runs whose levels differ by ~10%: a real run-to-run spread beyond sampling noise.
    levels = {"base": (0.0, 0.1, -0.1), "cand": (0.05, -0.05, 0.1)}
    base, cand = (
        per_request([rng.lognormal(np.log(100) + s, 0.1, 200) for s in levels[side]])
        for side in ("base", "cand")
    )
    sd, dof = between_run_log_sd((base, cand), 500, np.random.default_rng(0))
    assert dof == 4 and 0.05 < sd < 0.15
    narrow = bootstrap_change(base, cand, 0.95, 1000, seed=0, session_drift=False)
    wide = bootstrap_change(base, cand, 0.95, 1000, seed=0)
    assert wide.ci_low < narrow.ci_low and wide.ci_high > narrow.ci_high
    assert narrow.run_sd == 0.0 and 0.05 < wide.run_sd < 0.15


def test_runs_differing_by_sampling_noise_alone_add_no_drift() -> None:
    rng = np.random.default_rng(5)
    base, cand = (per_request([rng.lognormal(3.0, 0.3, 150) for _ in range(4)]) for _ in "bc")
    sd, dof = between_run_log_sd((base, cand), 500, np.random.default_rng(0))
    assert dof == 6 and sd < 0.02


def test_student_t_quantiles() -> None:
    exact = {2: 4.303, 3: 3.182, 4: 2.776, 6: 2.447, 10: 2.228, 30: 2.042}
    for dof, value in exact.items():
        assert student_t_quantile(0.975, dof) == pytest.approx(value, rel=0.01)


def test_a_zero_baseline_has_no_relative_change() -> None:
    zero = per_request([np.zeros(50)])
    with pytest.raises(ValueError, match="non-zero baseline"):
        bootstrap_change(zero, per_request([np.ones(50)]), 0.95, 200, seed=0)


@pytest.mark.parametrize("kind", ["mean", "percentile"])
def test_bootstrap_in_chunks_equals_the_whole_counts_matrix(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.gate import stats

    rng = np.random.default_rng(5)
    runs = [rng.lognormal(size=n) for n in (300, 170, 240)]
    data = per_request(runs, 90.0 if kind == "percentile" else None)
    # Small chunks: many chunks of rows, and weighted_percentile's own chunks of values too.
    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 5_000)
    whole = stats.statistic(
        data, hierarchical_counts(data.units_per_run, 400, np.random.default_rng(9))
    )
    chunked = stats.bootstrap(data, 400, np.random.default_rng(9))
    assert len(list(stats.count_chunks(data.units_per_run, 400, np.random.default_rng(9)))) > 10
    np.testing.assert_allclose(chunked, whole, rtol=1e-12)
