"""A request the workload abandons: the client closes its stream after N tokens or T seconds.

Users stop reading: they close the tab once the answer's start told them enough, or give up
on a slow one. :func:`send_abandoning` runs one request as a task of its own and cancels that
task when the spec's :class:`loadgen.request_spec.Abandon` says so: after ``after_tokens``
content chunks (one token each on engines that stream a token per event, as vLLM and ours do)
or ``after_s`` seconds after the request was due (its ``scheduled_s``: the user has waited
since then, queueing included). Cancelling closes the connection, which
is what tells an engine to abort the request and free its KV blocks. The request's own
cancellation path records it (status ``cancelled``, ``done_s`` the cut, ``output_tokens`` what
arrived); this module marks it ``abandoned`` and says why. A request whose stream completes
first is recorded as usual, and a run that is cut meanwhile (duration, Ctrl-C) cancels it as
any other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from loadgen.client.readers.openai_stream import StreamAccumulator
from loadgen.clock import RunClock
from loadgen.request_spec import Abandon
from results.folder.records import RequestRecord
from results.schema.api_kinds import Api

__all__ = ["AbandoningAccumulator", "send_abandoning"]


class AbandoningAccumulator(StreamAccumulator):
    """A StreamAccumulator that calls ``on_reached`` once ``after_tokens`` content chunks are
    in (never when ``after_tokens`` is None); ``max_tokens`` caps the stream as
    StreamAccumulator's does."""

    __slots__ = ("_after_tokens", "on_reached")

    def __init__(self, api: Api, after_tokens: int | None, max_tokens: int | None = None) -> None:
        super().__init__(api, max_tokens)
        self._after_tokens = after_tokens
        self.on_reached: Callable[[], None] | None = None

    def add_event(self, data: str, t_ns: int, read_ns: int | None = None) -> None:
        super().add_event(data, t_ns, read_ns)
        limit = self._after_tokens
        if limit is not None and len(self.texts) >= limit and self.on_reached is not None:
            reached, self.on_reached = self.on_reached, None
            reached()


async def send_abandoning(
    rule: Abandon,
    acc: AbandoningAccumulator,
    send: Callable[[], Awaitable[RequestRecord]],
    scheduled_s: float,
    clock: RunClock,
) -> RequestRecord:
    """Run ``send()`` (a request reading into ``acc``, due at ``scheduled_s`` on ``clock``) and
    abandon it by ``rule`` (module docstring); its record, marked ``abandoned`` with the reason
    when it was."""
    inner = asyncio.ensure_future(send())
    reasons: list[str] = []

    def abandon(why: str) -> None:
        if not inner.done() and not reasons:
            reasons.append(why)
            inner.cancel()

    acc.on_reached = lambda: abandon(f"after {rule.after_tokens} tokens")
    timer = None
    if rule.after_s is not None:
        loop = asyncio.get_running_loop()
        wait_s = max(0.0, scheduled_s + rule.after_s - clock.now_s())
        timer = loop.call_later(wait_s, abandon, f"after {rule.after_s:g} s")
    try:
        # A cut of the run cancels this task, hence ``inner`` (awaited), which records itself.
        record = await inner
    finally:
        if timer is not None:
            timer.cancel()
    if reasons and record.status == "cancelled":
        record.abandoned = True
        record.error = f"abandoned by the workload {reasons[0]} (the client closed the stream)"
    return record
