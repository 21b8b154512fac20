"""One entry point for a load: a plan (what to send, how), run in this process or sharded.

:class:`LoadPlan` says what the load is: closed loop (users working through sessions, a
single-turn request being a session of one) or open loop (requests at planned times, with an
optional concurrency cap). :func:`run_plan` runs it in the current event loop with a
:class:`~loadgen.drivers.selfcheck.ClientMonitor` watching the client, and returns the records and
the client's self-check samples; :func:`run_plan_sharded` (in :mod:`loadgen.drivers.workers`) runs
the same plan across worker processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from loadgen.client.auth import RequestHeaders
from loadgen.client.limits import DEFAULT_READ_TIMEOUT_S, DEFAULT_REQUEST_TIMEOUT_S
from loadgen.client.routing import DEFAULT_ROUTE, RoutedClient
from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.drivers.closed_loop import run_closed_loop
from loadgen.drivers.open_loop import run_open_loop
from loadgen.drivers.selfcheck import ClientMonitor
from loadgen.drivers.sending import LiveCounters, RecordCallback
from loadgen.drivers.stop import LoadStop
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from results.folder.client_samples import ClientSamples
from results.folder.records import RequestRecord

__all__ = ["ClientConfig", "LoadMode", "LoadPlan", "LoadResult", "run_plan"]

LoadMode = Literal["closed", "open"]


@dataclass(frozen=True)
class ClientConfig:
    """How to reach the server (see :class:`loadgen.client.stream.StreamingClient`); picklable, so
    worker processes build their own clients from it (``--workers`` gets it through the spawn
    pipe, never a file). ``headers``: ``--api-key`` and ``--header``, shown by name only.
    ``endpoints``: a fleet's replicas, every ``--url`` in order (``base_url`` is the first),
    each request sent to one by ``route`` (loadgen.client.routing); empty for one endpoint.
    ``timeout_s``: the longest silence between two reads (``--read-timeout``);
    ``request_timeout_s``: the longest whole request (``--request-timeout``), seconds
    (loadgen.client.limits)."""

    base_url: str
    model: str
    headers: RequestHeaders = field(default_factory=RequestHeaders)
    timeout_s: float = DEFAULT_READ_TIMEOUT_S
    extra_body: dict[str, Any] = field(default_factory=dict)
    endpoints: tuple[str, ...] = ()
    route: str = DEFAULT_ROUTE
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    kernel_stamps: bool = True  # time chunks by the kernel's receive stamps where there are

    @property
    def urls(self) -> tuple[str, ...]:
        """Every replica's base URL, in order (one for a run against one endpoint)."""
        return self.endpoints or (self.base_url,)

    def client(
        self, connections: int, tokenizer: TokenizerLike | None
    ) -> StreamingClient | RoutedClient:
        """One client per replica, each with ``connections`` connections (any replica may take
        every request in flight); a RoutedClient over them for a fleet."""
        clients = [
            StreamingClient(
                url,
                self.model,
                max_connections=connections,
                timeout_s=self.timeout_s,
                request_timeout_s=self.request_timeout_s,
                tokenizer=tokenizer,
                headers=self.headers.as_dict(),
                extra_body=self.extra_body,
                kernel_stamps=self.kernel_stamps,
            )
            for url in self.urls
        ]
        return clients[0] if len(clients) == 1 else RoutedClient(clients, self.route)


@dataclass(frozen=True)
class LoadPlan:
    """What a load sends and how.

    Attributes:
        mode: ``"closed"`` or ``"open"``.
        sessions: closed loop: what users take in order (each a list of turns); open loop:
            what starts at each planned time, in schedule order (a session of one request, or
            of several turns sent in order, loadgen.drivers.session_turns).
        users: closed loop: concurrent users. Open loop: the connection pool, and the cap on
            requests in flight (a due request waits for a free one; ``max_concurrency`` wins
            when smaller).
        schedule_s: open loop: due time of each session (its first request), s from the
            load's start.
        max_concurrency: open loop: most requests in flight (None: ``users``).
        duration_s: cut the load this many seconds after it starts (None: no limit).
        think_time_s: closed loop: pause between a user's answer and its next request.
        ramp_up_s: closed loop: users start spread over this many seconds (open loop: the
            ramp is already in the schedule).
        rows: what became of the rows of the file the requests were drawn from: read,
            refused by reason, reused (loadgen.workloads.rows.RowReport.to_json); None for
            workloads read from no file of prompts.
    """

    mode: LoadMode
    sessions: Sequence[Sequence[RequestSpec]]
    users: int
    schedule_s: np.ndarray | None = None
    max_concurrency: int | None = None
    duration_s: float | None = None
    think_time_s: float = 0.0
    ramp_up_s: float = 0.0
    rows: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("closed", "open"):
            raise ValueError(f"LoadPlan.mode: expected 'closed' or 'open', got {self.mode!r}")
        if self.users < 1:
            raise ValueError(f"LoadPlan.users: expected >= 1, got {self.users}")
        if self.mode == "open" and (
            self.schedule_s is None or len(self.schedule_s) != len(self.sessions)
        ):
            raise ValueError("LoadPlan: open loop needs one schedule_s time per session")

    @property
    def requests(self) -> list[RequestSpec]:
        """Every request, sessions flattened, in plan order."""
        return [spec for session in self.sessions for spec in session]

    @property
    def cap(self) -> int:
        """The most requests in flight at once."""
        if self.mode == "closed":
            return self.users
        return min(self.users, self.max_concurrency or self.users)

    def with_changes(self, **changes: Any) -> LoadPlan:
        return replace(self, **changes)


@dataclass(repr=False)
class LoadResult:
    """Records of the started requests (plan order; none when the load ran with
    ``keep_records`` False, its records streamed to disk) and the client's self-check samples."""

    records: list[RequestRecord]
    client: ClientSamples
    workers: int = 1
    # Locust: per worker its index, host, status (ok or lost), measured clock offset and bound.
    worker_info: list[dict[str, Any]] | None = None
    # Per client (a replica's, in a worker process) where its chunk times came from, per
    # connection (StreamingClient.receive_stamps, with "worker"): run.json's load.receive_stamps.
    stamps: list[dict[str, Any]] = field(default_factory=list)
    # Records the load made, kept in ``records`` or not (keep_records False); None: len(records).
    finished: int | None = None

    @property
    def recorded(self) -> int:
        """How many records the load made (one per started request), kept or not."""
        return len(self.records) if self.finished is None else self.finished

    def __repr__(self) -> str:
        # Short on purpose: Python 3.11's asyncio.run formats the main task's result when it
        # restores SIGINT handling, and a full repr of every record and chunk costs seconds.
        return (
            f"LoadResult({len(self.records)} records, {len(self.client)} client samples, "
            f"{self.workers} workers)"
        )


async def run_plan(
    plan: LoadPlan,
    config: ClientConfig,
    clock: RunClock,
    tokenizer: TokenizerLike | None = None,
    *,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    worker: int = 0,
    start_s: float | None = None,
    take_next: Callable[[], int] | None = None,
    user_ids: Sequence[int] | None = None,
    client: StreamingClient | RoutedClient | None = None,
    warm: bool = True,
    stop: LoadStop | None = None,
    keep_records: bool = True,
) -> LoadResult:
    """Run ``plan`` in this event loop (the arguments after ``counters`` are for shards).

    ``start_s`` (run seconds) is when an open-loop schedule starts (default: now). ``client``
    is used (and closed) instead of one built from ``config``: build it ahead when setting it
    up must not delay the start. ``warm`` opens the client's connections first (see
    StreamingClient.warm_up). ``stop`` ends the load early when set (loadgen.drivers.stop).
    ``keep_records`` False: ``on_record`` keeps the records (a stream to the run folder) and the
    result holds none, so the client's memory does not grow with the run's length.
    """
    if client is None:
        client = config.client(plan.cap, tokenizer)
    counters = counters if counters is not None else LiveCounters()
    done_before = counters.done
    if warm:
        await client.warm_up()
    async with client, ClientMonitor(clock, worker=worker) as monitor:
        if plan.mode == "closed":
            records = await run_closed_loop(
                client,
                None,
                plan.users,
                clock,
                duration_s=plan.duration_s,
                think_time_s=plan.think_time_s,
                on_record=on_record,
                counters=counters,
                sessions=plan.sessions,
                ramp_up_s=plan.ramp_up_s,
                on_started=monitor.note_schedule_lag,
                take_next=take_next,
                user_ids=user_ids,
                stop=stop,
                keep_records=keep_records,
            )
        else:
            assert plan.schedule_s is not None
            records = await run_open_loop(
                client,
                plan.sessions,
                plan.schedule_s,
                clock,
                max_concurrency=plan.cap,
                duration_s=plan.duration_s,
                start_s=start_s,
                on_record=on_record,
                counters=counters,
                on_started=monitor.note_schedule_lag,
                user_ids=user_ids,
                stop=stop,
                keep_records=keep_records,
            )
    return LoadResult(
        records, monitor.samples, stamps=receive_stamps(client, worker),
        finished=counters.done - done_before,
    )  # fmt: skip


def receive_stamps(client: StreamingClient | RoutedClient, worker: int) -> list[dict[str, Any]]:
    """``client``'s stamp records (one per replica), each naming the worker process."""
    found = client.receive_stamps()
    return [{"worker": worker, **one} for one in (found if isinstance(found, list) else [found])]
