"""Kernel receive stamps: the clock map, the fallback, and a reader the test delays on purpose.

The server here runs in a thread of its own (not on the client's event loop), so that it keeps
sending while the test blocks the loop: it stamps each chunk's true send time just before the
write, on the same ``perf_counter_ns`` the client maps the kernel's stamps onto.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.client.transport import kernel_stamps
from loadgen.client.transport.kernel_clock import KernelClock, run_stamps
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult, run_plan
from results.folder.records import RequestRecord
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import make_requests, spec
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(60)
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's"
)

# Wide margins, so that a loaded machine's scheduling cannot blur kernel and user-space stamps:
# a blocked chunk is read at least BLOCK_S after it was sent, far beyond any thread's wake-up
# delay (LATE_MS).
GAP_S = 0.3  # the server's spacing between chunks
BLOCK_S = 0.2  # how long the test blocks the client's event loop
LATE_MS = 50.0
CHUNKS = 4
BLOCKED = (0, 2)  # the chunks that arrive while the loop is blocked


class ChunkServer:
    """Answers one POST per connection with ``CHUNKS`` SSE chunks ``GAP_S`` apart; before
    sending a chunk of ``block``, it has ``loop`` blocked for ``BLOCK_S`` and waits until it is.
    ``sent_ns`` holds each chunk's send time (perf_counter_ns, just before the write)."""

    def __init__(self, block: tuple[int, ...]) -> None:
        self.block = block
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sent_ns: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _block_loop(self) -> threading.Event:
        """Block the client's loop now; it stays blocked until the returned event is set
        (after the chunk is sent) and ``BLOCK_S`` more, so it reads the chunk that late."""
        assert self.loop is not None
        started, sent = threading.Event(), threading.Event()

        def blocker() -> None:
            started.set()
            sent.wait(10)
            time.sleep(BLOCK_S)  # the whole loop stops: no read, no user-space stamp

        self.loop.call_soon_threadsafe(blocker)
        started.wait(10)
        return sent

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            for i in range(CHUNKS):
                if i:
                    time.sleep(GAP_S)
                blocked = self._block_loop() if i in self.block else None
                last = i == CHUNKS - 1
                event = {
                    "choices": [{"text": f" t{i}", "finish_reason": "length" if last else None}]
                }
                body = b"data: " + json.dumps(event).encode() + b"\n\n"
                if last:
                    body += b"data: [DONE]\n\n"
                self.sent_ns.append(time.perf_counter_ns())
                conn.sendall(b"%x\r\n%s\r\n" % (len(body), body) + (b"0\r\n\r\n" if last else b""))
                if blocked is not None:
                    blocked.set()

    def __enter__(self) -> ChunkServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(10)
        self.listener.close()


class Streamed:
    """One request's record, as perf_counter_ns times beside the server's true send times."""

    def __init__(self, record: RequestRecord, t0_ns: int, sent_ns: list[int], stamps: dict):
        self.record, self.sent_ns, self.stamps = record, sent_ns, stamps
        self.chunk_ns = [t0_ns + round(c.t_s * 1e9) for c in record.chunks]
        self.read_ns = [t0_ns + round(c.read_s * 1e9) for c in record.chunks]

    def late_ms(self, times_ns: list[int]) -> list[float]:
        """How long after its true send each chunk was stamped (ms)."""
        return [(t - s) / 1e6 for t, s in zip(times_ns, self.sent_ns, strict=True)]

    def itl_error_ms(self, times_ns: list[int]) -> list[float]:
        """Each recorded gap minus the true gap (ms)."""
        return [
            ((times_ns[i] - times_ns[i - 1]) - (self.sent_ns[i] - self.sent_ns[i - 1])) / 1e6
            for i in range(1, len(times_ns))
        ]


def stream_once(block: tuple[int, ...], kernel: bool) -> Streamed:
    """One request against a fresh ChunkServer that blocks the client's loop at ``block``."""
    with ChunkServer(block) as server:
        clock = RunClock()

        async def main() -> tuple[RequestRecord, dict]:
            server.loop = asyncio.get_running_loop()
            url = f"http://127.0.0.1:{server.port}"
            async with StreamingClient(url, "m", 1, timeout_s=10, kernel_stamps=kernel) as client:
                record = await client.send(spec(max_tokens=CHUNKS), 0, 0.0, clock)
                return record, client.receive_stamps()

        record, stamps = run(main())
    assert record.status == "ok", record.error
    assert len(record.chunks) == CHUNKS
    return Streamed(record, clock.t0_ns, server.sent_ns, stamps)


@linux_only
def test_a_blocked_reader_moves_user_space_stamps_but_not_the_kernels() -> None:
    got = stream_once(BLOCKED, kernel=True)
    assert got.record.stamps == "kernel"
    (conn,) = got.stamps["connections"]
    assert conn["stamps"] == "kernel" and conn["kernel_stamped_reads"] == conn["reads"] > 0
    kernel_late, user_late = got.late_ms(got.chunk_ns), got.late_ms(got.read_ns)
    # The client read the blocked chunks a block late ...
    assert all(user_late[i] >= BLOCK_S * 1000 for i in BLOCKED), user_late
    # ... but their recorded times, TTFT's chunk included, are when they arrived.
    assert all(-1.0 < late < LATE_MS for late in kernel_late), kernel_late
    assert max(abs(e) for e in got.itl_error_ms(got.chunk_ns)) < LATE_MS
    assert max(got.itl_error_ms(got.read_ns)) > BLOCK_S * 1000 - LATE_MS
    assert all(c.read_s >= c.t_s for c in got.record.chunks)
    assert got.record.done_s is not None and got.record.done_s <= got.record.chunks[-1].read_s


def test_user_space_stamps_move_with_the_blocked_reader() -> None:
    got = stream_once(BLOCKED, kernel=False)
    assert got.record.stamps == "user"
    assert got.chunk_ns == got.read_ns
    assert all(got.late_ms(got.chunk_ns)[i] >= BLOCK_S * 1000 for i in BLOCKED)
    (conn,) = got.stamps["connections"]
    assert conn == {"connection": 0, "stamps": "user", "why": "user-space stamps asked for",
                    "reads": 0, "kernel_stamped_reads": 0}  # fmt: skip


def test_a_socket_the_kernel_will_not_stamp_falls_back_to_user_space(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kernel_stamps, "_SO_TIMESTAMPNS", 0x7FFF)  # no such socket option
    got = stream_once((), kernel=True)
    assert got.record.stamps == "user"
    assert got.chunk_ns == got.read_ns
    (conn,) = got.stamps["connections"]
    assert conn["stamps"] == "user" and conn["why"].startswith("SO_TIMESTAMPNS refused")
    assert run_stamps([got.stamps], "")["source"] == "user"


def test_another_platform_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_stamps.sys, "platform", "darwin")
    with socket.socket() as sock:
        assert kernel_stamps.enable_receive_stamps(sock) == "no SO_TIMESTAMPNS on darwin"


def test_the_clock_map_puts_the_kernels_clock_on_perf_counter() -> None:
    clock = KernelClock(remeasure_s=0.0)
    before = time.perf_counter_ns()
    wall = time.clock_gettime_ns(time.CLOCK_REALTIME)
    after = time.perf_counter_ns()
    mapped = clock.to_perf_ns(wall, after)  # re-measured first: remeasure_s is 0
    assert before - 1_000_000 <= mapped <= after + 1_000_000
    assert clock.measurements == 2
    described = clock.describe()
    assert described["kernel_clock"] == "CLOCK_REALTIME"
    assert described["offset_measurements"] == 2 and described["offset_bracket_max_us"] >= 0


def test_the_runs_source_is_kernel_user_or_mixed() -> None:
    kernel = {"connections": [{"stamps": "kernel"}], "kernel_connections": 1}
    user = {"connections": [{"stamps": "user"}], "kernel_connections": 0}
    assert run_stamps([kernel, kernel], "")["source"] == "kernel"
    assert run_stamps([kernel, user], "")["source"] == "mixed"
    assert run_stamps([user], "")["source"] == "user"
    none = run_stamps([], "the locust driver's client")
    assert none["source"] == "user" and none["why"] == "the locust driver's client"


def test_a_fleets_router_reports_each_replicas_connections() -> None:
    async def main() -> LoadResult:
        async with (
            LocalServer(streaming_handler(2, 0.001)) as a,
            LocalServer(streaming_handler(2, 0.001)) as b,
        ):
            config = ClientConfig(a.base_url, "m", timeout_s=10, endpoints=(a.base_url, b.base_url))
            plan = LoadPlan("closed", [[s] for s in make_requests(4)], users=2)
            return await run_plan(plan, config, RunClock())

    result = run(main())
    assert [c["endpoint"] for c in result.stamps] == [r.endpoint for r in result.records[:2]]
    assert {c["worker"] for c in result.stamps} == {0}
    source = "kernel" if sys.platform.startswith("linux") else "user"
    assert {r.stamps for r in result.records} == {source}
    assert run_stamps(result.stamps, "")["source"] == source
