"""Locust user class for distributed load: the same plan, the same records, many machines.

`bench run --driver locust --workers N` starts Locust headless (a master and N workers on this
machine) with this file and a job (``$LLM_PERF_LOCUST_JOB``, see loadgen.drivers.locust_job). Each
Locust user is one closed-loop user: it takes the next session of the plan (worker ``w`` of
``W`` takes sessions ``w, w + W, ...``), sends its turns in order with the plan's think time,
and records every request exactly as the asyncio client does (the same SSE parser and stream
accumulator, one ``perf_counter_ns`` per network read). Workers send their records to the
master as Locust messages; the master appends them to ``records.jsonl`` (and the workers'
self-check samples to ``client.jsonl``) in the job's folder, and quits once every worker has
finished its sessions. Locust's own statistics see each request too (name = the API, response
time = end-to-end latency).

Other machines join as workers with the same job file:
``locust -f loadgen/drivers/locustfile.py --worker --master-host MASTER`` (see README).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import gevent
import requests
from locust import User, constant, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner

from loadgen.client.auth import RequestHeaders
from loadgen.client.openai_stream import StreamAccumulator, StreamError, error_message_from_body
from loadgen.client.sse import SSEParser
from loadgen.clock import RunClock
from loadgen.drivers.locust_job import CLIENT_FILE, JOB_ENV, RECORDS_FILE, read_job, record_to_wire
from loadgen.request_spec import RequestSpec
from results.client_samples import ClientSamples
from results.records import RequestRecord

if JOB_ENV not in os.environ:
    raise RuntimeError(
        f"${JOB_ENV} is not set: this locustfile runs under `bench run --driver locust`"
    )
JOB = read_job(os.environ[JOB_ENV])
# --api-key and --header, from this process's environment (the job file holds none).
HEADERS = RequestHeaders.from_env()
_FLUSH_S = 0.25
_TICK_S = 0.01


class WorkerState:
    """The sessions, clock and outgoing buffers of one worker process."""

    def __init__(self, worker_index: int, runner: Any) -> None:
        self.worker = worker_index
        self.runner = runner
        self.clock = RunClock(JOB.clock_origin_ns())
        self.queue = list(range(worker_index, len(JOB.plan.sessions), JOB.workers))[::-1]
        self.users = 0
        self.active = 0
        self.done_sent = False
        self.buffer: list[dict[str, Any]] = []
        self.samples = ClientSamples()
        gevent.spawn(self._flush_forever)
        gevent.spawn(self._tick_forever)

    def next_user_id(self) -> int:
        self.users += 1
        self.active += 1
        return (self.users - 1) * JOB.workers + self.worker

    def next_session(self) -> int | None:
        return self.queue.pop() if self.queue else None

    def user_finished(self) -> None:
        self.active -= 1
        if self.active == 0 and not self.queue and not self.done_sent:
            self.flush()
            self.done_sent = True
            self.runner.send_message("llmperf_done", self.worker)

    def flush(self) -> None:
        if self.buffer:
            batch, self.buffer = self.buffer, []
            self.runner.send_message("llmperf_records", batch)
        if len(self.samples):
            samples, self.samples = self.samples, ClientSamples()
            self.runner.send_message("llmperf_client", samples.columns())

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(_FLUSH_S)
            self.flush()

    def _tick_forever(self) -> None:
        # gevent's loop lag and the process CPU, as loadgen.drivers.selfcheck measures asyncio's.
        due = time.perf_counter_ns()
        next_cpu = due
        while True:
            due += int(_TICK_S * 1e9)
            gevent.sleep(max(due - time.perf_counter_ns(), 0) / 1e9)
            now = time.perf_counter_ns()
            self.samples.add(self.clock.to_s(due), self.worker, "loop_lag_s", (now - due) / 1e9)
            if now >= next_cpu:
                self.samples.add(self.clock.now_s(), self.worker, "cpu_s", time.process_time())
                next_cpu = now + 250_000_000
            due = max(due, now)


STATE: WorkerState | None = None


class _MasterSink:
    """The master's side: append what workers send, quit when all are done."""

    def __init__(self, runner: MasterRunner) -> None:
        self.runner = runner
        out = Path(JOB.out_dir)
        self.records = (out / RECORDS_FILE).open("a", encoding="utf-8")
        self.client = (out / CLIENT_FILE).open("a", encoding="utf-8")
        self.done: set[int] = set()
        runner.register_message("llmperf_records", self.on_records)
        runner.register_message("llmperf_client", self.on_client)
        runner.register_message("llmperf_done", self.on_done)

    def on_records(self, msg: Any, **_: Any) -> None:
        self.records.writelines(json.dumps(row) + "\n" for row in msg.data)
        self.records.flush()

    def on_client(self, msg: Any, **_: Any) -> None:
        self.client.write(json.dumps(msg.data) + "\n")
        self.client.flush()

    def on_done(self, msg: Any, **_: Any) -> None:
        self.done.add(int(msg.data))
        if len(self.done) >= JOB.workers:
            gevent.spawn_later(0.2, self.runner.quit)


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    global STATE
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        _MasterSink(runner)
    elif isinstance(runner, WorkerRunner):
        STATE = WorkerState(runner.worker_index, runner)


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    if STATE is not None:
        STATE.flush()


def _send(
    session: requests.Session, spec: RequestSpec, user_id: int, clock: RunClock
) -> RequestRecord:
    """One streamed request, recorded as loadgen.client.stream does (never raises but
    GreenletExit)."""
    plan_body: dict[str, Any] = {
        "model": JOB.model, "max_tokens": spec.max_tokens, "temperature": spec.temperature,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    if spec.api == "chat":
        messages = spec.messages or (("user", spec.prompt),)
        plan_body["messages"] = [{"role": r, "content": c} for r, c in messages]
        url = JOB.base_url.rstrip("/") + "/v1/chat/completions"
    else:
        plan_body["prompt"] = spec.prompt
        url = JOB.base_url.rstrip("/") + "/v1/completions"
    if spec.ignore_eos:
        plan_body["ignore_eos"] = True
    acc = StreamAccumulator(spec.api)
    scheduled_s = clock.now_s()
    sent_ns = time.perf_counter_ns()
    status, error, http_status = "ok", None, None
    raise_after = False
    try:
        with session.post(url, json=plan_body, stream=True, timeout=JOB.timeout_s) as response:
            http_status = response.status_code
            if http_status >= 400:
                error = f"HTTP {http_status}: {error_message_from_body(response.content)}"
            else:
                parser = SSEParser()
                for raw in response.raw.stream(None, decode_content=False):
                    t_ns = time.perf_counter_ns()
                    for data in parser.feed(raw):
                        if data:
                            acc.add_event(data, t_ns)
                    if parser.done and acc.done_ns is None:
                        acc.done_ns = t_ns
                if not parser.done and acc.finish_reason is None:
                    error = "stream ended before [DONE] (the server closed it early)"
    except gevent.GreenletExit:
        status, error = "cancelled", "cancelled: the run ended while the request was in flight"
        raise_after = True
    except (requests.RequestException, StreamError, UnicodeDecodeError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    if error is not None and status == "ok":
        status = "ok" if acc.done_ns is not None else "error"
        error = None if status == "ok" else error
    record = acc.to_record(
        spec=spec, user_id=user_id, scheduled_s=scheduled_s, sent_ns=sent_ns,
        end_ns=time.perf_counter_ns(), clock=clock, tokenizer=JOB.tokenizer, status=status,
        error=error, http_status=http_status,
    )  # fmt: skip
    if raise_after:
        STATE.buffer.append(record_to_wire(record))  # type: ignore[union-attr]
        raise gevent.GreenletExit
    return record


class PlanUser(User):
    """A closed-loop user working through the job's sessions (module docstring)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        assert STATE is not None, "PlanUser runs on Locust workers (bench starts them)"
        self.user_id = STATE.next_user_id()
        self.http = requests.Session()
        self.http.trust_env = False  # a proxy on the path would distort every latency
        self.http.headers.update({"Accept-Encoding": "identity"})
        self.http.headers.update(HEADERS.as_dict())
        self.finished = False

    def on_stop(self) -> None:
        if not self.finished and STATE is not None:
            self.finished = True
            STATE.user_finished()

    @task
    def run_session(self) -> None:
        assert STATE is not None
        index = STATE.next_session()
        if index is None:
            self.finished = True
            STATE.user_finished()
            raise StopUser
        for spec in JOB.plan.sessions[index]:
            record = _send(self.http, spec, self.user_id, STATE.clock)
            STATE.buffer.append(record_to_wire(record))
            e2e_ms = ((record.done_s or record.sent_s) - record.sent_s) * 1000.0
            failure = None if record.status == "ok" else RuntimeError(record.error or "failed")
            self.environment.events.request.fire(
                request_type="POST", name=spec.api, response_time=e2e_ms,
                response_length=record.output_tokens, exception=failure, context={},
            )  # fmt: skip
            if JOB.plan.think_time_s > 0:
                gevent.sleep(JOB.plan.think_time_s)
