"""The open-loop driver: requests go out at their planned times, whatever the server does.

Each request ``i`` is due at ``start_s + schedule_s[i]`` on the run clock (a precomputed plan,
see :mod:`loadgen.workloads.arrivals`), and its record's ``scheduled_s`` is that planned time, not
the time it actually went out. So ``done_s - scheduled_s`` (and ``first_token_s - scheduled_s``)
include any delay before sending: waiting for the concurrency cap, or a client that fell behind.
That is what "no coordinated omission" means: a slow system cannot slow down the arrivals and hide
its queueing.

The driver sleeps until each due time and starts a task per request; with ``max_concurrency``
a request due while that many are in flight waits for one to finish (``sent_s`` is then later
than ``scheduled_s``; the wait is queueing, not client lag). The schedule lag reported to
``on_started`` is the moment the driver started the request minus its due time, before any
cap: that part is the client's own delay.

The run ends when every planned request has finished, or at ``duration_s`` after the start:
requests not yet due are never sent, and those in flight (or waiting for the cap) are cancelled
and recorded with status "cancelled", as in the closed loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import numpy as np

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

__all__ = ["run_open_loop"]


def _check(
    requests: Sequence[Any],
    schedule: np.ndarray,
    max_concurrency: int | None,
    duration_s: float | None,
) -> None:
    if schedule.ndim != 1 or len(schedule) != len(requests):
        raise ValueError(
            f"run_open_loop schedule_s: expected one time per request ({len(requests)}), "
            f"got shape {schedule.shape}"
        )
    if len(schedule) and (not np.all(np.isfinite(schedule)) or schedule.min() < 0):
        raise ValueError("run_open_loop schedule_s: expected finite seconds >= 0")
    if len(schedule) > 1 and np.any(np.diff(schedule) < 0):
        raise ValueError("run_open_loop schedule_s: expected non-decreasing times")
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or max_concurrency < 1
    ):
        raise ValueError(
            f"run_open_loop max_concurrency: expected an int >= 1 or None, got {max_concurrency!r}"
        )
    if duration_s is not None and not duration_s > 0:
        raise ValueError(
            f"run_open_loop duration_s: expected seconds > 0 or None, got {duration_s!r}"
        )


async def run_open_loop(
    client: RequestSender,
    requests: Sequence[RequestSpec] | Sequence[Sequence[RequestSpec]],
    schedule_s: Sequence[float] | np.ndarray,
    clock: RunClock,
    *,
    max_concurrency: int | None = None,
    duration_s: float | None = None,
    start_s: float | None = None,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    on_started: ScheduleHook | None = None,
    user_ids: Sequence[int] | None = None,
    stop: LoadStop | None = None,
    keep_records: bool = True,
) -> list[RequestRecord]:
    """Send ``requests[i]`` at ``start_s + schedule_s[i]``; return one record per started one.

    Args:
        client: sends one request and returns its record.
        requests: what to send, in schedule order: requests, or sessions (each a list of
            turns, loadgen.drivers.session_turns): a session starts at its due time and sends
            its turns in order, each after the previous answer and the turn's delay.
        schedule_s: due times, seconds from ``start_s``, non-decreasing, one per request (or
            session).
        clock: the run clock.
        max_concurrency: the most requests in flight at once (None: no cap). Size the
            client's pool to at least this (or to the expected peak when None).
        duration_s: seconds after ``start_s`` at which the run is cut (None: no limit).
        start_s: run seconds of the schedule's origin (default: now).
        on_record: called with each record as it completes; an exception in it stops the run.
        counters: live totals updated in place.
        on_started: called with (due_s, started_s) per request (see
            :mod:`loadgen.drivers.selfcheck`).
        user_ids: the ``user_id`` recorded per request or session (default: its index: each
            arrival is a new user).
        stop: when it is set (an interrupt, a dead engine), the run is cut as at
            ``duration_s``: requests not yet due are never sent, those in flight are cancelled
            with the stop's reason.
        keep_records: False when ``on_record`` keeps them (a record stream to disk): no
            record is held past its ``on_record`` call, and none is returned.

    Returns:
        The records of the started requests in schedule order (a session's turns together);
        empty with ``keep_records`` False.
    """
    schedule = np.asarray(schedule_s, dtype=np.float64)
    _check(requests, schedule, max_concurrency, duration_s)
    work = [[r] if isinstance(r, RequestSpec) else list(r) for r in requests]
    live = counters if counters is not None else LiveCounters()
    origin_s = clock.now_s() if start_s is None else start_s
    records: list[list[RequestRecord | None]] | None = (
        [[None] * len(s) for s in work] if keep_records else None
    )
    cap = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    tasks: set[asyncio.Task[None]] = set()
    failure: list[BaseException] = []

    main = asyncio.current_task()
    assert main is not None
    one = _session_sender(
        client, work, clock, records, live, cap, failure, main,
        on_record=on_record, user_ids=user_ids, stop=stop,
    )  # fmt: skip

    timeout = None if duration_s is None else max(origin_s + duration_s - clock.now_s(), 0.0)
    launch = _launch_all(schedule, origin_s, clock, one, tasks, stop, on_started)
    launcher = asyncio.create_task(launch, name="open-loop-launcher")
    await _await_launcher(launcher, tasks, timeout, stop, failure, main)
    if failure:
        raise failure[0]
    if launcher.done() and not launcher.cancelled() and launcher.exception() is not None:
        raise launcher.exception()  # type: ignore[misc]
    if records is None:
        return []
    return [record for turns in records for record in turns if record is not None]


def _session_sender(
    client: RequestSender,
    work: Sequence[Sequence[RequestSpec]],
    clock: RunClock,
    records: list[list[RequestRecord | None]] | None,
    live: LiveCounters,
    cap: asyncio.Semaphore | None,
    failure: list[BaseException],
    main: asyncio.Task[Any],
    *,
    on_record: RecordCallback | None,
    user_ids: Sequence[int] | None,
    stop: LoadStop | None,
) -> Callable[[int, float], Coroutine[Any, Any, None]]:
    """run_open_loop's session ``i`` (a single request being a session of one), due at run
    second ``due_s``: each turn sent (within ``cap``), recorded in ``records[i][turn]`` (unless
    ``records`` is None) and
    passed to ``on_record``; an exception of on_record goes to ``failure`` and cancels
    ``main``, the run. Arguments as run_open_loop's."""

    def finish(i: int, turn: int, record: RequestRecord) -> None:
        if records is not None:
            records[i][turn] = record
        if on_record is not None:
            try:
                on_record(record)
            except Exception as exc:
                failure.append(exc)
                main.cancel()

    runner = SessionRunner(
        client, clock, live, finish, stop, count=prompt_counter(client), planned=True, cap=cap,
    )  # fmt: skip

    async def one(i: int, due_s: float) -> None:
        user_id = user_ids[i] if user_ids is not None else i
        await runner.run(i, work[i], user_id, due_s, started=True)

    return one


async def _launch_all(
    schedule: np.ndarray,
    origin_s: float,
    clock: RunClock,
    one: Callable[[int, float], Coroutine[Any, Any, None]],
    tasks: set[asyncio.Task[None]],
    stop: LoadStop | None,
    on_started: ScheduleHook | None,
) -> None:
    """Start request ``i`` (``one(i, due_s)``, a task held in ``tasks`` until done) at run
    second ``origin_s + schedule[i]``, until the schedule ends or ``stop`` is set; then wait
    for every request in flight."""
    due_list = schedule.tolist()
    for i, offset in enumerate(due_list):
        due_s = origin_s + offset
        delay = due_s - clock.now_s()
        if delay > 0:
            await asyncio.sleep(delay)
        if stop is not None and stop.is_set():
            break
        if on_started is not None:
            on_started(due_s, clock.now_s())
        task = asyncio.create_task(one(i, due_s), name=f"open-loop-{i}")
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    while tasks:
        await asyncio.wait(set(tasks))


async def _await_launcher(
    launcher: asyncio.Task[None],
    tasks: set[asyncio.Task[None]],
    timeout: float | None,
    stop: LoadStop | None,
    failure: list[BaseException],
    main: asyncio.Task[Any],
) -> None:
    """Wait for ``launcher`` (every request sent and answered) until ``timeout`` (s) or
    ``stop``; then cancel it and the requests in flight and wait for their records. A cancel of
    ``main`` that an on_record failure (in ``failure``) made is taken back."""
    stopper = asyncio.create_task(stop.wait(), name="open-loop-stop") if stop else None
    try:
        await asyncio.wait(
            {launcher} if stopper is None else {launcher, stopper},
            timeout=timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
    except asyncio.CancelledError:
        if not failure:
            raise
        main.uncancel()  # the cancel was ours, to stop on an on_record failure
    finally:
        if stopper is not None:
            stopper.cancel()
        launcher.cancel()
        for task in list(tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await launcher
        await asyncio.gather(*list(tasks), return_exceptions=True)
