"""The run clock: one monotonic time base for every timestamp a run records.

Every time inside a run (scheduled, sent, first token, chunk arrivals, done) is seconds since the
run's start on ``time.perf_counter_ns``. Wall-clock time (``time.time``) can step under NTP and is
too coarse on some platforms, so it is read exactly once, at the start, for run.json's metadata.

The hot path keeps raw ``perf_counter_ns`` integers and converts them with :meth:`RunClock.to_s`
after a stream has ended, so that measuring costs one C call per network read and no float math.
"""

from __future__ import annotations

import time

__all__ = ["RunClock"]

_NS_PER_S = 1_000_000_000


class RunClock:
    """Seconds since the run's start, on ``time.perf_counter_ns``.

    Contract:
        * ``t0_ns`` is the ``perf_counter_ns`` reading that defines ``t = 0 s``.
        * ``t0_unix_s`` is the wall-clock time (seconds since the Unix epoch) read at the same
          moment; use it only to label the run, never to compute latencies.
        * :meth:`now_s` and :meth:`to_s` return float seconds relative to ``t0_ns``; they are
          monotonic non-decreasing within a process.
    """

    __slots__ = ("t0_ns", "t0_unix_s")

    def __init__(self, t0_ns: int | None = None) -> None:
        """Start the clock now, or at ``t0_ns`` (a ``perf_counter_ns`` value) when given.

        Passing ``t0_ns`` lets several components share one time base (for example probes
        started before the load generator).
        """
        now_ns = time.perf_counter_ns()
        if t0_ns is None:
            t0_ns = now_ns
        elif not isinstance(t0_ns, int) or isinstance(t0_ns, bool):
            raise TypeError(
                f"RunClock t0_ns: expected an int from time.perf_counter_ns(), got {t0_ns!r}"
            )
        self.t0_ns: int = t0_ns
        # Wall time of t0: shift "now" back by the time elapsed since t0_ns.
        self.t0_unix_s: float = time.time() - (now_ns - t0_ns) / _NS_PER_S

    def now_ns(self) -> int:
        """The raw ``perf_counter_ns`` reading now (for hot paths that convert later)."""
        return time.perf_counter_ns()

    def now_s(self) -> float:
        """Seconds since the run's start."""
        return (time.perf_counter_ns() - self.t0_ns) / _NS_PER_S

    def to_s(self, t_ns: int) -> float:
        """Convert a ``perf_counter_ns`` reading taken in this process to run seconds."""
        return (t_ns - self.t0_ns) / _NS_PER_S

    def __repr__(self) -> str:
        return f"RunClock(t0_ns={self.t0_ns}, t0_unix_s={self.t0_unix_s:.6f})"
