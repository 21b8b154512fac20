"""Run a load plan with Locust: a headless master and N workers on this machine.

What `bench run --driver locust --workers N` calls. The plan goes to the Locust processes as a
job file (loadgen.drivers.locust_job); the master gathers every worker's records in its folder,
which this driver tails while the load runs (so a live display keeps counting) and returns in plan
order, with the workers' self-check samples, exactly as :func:`loadgen.drivers.workers.run_load`
does. Locust users are closed-loop users; an open-loop plan is refused (use the asyncio driver).
Other machines can join the master as extra workers (README: Locust across machines).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from loadgen.clock import RunClock
from loadgen.drivers.closed_loop import LiveCounters
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult
from loadgen.drivers.locust_job import (
    CLIENT_FILE,
    JOB_ENV,
    RECORDS_FILE,
    LocustJob,
    record_from_wire,
    write_job,
)
from loadgen.drivers.stop import LoadStop
from loadgen.protocols import TokenizerLike
from results.client_samples import ClientSamples
from results.records import RequestRecord

__all__ = ["LocustError", "locust_commands", "run_locust"]

LOCUSTFILE = Path(__file__).with_name("locustfile.py")
_GRACE_S = 120.0
# Seconds a stopped master gets to collect its workers' last records.
_STOP_S = 15.0
_NO_LIMIT_S = 6 * 3600


class LocustError(RuntimeError):
    """Locust could not run the plan; the message says why (and Locust's output tail)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def locust_commands(
    plan: LoadPlan, base_url: str, workers: int, port: int, run_time_s: float,
    bind_host: str = "127.0.0.1",
) -> tuple[list[str], list[str]]:  # fmt: skip
    """The master's (expecting ``workers`` in all) and one local worker's command lines."""
    base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "WARNING"]
    master = [
        *base, "--headless", "--master", "--master-bind-host", bind_host,
        "--master-bind-port", str(port), "--expect-workers", str(workers),
        "--expect-workers-max-wait", "60", "-u", str(plan.users), "-r", str(plan.users),
        "--host", base_url, "--run-time", f"{max(1, round(run_time_s))}s",
        "--exit-code-on-error", "0", "--only-summary",
    ]  # fmt: skip
    worker = [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    return master, worker


def _picklable(tokenizer: TokenizerLike | None) -> TokenizerLike | None:
    try:
        pickle.dumps(tokenizer)
    except Exception:
        return None  # workers then count tokens from usage, else one per chunk
    return tokenizer


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
    tokenizer: TokenizerLike | None,
    workers: int,
    *,
    on_record: Callable[[RequestRecord], None] | None = None,
    counters: LiveCounters | None = None,
    run_time_s: float | None = None,
    remote_workers: int = 0,
    bind_host: str = "127.0.0.1",
    on_job: Callable[[Path, list[str]], None] | None = None,
    stop: LoadStop | None = None,
) -> LoadResult:
    """Run ``plan`` with a Locust master and ``workers`` local workers; block until it ends.

    ``run_time_s`` bounds the run (default: the plan's duration, else 6 hours). With
    ``remote_workers`` the master also waits (60 s) for that many workers from other machines,
    listening on ``bind_host`` (give an address they can reach); ``on_job(job_path,
    worker_command)`` is told what those machines must run, with the job file copied to them.
    ``stop``, once set, ends the run early: the master is sent SIGTERM (Locust stops its users,
    whose requests in flight are recorded cancelled) and what the workers sent is collected.

    Raises:
        LocustError: an open-loop plan, fewer users than workers, Locust missing, or Locust
            ending without the records of any request.
    """
    if plan.mode != "closed":
        raise LocustError(
            "the Locust driver runs closed-loop users; use the asyncio driver for open loop"
        )
    total = workers + remote_workers
    if workers < 1 or remote_workers < 0 or plan.users < total:
        raise LocustError(
            f"--workers {workers} (+{remote_workers} remote): need 1 <= workers <= users "
            f"({plan.users})"
        )
    if not _has_locust():
        raise LocustError("Locust is not installed: pip install locust")
    out = Path(tempfile.mkdtemp(prefix="llm-perf-locust-"))
    job = LocustJob(
        plan=plan, base_url=config.base_url, model=config.model, api_key=config.api_key,
        timeout_s=config.timeout_s, t0_ns=clock.t0_ns, t0_unix_ns=int(clock.t0_unix_s * 1e9),
        hostname=socket.gethostname(), workers=total, out_dir=str(out),
        tokenizer=_picklable(tokenizer),
    )  # fmt: skip
    env = {**os.environ, JOB_ENV: str(write_job(job, out / "job.pkl"))}
    limit_s = run_time_s or plan.duration_s or _NO_LIMIT_S
    port = _free_port()
    master_cmd, worker_cmd = locust_commands(plan, config.base_url, total, port, limit_s, bind_host)
    if on_job is not None:
        remote = ["locust", "-f", "loadgen/drivers/locustfile.py", "--worker", "--master-host",
                  socket.gethostname(), "--master-port", str(port)]  # fmt: skip
        on_job(out / "job.pkl", remote)
    log = (out / "locust.log").open("wb")
    # Sessions of their own: a terminal's Ctrl-C reaches bench only, which stops them (``stop``).
    common = {
        "env": env, "stdout": log, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL,
        "start_new_session": True,
    }  # fmt: skip
    master = subprocess.Popen(master_cmd, **common)  # type: ignore[call-overload]
    procs = [subprocess.Popen(worker_cmd, **common) for _ in range(workers)]  # type: ignore[call-overload]
    live = counters if counters is not None else LiveCounters()
    records: list[RequestRecord] = []
    offset = 0
    deadline = time.monotonic() + limit_s + _GRACE_S
    try:
        while True:
            lines, offset = _tail(out / RECORDS_FILE, offset)
            for line in lines:
                record = record_from_wire(json.loads(line))
                records.append(record)
                live.request_started()
                live.request_finished(record)
                if on_record is not None:
                    on_record(record)
            if master.poll() is not None:
                if not lines:
                    break
                continue
            if stop is not None and stop.is_set() and deadline > time.monotonic() + _STOP_S:
                master.terminate()
                deadline = time.monotonic() + _STOP_S
            elif time.monotonic() > deadline:
                raise LocustError(f"Locust did not end within {limit_s + _GRACE_S:.0f} s")
            time.sleep(0.2)
    finally:
        for proc in [master, *procs]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [master, *procs]:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
    samples = ClientSamples()
    client_path = out / CLIENT_FILE
    if client_path.is_file():
        for line in client_path.read_text(encoding="utf-8").splitlines():
            cols = json.loads(line)
            for t, w, n, v in zip(
                cols["t_s"], cols["worker"], cols["name"], cols["value"], strict=True
            ):
                samples.add(t, w, n, v)
    if not records:
        tail = (out / "locust.log").read_text(errors="replace")[-3000:]
        raise LocustError(f"Locust ended without recording a request; its log:\n{tail}")
    order = {spec.request_id: i for i, spec in enumerate(plan.requests)}
    records.sort(key=lambda r: order.get(r.request_id, len(order)))
    shutil.rmtree(out, ignore_errors=True)
    return LoadResult(records, samples, workers=workers)


def _has_locust() -> bool:
    # Never import it here: importing locust monkey-patches this whole process with gevent.
    return importlib.util.find_spec("locust") is not None
