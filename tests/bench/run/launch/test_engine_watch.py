"""An engine's death seen (a real process killed; a real port closed) and what it cost counted."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.run.launch.engine_watch import EngineWatch, engine_death_section
from engine_adapters.launcher import free_port
from loadgen.drivers.stop import LoadStop
from results.folder.records import RequestRecord
from results.validity.run_end import engine_death_line

pytestmark = pytest.mark.timeout(60)


def record(i: int, sent_s: float, done_s: float, status: str = "ok") -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}", user_id=i % 2, scheduled_s=sent_s, sent_s=sent_s,
        first_token_s=None, done_s=done_s, prompt_tokens=8, output_tokens=4,
        output_tokens_source="usage", status=status,  # type: ignore[arg-type]
        error=None if status == "ok" else "ConnectError: connection refused", http_status=None,
    )  # fmt: skip


# Two users: ok until 1.0 s, then both requests in flight fail at 1.2 s, then refused ones.
RECORDS = [
    record(0, 0.0, 0.5), record(1, 0.0, 0.6), record(2, 0.5, 1.0),
    record(3, 0.6, 1.2, "error"), record(4, 1.0, 1.2, "error"),
    record(5, 1.2, 1.21, "error"), record(6, 1.21, 1.22, "error"),
]  # fmt: skip


@pytest.fixture
def healthy_server() -> Iterator[str]:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_killed_process_stops_the_load_and_is_described() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop = LoadStop()
    t0_ns = time.perf_counter_ns()
    with EngineWatch(process, stop) as watch:  # type: ignore[arg-type]
        time.sleep(0.3)
        assert not stop.is_set()
        process.kill()
        deadline = time.monotonic() + 5.0
        while not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
    assert stop.is_set() and stop.reason == "the engine died"
    died = engine_death_section(watch, "http://127.0.0.1:1", "/health", RECORDS, t0_ns, 10)
    assert died is not None
    assert died["signal"] == "SIGKILL" and died["exit_code"] is None
    assert died["detected_by"] == "process exit"
    # The earlier of the exit as seen (~0.3 s after t0) and the first failure (1.2 s).
    assert died["t_s"] == pytest.approx(min(1.2, (watch.died_ns - t0_ns) / 1e9))
    assert died["not_sent"] == 3


def test_an_unreachable_url_engine_died_at_its_first_failure_streak() -> None:
    watch = EngineWatch(None, LoadStop())
    url = f"http://127.0.0.1:{free_port()}"
    died = engine_death_section(watch, url, "/health", RECORDS, 0, None)
    assert died == {
        "t_s": 1.2, "detected_by": "health check", "exit_code": None, "signal": None,
        "failed_in_flight": 2, "refused": 2, "not_sent": None,
    }  # fmt: skip
    assert engine_death_line(died) == (
        "the engine died at t=1.20 s (unreachable after the load): 2 requests failed in flight, "
        "2 never sent"
    )


def test_failures_from_a_live_engine_are_not_a_death(healthy_server: str) -> None:
    died = engine_death_section(EngineWatch(None, LoadStop()), healthy_server, "/", RECORDS, 0, 7)
    assert died is None


def test_an_engine_that_exited_by_itself_gives_its_code() -> None:
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    stop = LoadStop()
    with EngineWatch(process, stop) as watch:  # type: ignore[arg-type]
        process.wait(10)
        deadline = time.monotonic() + 5.0
        while not stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
    died = engine_death_section(watch, "http://127.0.0.1:1", "/health", [], watch.died_ns or 0, 0)
    assert died is not None and died["exit_code"] == 3 and died["signal"] is None
    assert "(exit code 3)" in engine_death_line(died)


def test_an_exit_between_polls_is_seen_when_the_watch_closes() -> None:
    # A load whose every request is refused at once can end before the next poll.
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop = LoadStop()
    watch = EngineWatch(process, stop).__enter__()  # type: ignore[arg-type]
    process.kill()
    process.wait(10)
    watch.close()
    assert watch.returncode == -9 and watch.died_ns is not None and stop.is_set()
