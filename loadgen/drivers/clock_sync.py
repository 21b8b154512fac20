"""A worker's clock offset against the master, measured over the message channel (NTP-style).

The master sends its ``perf_counter_ns`` reading ``t0``; the worker answers with its own reading
``t1`` as soon as the message arrives; the master reads ``t2`` when the answer lands. If both
legs took the same time, the worker's clock read ``t1`` when the master's read ``(t0 + t2) / 2``,
so ``offset = t1 - (t0 + t2) / 2`` (worker minus master). Whatever the split between the legs,
the true offset lies within ``rtt / 2`` of that estimate, ``rtt = t2 - t0``: the sample with the
smallest round trip has the tightest bound, and is the one kept.

Nothing here assumes the machines' wall clocks agree (NTP or not): only each side's monotonic
clock is read, and the bound is measured, not assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ClockOffset", "ClockSample", "estimate_offset"]


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One ping-pong: master sent at ``t0_ns``, worker read ``t1_ns``, master got it at
    ``t2_ns`` (all ``perf_counter_ns`` readings, master's for t0/t2, worker's for t1)."""

    t0_ns: int
    t1_ns: int
    t2_ns: int

    @property
    def rtt_ns(self) -> int:
        """The round trip as the master saw it, ns."""
        return self.t2_ns - self.t0_ns

    @property
    def offset_ns(self) -> float:
        """Worker clock minus master clock, ns, if both legs took equally long."""
        return self.t1_ns - (self.t0_ns + self.t2_ns) / 2


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """A worker's clock against the master's.

    Attributes:
        offset_ns: worker ``perf_counter_ns`` minus master ``perf_counter_ns``, ns: a master
            reading ``m`` is the worker reading ``m + offset_ns``.
        bound_ns: the true offset lies within ``offset_ns ± bound_ns`` (half the kept round
            trip).
        rtt_ns: the kept sample's round trip, ns.
        samples: how many ping-pongs were taken.
    """

    offset_ns: int
    bound_ns: int
    rtt_ns: int
    samples: int

    def to_worker_ns(self, master_ns: int) -> int:
        """A master ``perf_counter_ns`` reading as the worker's clock read it at that moment
        (how the master hands a worker the run's origin ``t0_ns``)."""
        return master_ns + self.offset_ns

    def to_json(self) -> dict[str, float | int]:
        """run.json's form: seconds, as every time of a run folder."""
        return {
            "clock_offset_s": self.offset_ns / 1e9,
            "clock_offset_bound_s": self.bound_ns / 1e9,
            "clock_rtt_s": self.rtt_ns / 1e9,
            "clock_samples": self.samples,
        }


def estimate_offset(samples: Sequence[ClockSample]) -> ClockOffset:
    """The offset from the sample of smallest round trip (module docstring).

    Raises:
        ValueError: no samples, or a sample whose answer came back before it was sent (the
            master's clock is monotonic, so that is a bookkeeping error, never a measurement).
    """
    if not samples:
        raise ValueError("estimate_offset: no clock samples (did the worker answer any ping?)")
    for s in samples:
        if s.rtt_ns < 0:
            raise ValueError(f"estimate_offset: sample {s} came back before it was sent")
    best = min(samples, key=lambda s: s.rtt_ns)
    # Rounded up, so that the bound never understates the interval.
    return ClockOffset(
        offset_ns=round(best.offset_ns),
        bound_ns=(best.rtt_ns + 1) // 2,
        rtt_ns=best.rtt_ns,
        samples=len(samples),
    )
