"""An engine that dies during the load: seen, the load stopped, and what was lost recorded.

- A launched engine (bench started its process): :class:`EngineWatch` polls the process during
  the load; when it exits, the time is stamped on the run clock and the load's
  :class:`~loadgen.drivers.stop.LoadStop` is set, so nothing more is sent to a dead port (the
  requests it was serving have failed with their causes; the rest are counted as never sent).
- An engine at ``--url``: after a load with failures, its health path is asked once; an engine
  that no longer answers at all died.

Either way the death is placed at the first failure of the final run of failures (in order of
their ends) when that is earlier than the exit was seen.

:func:`engine_death_section` returns run.json's ``engine_died`` (results.schema.EngineDeath), or
None for an engine that lived.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Sequence

import httpx

from loadgen.drivers.stop import LoadStop
from results.folder.outcomes import Outcome
from results.schema import EngineDeath

__all__ = ["EngineWatch", "engine_death_section"]

_POLL_S = 0.1
_HEALTH_TIMEOUT_S = 3.0
# Seconds a launched engine whose port is closed gets to finish exiting, so its status is known.
_SETTLE_S = 2.0


class EngineWatch:
    """Watch ``process`` (None: nothing to watch) from a thread until :meth:`close`; its exit
    sets ``stop`` with the reason "the engine died"."""

    def __init__(self, process: subprocess.Popen[bytes] | None, stop: LoadStop) -> None:
        self.process = process
        self.stop = stop
        # time.perf_counter_ns when the exit was seen, and the exit status (negative: a signal).
        self.died_ns: int | None = None
        self.returncode: int | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> EngineWatch:
        if self.process is not None:
            self._thread = threading.Thread(target=self._run, name="engine-watch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _poll(self) -> bool:
        """Whether the process has exited (stamped, and the load stopped, the first time)."""
        assert self.process is not None
        if self.died_ns is None and (code := self.process.poll()) is not None:
            self.died_ns, self.returncode = time.perf_counter_ns(), code
            self.stop.set("the engine died")
        return self.died_ns is not None

    def _run(self) -> None:
        while not self._closed.wait(_POLL_S):
            if self._poll():
                return

    def settle(self, timeout_s: float) -> None:
        """Give a process that is dying (its port already closed) ``timeout_s`` to exit."""
        if self.process is not None and self.died_ns is None:
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return
            self._poll()

    def close(self) -> None:
        """Stop watching; a load whose requests all failed can end before the next poll, so the
        process is looked at once more."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._poll()


def _reachable(base_url: str, health_path: str) -> bool:
    """Whether anything answers HTTP at the engine's health path (any status counts)."""
    try:
        httpx.get(base_url + health_path, timeout=_HEALTH_TIMEOUT_S)
    except httpx.HTTPError:
        return False
    return True


def _first_failure_of_last_streak(records: Sequence[Outcome]) -> float | None:
    """The end (run seconds) of the first failure in the final run of failures, in order of
    their ends: the nearest mark of the engine's death the records give (None: none failed)."""
    ended = sorted(
        (r for r in records if r.done_s is not None and r.status != "cancelled"),
        key=lambda r: r.done_s or 0.0,
    )
    first: float | None = None
    for record in reversed(ended):
        if record.status == "ok":
            break
        first = record.done_s
    return first


def engine_death_section(
    watch: EngineWatch,
    base_url: str,
    health_path: str,
    records: Sequence[Outcome],
    t0_ns: int,
    planned: int | None,
) -> EngineDeath | None:
    """run.json's ``engine_died`` (module docstring), or None when the engine lived.

    ``planned``: requests the load would have sent (None for a load bounded by its duration).
    """
    errors = [r for r in records if r.status == "error"]
    lost = [r for r in records if r.status != "ok"]
    unreachable = False
    if watch.died_ns is None and errors and not _reachable(base_url, health_path):
        unreachable = True
        watch.settle(_SETTLE_S)  # a launched engine whose port closed may still be exiting
    if watch.died_ns is not None:
        t_s: float | None = (watch.died_ns - t0_ns) / 1e9
        detected_by = "process exit"
    elif unreachable:
        t_s, detected_by = None, "health check"
    else:
        return None
    # The exit is seen up to _POLL_S late, and users whose requests are refused at once send
    # many meanwhile: the first failure of the final streak is the nearer mark of the death.
    first_failure = _first_failure_of_last_streak(records)
    if first_failure is not None and (t_s is None or first_failure < t_s):
        t_s = first_failure
    code = watch.returncode
    signame = None
    if code is not None and code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = f"signal {-code}"
        code = None
    if t_s is None:
        in_flight, refused = len(lost), 0
    else:
        # Sent before the death: it was serving them (failed, or cut by the stop); after:
        # refused at a closed port.
        in_flight = sum(1 for r in lost if r.sent_s < t_s)
        refused = len(lost) - in_flight
    return EngineDeath(
        t_s=t_s,
        detected_by=detected_by,  # type: ignore[typeddict-item]
        exit_code=code,
        signal=signame,
        failed_in_flight=in_flight,
        refused=refused,
        not_sent=None if planned is None else max(planned - len(records), 0),
    )
