"""The closed-loop driver: N users, each sends a request, reads it to the end, thinks, repeats.

Concurrency is bounded by construction: each user has at most one request in flight, so the
server never sees more than ``num_users`` at once. Users take requests from one shared list in
order (asyncio is single-threaded, so taking the next index needs no lock), which keeps the
workload identical between runs whatever the timing. The run ends at the end of the list or at
``duration_s``, whichever comes first; requests in flight at the cut are cancelled and recorded
with status "cancelled", so every request that started has exactly one record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from loadgen.clock import RunClock
from loadgen.records import RequestRecord, RequestSpec

__all__ = ["LiveCounters", "RequestSender", "run_closed_loop"]


class RequestSender(Protocol):
    """What the driver needs from a client (:class:`loadgen.client.StreamingClient` fits)."""

    async def send(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock
    ) -> RequestRecord: ...


@dataclass
class LiveCounters:
    """Running totals for a live display; updated in place as requests start and finish.

    ``output_tokens`` grows when a request finishes (not per chunk, to keep the stream path
    free of callbacks). ``done`` counts finished requests of any status.
    """

    started: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    done: int = 0
    ok: int = 0
    errors: int = 0
    cancelled: int = 0
    output_tokens: int = 0

    def request_started(self) -> None:
        self.started += 1
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight

    def request_finished(self, record: RequestRecord) -> None:
        self.in_flight -= 1
        self.done += 1
        self.output_tokens += record.output_tokens
        if record.status == "ok":
            self.ok += 1
        elif record.status == "error":
            self.errors += 1
        else:
            self.cancelled += 1

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters as a plain dict."""
        return asdict(self)


def _cancelled_record(spec: RequestSpec, user_id: int, scheduled_s: float) -> RequestRecord:
    """The record of a request whose client raised CancelledError instead of returning one."""
    return RequestRecord(
        request_id=spec.request_id,
        user_id=user_id,
        scheduled_s=scheduled_s,
        sent_s=scheduled_s,
        first_token_s=None,
        done_s=None,
        prompt_tokens=spec.prompt_tokens,
        output_tokens=0,
        output_tokens_source="chunks",
        status="cancelled",
        error="cancelled: the run ended while the request was in flight",
        http_status=None,
    )


async def run_closed_loop(
    client: RequestSender,
    requests: Sequence[RequestSpec],
    num_users: int,
    clock: RunClock,
    duration_s: float | None = None,
    think_time_s: float = 0.0,
    on_record: Callable[[RequestRecord], None] | None = None,
    counters: LiveCounters | None = None,
) -> list[RequestRecord]:
    """Drive ``requests`` with ``num_users`` closed-loop users; return one record per started one.

    Args:
        client: sends one request and returns its record (see :class:`RequestSender`).
        requests: taken in order; the run ends when they are all done.
        num_users: concurrent users, >= 1 (size the client's pool to at least this).
        clock: the run clock; ``scheduled_s`` is when a user was ready to send.
        duration_s: seconds from this call after which the run is cut (None: no limit).
        think_time_s: pause between a user's answer and its next request, seconds >= 0.
        on_record: called with each record as it completes (exceptions in it stop the run and
            propagate, after the in-flight requests are cancelled and recorded).
        counters: live totals updated in place; pass one to watch progress from another task.

    Returns:
        The records of all started requests, in the order of ``requests``; requests never
        started (the run was cut first) have none.
    """
    if not isinstance(num_users, int) or num_users < 1:
        raise ValueError(f"run_closed_loop num_users: expected an int >= 1, got {num_users!r}")
    if duration_s is not None and not duration_s > 0:
        raise ValueError(
            f"run_closed_loop duration_s: expected seconds > 0 or None, got {duration_s!r}"
        )
    if not think_time_s >= 0:
        raise ValueError(
            f"run_closed_loop think_time_s: expected seconds >= 0, got {think_time_s!r}"
        )
    live = counters if counters is not None else LiveCounters()
    records: list[RequestRecord | None] = [None] * len(requests)
    next_index = 0
    stopping = False

    def finish(i: int, record: RequestRecord) -> None:
        records[i] = record
        live.request_finished(record)
        if on_record is not None:
            on_record(record)

    async def user(user_id: int) -> None:
        nonlocal next_index
        task = asyncio.current_task()
        first = True
        while not stopping and next_index < len(requests):
            if not first and think_time_s > 0:
                await asyncio.sleep(think_time_s)
                if stopping or next_index >= len(requests):
                    return
            first = False
            i = next_index
            next_index += 1
            spec = requests[i]
            live.request_started()
            scheduled_s = clock.now_s()
            try:
                record = await client.send(spec, user_id, scheduled_s, clock)
            except asyncio.CancelledError:
                finish(i, _cancelled_record(spec, user_id, scheduled_s))
                raise
            finish(i, record)
            # StreamingClient returns a cancelled record instead of raising: stop here too.
            if task is not None and task.cancelling():
                return

    tasks = [asyncio.create_task(user(u), name=f"closed-loop-user-{u}") for u in range(num_users)]
    try:
        await asyncio.wait(tasks, timeout=duration_s, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        stopping = True
        for task in tasks:
            if not task.done():
                task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome
    return [record for record in records if record is not None]
