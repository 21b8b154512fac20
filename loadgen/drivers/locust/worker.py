"""A Locust worker of a `bench run --driver locust` run; `bench worker --master HOST:PORT` runs it.

``python -m loadgen.drivers.locust.worker --master HOST:PORT`` connects to the master
(loadgen.drivers.locust.master), answers its clock pings, receives its share of the plan and the
client settings (loadgen.drivers.locust.job lists the messages), and then runs Locust users when
the master starts them: each user is one closed-loop user that takes the worker's next session,
sends its turns in order with the plan's think time, and records every request as the asyncio
client does, through the same raw client in blocking form (loadgen.drivers.locust.raw: the same
parser and accumulator, each read timed by the kernel's receive stamp where Linux gives one,
``https://`` included), on the run's clock: the master gave the run's origin on this worker's
own clock, as it measured it (loadgen.drivers.clock_sync), and gives it again when it measures
it again during the run. An open-loop plan runs no Locust user: the worker sends its share of
the schedule at the planned times from the start second the master gives
(loadgen.drivers.locust.open_schedule). Records, and each request's start, go back to the
master every 0.25 s; the process exits when the master says quit (or is gone for 60 s,
Locust's own rule). At its end the worker sends the stamp record of every connection its users
opened (run.json's ``load.receive_stamps``).

This module imports Locust, which monkey-patches the whole process with gevent: it is only ever
the main module of its own process, and ``locust`` is imported before anything that opens a
socket or builds a TLS context.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import gevent
import locust  # noqa: F401  (first: importing locust monkey-patches ssl and sockets)
from locust import User, constant, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner
from locust.stats import RequestStats

from loadgen.client.apis import request_body
from loadgen.client.failures import CANCELLED
from loadgen.client.readers.openai_stream import StreamAccumulator
from loadgen.client.routing import Router
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig
from loadgen.drivers.locust.job import (
    MSG_CLIENT,
    MSG_CLOCK,
    MSG_DONE,
    MSG_PING,
    MSG_PLAN,
    MSG_PONG,
    MSG_READY,
    MSG_RECORDS,
    MSG_SETUP,
    MSG_START,
    MSG_STOP,
    client_from_wire,
    parse_address,
    record_to_wire,
    spec_from_wire,
)
from loadgen.drivers.locust.open_schedule import OpenLoopShare
from loadgen.drivers.locust.raw import UserConnections, WorkerStamps
from loadgen.request_spec import RequestSpec
from results.folder.client_samples import ClientSamples
from results.folder.records import RequestRecord, endpoint_of
from results.folder.redact import REDACTED

__all__ = ["PlanUser", "WorkerState", "main"]

_FLUSH_S = 0.25
_TICK_S = 0.01


class WorkerState:
    """What the master gave this worker, and what goes back to it."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner = runner
        self.index = -1
        self.workers = 1
        self.client: ClientConfig | None = None
        # A fleet's replicas, picked per request; least-outstanding counts this worker's own
        # requests in flight (loadgen.client.routing).
        self.router = Router(1)
        self.clock: RunClock | None = None
        # Every connection's stamp record, and the kernel clock's map (loadgen.drivers.locust.raw).
        self.stamps: WorkerStamps | None = None
        self.think_time_s = 0.0
        self.parts_expected = -1
        self.parts: dict[int, list[list[RequestSpec]]] = {}
        self.part_due: dict[int, list[float] | None] = {}
        self.queue: list[list[RequestSpec]] = []
        # Open loop: the mode, the most requests in flight here, this worker's share.
        self.mode = "closed"
        self.max_concurrency = 1
        self.share: OpenLoopShare | None = None
        self.ordered: list[list[RequestSpec]] = []
        self.due_s: list[float] = []
        self.users = 0
        self.active = 0
        self.done_sent = False
        self.started: list[list[Any]] = []
        self.buffer: list[dict[str, Any]] = []
        self.samples = ClientSamples()
        for name, handler in (
            (MSG_PING, self.on_ping), (MSG_SETUP, self.on_setup), (MSG_PLAN, self.on_plan),
            (MSG_STOP, self.on_stop), (MSG_START, self.on_start), (MSG_CLOCK, self.on_clock),
        ):  # fmt: skip
            runner.register_message(name, handler)

    # The master's messages (each handler runs in the worker's receiving greenlet).
    def on_ping(self, msg: Any, **_: Any) -> None:
        t1_ns = time.perf_counter_ns()
        self.runner.send_message(MSG_PONG, {**msg.data, "t1_ns": t1_ns})

    def on_setup(self, msg: Any, **_: Any) -> None:
        data = msg.data
        self.index, self.workers = int(data["index"]), int(data["workers"])
        self.client = client_from_wire(data["client"])
        self.router = Router(len(self.client.urls), self.client.route)
        self.stamps = WorkerStamps(self.client)
        self.clock = RunClock(int(data["t0_ns"]))
        self.think_time_s = float(data["think_time_s"])
        self.parts_expected = int(data["parts"])
        self.mode = str(data.get("mode", "closed"))
        self.max_concurrency = int(data.get("max_concurrency") or 1)
        self._maybe_ready()

    def on_plan(self, msg: Any, **_: Any) -> None:
        sessions = [[spec_from_wire(r) for r in session] for session in msg.data["sessions"]]
        self.parts[int(msg.data["part"])] = sessions
        self.part_due[int(msg.data["part"])] = msg.data.get("due_s")
        self._maybe_ready()

    def on_clock(self, msg: Any, **_: Any) -> None:
        # The master measured this worker's clock again: the run's origin, as it now stands.
        self.clock = RunClock(int(msg.data["t0_ns"]))

    def on_start(self, msg: Any, **_: Any) -> None:
        gevent.spawn(self._run_open, float(msg.data["start_s"]))

    def on_stop(self, msg: Any, **_: Any) -> None:
        # The run's duration is over: cancelling the users records their requests as cancelled.
        self.queue.clear()
        gevent.spawn(self._stop_and_report)

    def _stop_and_report(self) -> None:
        if self.share is not None:
            self.share.stop()
        else:
            self.runner.stop()
        self.finish()

    def _run_open(self, start_s: float) -> None:
        """This worker's share of the open-loop schedule (loadgen.drivers.locust.open_schedule)."""
        assert self.client is not None and self.stamps is not None
        sessions = [UserConnections(self.client, self.stamps) for _ in range(self.max_concurrency)]
        requests_ = [session[0] for session in self.ordered]
        self.users = len(sessions)
        self.share = OpenLoopShare(
            requests_, self.due_s, lambda: self.clock, self._note_lag, sessions,
            self.index, self.workers,
        )  # fmt: skip
        self.share.run(start_s, self._send_open, self._cancelled_open)
        self.finish()

    def _note_lag(self, due_s: float, lag_s: float) -> None:
        self.samples.add(due_s, self.index, "schedule_lag_s", lag_s)

    def _send_open(self, spec: RequestSpec, user_id: int, planned: float, http: Any) -> None:
        record = _send(http, spec, user_id, self, scheduled_s=planned)
        self.buffer.append(record_to_wire(record))

    def _cancelled_open(self, spec: RequestSpec, planned: float) -> None:
        assert self.clock is not None
        now = self.clock.now_s()
        self.started.append([spec.request_id, -1, planned, now])
        self.buffer.append(record_to_wire(RequestRecord.unanswered(
            spec.request_id, -1, planned, now, now, spec.prompt_tokens, "cancelled",
            "cancelled: the run ended while the request waited for a connection",
        )))  # fmt: skip

    def _maybe_ready(self) -> None:
        if self.clock is None or len(self.parts) != self.parts_expected:
            return
        ordered = [s for i in range(self.parts_expected) for s in self.parts[i]]
        if self.mode == "open":
            self.ordered = ordered
            self.due_s = [t for i in range(self.parts_expected) for t in self.part_due[i] or ()]
        self.parts.clear()
        self.queue = ordered[::-1] if self.mode == "closed" else []
        gevent.spawn(self._flush_forever)
        gevent.spawn(self._tick_forever)
        requests_given = sum(len(s) for s in ordered)
        self.runner.send_message(MSG_READY, {"requests": requests_given})

    # What the users call.
    def next_user_id(self) -> int:
        self.users += 1
        self.active += 1
        return (self.users - 1) * self.workers + self.index

    def next_session(self) -> list[RequestSpec] | None:
        return self.queue.pop() if self.queue else None

    def user_finished(self) -> None:
        self.active -= 1
        if self.active == 0 and not self.queue:
            self.finish()

    def finish(self) -> None:
        """Send what is left and say this worker is done (once)."""
        if not self.done_sent:
            self.flush()
            self.done_sent = True
            stamps = self.stamps.reports(self.index) if self.stamps is not None else []
            self.runner.send_message(MSG_DONE, {"stamps": stamps})

    def flush(self) -> None:
        if self.started or self.buffer:
            started, self.started = self.started, []
            batch, self.buffer = self.buffer, []
            self.runner.send_message(MSG_RECORDS, {"started": started, "records": batch})
        if len(self.samples):
            samples, self.samples = self.samples, ClientSamples()
            self.runner.send_message(MSG_CLIENT, samples.columns())

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(_FLUSH_S)
            self.flush()

    def _tick_forever(self) -> None:
        # gevent's loop lag and the process CPU, as loadgen.drivers.selfcheck measures asyncio's.
        assert self.clock is not None
        due = time.perf_counter_ns()
        next_cpu = due
        while True:
            due += int(_TICK_S * 1e9)
            gevent.sleep(max(due - time.perf_counter_ns(), 0) / 1e9)
            now = time.perf_counter_ns()
            self.samples.add(self.clock.to_s(due), self.index, "loop_lag_s", (now - due) / 1e9)
            if now >= next_cpu:
                self.samples.add(self.clock.now_s(), self.index, "cpu_s", time.process_time())
                next_cpu = now + 250_000_000
            due = max(due, now)


STATE: WorkerState | None = None


class _PlanWorkerRunner(WorkerRunner):
    """Locust's worker runner, listening for the master's messages before it first connects
    (the master pings as soon as the worker's hello is acknowledged)."""

    def connect_to_master(self) -> None:
        global STATE
        if STATE is None:
            STATE = WorkerState(self)
        super().connect_to_master()


def _send(
    http: UserConnections, spec: RequestSpec, user_id: int, state: WorkerState,
    scheduled_s: float | None = None,
) -> RequestRecord:  # fmt: skip
    """One streamed request to the replica the worker's router picks, recorded as
    loadgen.client.stream does (never raises but GreenletExit, after recording the request as
    cancelled); ``scheduled_s``: its planned time (open loop), else now."""
    index = state.router.pick()
    try:
        return _send_to(index, http, spec, user_id, state, scheduled_s)
    finally:
        state.router.done(index)


def _send_to(
    index: int, http: UserConnections, spec: RequestSpec, user_id: int, state: WorkerState,
    scheduled_s: float | None = None,
) -> RequestRecord:  # fmt: skip
    config, clock = state.client, state.clock
    assert config is not None and clock is not None
    base_url = config.urls[index]
    # OpenAI's streams only (bench.run.load_runner refuses the other APIs for Locust).
    api = spec.api
    url = base_url.rstrip("/") + "/v1" + spec.kind.path
    acc = StreamAccumulator(spec.api, spec.max_tokens)
    scheduled_s = clock.now_s() if scheduled_s is None else scheduled_s
    sent_ns = time.perf_counter_ns()
    state.started.append([spec.request_id, user_id, scheduled_s, clock.to_s(sent_ns)])
    status, error, http_status, stamps = "ok", None, None, None
    raise_after = False
    try:
        payload = request_body(spec, config.model, config.extra_body)
        http_status, error, stamps = http.stream(index, api, payload, acc, url)
    except gevent.GreenletExit:
        status, error = "cancelled", CANCELLED
        raise_after = True
    if error is None and (problem := acc.problem()) is not None:
        acc.usage, status, error = None, "error", problem  # an absurd usage is not used
    if error is not None and status == "ok":
        status = "ok" if acc.done_ns is not None else "error"
        error = None if status == "ok" else error
    if error is not None:
        for secret in config.headers.secret_values():
            error = error.replace(secret, REDACTED)  # a server may echo the key back
    record = acc.to_record(
        spec=spec, user_id=user_id, scheduled_s=scheduled_s, sent_ns=sent_ns,
        end_ns=time.perf_counter_ns(), clock=clock, tokenizer=None, status=status,
        error=error, http_status=http_status,
    )  # fmt: skip
    record.endpoint = endpoint_of(base_url)
    record.model = spec.model or config.model
    if stamps is not None:
        record.stamps = stamps
    if raise_after:
        state.buffer.append(record_to_wire(record))
        raise gevent.GreenletExit
    return record


class PlanUser(User):
    """A closed-loop user working through this worker's sessions (module docstring)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        assert STATE is not None and STATE.client is not None, "PlanUser runs on bench workers"
        self.state = STATE
        self.user_id = STATE.next_user_id()
        assert STATE.stamps is not None
        self.http = UserConnections(STATE.client, STATE.stamps)
        self.finished = False

    def on_stop(self) -> None:
        self.http.close()
        if not self.finished:
            self.finished = True
            self.state.user_finished()

    @task
    def run_session(self) -> None:
        session = self.state.next_session()
        if session is None:
            self.finished = True
            self.state.user_finished()
            raise StopUser
        for spec in session:
            record = _send(self.http, spec, self.user_id, self.state)
            self.state.buffer.append(record_to_wire(record))
            e2e_ms = ((record.done_s or record.sent_s) - record.sent_s) * 1000.0
            failure = None if record.status == "ok" else RuntimeError(record.error or "failed")
            self.environment.events.request.fire(
                request_type="POST", name=spec.api, response_time=e2e_ms,
                response_length=record.output_tokens, exception=failure, context={},
            )  # fmt: skip
            if self.state.think_time_s > 0:
                gevent.sleep(self.state.think_time_s)


def main(argv: list[str] | None = None) -> int:
    """Join the master at ``--master HOST:PORT`` and work until it says quit; the exit status
    is 0 then, 2 for a bad address, 1 when the master cannot be reached (Locust retries for
    about 5 minutes)."""
    parser = argparse.ArgumentParser(prog="bench worker")
    parser.add_argument("--master", required=True, help="HOST:PORT of `bench run`'s master")
    args = parser.parse_args(argv)
    try:
        host, port = parse_address(args.master, "--master")
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    env = Environment(user_classes=[PlanUser])
    print(f"bench worker: connecting to the master at {host}:{port} ...", flush=True)
    try:
        # As Environment.create_worker_runner, with the runner above.
        env.stats = RequestStats(use_response_times_cache=False)
        runner = env._create_runner(_PlanWorkerRunner, master_host=host, master_port=port)
    except ConnectionError:
        print(f"bench worker: no master answered at {host}:{port}", file=sys.stderr)
        return 1
    print(f"bench worker: joined {host}:{port}", flush=True)
    runner.greenlet.join()
    users = STATE.users if STATE is not None else 0
    print(f"bench worker: done, {users} users ran here", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
