"""The closed-loop driver: N users, each sends a request, reads it to the end, thinks, repeats.

Concurrency is bounded by construction: each user has at most one request in flight, so the
server never sees more than ``num_users`` at once. Users take requests from one shared list in
order (asyncio is single-threaded, so taking the next index needs no lock), which keeps the
workload identical between runs whatever the timing. The run ends at the end of the list or at
``duration_s``, whichever comes first; requests in flight at the cut are cancelled and recorded
with status "cancelled", so every request that started has exactly one record.

Multi-turn chats and agent sessions run as sessions: a user takes the next session and sends
its turns in order, each after the previous answer and the turn's delay (else the think time),
so a session's history grows on one user (loadgen.drivers.session_turns).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from loadgen.clock import RunClock
from loadgen.drivers.sending import (
    LiveCounters,
    RecordCallback,
    RequestSender,
    ScheduleHook,
    prompt_counter,
)
from loadgen.drivers.session_turns import SessionRunner
from loadgen.drivers.stop import LoadStop
from loadgen.request_spec import RequestSpec
from results.folder.records import RequestRecord

__all__ = ["run_closed_loop"]


def _as_sessions(
    requests: Sequence[RequestSpec] | None, sessions: Sequence[Sequence[RequestSpec]] | None
) -> Sequence[Sequence[RequestSpec]]:
    if (requests is None) == (sessions is None):
        raise ValueError("run_closed_loop: pass exactly one of requests and sessions")
    if sessions is not None:
        return sessions
    assert requests is not None
    return [(spec,) for spec in requests]


async def run_closed_loop(
    client: RequestSender,
    requests: Sequence[RequestSpec] | None,
    num_users: int,
    clock: RunClock,
    duration_s: float | None = None,
    think_time_s: float = 0.0,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    *,
    sessions: Sequence[Sequence[RequestSpec]] | None = None,
    ramp_up_s: float = 0.0,
    on_started: ScheduleHook | None = None,
    take_next: Callable[[], int] | None = None,
    user_ids: Sequence[int] | None = None,
    stop: LoadStop | None = None,
    keep_records: bool = True,
) -> list[RequestRecord]:
    """Drive ``requests`` with ``num_users`` closed-loop users; return one record per started one.

    Args:
        client: sends one request and returns its record (see :class:`RequestSender`).
        requests: taken in order; the run ends when they are all done. Pass None with
            ``sessions``.
        num_users: concurrent users, >= 1 (size the client's pool to at least this).
        clock: the run clock; ``scheduled_s`` is when a user was ready to send.
        duration_s: seconds from this call after which the run is cut (None: no limit).
        think_time_s: pause between a user's answer and its next request, seconds >= 0.
        on_record: called with each record as it completes (exceptions in it stop the run and
            propagate, after the in-flight requests are cancelled and recorded).
        counters: live totals updated in place; pass one to watch progress from another task.
        sessions: instead of ``requests``: conversations, each a list of turns that one user
            sends in order (think time between turns too) before it takes the next session.
        ramp_up_s: start the users evenly spread over this many seconds (user u at
            ``u * ramp_up_s / num_users``), >= 0.
        on_started: called with (due_s, started_s) for each request: when its user should have
            been ready (the previous answer's end plus think time, or its ramp start) and when
            it got to send. Their difference is the client's own lag (see
            loadgen.drivers.selfcheck).
        take_next: returns the index of the next session to run (a counter shared between
            worker processes); by default an in-process counter. An index past the end stops
            the user.
        user_ids: the ids recorded for users 0..num_users-1 (default: 0..num_users-1).
        stop: when it is set (an interrupt, a dead engine), the run is cut as at
            ``duration_s``: no new request, those in flight cancelled with the stop's reason.
        keep_records: False when ``on_record`` keeps them (a record stream to disk): the
            driver then holds no record past its ``on_record`` call, so its memory does not
            grow with the run's length, and returns none.

    Returns:
        The records of all started requests, in the order of ``requests`` (sessions: their
        turns, session by session); requests never started (the run was cut first) have none.
        Empty with ``keep_records`` False.
    """
    _check_closed_loop_args(num_users, duration_s, think_time_s, ramp_up_s, user_ids)
    work = _as_sessions(requests, sessions)
    live = counters if counters is not None else LiveCounters()
    records: list[list[RequestRecord | None]] | None = (
        [[None] * len(s) for s in work] if keep_records else None
    )
    user, cut = _closed_loop_users(
        client, work, records, live, clock, num_users, think_time_s, ramp_up_s,
        on_record=on_record, on_started=on_started, take_next=take_next, user_ids=user_ids,
        stop=stop,
    )  # fmt: skip
    tasks = [asyncio.create_task(user(u), name=f"closed-loop-user-{u}") for u in range(num_users)]
    outcomes = await _await_users(tasks, duration_s, stop, cut)
    for outcome in outcomes:
        if isinstance(outcome, Exception):
            raise outcome
    if records is None:
        return []
    return [record for turns in records for record in turns if record is not None]


def _check_closed_loop_args(
    num_users: int,
    duration_s: float | None,
    think_time_s: float,
    ramp_up_s: float,
    user_ids: Sequence[int] | None,
) -> None:
    """Raise ValueError, naming the argument, for any of run_closed_loop's that is out of range."""
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
    if not ramp_up_s >= 0:
        raise ValueError(f"run_closed_loop ramp_up_s: expected seconds >= 0, got {ramp_up_s!r}")
    if user_ids is not None and len(user_ids) != num_users:
        raise ValueError(f"run_closed_loop user_ids: expected {num_users} ids, got {len(user_ids)}")


def _closed_loop_users(
    client: RequestSender,
    work: Sequence[Sequence[RequestSpec]],
    records: list[list[RequestRecord | None]] | None,
    live: LiveCounters,
    clock: RunClock,
    num_users: int,
    think_time_s: float,
    ramp_up_s: float,
    *,
    on_record: RecordCallback | None,
    on_started: ScheduleHook | None,
    take_next: Callable[[], int] | None,
    user_ids: Sequence[int] | None,
    stop: LoadStop | None,
) -> tuple[Callable[[int], Coroutine[Any, Any, None]], Callable[[], None]]:
    """run_closed_loop's user ``u`` (a coroutine function: it runs sessions of ``work`` until
    none is left, the run is cut or ``stop`` is set, storing each turn's record in
    ``records[session][turn]`` unless ``records`` is None) and the function that cuts the run
    (no user sends again). Arguments as run_closed_loop's; the users' ramp starts now."""
    start_s = clock.now_s()
    counter = 0

    def take() -> int:
        nonlocal counter
        counter += 1
        return counter - 1

    next_session = take_next or take

    def finish(i: int, turn: int, record: RequestRecord) -> None:
        if records is not None:
            records[i][turn] = record
        if on_record is not None:
            on_record(record)

    runner = SessionRunner(
        client, clock, live, finish, stop,
        think_time_s=think_time_s, on_started=on_started, count=prompt_counter(client),
    )  # fmt: skip

    async def user(u: int) -> None:
        user_id = user_ids[u] if user_ids is not None else u
        due_s = start_s + ramp_up_s * u / num_users
        if due_s > start_s:
            await asyncio.sleep(max(due_s - clock.now_s(), 0.0))
        while not runner.stopped():
            i = next_session()
            if i >= len(work):
                return
            end_s = await runner.run(i, work[i], user_id, due_s)
            if end_s is None:
                return
            due_s = end_s + think_time_s
            if think_time_s > 0:
                await asyncio.sleep(max(due_s - clock.now_s(), 0.0))

    return user, runner.cut


async def _await_users(
    tasks: list[asyncio.Task[None]],
    duration_s: float | None,
    stop: LoadStop | None,
    cut: Callable[[], None],
) -> list[BaseException | None]:
    """Wait for the users' ``tasks`` until they are all done, one raises, ``duration_s`` (s)
    passes or ``stop`` is set; then ``cut`` the run, cancel the users still running and return
    each task's outcome (None or its exception)."""
    stopper = asyncio.create_task(stop.wait(), name="closed-loop-stop") if stop else None
    try:
        if stopper is None:
            await asyncio.wait(tasks, timeout=duration_s, return_when=asyncio.FIRST_EXCEPTION)
        else:
            users = asyncio.create_task(asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION))
            await asyncio.wait(
                {users, stopper}, timeout=duration_s, return_when=asyncio.FIRST_COMPLETED
            )
            users.cancel()
    finally:
        cut()
        if stopper is not None:
            stopper.cancel()
        for task in tasks:
            if not task.done():
                task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    return outcomes
