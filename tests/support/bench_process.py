"""A `bench` command as a user runs it: its own process group, signalled as a terminal would.

:class:`BenchProcess` starts ``python -m bench ...`` with this checkout on PYTHONPATH, its
output in a file, in a new session whose group id is its pid: ``ctrl_c()`` sends SIGINT to that
whole group, as a terminal's Ctrl-C reaches every process in the foreground group. SIGINT is
reset to its default in the child, so a test run from a shell that ignores it (a background
job) still tests the real handling.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import REPO_ROOT

__all__ = ["BenchProcess", "requests_succeeded"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def requests_succeeded(base_url: str) -> float:
    """The engine's vllm:request_success_total (0 when it does not answer)."""
    try:
        text = httpx.get(base_url + "/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:request_success_total"
    )


class BenchProcess:
    """``python -m bench *args`` in ``cwd`` (module docstring)."""

    def __init__(self, args: list[str], cwd: Path) -> None:
        self.log = cwd / "bench.log"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench", *args],
                cwd=cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_default_sigint,
            )
        self._seen: dict[int, psutil.Process] = {}

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout_s: float, count: int = 1) -> re.Match[str]:
        """The ``count``-th match of ``pattern`` in the output, waiting up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.note_children()
            matches = list(re.finditer(pattern, self.output))
            if len(matches) >= count:
                return matches[count - 1]
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} (x{count}) in the output:\n{self.output}")
            time.sleep(0.1)

    def wait_engine_progress(self, base_url: str, done: int, timeout_s: float) -> None:
        """Wait until the engine at ``base_url`` has finished ``done`` requests."""
        deadline = time.monotonic() + timeout_s
        while requests_succeeded(base_url) < done:
            self.note_children()
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{done} requests not done in time:\n{self.output}")
            time.sleep(0.1)

    def note_children(self) -> None:
        """Remember every descendant seen so far (to check later that none outlives bench)."""
        try:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                self._seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass

    def children(self) -> list[psutil.Process]:
        """The descendants alive now (and remembered, see :meth:`note_children`)."""
        self.note_children()
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def child_running(self, word: str) -> bool:
        """Whether a descendant whose command line holds ``word`` runs now."""
        for child in self.children():
            try:
                if word in " ".join(child.cmdline()):
                    return True
            except psutil.Error:  # gone meanwhile
                pass
        return False

    def ctrl_c(self) -> None:
        """SIGINT to the whole process group, as a terminal's Ctrl-C."""
        self.note_children()
        os.killpg(self.process.pid, signal.SIGINT)

    def send(self, sig: int) -> None:
        """``sig`` to the bench process alone (as `kill PID` or a supervisor sends SIGTERM)."""
        self.note_children()
        self.process.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def survivors(self, grace_s: float = 3.0) -> list[str]:
        """Descendants seen during the run that are still alive ``grace_s`` after it ended."""
        deadline = time.monotonic() + grace_s
        while True:
            alive = []
            for child in self._seen.values():
                try:
                    if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                        alive.append(f"{child.pid} {' '.join(child.cmdline()[:4])}")
                except psutil.NoSuchProcess:
                    pass
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)

    def kill(self) -> None:
        """Clean up after a failed test: the whole group, and every descendant seen."""
        for child in self._seen.values():
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
