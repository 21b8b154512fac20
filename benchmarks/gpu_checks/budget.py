"""Budgets the GPU check enforces: each line's, and the whole check's deadline.

A line runs in the check's own process (the lines share one measured 8B reference), so its
budget is an interval timer (``signal.setitimer``) whose handler raises :class:`OverBudget` in
the line: Python code stops at once, a single CUDA call or C loop when it returns to Python.
What a line started as another process (``bench run`` and the engine under it) goes through
:func:`run_child`, which records it; when the line ends, in time or not, every process of
those trees still alive is terminated, then killed after :data:`KILL_GRACE_S`, so no engine is
left holding GPU memory. The whole check's deadline is also kept by :class:`Deadline`'s
watchdog thread, which fires even while the main thread is stuck in one call: it kills the
children, calls back (the runner prints the rows so far, the rest as MISS) and exits the
process with status 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress

import psutil

KILL_GRACE_S = 5.0

_children: list[psutil.Process] = []


class OverBudget(Exception):
    """A line ran past its budget (the message says which budget)."""


def run_child(command: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``command``, its output captured as text, for at most ``timeout_s`` seconds; the
    process (and what it starts) is recorded, to be killed when the line ends. Raises
    OverBudget when it runs past ``timeout_s`` (its tree killed first)."""
    proc = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _children.append(psutil.Process(proc.pid))
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.1))
    except subprocess.TimeoutExpired:
        kill_children()
        proc.communicate()
        raise OverBudget(f"{command[0]} ... ran past its {timeout_s:.0f} s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill_children() -> list[int]:
    """Terminate, then kill, every process the current line started and what they started;
    returns their pids (those that were still alive)."""
    tree: list[psutil.Process] = []
    for proc in _children:
        try:
            tree.extend([*proc.children(recursive=True), proc])
        except psutil.NoSuchProcess:
            continue
    _children.clear()
    alive = [p for p in tree if p.is_running()]
    for proc in alive:
        with suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, left = psutil.wait_procs(alive, timeout=KILL_GRACE_S)
    for proc in left:
        with suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(left, timeout=KILL_GRACE_S)
    return [p.pid for p in alive]


@contextmanager
def line_budget(seconds: float) -> Iterator[None]:
    """Raise OverBudget in the block after ``seconds``; on leaving it, kill what it started."""

    def expire(signum: int, frame: object) -> None:
        raise OverBudget(f"ran past its budget of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        kill_children()


class Deadline:
    """The whole check's deadline, ``seconds`` from now. ``left_s()`` is what remains;
    ``start(on_expiry)`` arms the watchdog (module docstring), ``stop()`` disarms it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._done = threading.Event()

    def left_s(self) -> float:
        return self.at - time.monotonic()

    def start(self, on_expiry: Callable[[], None]) -> None:
        def watch() -> None:
            if self._done.wait(max(self.left_s(), 0) + KILL_GRACE_S):
                return
            kill_children()
            on_expiry()
            os._exit(1)

        threading.Thread(target=watch, name="gpu-check-deadline", daemon=True).start()

    def stop(self) -> None:
        self._done.set()
