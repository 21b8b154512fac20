"""The NTP-style clock offset: the minimum-round-trip sample, its bound, and what it refuses."""

from __future__ import annotations

import random

import pytest

from loadgen.clock import RunClock
from loadgen.drivers.clock_sync import ClockSample, estimate_offset


def ping(t0_ns: int, out_ns: int, back_ns: int, offset_ns: int) -> ClockSample:
    """A ping sent at master time ``t0_ns`` taking ``out_ns`` there and ``back_ns`` back, to a
    worker whose clock reads ``offset_ns`` more than the master's."""
    return ClockSample(t0_ns, t0_ns + out_ns + offset_ns, t0_ns + out_ns + back_ns)


def test_the_shortest_round_trip_gives_the_estimate_and_the_bound_holds_the_truth() -> None:
    rng = random.Random(3)
    true_offset = -7_345_120_998  # the worker's clock is 7.3 s behind
    samples = [
        ping(
            i * 10_000_000, rng.randint(40_000, 900_000), rng.randint(40_000, 900_000), true_offset
        )
        for i in range(16)
    ]
    est = estimate_offset(samples)
    best = min(samples, key=lambda s: s.rtt_ns)
    assert est.rtt_ns == best.rtt_ns and est.samples == 16
    assert est.bound_ns == (best.rtt_ns + 1) // 2
    assert abs(est.offset_ns - true_offset) <= est.bound_ns
    j = est.to_json()
    assert j["clock_offset_s"] == pytest.approx(est.offset_ns / 1e9)
    assert j["clock_offset_bound_s"] == pytest.approx(est.bound_ns / 1e9)


def test_a_lopsided_round_trip_is_off_by_at_most_half_of_it() -> None:
    # All the delay on the way out: the estimate is off by rtt / 2, exactly the bound.
    est = estimate_offset([ping(0, 1_000_000, 0, 0)])
    assert est.offset_ns == 500_000 and est.bound_ns == 500_000


def test_no_samples_or_a_sample_back_before_it_left_are_refused() -> None:
    with pytest.raises(ValueError, match="no clock samples"):
        estimate_offset([])
    with pytest.raises(ValueError, match="came back before it was sent"):
        estimate_offset([ClockSample(100, 50, 90)])


def test_the_run_origin_handed_to_a_worker_puts_its_readings_on_the_masters_run_clock() -> None:
    skew = 7_300_000_000  # the worker's clock reads 7.3 s more than the master's
    master_t0 = 1_000_000_000
    est = estimate_offset([ping(master_t0 + 10**9, 200_000, 200_000, skew)])
    worker_clock = RunClock(est.to_worker_ns(master_t0))
    # 5 s into the run on the master's clock, the worker reads master_t0 + 5 s + skew.
    assert worker_clock.to_s(master_t0 + 5 * 10**9 + skew) == pytest.approx(5.0, abs=1e-9)
