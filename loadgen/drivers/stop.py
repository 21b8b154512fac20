"""Ending a load early: a request to stop that the drivers honour (an interrupt, a dead engine).

A :class:`LoadStop` is set once, from any thread (a signal handler, a watchdog); a driver that is
given one stops sending when it is set and cancels the requests in flight, which are recorded
with status "cancelled", the time of the cut and the stop's reason, exactly as a cut at the
scenario's ``duration_s`` records them. Requests not yet sent are never sent (they have no row;
the caller counts them from the plan).

The flag is a ``threading.Event`` by default; worker processes are handed a
``multiprocessing`` event instead (any object with ``set``, ``is_set`` and ``wait``), so a stop
set in the parent reaches every worker.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Protocol

__all__ = ["POLL_S", "LoadStop", "cancelled_message"]

# How often an asyncio driver looks at the flag, seconds: a stop takes effect within this.
POLL_S = 0.05


class _Flag(Protocol):
    def set(self) -> None: ...
    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


def cancelled_message(reason: str | None) -> str:
    """The ``error`` of a request cancelled in flight: why the run ended under it."""
    why = reason or "the run ended"
    return f"cancelled: {why} while the request was in flight"


class LoadStop:
    """Set once to end a load: ``set(reason)`` from any thread; drivers ``await wait()``.

    ``reason`` is a short phrase for the cancelled requests' message ("the run was interrupted
    (SIGINT)", "the engine died"); the first reason given is kept.
    """

    def __init__(self, flag: _Flag | Any | None = None) -> None:
        self._flag: _Flag = flag if flag is not None else threading.Event()
        self._reason: str | None = None
        self._lock = threading.Lock()

    @property
    def flag(self) -> Any:
        """The underlying event (to hand to another process when it is a multiprocessing one)."""
        return self._flag

    @property
    def reason(self) -> str | None:
        return self._reason

    def is_set(self) -> bool:
        return self._flag.is_set()

    def set(self, reason: str) -> None:
        """Ask the load to stop; safe from a signal handler (no blocking beyond a short lock)."""
        # A signal handler may interrupt a thread holding the lock: never wait for it there.
        if self._lock.acquire(blocking=False):
            try:
                if self._reason is None:
                    self._reason = reason
            finally:
                self._lock.release()
        self._flag.set()

    async def wait(self) -> None:
        """Return once the stop is set (looks every :data:`POLL_S` seconds, so it works for a
        flag shared with other processes too)."""
        while not self._flag.is_set():
            await asyncio.sleep(POLL_S)

    def message(self) -> str:
        """The ``error`` for requests cancelled by this stop."""
        return cancelled_message(self._reason)
