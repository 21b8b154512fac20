"""Start an engine as a subprocess on 127.0.0.1, wait until it serves, stop it cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from results.folder.redact import command_secrets, redact_command, redact_text

# How long a wrapped engine's process group has to exit after SIGTERM before SIGKILL (seconds),
# once the wrapper outlived the stop of its program.
GROUP_STOP_S = 10.0


class EngineStartError(RuntimeError):
    """The engine exited or did not become healthy in time; carries the tail of its log.

    The message shows the command line and the log tail redacted (results.folder.redact): an engine
    that echoes its arguments (vLLM logs its non-default ones) does not print its key here."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the engine binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LaunchedEngine:
    """A running engine subprocess. Use as a context manager, or call stop()."""

    command: list[str]
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    started_s: float = field(default_factory=time.monotonic)
    # The engine's own command line when ``command`` runs it under a wrapper that must outlive
    # it (nsys profile writes its report after the program exits); None: not wrapped.
    wrapped_command: list[str] | None = None

    def log_tail(self, max_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-max_chars:]
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """Stop the engine; returns the exit code.

        Plain: SIGTERM to its process group, then SIGKILL after ``timeout_s``. Under a wrapper
        (``wrapped_command``, e.g. nsys): SIGTERM to the wrapped program alone, so that it stops
        its own children (bench serve's front closes its engine-core process, which does the
        CUDA work) and the wrapper, seeing it exit, writes its report; only when the wrapper is
        still running after ``timeout_s`` does the whole group get SIGTERM, then SIGKILL after
        :data:`GROUP_STOP_S`. An engine that already died (killed) may have left children in
        its group (an engine-core process, workers): they get SIGTERM too."""
        if self.process.poll() is None:
            group_wait_s = timeout_s
            if self.wrapped_command is not None and self._signal_wrapped_program():
                try:
                    return self.process.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    group_wait_s = GROUP_STOP_S
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=group_wait_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=group_wait_s)
        else:
            # The group outlives its leader while a member lives; ESRCH: none is left.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGTERM)
        return self.process.returncode

    def _signal_wrapped_program(self) -> bool:
        """SIGTERM to the wrapper's descendants that run ``wrapped_command``; whether any did.

        Matched by command line, not by being the wrapper's first child: a profiler may start
        helpers of its own, which must go on running until the report is written."""
        try:
            descendants = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            return False
        signalled = False
        for proc in descendants:
            with contextlib.suppress(psutil.Error):
                if proc.cmdline() == self.wrapped_command:
                    proc.send_signal(signal.SIGTERM)
                    signalled = True
        return signalled

    def __enter__(self) -> LaunchedEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(
    command: list[str],
    base_url: str,
    health_path: str = "/health",
    timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
    wrapped_command: list[str] | None = None,
) -> LaunchedEngine:
    """Run ``command`` in its own process group and wait until ``base_url + health_path`` is 200.

    ``wrapped_command``: the engine's own command line inside ``command`` when a wrapper (nsys)
    runs it; stopping then signals it alone first (LaunchedEngine.stop).

    Raises EngineStartError with the engine's log tail when it exits early or is not healthy
    within ``timeout_s`` seconds (the process is stopped first).
    """
    fd, log_name = tempfile.mkstemp(prefix="engine-", suffix=".log")
    # The child keeps its own copy of the descriptor; ours is closed once it has started.
    shown = " ".join(redact_command(command))
    with os.fdopen(fd, "wb") as log_file:
        try:
            process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as exc:  # no such program, not executable: said, not a traceback
            Path(log_name).unlink(missing_ok=True)
            raise EngineStartError(
                f"cannot run {command[0]!r} ({exc.strerror or exc}): {shown}"
            ) from None
    engine = LaunchedEngine(
        command, base_url, process, Path(log_name), wrapped_command=wrapped_command
    )
    try:
        _wait_healthy(engine, health_path, timeout_s)
    except BaseException:
        # Not healthy, or the wait was interrupted (a signal): never leave the engine running.
        engine.stop()
        raise
    return engine


def _wait_healthy(engine: LaunchedEngine, health_path: str, timeout_s: float) -> None:
    """Return once ``health_path`` answers 200; EngineStartError (its message and log tail
    redacted) when the engine exits first or ``timeout_s`` passes."""
    process, command, base_url = engine.process, engine.command, engine.base_url
    shown = " ".join(redact_command(command))
    secrets = command_secrets(command)
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            if process.poll() is not None:
                raise EngineStartError(
                    f"the engine exited with code {process.returncode} before it was healthy: "
                    f"{shown}\n--- its log ---\n{redact_text(engine.log_tail(), secrets)}"
                )
            try:
                if client.get(base_url + health_path).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"the engine was not healthy at {base_url}{health_path} after {timeout_s:.0f} "
                    f"s: {shown}\n--- its log ---\n{redact_text(engine.log_tail(), secrets)}"
                )
            time.sleep(0.1)
