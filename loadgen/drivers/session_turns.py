"""One session's turns, sent in order: what the closed and the open loop share.

A session is a list of planned turns (loadgen.request_spec.RequestSpec, each with its
``session``). Turn ``k`` goes out after turn ``k - 1`` has answered and its delay has passed
(``SessionTurn.delay_s``: a tool's run time or a user's thinking; else the scenario's think
time), and it is rebuilt from that answer when the answer made tool calls
(loadgen.workloads.sessions.history). The wait is an ``asyncio.sleep`` of this session's own
task, so a session waiting never holds another back.

The closed loop runs the sessions a user takes one after another; the open loop starts each at
its planned time, every session a task of its own (loadgen.drivers.open_loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loadgen.clock import RunClock
from loadgen.drivers.sending import LiveCounters, RequestSender, ScheduleHook
from loadgen.drivers.stop import LoadStop, cancelled_message
from loadgen.request_spec import RequestSpec
from loadgen.workloads.sessions.history import follow_answer
from results.folder.records import RequestRecord

__all__ = ["Finish", "SessionRunner", "cancelled_record"]

# Called with (session index, turn index, record) for every turn sent, once.
Finish = Callable[[int, int, RequestRecord], None]


def cancelled_record(
    spec: RequestSpec, user_id: int, scheduled_s: float, done_s: float | None = None,
    reason: str | None = None,
) -> RequestRecord:  # fmt: skip
    """The record of a request whose client raised CancelledError instead of returning one;
    ``done_s`` is when it was cut (run seconds), ``reason`` why (see loadgen.drivers.stop)."""
    record = RequestRecord.unanswered(
        spec.request_id, user_id, scheduled_s, scheduled_s, done_s, spec.prompt_tokens,
        "cancelled", cancelled_message(reason),
    )  # fmt: skip
    record.model = spec.model  # None: the run's model, filled when the folder is read
    return record


@dataclass
class SessionRunner:
    """Sends sessions' turns for one driver.

    ``finish`` gets every turn's record (cancelled ones too, their error saying why when
    ``stop`` is set), after the live counters have counted it; once ``stop`` is set or
    :meth:`cut` was called, no new turn goes out; ``count`` counts a rebuilt prompt's
    tokens (None: the planned count is kept); ``planned``: open loop, where a turn's
    ``scheduled_s`` is when it was due (its session's planned start, or the previous answer's
    end plus the delay) rather than when it went out, so that waiting for the concurrency cap
    counts as queueing.
    """

    client: RequestSender
    clock: RunClock
    live: LiveCounters
    finish: Finish
    stop: LoadStop | None
    think_time_s: float = 0.0
    on_started: ScheduleHook | None = None
    count: Callable[[str], int] | None = None
    planned: bool = False
    cap: asyncio.Semaphore | None = None
    _cut: bool = field(default=False, init=False)

    def cut(self) -> None:
        """End the run: no new turn goes out (the turns in flight finish)."""
        self._cut = True

    def stopped(self) -> bool:
        """Whether the run is cut, by :meth:`cut` or by ``stop``."""
        return self._cut or (self.stop is not None and self.stop.is_set())

    def delay_before(self, spec: RequestSpec) -> float:
        """Seconds to wait after the previous turn's answer before ``spec`` is due."""
        if spec.session is not None and spec.session.delay_s is not None:
            return spec.session.delay_s
        return self.think_time_s

    async def run(
        self, i: int, session: Sequence[RequestSpec], user_id: int, due_s: float,
        started: bool = False,
    ) -> float | None:  # fmt: skip
        """Send session ``i``'s turns in order, the first due at run second ``due_s``
        (``started``: its start was already reported to on_started). Returns when its last
        answer ended (run s), or None when the run was cut first."""
        task = asyncio.current_task()
        previous: tuple[RequestSpec, RequestRecord] | None = None
        end_s = due_s
        for k, planned in enumerate(session):
            if k:
                due_s = end_s + self.delay_before(planned)
                await asyncio.sleep(max(due_s - self.clock.now_s(), 0.0))
            if self.stopped():
                return None
            spec = follow_answer(planned, previous, self.count)
            self.live.request_started()
            now_s = self.clock.now_s()
            if self.on_started is not None and not (started and k == 0):
                self.on_started(due_s, now_s)
            record = await self._send(i, k, spec, user_id, due_s if self.planned else now_s)
            # StreamingClient returns a cancelled record instead of raising: stop here too.
            if task is not None and task.cancelling():
                return None
            end_s = record.done_s if record.done_s is not None else self.clock.now_s()
            previous = (spec, record)
        return end_s

    async def _send(
        self, i: int, k: int, spec: RequestSpec, user_id: int, scheduled_s: float
    ) -> RequestRecord:
        """One turn, within the cap; its record goes to ``finish`` whatever happens: a
        cancelled one when it was cut, an error naming the exception when its client raised
        (a client records a server's failures itself; this is for its own)."""
        record: RequestRecord | None = None
        try:
            if self.cap is not None:
                async with self.cap:
                    record = await self.client.send(spec, user_id, scheduled_s, self.clock)
            else:
                record = await self.client.send(spec, user_id, scheduled_s, self.clock)
        except Exception as exc:
            record = RequestRecord.unanswered(
                spec.request_id, user_id, scheduled_s, scheduled_s, self.clock.now_s(),
                spec.prompt_tokens, "error", f"the client raised {type(exc).__name__}: {exc}",
            )  # fmt: skip
            record.model = spec.model
        finally:
            if record is None:
                record = cancelled_record(spec, user_id, scheduled_s, self.clock.now_s())
            if spec.session is not None:
                record.session_id, record.turn = spec.session.session_id, spec.session.turn
            if record.status == "cancelled" and self.stop is not None and self.stop.is_set():
                record.error = self.stop.message()
            self.live.request_finished(record)
            self.finish(i, k, record)
        return record
