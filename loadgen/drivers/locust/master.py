"""The Locust master of a `bench run --driver locust` run: its own process, started by the driver.

``python -m loadgen.drivers.locust.master JOB`` (loadgen.drivers.locust.driver starts it) binds
the job's address and waits for its workers. Each worker that joins gets an index (join order),
has its clock offset measured (NTP-style pings, loadgen.drivers.clock_sync), and receives its
sessions and the client settings as messages (loadgen.drivers.locust.job); when all of them hold
their plan, the master starts the Locust users (spread over the workers by Locust); for an
open-loop plan it starts no user: each worker holds its share of the schedule with the planned
times (loadgen.drivers.locust.fleet), and the master tells them all one start second on its
clock, :data:`START_LEAD_S` ahead, so that the message reaches every worker before the first
request is due. During the run (either loop) it measures each worker's clock again every job's
``clock_resync_s`` (30 s) and sends the new origin (drift), and it keeps each worker's schedule
lag from its self-check samples; a worker past the client check's limit is named (event
``behind``) before the end. It appends
what comes back to the job's folder: records to ``records.jsonl``, self-check samples to
``client.jsonl``, and what happens (listening, joined, waiting, lost, end, error) to
``events.jsonl``, which the driver tails.

A worker whose heartbeats stop for the job's ``worker_timeout_s`` is lost (Locust marks it
``missing``); its requests in flight and those it had not sent become failed rows
(loadgen.drivers.locust.fleet). The run ends when every worker is done or lost; at the plan's
duration the master tells the workers to stop, and they record what was in flight as cancelled.

This module imports Locust, which monkey-patches the whole process with gevent: it is only ever
the main module of its own process.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import gevent
import locust.runners as locust_runners
from locust.env import Environment
from locust.rpc import Message

from loadgen.clock import RunClock
from loadgen.drivers.clock_sync import ClockSample, estimate_offset
from loadgen.drivers.locust.fleet import Fleet, WorkerSlot, lost_cause
from loadgen.drivers.locust.job import (
    CLIENT_FILE,
    EVENTS_FILE,
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
    RECORDS_FILE,
    LocustJob,
    client_to_wire,
    plan_parts,
    read_job,
    record_from_wire,
    record_to_wire,
)
from loadgen.drivers.locust.worker import PlanUser

__all__ = ["main"]

_CLOCK_SAMPLES = 16
_PING_GAP_S = 0.005
_PING_WAIT_S = 1.0
_SYNC_LIMIT_S = 30.0
_WAITING_EVERY_S = 5.0
_POLL_S = 0.1
# Open loop: the schedule starts this long after the start message leaves, s.
START_LEAD_S = 1.0
_RESYNC_SAMPLES = 8


class Master:
    """One run's master (module docstring)."""

    def __init__(self, job: LocustJob) -> None:
        self.job = job
        self.clock = RunClock(job.t0_ns)
        self.open_loop = job.plan.mode == "open"
        schedule = job.plan.schedule_s if self.open_loop else None
        self.fleet = Fleet(job.plan.sessions, job.workers, schedule)
        out = Path(job.out_dir)
        self.records: TextIO = (out / RECORDS_FILE).open("a", encoding="utf-8")
        self.client: TextIO = (out / CLIENT_FILE).open("a", encoding="utf-8")
        self.events: TextIO = (out / EVENTS_FILE).open("a", encoding="utf-8")
        self.pongs: dict[str, gevent.queue.Queue] = {}
        # Set by SIGUSR1 (the driver ending the run early, loadgen.drivers.stop): the workers
        # are told to cancel what is in flight, as at the run's bound, and their records kept.
        self.stop_early = False
        # Locust's own liveness rule, counted in heartbeats of HEARTBEAT_INTERVAL seconds.
        locust_runners.HEARTBEAT_LIVENESS = max(
            1, math.ceil(job.worker_timeout_s / locust_runners.HEARTBEAT_INTERVAL)
        )
        self.env = Environment(user_classes=[PlanUser], host=job.client.base_url)
        self.runner = self.env.create_master_runner(job.bind_host, job.bind_port)
        self.env.events.worker_connect.add_listener(self.on_connect)
        for name, handler in (
            (MSG_PONG, self.on_pong), (MSG_READY, self.on_ready),
            (MSG_RECORDS, self.on_records), (MSG_CLIENT, self.on_client), (MSG_DONE, self.on_done),
        ):  # fmt: skip
            self.runner.register_message(name, handler)

    def emit(self, event: str, **fields: Any) -> None:
        self.events.write(json.dumps({"event": event, "t_s": self.clock.now_s(), **fields}) + "\n")
        self.events.flush()

    # Workers joining.
    def on_connect(self, client_id: str, **_: Any) -> None:
        slot = self.fleet.join(client_id)
        if slot is None:
            if self.fleet.get(client_id) is None:
                # More workers than the run waits for: this one is told to go.
                self.emit("refused", host=client_id.rpartition("_")[0], reason="run is full")
                self.runner.server.send_to_client(Message("quit", None, client_id))
            return
        self.pongs[client_id] = gevent.queue.Queue()
        gevent.spawn(self.set_up, slot)

    def ping(self, slot: WorkerSlot, count: int) -> list[ClockSample]:
        """Up to ``count`` clock samples of ``slot``'s worker (within _SYNC_LIMIT_S)."""
        samples: list[ClockSample] = []
        queue = self.pongs[slot.client_id]
        deadline = time.monotonic() + _SYNC_LIMIT_S
        seq = 0
        while len(samples) < count and time.monotonic() < deadline:
            seq += 1
            t0 = time.perf_counter_ns()
            self.runner.send_message(MSG_PING, {"seq": seq, "t0_ns": t0}, slot.client_id)
            try:
                while True:
                    pong, t2 = queue.get(timeout=_PING_WAIT_S)
                    if pong["seq"] == seq:  # a late answer to an earlier ping is dropped
                        break
            except gevent.queue.Empty:
                continue  # the worker may not listen yet (it registers after its ack)
            samples.append(ClockSample(int(pong["t0_ns"]), int(pong["t1_ns"]), t2))
            gevent.sleep(_PING_GAP_S)
        return samples

    def set_up(self, slot: WorkerSlot) -> None:
        """Measure the worker's clock, then send its plan."""
        samples = self.ping(slot, _CLOCK_SAMPLES)
        if self.fleet.get(slot.client_id) is not slot:
            return  # it left while being pinged (check_left)
        if not samples:
            self.emit("error", message=f"worker {slot.index} ({slot.host}) answered no clock ping")
            return
        slot.clock = slot.first_clock = estimate_offset(samples)
        parts = list(plan_parts(slot.sessions))
        setup = {
            "index": slot.index,
            "workers": self.job.workers,
            # The run's origin on the worker's clock: its records arrive in run seconds.
            "t0_ns": slot.clock.to_worker_ns(self.job.t0_ns),
            "client": client_to_wire(self.job.client),
            "think_time_s": self.job.plan.think_time_s,
            "parts": len(parts),
            "mode": self.job.plan.mode,
            "max_concurrency": self.worker_concurrency(),
        }
        self.runner.send_message(MSG_SETUP, setup, slot.client_id)
        done = 0
        for i, part in enumerate(parts):
            due = slot.due_s[done : done + len(part)] if slot.due_s is not None else None
            done += len(part)
            self.runner.send_message(MSG_PLAN, {"part": i, "sessions": part, "due_s": due},
                                     slot.client_id)  # fmt: skip
        self.emit(
            "joined", index=slot.index, host=slot.host, joined=self.fleet.set_up,
            expected=self.fleet.expected, requests=len(slot.requests), **slot.clock.to_json(),
        )  # fmt: skip

    def worker_concurrency(self) -> int:
        """Open loop: the most requests one worker has in flight, its share of the plan's cap
        (max_concurrency, else users), at least 1."""
        plan = self.job.plan
        cap = plan.max_concurrency or plan.users
        return max(1, math.ceil(cap / self.job.workers))

    def resync(self, slot: WorkerSlot) -> None:
        """Measure ``slot``'s clock again every job.clock_resync_s while it runs, and send it the
        run's origin as it now stands on its clock."""
        while slot.state == "running":
            gevent.sleep(self.job.clock_resync_s)
            if slot.state != "running":
                return
            samples = self.ping(slot, _RESYNC_SAMPLES)
            if not samples or slot.state != "running":
                continue
            slot.clock = estimate_offset(samples)
            slot.resyncs += 1
            origin = {"t0_ns": slot.clock.to_worker_ns(self.job.t0_ns)}
            self.runner.send_message(MSG_CLOCK, origin, slot.client_id)

    def on_pong(self, msg: Any, **_: Any) -> None:
        t2 = time.perf_counter_ns()
        self.fleet.heard(msg.node_id, self.clock.now_s())
        queue = self.pongs.get(msg.node_id)
        if queue is not None:
            queue.put((msg.data, t2))

    def on_ready(self, msg: Any, **_: Any) -> None:
        slot = self.fleet.heard(msg.node_id, self.clock.now_s())
        if slot is not None and slot.state == "joining":
            slot.state = "ready"

    # What workers send back.
    def on_records(self, msg: Any, **_: Any) -> None:
        slot = self.fleet.heard(msg.node_id, self.clock.now_s())
        if slot is None:
            return
        self.fleet.started(slot, msg.data["started"])
        rows = [r for r in msg.data["records"] if self.fleet.recorded(slot, record_from_wire(r))]
        self.records.writelines(json.dumps(row) + "\n" for row in rows)
        self.records.flush()

    def on_client(self, msg: Any, **_: Any) -> None:
        slot = self.fleet.heard(msg.node_id, self.clock.now_s())
        if slot is not None and slot.state != "lost":
            self.client.write(json.dumps(msg.data) + "\n")
            self.client.flush()
            data = msg.data
            slot.lags_s.extend(v for n, v in zip(data["name"], data["value"], strict=True)
                               if n == "schedule_lag_s")  # fmt: skip

    def on_done(self, msg: Any, **_: Any) -> None:
        slot = self.fleet.heard(msg.node_id, self.clock.now_s())
        if slot is not None and slot.state in ("ready", "running"):
            slot.state = "done"
        if slot is not None and slot.state != "lost" and isinstance(msg.data, dict):
            slot.stamps = list(msg.data.get("stamps") or ())

    # The run.
    def check_lost(self) -> None:
        for slot in self.fleet.slots:
            if slot.state in ("done", "lost"):
                continue
            if not self.gone(slot):
                continue
            node = self.runner.clients.get(slot.client_id)
            t_s = self.clock.now_s()
            in_flight, was, heard = len(slot.in_flight), slot.state, slot.last_heard_s
            failed = self.fleet.lose(slot, t_s)
            self.records.writelines(json.dumps(record_to_wire(r)) + "\n" for r in failed)
            self.records.flush()
            self.emit(
                "lost", index=slot.index, host=slot.host, in_flight=in_flight,
                cause=lost_cause(slot.index, slot.host, t_s, heard),
                unsent=len(failed) - in_flight, during=was,
            )  # fmt: skip
            if node is not None:
                self.runner.server.send_to_client(Message("quit", None, slot.client_id))

    def gone(self, slot: WorkerSlot) -> bool:
        """Whether Locust no longer counts ``slot``'s worker (it quit, or its heartbeats
        stopped for the job's worker_timeout_s)."""
        node = self.runner.clients.get(slot.client_id)
        return node is None or node.state == locust_runners.STATE_MISSING

    def check_left(self) -> None:
        """Before the load: a worker gone gives its place to the next one that joins."""
        for slot in list(self.fleet.slots):
            if self.gone(slot) and self.fleet.release(slot):
                self.pongs.pop(slot.client_id, None)
                if self.runner.clients.get(slot.client_id) is not None:
                    # Missing, not gone: should it come back, it has no place in this run.
                    self.runner.server.send_to_client(Message("quit", None, slot.client_id))
                self.emit("left", index=slot.index, host=slot.host, joined=self.fleet.joined,
                          expected=self.fleet.expected)  # fmt: skip

    def wait_for_workers(self) -> bool:
        """Until every worker holds its plan; False (said in an error event) on timeout."""
        self.emit("listening", host=self.job.bind_host, port=self.job.bind_port,
                  expected=self.fleet.expected)  # fmt: skip
        deadline = time.monotonic() + self.job.join_timeout_s
        next_note = time.monotonic() + _WAITING_EVERY_S
        while not self.fleet.all_ready:
            if self.stop_early:
                self.emit("error", message="the run was stopped before every worker joined")
                return False
            self.check_left()
            now = time.monotonic()
            if now > deadline:
                self.emit(
                    "error",
                    message=f"{self.fleet.joined} of {self.fleet.expected} Locust workers joined "
                    f"within {self.job.join_timeout_s:.0f} s (--worker-join-timeout)",
                )
                return False
            if now >= next_note and self.fleet.joined < self.fleet.expected:
                self.emit("waiting", joined=self.fleet.joined, expected=self.fleet.expected,
                          left_s=deadline - now)  # fmt: skip
                next_note = now + _WAITING_EVERY_S
            gevent.sleep(_POLL_S)
        return True

    def abort(self) -> None:
        """SIGTERM (the driver stopping early): tell the workers to quit, which they would
        otherwise only do a minute after the master's heartbeats stop, then exit 143."""
        self.emit("error", message="the Locust master was stopped (SIGTERM)")
        for node in self.runner.clients.all:
            self.runner.server.send_to_client(Message("quit", None, node.id))
        gevent.sleep(0.5)  # let the quit messages leave before the sockets close
        os._exit(143)

    def run(self) -> int:
        """The whole run; the exit status: 0 when it ran (lost workers included), 3 when the
        workers did not all join."""
        try:
            if not self.wait_for_workers():
                return 3
            plan = self.job.plan
            for slot in self.fleet.slots:
                slot.state = "running"
            self.emit("started", users=plan.users, workers=self.fleet.expected)
            for slot in self.fleet.slots:
                gevent.spawn(self.resync, slot)
            if self.open_loop:
                start_s = self.clock.now_s() + START_LEAD_S
                for slot in self.fleet.slots:
                    slot.start_s = start_s
                self.runner.send_message(MSG_START, {"start_s": start_s})
            else:
                rate = plan.users / plan.ramp_up_s if plan.ramp_up_s > 0 else plan.users
                self.runner.start(plan.users, spawn_rate=rate)
            stop_at = time.monotonic() + self.job.run_time_s
            stopped = False
            while not self.fleet.finished:
                self.check_lost()
                if not stopped and (self.stop_early or time.monotonic() > stop_at):
                    self.runner.send_message(MSG_STOP, None)
                    stopped = True
                gevent.sleep(_POLL_S)
            rows = [s.to_json() for s in self.fleet.slots]
            for row in rows:
                lag = row.get("schedule_lag") or {}
                if lag.get("behind"):
                    self.emit("behind", index=row["index"], host=row["host"], **lag)
            stamps = [one for slot in self.fleet.slots for one in slot.stamps]
            self.emit("end", workers=rows, stamps=stamps)
            return 0
        finally:
            self.runner.quit()
            for fh in (self.records, self.client, self.events):
                fh.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m loadgen.drivers.locust.master JOB_FILE", file=sys.stderr)
        return 2
    job = read_job(args[0])
    try:
        master = Master(job)
    except Exception as exc:  # Locust's RPC layer raises its own kinds for a port in use
        out = Path(job.out_dir) / EVENTS_FILE
        with out.open("a", encoding="utf-8") as fh:
            message = f"the master cannot listen on {job.bind_host}:{job.bind_port}: {exc}"
            fh.write(json.dumps({"event": "error", "t_s": 0.0, "message": message}) + "\n")
        return 3
    gevent.signal_handler(signal.SIGTERM, lambda: gevent.spawn(master.abort))
    gevent.signal_handler(signal.SIGUSR1, lambda: setattr(master, "stop_early", True))
    return master.run()


if __name__ == "__main__":
    sys.exit(main())
