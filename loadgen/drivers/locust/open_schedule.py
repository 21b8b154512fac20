"""A Locust worker's share of an open-loop schedule, sent at the planned times.

The master (loadgen.drivers.locust.master) gives each worker its requests with their planned
times, ``due_s`` seconds from the schedule's start (loadgen.drivers.locust.fleet splits the
schedule), then one start second ``start_s`` on the run clock, which is the master's clock as
this worker measured it (loadgen.drivers.clock_sync; measured again during a long run, so the
worker's RunClock may be replaced while it sends). Request ``i`` is due at ``start_s +
due_s[i]``: this worker sleeps until then, notes its schedule lag (the moment it got to the
request minus its due time, the self-check's ``schedule_lag_s``) and sends it in a greenlet of
its own, its record's ``scheduled_s`` the planned time, so latency counts from the plan
whatever the worker or the server did. At most ``max_concurrency`` requests are in flight: a
due request waits for a free connection (``sent_s`` later than ``scheduled_s``: queueing, not
lag), as the asyncio open loop does.

Imported only by loadgen.drivers.locust.worker, in its gevent-patched process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gevent
import gevent.pool
import gevent.queue

from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec

__all__ = ["OpenLoopShare"]

# A request this close to its due time is sent rather than slept for, s.
_EARLY_S = 0.0005

# What a share sends with: (spec, user_id, scheduled_s, session) -> None, recording the request;
# and what records one cancelled while it waited for a connection: (spec, scheduled_s) -> None.
Send = Callable[[RequestSpec, int, float, Any], None]
Cancel = Callable[[RequestSpec, float], None]


class OpenLoopShare:
    """This worker's requests and planned times (module docstring).

    ``clock`` returns the worker's current RunClock (it may change between requests);
    ``note_lag(due_s, lag_s)`` records a schedule lag; ``sessions`` are ``max_concurrency``
    HTTP sessions, one per request in flight; ``user_base``/``user_step`` number the records'
    ``user_id`` by connection (worker ``index`` of ``workers``).
    """

    def __init__(
        self, requests: Sequence[RequestSpec], due_s: Sequence[float],
        clock: Callable[[], RunClock], note_lag: Callable[[float, float], None],
        sessions: Sequence[Any], user_base: int, user_step: int,
    ) -> None:  # fmt: skip
        if len(requests) != len(due_s):
            raise ValueError(f"{len(requests)} requests against {len(due_s)} planned times")
        self.requests, self.due_s = list(requests), [float(t) for t in due_s]
        self.clock, self.note_lag = clock, note_lag
        self.free: gevent.queue.Queue[tuple[int, Any]] = gevent.queue.Queue()
        for i, session in enumerate(sessions):
            self.free.put((user_base + i * user_step, session))
        self.pool = gevent.pool.Group()
        self.sent = 0
        self.stopped = False

    def run(self, start_s: float, send: Send, cancel: Cancel) -> None:
        """Send every request at ``start_s + due_s`` (run seconds); returns when all are sent
        and done, or when :meth:`stop` was called (what was not yet due stays unsent; what
        waited for a connection is recorded by ``cancel``)."""
        for spec, due in zip(self.requests, self.due_s, strict=True):
            planned = start_s + due
            while not self.stopped:
                wait = planned - self.clock().now_s()
                if wait <= _EARLY_S:
                    break
                gevent.sleep(min(wait, 0.5))  # a stop is seen within half a second
            if self.stopped:
                break
            self.note_lag(planned, self.clock().now_s() - planned)
            self.pool.spawn(self._one, spec, planned, send, cancel)
            self.sent += 1
        self.pool.join()

    def _one(self, spec: RequestSpec, planned: float, send: Send, cancel: Cancel) -> None:
        try:
            user_id, session = self.free.get()  # the concurrency cap: wait for a connection
        except gevent.GreenletExit:
            cancel(spec, planned)
            raise
        try:
            send(spec, user_id, planned, session)
        finally:
            self.free.put((user_id, session))

    def stop(self) -> None:
        """Send nothing more and cancel what is in flight (each recorded as cancelled by the
        sender, which sees GreenletExit)."""
        self.stopped = True
        self.pool.kill(block=True, timeout=5)
