"""Locust workers from other machines for `bench run`: the options, and what the run says of them.

`bench run --driver locust --expect-workers N --master-bind HOST:PORT` starts no local worker: the
master listens on HOST:PORT and waits (``--worker-join-timeout``) for N workers, each started
with the printed `bench worker --master HOST:PORT` (on other machines, or on this one too). A
worker silent for ``--worker-timeout`` seconds is lost: its requests are recorded as failed, a
warning says so, and the run goes on with the others (loadgen.drivers.locust.master).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from bench.run.messages import print_note, print_warning
from loadgen.drivers.locust.driver import DEFAULT_JOIN_TIMEOUT_S, DEFAULT_WORKER_TIMEOUT_S
from loadgen.drivers.locust.job import parse_address
from perfmodel.files import JSONObject

__all__ = ["RemoteWorkers", "print_locust_event", "print_loopback_note"]

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class RemoteWorkers:
    """Where the Locust master listens and what it waits for.

    Attributes:
        expected: workers that join with `bench worker` (0: only the local ``--workers``).
        bind: the master's (host, port); None: a free port of 127.0.0.1.
        join_timeout_s: how long the master waits for all workers, s.
        worker_timeout_s: a worker silent this long is lost, s.
    """

    expected: int = 0
    bind: tuple[str, int] | None = None
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S
    worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT_S

    @classmethod
    def from_options(
        cls,
        driver: str,
        workers: int,
        expect_workers: int,
        master_bind: str | None,
        join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S,
        worker_timeout_s: float = DEFAULT_WORKER_TIMEOUT_S,
    ) -> RemoteWorkers:
        """`bench run`'s options, checked.

        Raises:
            ValueError: a combination that cannot run, naming the option and the fix.
        """
        if expect_workers < 0:
            raise ValueError(f"--expect-workers {expect_workers}: expected >= 0")
        if (expect_workers or master_bind) and driver != "locust":
            raise ValueError(
                "--expect-workers and --master-bind are the Locust driver's: add --driver locust"
            )
        if expect_workers and workers != 1:
            raise ValueError(
                f"--workers {workers} with --expect-workers: every worker then joins with "
                "`bench worker` (run it on this machine too for local ones); drop --workers"
            )
        if expect_workers and master_bind is None:
            raise ValueError(
                "--expect-workers needs --master-bind HOST:PORT, an address the worker hosts "
                "reach (e.g. 0.0.0.0:5557)"
            )
        if join_timeout_s <= 0 or worker_timeout_s <= 0:
            raise ValueError("--worker-join-timeout and --worker-timeout: expected seconds > 0")
        bind = parse_address(master_bind, "--master-bind") if master_bind else None
        return cls(expect_workers, bind, join_timeout_s, worker_timeout_s)

    def local_workers(self, workers: int) -> int:
        """The workers bench starts itself: none when workers join from elsewhere."""
        return 0 if self.expected else workers

    def run_locust_arguments(self) -> dict[str, Any]:
        """The keyword arguments of loadgen.drivers.locust.driver.run_locust they set."""
        return {
            "remote_workers": self.expected,
            "bind": self.bind,
            "join_timeout_s": self.join_timeout_s,
            "worker_timeout_s": self.worker_timeout_s,
        }

    def to_json(self) -> JSONObject:
        """run.json's load section's part (the address the master listened on)."""
        bind = f"{self.bind[0]}:{self.bind[1]}" if self.bind else None
        return {"expect_workers": self.expected, "master_bind": bind}


def print_loopback_note(console: Console, base_url: str, remote: RemoteWorkers) -> None:
    """Say, when workers join from elsewhere, that a loopback ``base_url`` is each worker's own
    host (they send to the URL as given)."""
    if remote.expected and urlsplit(base_url).hostname in _LOOPBACK:
        print_note(
            console,
            f"workers send to {base_url} as given: on another machine that is the worker's own "
            "host; pass --url with an address the worker hosts reach",
        )


def print_locust_event(console: Console, event: JSONObject, remote: int) -> None:
    """Say on ``console`` what the master reported (loadgen.drivers.locust.driver.run_locust's
    ``on_event``); ``remote`` is the number of workers expected from `bench worker`."""
    kind = event["event"]
    if kind == "listening" and remote:
        console.print(
            f"Locust master on {event['host']}:{event['port']} waiting for {remote} worker(s); "
            f"on each worker host run:\n    {event['command']}",
            markup=False,
            highlight=False,
        )
    elif kind == "joined":
        print_note(
            console,
            f"worker {event['index']} ({event['host']}) joined, {event['joined']} of "
            f"{event['expected']}: clock offset {event['clock_offset_s'] * 1e3:+.3f} ms "
            f"± {event['clock_offset_bound_s'] * 1e3:.3f} ms, {event['requests']} requests",
        )
    elif kind == "waiting":
        print_note(
            console,
            f"waiting for Locust workers: {event['joined']} of {event['expected']} joined "
            f"({event['left_s']:.0f} s left)",
        )
    elif kind == "lost":
        print_warning(
            console,
            f"{event['cause']}: its {event['in_flight']} request(s) in flight and "
            f"{event['unsent']} not yet sent are recorded as failed",
        )
    elif kind == "left":
        print_warning(
            console,
            f"worker {event['index']} ({event['host']}) left before the load started; waiting "
            f"for another ({event['joined']} of {event['expected']} joined)",
        )
    elif kind == "behind":
        print_warning(
            console,
            f"worker {event['index']} ({event['host']}) could not keep up with its share of the "
            f"schedule: lag p50 {event['p50_s'] * 1e3:.1f} ms, p99 {event['p99_s'] * 1e3:.1f} "
            f"ms, max {event['max_s'] * 1e3:.1f} ms (latencies still count from the plan)",
        )
    elif kind == "refused":
        print_warning(console, f"a worker from {event['host']} was turned away: the run is full")
