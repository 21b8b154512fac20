"""A real reference-engine server on 127.0.0.1 for tests: uvicorn in a background thread
(``running_server``), or `bench serve` in its own process (``bench_serve``), for tests that
time it, kill its engine core, or watch it exit."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.serving.core_process import EngineCoreProcess
from engine.serving.guards.connection_guard import ServerConfig
from engine.serving.guards.limits import ServerLimits
from engine.serving.server import build_app
from engine_adapters.launcher import free_port


@contextmanager
def running_server(
    config: EngineConfig,
    startup_timeout_s: float = 60.0,
    core_process: bool = False,
    api_key: str | None = None,
    limits: ServerLimits | None = None,
) -> Iterator[str]:
    """Serve ``config`` on a free port; yields the base URL, stops the server on exit.

    The engine steps in a thread of this process, or with ``core_process`` in a child process
    named "engine-core" (as `bench serve` runs it), which the server closes when it stops. The
    HTTP front is `bench serve`'s (its protocol and ``limits``, default ServerLimits()). With
    ``api_key`` the /v1 routes need it (`bench serve --api-key`)."""
    engine = EngineCoreProcess(config) if core_process else LLMEngine(config)
    port = free_port()
    limits = limits or ServerLimits()
    server = uvicorn.Server(
        ServerConfig(
            build_app(engine, limits, api_key=api_key), limits, host="127.0.0.1", port=port,
            log_level="warning", access_log=False,
        )
    )  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + startup_timeout_s
    while True:
        try:
            if httpx.get(base_url + "/health", timeout=1.0).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"test server did not start at {base_url}")
        time.sleep(0.05)
    try:
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@dataclass
class ServeProcess:
    """A `bench serve` subprocess: its base URL, its process, and the log it writes."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def bench_serve(
    log_path: Path, *args: str, startup_timeout_s: float = 120.0
) -> Iterator[ServeProcess]:
    """`bench serve --model tiny --dtype float32 ARGS` on a free port of 127.0.0.1, as a user
    starts it (its own process, its engine core in another); yields once /health answers 200.
    On exit the server is interrupted (SIGINT, as Ctrl-C), then killed if it lingers."""
    port = free_port()
    command = [
        sys.executable, "-m", "bench", "serve", "--model", "tiny", "--dtype", "float32",
        "--port", str(port), *args,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    served = ServeProcess(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"bench serve exited with {process.returncode}:\n{served.log()}")
            try:
                if httpx.get(served.url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench serve did not start at {served.url}:\n{served.log()}")
            time.sleep(0.1)
        yield served
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
