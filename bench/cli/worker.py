"""`bench worker --master HOST:PORT`: lend this machine to a `bench run --driver locust` run.

The command `bench run --expect-workers N --master-bind HOST:PORT` prints. The worker needs this
project installed (the same version as the master's) and nothing else: the plan, the client
settings and its clock offset come from the master. The process becomes the Locust worker
(loadgen.drivers.locust.worker) in place, with the same process id, so that a signal sent to
`bench worker` reaches the worker itself; it exits when the master's run ends.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from rich.console import Console

from bench.run.messages import print_error

__all__ = ["register", "worker"]

_console = Console(stderr=True)


def worker(
    master: Annotated[
        str,
        typer.Option(
            help="HOST:PORT of the master, as `bench run --driver locust --master-bind` printed "
            "it (an IPv6 address as [ADDR]:PORT)."
        ),
    ],
) -> None:
    """Join a `bench run --driver locust` master as one of its Locust workers."""
    from loadgen.drivers.locust.job import parse_address

    try:
        parse_address(master, "--master")
    except ValueError as e:
        print_error(_console, e)
        raise typer.Exit(2) from e
    # A fresh interpreter, not this one: Locust's gevent monkey-patching must come before any
    # other import, and exec keeps the pid that whoever started `bench worker` holds.
    argv = [sys.executable, "-m", "loadgen.drivers.locust.worker", "--master", master]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def register(app: typer.Typer) -> None:
    """Add `bench worker` to ``app``."""
    app.command("worker")(worker)
