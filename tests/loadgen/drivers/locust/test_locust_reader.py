"""A Locust worker's reader (loadgen.drivers.locust.raw over the blocking raw client) in a
gevent-patched process, its whole hub blocked on purpose while chunks arrive: kernel stamps
keep the chunks' arrival times, over plain http and TLS; user-space stamps move with the block;
a socket the kernel will not stamp falls back and says why; Locust workers over https report
each connection's stamps."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.client.transport.kernel_clock import run_stamps
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.drivers.locust.driver import run_locust
from tests.support.chunk_server import (
    BLOCK_S,
    BLOCKED,
    CHUNKS,
    LINUX_ONLY,
    ChunkServer,
    PipeHold,
    kernel_stamping,
)
from tests.support.loadgen_requests import make_requests
from tests.support.openai_fakes import serving
from tests.support.sse_streams import streaming_handler
from tests.support.tls_certs import TlsCert, server_context, tls_cert, trusting

__all__ = ["kernel_stamping", "tls_cert", "trusting"]  # fixtures

pytestmark = pytest.mark.timeout(90)


ROOT = Path(__file__).resolve().parents[4]
LATE_MS = 50.0  # far beyond any wake-up delay, far below BLOCK_S


def read_held(kernel: bool, tls: TlsCert | None = None, *extra: str) -> tuple[dict, list[int]]:
    """One request from a gevent reader process, held at BLOCKED; (its result, true sends)."""
    holder = PipeHold()
    with ChunkServer(BLOCKED, holder, server_context(tls) if tls else None) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.gevent_reader", server.url, str(int(kernel)),
             *extra],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        holder.proc = proc
        try:
            server.thread.join(60)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    lines = [line for line in out.splitlines() if line.startswith("result ")]
    assert lines, out
    result: dict[str, Any] = json.loads(lines[0].removeprefix("result "))
    assert result["error"] is None, result["error"]
    assert len(result["chunk_ns"]) == CHUNKS and result["socket"].startswith("gevent")
    return result, server.sent_ns


def late_ms(times_ns: list[int], sent_ns: list[int]) -> list[float]:
    return [(t - s) / 1e6 for t, s in zip(times_ns, sent_ns, strict=True)]


def check_held_kernel(result: dict, sent_ns: list[int]) -> None:
    assert result["stamps"] == "kernel"
    (report,) = result["reports"]
    (conn,) = report["connections"]
    assert conn["stamps"] == "kernel" and conn["kernel_stamped_reads"] == conn["reads"] > 0
    assert report["worker"] == 0 and report["kernel_clock"] == "CLOCK_REALTIME"
    user_late = late_ms(result["read_ns"], sent_ns)
    kernel_late = late_ms(result["chunk_ns"], sent_ns)
    # The hub read the held chunks a block late ...
    assert all(user_late[i] >= BLOCK_S * 1000 for i in BLOCKED), user_late
    # ... but their recorded times, the first chunk's (TTFT) included, are their arrivals.
    assert all(-1.0 < late < LATE_MS for late in kernel_late), kernel_late
    assert all(r >= t for r, t in zip(result["read_ns"], result["chunk_ns"], strict=True))
    assert run_stamps(result["reports"], "")["source"] == "kernel"


@LINUX_ONLY
def test_a_blocked_gevent_hub_moves_user_space_stamps_but_not_the_kernels() -> None:
    check_held_kernel(*read_held(True))


@LINUX_ONLY
def test_over_tls_the_gevent_readers_kernel_stamps_survive_the_block(trusting: TlsCert) -> None:
    result, sent_ns = read_held(True, trusting)
    check_held_kernel(result, sent_ns)
    assert result["reports"][0]["endpoint"].startswith("https://")


def test_user_space_stamps_move_with_the_blocked_hub() -> None:
    result, sent_ns = read_held(False)
    assert result["stamps"] == "user" and result["chunk_ns"] == result["read_ns"]
    assert all(late_ms(result["chunk_ns"], sent_ns)[i] >= BLOCK_S * 1000 for i in BLOCKED)
    (conn,) = result["reports"][0]["connections"]
    assert conn == {"connection": 0, "stamps": "user", "why": "user-space stamps asked for",
                    "reads": 0, "kernel_stamped_reads": 0}  # fmt: skip


def test_a_socket_the_kernel_will_not_stamp_falls_back_and_says_why() -> None:
    result, _ = read_held(True, None, "refused")
    assert result["stamps"] == "user" and result["chunk_ns"] == result["read_ns"]
    (conn,) = result["reports"][0]["connections"]
    assert conn["stamps"] == "user" and conn["why"].startswith("SO_TIMESTAMPNS refused")
    assert run_stamps(result["reports"], "")["source"] == "user"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="locust is not installed")
def test_locust_workers_read_https_with_kernel_stamps_and_report_each_connection(
    trusting: TlsCert,
) -> None:
    plan = LoadPlan("closed", [[s] for s in make_requests(8)], users=2)
    with serving(streaming_handler(3, 0.01), tls=server_context(trusting)) as server:
        url = server.base_url
        result = run_locust(
            plan, ClientConfig(url, "m", timeout_s=30), RunClock(), 2, run_time_s=120
        )
    assert url.startswith("https://")
    assert all(r.status == "ok" for r in result.records), [r.error for r in result.records]
    source = "kernel" if sys.platform.startswith("linux") else "user"
    assert {r.stamps for r in result.records} == {source}
    # Each worker reports its users' connections (one each here), each with its source.
    assert sorted(c["worker"] for c in result.stamps) == [0, 1]
    assert {c["endpoint"] for c in result.stamps} == {url}
    for client in result.stamps:
        assert client["connections"] and all(
            conn["stamps"] == source and conn["reads"] >= (source == "kernel")
            for conn in client["connections"]
        )
    summary = run_stamps(result.stamps, "")
    assert summary["source"] == source and summary["connections"] == 2
