"""A real reference-engine server on 127.0.0.1 for tests: uvicorn in a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.serving.core_process import EngineCoreProcess
from engine.serving.server import build_app
from engine_adapters.launcher import free_port


@contextmanager
def running_server(
    config: EngineConfig,
    startup_timeout_s: float = 60.0,
    core_process: bool = False,
    api_key: str | None = None,
) -> Iterator[str]:
    """Serve ``config`` on a free port; yields the base URL, stops the server on exit.

    The engine steps in a thread of this process, or with ``core_process`` in a child process
    named "engine-core" (as `bench serve` runs it), which the server closes when it stops.
    With ``api_key`` the /v1 routes need it (`bench serve --api-key`)."""
    engine = EngineCoreProcess(config) if core_process else LLMEngine(config)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            build_app(engine, api_key),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
        )
    )
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
