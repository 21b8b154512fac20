"""Run a load plan with Locust: a master on this machine, workers here or on other machines.

What `bench run --driver locust` calls. This process starts the master
(loadgen.drivers.locust.master, its own process: Locust monkey-patches whatever imports it) with
the job in a private temporary folder, and ``workers`` local workers
(loadgen.drivers.locust.worker, the same program `bench worker` runs); ``remote_workers`` more
join from wherever `bench worker --master HOST:PORT` is run. Workers get their plan and their
clock offset from the master over Locust's messages. The master gathers every record in its
folder, which this driver tails while the load runs (so a live display keeps counting), and the
driver returns them in plan order with the workers' self-check samples and, per worker, its
measured clock offset and whether it was lost, as :func:`loadgen.drivers.workers.run_load` does
for processes. A closed-loop plan runs as Locust users; an open-loop plan (Poisson, gamma,
constant arrivals or a trace replay) is split among the workers, each sending its share at the
planned times on the master's clock (loadgen.drivers.locust.open_schedule), with each worker's
schedule lag in its entry of ``worker_info``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult
from loadgen.drivers.locust.job import (
    CLIENT_FILE,
    DEFAULT_CLOCK_RESYNC_S,
    EVENTS_FILE,
    RECORDS_FILE,
    LocustJob,
    record_from_wire,
    write_job,
)
from loadgen.drivers.sending import LiveCounters, RecordCallback
from loadgen.drivers.stop import LoadStop
from results.folder.client_samples import ClientSamples
from results.folder.records import RequestRecord

__all__ = ["LocustError", "run_locust", "worker_command"]

# How long the driver waits past the run's bound before it gives up on the master, s.
_GRACE_S = 120.0
# Seconds a stopped master gets to collect its workers' last records.
_STOP_S = 15.0
_NO_LIMIT_S = 6 * 3600
DEFAULT_JOIN_TIMEOUT_S = 120.0
DEFAULT_WORKER_TIMEOUT_S = 10.0
_ANY_ADDRESS = ("", "*", "0.0.0.0", "::")


class LocustError(RuntimeError):
    """Locust could not run the plan; the message says why (and Locust's output tail)."""


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def reachable_host(bind_host: str) -> str:
    """The address a worker connects to for a master bound to ``bind_host``: this machine's
    name for a wildcard bind, else the address itself."""
    return socket.getfqdn() if bind_host in _ANY_ADDRESS else bind_host


def worker_command(host: str, port: int) -> str:
    """The one command a worker host runs to join the master at ``host:port``."""
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"bench worker --master {address}"


def _tail(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines appended to ``path`` since byte ``offset``."""
    if not path.is_file():
        return [], offset
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    end = data.rfind(b"\n") + 1
    return data[:end].decode("utf-8").splitlines(), offset + end


def run_locust(
    plan: LoadPlan,
    config: ClientConfig,
    clock: RunClock,
    workers: int,
    *,
    remote_workers: int = 0,
    bind: tuple[str, int] | None = None,
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S,
    worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT_S,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    run_time_s: float | None = None,
    stop: LoadStop | None = None,
    clock_resync_s: float = DEFAULT_CLOCK_RESYNC_S,
    keep_records: bool = True,
) -> LoadResult:
    """Run ``plan`` with a Locust master, ``workers`` local workers and ``remote_workers``
    joining ones; block until it ends.

    ``bind`` is where the master listens (default: a free port of 127.0.0.1, for local
    workers only). The master waits ``join_timeout_s`` for every worker; a worker silent for
    ``worker_timeout_s`` is lost and its requests recorded as failed. ``run_time_s`` bounds the
    load (default: the plan's duration, else 6 hours). ``on_event`` is told what the master
    reports, as dicts with an ``"event"`` key: ``listening`` (``host``, ``port``,
    ``expected``, and the ``command`` a worker host runs), ``joined`` (``index``, ``host``,
    ``joined``, ``expected``, the clock offset), ``waiting`` (``joined``, ``expected``,
    ``left_s``), ``started``, ``lost`` (``index``, ``host``, ``cause``, ``in_flight``,
    ``unsent``), ``behind`` (open loop: a worker whose schedule lag p99 passed the client
    check's limit: ``index``, ``host``, ``p50_s``, ``p99_s``, ``max_s``), ``refused``, ``end``
    and ``error`` (``message``).
    ``stop``, once set, ends the run early: the master is sent SIGUSR1 (it tells its workers to
    cancel what is in flight, recorded cancelled) and what the workers sent is collected.
    ``clock_resync_s``: how often each worker's clock is measured again during the load.
    ``keep_records`` False: ``on_record`` keeps the records (a stream to the run folder) and
    the result holds none (loadgen.drivers.driver.run_plan).

    Raises:
        LocustError: fewer users than workers, Locust missing, workers that did not join in
            time, or Locust ending without the records of any request.
    """
    total = workers + remote_workers
    if workers < 0 or remote_workers < 0 or total < 1 or plan.users < total:
        raise LocustError(
            f"{workers} local + {remote_workers} joining Locust workers: need 1 <= workers <= "
            f"users ({plan.users})"
        )
    if not _has_locust():
        raise LocustError("Locust is not installed: pip install locust")
    host, port = bind if bind is not None else ("127.0.0.1", _free_port("127.0.0.1"))
    out = Path(tempfile.mkdtemp(prefix="llm-perf-locust-"))
    limit_s = run_time_s or plan.duration_s or _NO_LIMIT_S
    job = LocustJob(
        plan=plan, client=config, t0_ns=clock.t0_ns, workers=total, bind_host=host,
        bind_port=port, out_dir=str(out), join_timeout_s=join_timeout_s,
        worker_timeout_s=worker_timeout_s, run_time_s=limit_s, clock_resync_s=clock_resync_s,
    )  # fmt: skip
    try:
        return _run(plan, job, workers, out, on_record, counters, on_event, stop, keep_records)
    finally:
        # The job folder holds the plan and the records: never left behind.
        shutil.rmtree(out, ignore_errors=True)


def _run(
    plan: LoadPlan,
    job: LocustJob,
    workers: int,
    out: Path,
    on_record: RecordCallback | None,
    counters: LiveCounters | None,
    on_event: Callable[[dict[str, Any]], None] | None,
    stop: LoadStop | None = None,
    keep_records: bool = True,
) -> LoadResult:
    host, port, limit_s, total = job.bind_host, job.bind_port, job.run_time_s, job.workers
    job_path = write_job(job, out / "job.pkl")
    log = (out / "locust.log").open("wb")
    master, procs = _start_locust(job, job_path, workers, log)
    live = counters if counters is not None else LiveCounters()
    done_before = live.done
    records: list[RequestRecord] = []
    errors: list[str] = []
    end_info: list[dict[str, Any]] = []
    stamps: list[dict[str, Any]] = []  # each worker's connections, per replica
    offsets = {RECORDS_FILE: 0, EVENTS_FILE: 0}
    deadline = time.monotonic() + job.join_timeout_s + limit_s + _GRACE_S
    try:
        while True:
            lines, offsets[EVENTS_FILE] = _tail(out / EVENTS_FILE, offsets[EVENTS_FILE])
            for line in lines:
                event = json.loads(line)
                if event["event"] == "listening":
                    event["command"] = worker_command(reachable_host(host), port)
                elif event["event"] == "error":
                    errors.append(event["message"])
                elif event["event"] == "end":
                    end_info, stamps = event["workers"], event.get("stamps", [])
                if on_event is not None:
                    on_event(event)
            rows, offsets[RECORDS_FILE] = _tail(out / RECORDS_FILE, offsets[RECORDS_FILE])
            for row in rows:
                record = record_from_wire(json.loads(row))
                if keep_records:
                    records.append(record)
                live.request_started()
                live.request_finished(record)
                if on_record is not None:
                    on_record(record)
            if master.poll() is not None:
                if not lines and not rows:
                    break
                continue
            if stop is not None and stop.is_set() and deadline > time.monotonic() + _STOP_S:
                # The master tells its workers to cancel what is in flight and collects their
                # records (SIGUSR1, loadgen.drivers.locust.master); SIGTERM would drop them.
                master.send_signal(signal.SIGUSR1)
                deadline = time.monotonic() + _STOP_S
            elif time.monotonic() > deadline:
                raise LocustError(
                    f"the Locust master did not end within {limit_s + _GRACE_S:.0f} s"
                )
            time.sleep(0.2)
    finally:
        _end_locust([master, *procs])
        log.close()
    if errors:
        raise LocustError("; ".join(errors))
    if master.returncode != 0 or not end_info:
        tail = (out / "locust.log").read_text(errors="replace")[-3000:]
        raise LocustError(
            f"the Locust master ended (status {master.returncode}) before the run did; its "
            f"log:\n{tail}"
        )
    samples = _client_samples(out / CLIENT_FILE)
    if live.done == done_before:
        tail = (out / "locust.log").read_text(errors="replace")[-3000:]
        raise LocustError(f"Locust ended without recording a request; its log:\n{tail}")
    order = {spec.request_id: i for i, spec in enumerate(plan.requests)}
    records.sort(key=lambda r: order.get(r.request_id, len(order)))
    return LoadResult(
        records, samples, workers=total, worker_info=end_info or None, stamps=stamps,
        finished=live.done - done_before,
    )  # fmt: skip


def _start_locust(
    job: LocustJob, job_path: Path, workers: int, log: IO[bytes]
) -> tuple[subprocess.Popen[bytes], list[subprocess.Popen[bytes]]]:
    """Start the Locust master on ``job_path`` and ``workers`` local workers connected to it,
    all writing to ``log``; returns (master, workers)."""
    host, port = job.bind_host, job.bind_port
    # Sessions of their own: a terminal's Ctrl-C reaches bench only, which stops them (``stop``).
    common: dict[str, Any] = {
        "stdout": log,
        "stderr": subprocess.STDOUT,
        "stdin": subprocess.DEVNULL,
        "start_new_session": True,
    }
    # The request headers reach the master through its environment, never the job file; the
    # workers get them from the master by message.
    master = subprocess.Popen(
        [sys.executable, "-m", "loadgen.drivers.locust.master", str(job_path)],
        env={**os.environ, **job.client.headers.to_env()}, **common,
    )  # fmt: skip
    local = "127.0.0.1" if host in _ANY_ADDRESS else host
    local_address = f"[{local}]:{port}" if ":" in local else f"{local}:{port}"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "loadgen.drivers.locust.worker", "--master", local_address],
            **common,
        )
        for _ in range(workers)
    ]
    return master, procs


def _end_locust(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate each of ``procs`` still running and wait up to 10 s each; kill one that
    does not end."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _client_samples(path: Path) -> ClientSamples:
    """The workers' self-check samples from ``path`` (one JSON object of columns a line; no
    file: none)."""
    samples = ClientSamples()
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            cols = json.loads(line)
            for t, w, n, v in zip(
                cols["t_s"], cols["worker"], cols["name"], cols["value"], strict=True
            ):
                samples.add(t, w, n, v)
    return samples


def _has_locust() -> bool:
    # Never import it here: importing locust monkey-patches this whole process with gevent.
    return importlib.util.find_spec("locust") is not None
