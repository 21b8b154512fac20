"""The kernel's receive stamps on the run's clock, and the record of where a run's stamps came from.

The clock map (:class:`KernelClock`): ``SO_TIMESTAMPNS`` stamps are ``CLOCK_REALTIME``; the offset
between it and ``perf_counter_ns`` is the middle of the tightest of a few brackets
(``perf_counter_ns``, ``clock_gettime_ns(CLOCK_REALTIME)``, ``perf_counter_ns``), measured at the
start and again every ``remeasure_s`` seconds of reads (NTP slews the two clocks apart; a stepped
wall clock would be caught by the next measurement).

The record (:class:`StampCounts`, :func:`stamp_report`, :func:`run_stamps`): per connection its
stamp source ("kernel" or "user", with the reason), and the run's source over every client, as
run.json's ``load.receive_stamps`` holds them. loadgen.client.transport.kernel_stamps reads the
sockets.
"""

from __future__ import annotations

import time
from time import perf_counter_ns

from perfmodel.files import JSONObject

__all__ = ["KERNEL", "USER", "KernelClock", "StampCounts", "run_stamps", "stamp_report"]

KERNEL, USER = "kernel", "user"  # a connection's stamp source, as run.json names it


class KernelClock:
    """Maps ``CLOCK_REALTIME`` ns onto ``perf_counter_ns`` (module docstring).

    Contract: :meth:`to_perf_ns` returns ``realtime_ns + offset_ns``, re-measuring the offset
    first when ``remeasure_s`` seconds have passed since the last measurement; ``bracket_ns`` is
    the width of the tightest bracket of the last measurement (the offset's uncertainty),
    ``drift_ns`` the spread of every offset measured so far.
    """

    def __init__(self, remeasure_s: float = 1.0, tries: int = 7) -> None:
        self.remeasure_ns = int(remeasure_s * 1e9)
        self.tries = tries
        self.measurements = 0
        self.bracket_ns = 0
        self.bracket_max_ns = 0
        self._offsets: tuple[int, int] | None = None  # the least and greatest offset measured
        self.offset_ns = 0
        self._next_ns = 0
        self.measure()

    def measure(self) -> None:
        """Measure the offset now: the tightest of ``tries`` brackets."""
        best_width, best_offset = -1, 0
        for _ in range(self.tries):
            before = perf_counter_ns()
            wall = time.clock_gettime_ns(time.CLOCK_REALTIME)
            after = perf_counter_ns()
            width = after - before
            if best_width < 0 or width < best_width:
                best_width, best_offset = width, (before + after) // 2 - wall
        self.offset_ns, self.bracket_ns = best_offset, best_width
        self.bracket_max_ns = max(self.bracket_max_ns, best_width)
        low, high = self._offsets or (best_offset, best_offset)
        self._offsets = (min(low, best_offset), max(high, best_offset))
        self.measurements += 1
        self._next_ns = after + self.remeasure_ns

    def to_perf_ns(self, realtime_ns: int, now_ns: int) -> int:
        """``realtime_ns`` on the ``perf_counter_ns`` clock (``now_ns``: perf_counter_ns now)."""
        if now_ns >= self._next_ns:
            self.measure()
        return realtime_ns + self.offset_ns

    @property
    def drift_ns(self) -> int:
        low, high = self._offsets or (0, 0)
        return high - low

    def describe(self) -> JSONObject:
        """For run.json: how the kernel's clock was mapped, and how well."""
        return {
            "kernel_clock": "CLOCK_REALTIME",
            "offset_measurements": self.measurements,
            "offset_bracket_max_us": self.bracket_max_ns / 1e3,
            "offset_drift_us": self.drift_ns / 1e3,
            "remeasure_s": self.remeasure_ns / 1e9,
        }


class StampCounts:
    """One connection's stamp record over its openings: the source of its last opening, why
    when that is user-space, how many times it was opened, its reads and the stamped ones."""

    __slots__ = ("clamped", "opened", "reads", "source", "stamped", "why")

    def __init__(self) -> None:
        self.source, self.why = USER, "never opened"
        self.opened = self.reads = self.stamped = self.clamped = 0

    def to_json(self, index: int) -> JSONObject:
        row: JSONObject = {"connection": index, "stamps": self.source}
        if self.source == USER:
            row["why"] = self.why
        row.update(reads=self.reads, kernel_stamped_reads=self.stamped)
        return row


def stamp_report(connections: list[StampCounts], clock: KernelClock | None) -> JSONObject:
    """run.json's record of one pool: per opened connection its stamps; the clock map's
    quality; how many mapped stamps were later than their read (clamped, a clock-map error)."""
    opened = [c.to_json(i) for i, c in enumerate(connections) if c.opened]
    report: JSONObject = {
        "connections": opened,
        "kernel_connections": sum(1 for c in connections if c.opened and c.source == KERNEL),
        "clamped_reads": sum(c.clamped for c in connections),
    }
    if clock is not None:
        report.update(clock.describe())
    return report


def run_stamps(clients: list[JSONObject], why_none: str) -> JSONObject:
    """run.json's ``load.receive_stamps``: every client's :func:`stamp_report` (``clients``)
    and the run's source: "kernel" when every opened connection had kernel stamps, "user" when
    none did (``why_none`` when no client reports, e.g. a driver without the raw client),
    else "mixed"."""
    opened = sum(len(c.get("connections", ())) for c in clients)
    kernel = sum(int(c.get("kernel_connections", 0)) for c in clients)
    source = "mixed" if 0 < kernel < opened else (KERNEL if opened and kernel == opened else USER)
    out: JSONObject = {"source": source, "connections": opened, "kernel_connections": kernel}
    if not clients:
        out["why"] = why_none
    out["clients"] = clients
    return out
