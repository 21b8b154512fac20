"""Samplers: read something at a fixed rate in a background thread, and account for their cost.

A :class:`Sampler` knows how to read one source (NVML, the CPU, an engine's /metrics); a
:class:`SamplerThread` runs it at ``interval_s`` on deadlines ``start + k * interval_s`` and
measures, per tick, its wall time and the CPU time of its thread. A tick whose deadline passed
more than a whole interval before the thread could run it is *missed* (skipped, not run late);
the lag between a deadline and the tick's start is kept too. The thread ticks once at start and
once more at stop, so counters (energy, token totals) have readings spanning the whole run.

Readings go to a columnar :class:`SampleBuffer` owned by the thread: t_ns (perf_counter_ns of
the reading), source, name, value (float) and labels (a JSON object as text, '' when none). A
run that streams its samples to its folder (probes.sample_stream) takes them out of the buffer
as it goes (:meth:`SampleBuffer.take`), so the buffer holds only those not yet written.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from perfmodel.files import JSONObject
from results.folder.table_columns import SAMPLE_COLUMNS

__all__ = ["SAMPLE_COLUMNS", "Emit", "SampleBuffer", "Sampler", "SamplerThread"]


class Emit(Protocol):
    """Record one reading: ``name`` and ``value`` with optional labels; ``t_ns`` defaults to
    the tick's time and ``source`` to the sampler's."""

    def __call__(
        self,
        name: str,
        value: float,
        labels: Mapping[str, str] | None = None,
        *,
        t_ns: int | None = None,
        source: str | None = None,
    ) -> None: ...


class Sampler(ABC):
    """One source of readings. Subclasses set ``source`` and implement :meth:`sample`."""

    source: str = "unknown"

    def __init__(self, interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"{self.source}: interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s

    def open(self) -> str | None:
        """Prepare to sample; return None when ready, else why this source cannot be read."""
        return None

    @abstractmethod
    def sample(self, t_ns: int, emit: Emit) -> None:
        """Take one set of readings at ``t_ns`` (perf_counter_ns) and emit them."""

    def close(self) -> None:  # noqa: B027 - optional hook, most samplers hold nothing
        """Release what :meth:`open` acquired; called once, after the last tick."""

    def describe(self) -> JSONObject:
        """What run.json should say about this source (devices found, readings unsupported)."""
        return {}


class SampleBuffer:
    """Columnar readings of one sampler; appended to by its thread only, taken by any."""

    def __init__(self) -> None:
        self._clear()
        self.appended = 0  # every reading ever appended, taken or not
        self._label_text: dict[tuple[tuple[str, str], ...], str] = {}
        # A reading's five columns are appended, and taken, together.
        self._lock = threading.Lock()

    def _clear(self) -> None:
        self.t_ns = array("q")
        self.value = array("d")
        self.source: list[str] = []
        self.name: list[str] = []
        self.labels: list[str] = []

    def append(
        self, t_ns: int, source: str, name: str, value: float, labels: Mapping[str, str] | None
    ) -> None:
        key = tuple(sorted(labels.items())) if labels else ()
        text = self._label_text.get(key)
        if text is None:
            text = json.dumps(dict(key), separators=(",", ":")) if key else ""
            self._label_text[key] = text
        with self._lock:
            self.t_ns.append(t_ns)
            self.value.append(float(value))
            self.source.append(source)
            self.name.append(name)
            self.labels.append(text)
            self.appended += 1

    def __len__(self) -> int:
        """The readings held now (appended and not taken)."""
        return len(self.t_ns)

    def take(self) -> tuple[array, array, list[str], list[str], list[str]]:
        """The readings held (t_ns, value, source, name, labels, in append order), which the
        buffer then no longer holds."""
        with self._lock:
            taken = (self.t_ns, self.value, self.source, self.name, self.labels)
            self._clear()
        return taken

    def columns(self) -> dict[str, list[Any]]:
        return {
            "t_ns": self.t_ns.tolist(),
            "source": list(self.source),
            "name": list(self.name),
            "value": self.value.tolist(),
            "labels": list(self.labels),
        }


def _ms_stats(values_ns: array) -> dict[str, float | None]:
    if not values_ns:
        return {"mean": None, "p99": None, "max": None}
    ms = np.frombuffer(values_ns, dtype=np.int64) / 1e6
    return {"mean": float(ms.mean()), "p99": float(np.percentile(ms, 99)), "max": float(ms.max())}


class SamplerThread:
    """Runs one sampler at its fixed rate until :meth:`stop`; see the module docstring."""

    def __init__(
        self, sampler: Sampler, clock_ns: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        self.sampler = sampler
        self.buffer = SampleBuffer()
        self._clock_ns = clock_ns
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.status = "new"
        self.reason: str | None = None
        self.ticks = self.missed_ticks = self.errors = 0
        self.first_error: str | None = None
        self._tick_ns, self._cpu_ns, self._lag_ns = array("q"), array("q"), array("q")
        self._started_ns = self._stopped_ns = self._tick_t_ns = 0

    def start(self) -> str | None:
        """Open the sampler and start ticking; returns why it cannot run (then no thread)."""
        try:
            self.reason = self.sampler.open()
        except Exception as exc:  # a probe must never stop the run: report it instead
            self.reason = f"{type(exc).__name__}: {exc}"
        if self.reason is not None:
            self.status = "unavailable"
            return self.reason
        self.status = "running"
        self._started_ns = self._clock_ns()
        self._thread = threading.Thread(
            target=self._run, name=f"probe-{self.sampler.source}", daemon=True
        )
        self._thread.start()
        return None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after one final tick, close the sampler; safe to call more than once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.status = "hung"
                self.reason = f"the sampler did not stop within {timeout_s} s"
            self._thread = None

    def _emit(
        self,
        name: str,
        value: float,
        labels: Mapping[str, str] | None = None,
        *,
        t_ns: int | None = None,
        source: str | None = None,
    ) -> None:
        self.buffer.append(
            t_ns or self._tick_t_ns, source or self.sampler.source, name, value, labels
        )

    def _tick(self, deadline_ns: int) -> None:
        t_ns = self._tick_t_ns = self._clock_ns()
        cpu0 = time.thread_time_ns()
        try:
            self.sampler.sample(t_ns, self._emit)
        except Exception as exc:  # counted and reported once; the next tick tries again
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{type(exc).__name__}: {exc}"
        self.ticks += 1
        self._tick_ns.append(self._clock_ns() - t_ns)
        self._cpu_ns.append(time.thread_time_ns() - cpu0)
        self._lag_ns.append(max(0, t_ns - deadline_ns))

    def _run(self) -> None:
        interval_ns = round(self.sampler.interval_s * 1e9)
        deadline = self._started_ns
        try:
            while True:
                self._tick(deadline)
                deadline += interval_ns
                behind = self._clock_ns() - deadline
                if behind >= interval_ns:  # whole intervals passed: those ticks are lost
                    skipped = behind // interval_ns
                    self.missed_ticks += skipped
                    deadline += skipped * interval_ns
                if self._stop.wait(max(0.0, (deadline - self._clock_ns()) / 1e9)):
                    self._tick(self._clock_ns())  # the closing reading
                    break
        finally:
            self._stopped_ns = self._clock_ns()
            try:
                self.sampler.close()
            except Exception as exc:
                self.first_error = self.first_error or f"close: {type(exc).__name__}: {exc}"
            if self.status == "running":
                self.status = "ok"

    def report(self) -> JSONObject:
        """Health and cost of this sampler, for run.json's "probes"."""
        wall_s = max(0, self._stopped_ns - self._started_ns) / 1e9
        cpu_s = sum(self._cpu_ns) / 1e9
        return {
            "source": self.sampler.source,
            "status": self.status,
            "reason": self.reason,
            "interval_s": self.sampler.interval_s,
            "ticks": self.ticks,
            "missed_ticks": self.missed_ticks,
            "samples": self.buffer.appended,
            "errors": self.errors,
            "first_error": self.first_error,
            "tick_wall_ms": _ms_stats(self._tick_ns),
            "tick_cpu_ms": _ms_stats(self._cpu_ns),
            "wake_lag_ms": _ms_stats(self._lag_ns),
            "cpu_s": cpu_s,
            "wall_s": wall_s,
            # CPU the sampler's thread used, as a fraction of one core over its lifetime.
            "cpu_fraction_of_one_core": cpu_s / wall_s if wall_s > 0 else None,
            **self.sampler.describe(),
        }
