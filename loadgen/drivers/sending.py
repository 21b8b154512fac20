"""What every driver shares about sending requests: the client it drives
(:class:`RequestSender`), who is given each record (:data:`RecordCallback`), the live
counters it keeps (:class:`LiveCounters`), the hook told of
each request's schedule (:data:`ScheduleHook`) and how a rebuilt turn's prompt is counted
(:func:`prompt_counter`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec
from results.folder.records import RequestRecord

__all__ = ["LiveCounters", "RecordCallback", "RequestSender", "ScheduleHook", "prompt_counter"]

# Given each finished request's record, once (the live display, the stream to the run folder).
RecordCallback = Callable[[RequestRecord], None]


class RequestSender(Protocol):
    """What the driver needs from a client (:class:`loadgen.client.stream.StreamingClient` fits)."""

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


# Told (due_s, started_s) of each request: when it should have gone and when it went, in run
# seconds; the self-check's schedule lag is the difference.
ScheduleHook = Callable[[float, float], None]


def prompt_counter(client: RequestSender) -> Callable[[str], int] | None:
    """How the client's tokenizer counts a rebuilt turn's prompt (None: it has none)."""
    tokenizer = getattr(client, "tokenizer", None)
    if tokenizer is None:
        return None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
