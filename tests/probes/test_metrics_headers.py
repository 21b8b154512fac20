"""The probes' /metrics scrape behind a key: the probe process gets the headers through its
stdin pipe (not its argv, environment or a file) and sends them with every scrape."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import psutil
import pytest

from probes.probe_process import ProbeProcess
from probes.probe_spec import ProbeSpec

pytestmark = pytest.mark.timeout(60)

KEY = "sk-canary-probes-2b7c"
METRICS = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3.0\n"


class _Guarded(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append(dict(self.headers.items()))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            body = json.dumps({"error": "Unauthorized"}).encode()
            self.send_response(401)
        else:
            body = METRICS.encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def guarded_server() -> Iterator[str]:
    _Guarded.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Guarded)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def spec(url: str) -> ProbeSpec:
    names = {"num_requests_running": ("vllm:num_requests_running",)}
    return ProbeSpec(
        nvml=False, cpu=False, engine_url=url, engine_metric_names=names, engine_interval_s=0.05
    )


def test_the_scrape_carries_the_key_which_the_process_never_shows(guarded_server: str) -> None:
    probes = ProbeProcess(spec(guarded_server), {"Authorization": f"Bearer {KEY}"})
    assert probes.start() == []
    child = psutil.Process(probes.pid)
    assert KEY not in " ".join(child.cmdline())
    assert all(KEY not in v for v in child.environ().values())
    assert KEY not in json.dumps(probes.spec.to_json())
    time.sleep(0.3)
    result = probes.stop()
    assert result.num_samples >= 3
    assert all(h.get("Authorization") == f"Bearer {KEY}" for h in _Guarded.seen)
    assert KEY not in json.dumps(result.to_json())


def test_without_the_key_the_probe_says_401_once(guarded_server: str) -> None:
    probes = ProbeProcess(spec(guarded_server))
    (reason,) = probes.start()
    assert "HTTP 401" in reason
    assert probes.stop().num_samples == 0
