"""Kernel receive stamps: the clock map, the fallback, and a reader the test delays on purpose,
over plain http and TLS (tests.support.chunk_server says how the reader is held)."""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.client.transport import kernel_stamps, tls_layer
from loadgen.client.transport.kernel_clock import KernelClock, run_stamps
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult, run_plan
from results.folder.records import RequestRecord
from tests.support.chunk_server import (
    BLOCK_S,
    BLOCKED,
    CHUNKS,
    LINUX_ONLY,
    ChunkServer,
    LoopHold,
    kernel_stamping,
)
from tests.support.http_server import HttpRequest, LocalServer, Response, run
from tests.support.loadgen_requests import make_requests, spec
from tests.support.openai_fakes import openai_handler, serving
from tests.support.sse_streams import streaming_handler
from tests.support.tls_certs import TlsCert, server_context, tls_cert, trusting

__all__ = ["kernel_stamping", "tls_cert", "trusting"]  # fixtures

pytestmark = pytest.mark.timeout(60)


# Wide margins, so that a loaded machine's scheduling cannot blur kernel and user-space stamps:
# a held chunk is read at least BLOCK_S after it was sent, far beyond any thread's wake-up
# delay (LATE_MS).
LATE_MS = 50.0


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


def stream_once(block: tuple[int, ...], kernel: bool, tls: TlsCert | None = None) -> Streamed:
    """One request against a fresh ChunkServer that blocks the client's loop at ``block``
    (over TLS with ``tls``, a certificate the client trusts)."""
    holder = LoopHold()
    context = server_context(tls) if tls is not None else None
    with ChunkServer(block, holder, context) as server:
        clock = RunClock()

        async def main() -> tuple[RequestRecord, dict]:
            holder.loop = asyncio.get_running_loop()
            async with StreamingClient(
                server.url, "m", 1, timeout_s=10, kernel_stamps=kernel
            ) as client:
                record = await client.send(spec(max_tokens=CHUNKS), 0, 0.0, clock)
                return record, client.receive_stamps()

        record, stamps = run(main())
    assert record.status == "ok", record.error
    assert len(record.chunks) == CHUNKS
    return Streamed(record, clock.t0_ns, server.sent_ns, stamps)


def check_kernel_stamps_held(got: Streamed) -> None:
    """The held chunks were read a hold late, but their recorded times are their arrivals."""
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


@LINUX_ONLY
def test_a_blocked_reader_moves_user_space_stamps_but_not_the_kernels() -> None:
    check_kernel_stamps_held(stream_once(BLOCKED, kernel=True))


@LINUX_ONLY
def test_over_tls_the_kernels_stamps_survive_the_blocked_reader(trusting: TlsCert) -> None:
    got = stream_once(BLOCKED, kernel=True, tls=trusting)
    check_kernel_stamps_held(got)
    assert got.stamps["endpoint"].startswith("https://")


def test_over_tls_without_kernel_stamps_the_reader_stamps_as_it_reads(trusting: TlsCert) -> None:
    got = stream_once(BLOCKED, kernel=False, tls=trusting)
    assert got.record.stamps == "user" and got.chunk_ns == got.read_ns
    assert all(got.late_ms(got.chunk_ns)[i] >= BLOCK_S * 1000 for i in BLOCKED)
    (conn,) = got.stamps["connections"]
    assert conn["stamps"] == "user" and conn["why"] == "user-space stamps asked for"


def test_a_certificate_the_client_does_not_trust_fails_the_request(tls_cert: TlsCert) -> None:
    tls_layer.client_context.cache_clear()  # the default trust: no self-signed certificate
    with ChunkServer((), LoopHold(), server_context(tls_cert)) as server:

        async def main() -> RequestRecord:
            async with StreamingClient(server.url, "m", 1, timeout_s=5) as client:
                return await client.send(spec(max_tokens=CHUNKS), 0, 0.0, RunClock())

        record = run(main())
    assert record.status == "error" and "CERTIFICATE_VERIFY_FAILED" in (record.error or "")


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


def test_the_pre_flight_check_and_the_streams_trust_the_same_certificate(
    trusting: TlsCert,
) -> None:
    models = [{"id": "m", "object": "model"}]
    with serving(openai_handler(models), tls=server_context(trusting)) as server:

        async def main() -> tuple[list[str], RequestRecord]:
            async with StreamingClient(server.base_url, "m", 1, timeout_s=10) as client:
                served = await client.check_reachable()  # httpx, with the raw path's context
                return served, await client.send(spec(), 0, 0.0, RunClock())

        served, record = run(main())
    assert served == ["m"]
    assert record.status == "ok", record.error
    assert record.stamps == ("kernel" if sys.platform.startswith("linux") else "user")


def test_over_tls_a_server_closing_after_each_answer_loses_no_byte(trusting: TlsCert) -> None:
    stream = streaming_handler(3, 0.001)

    async def closing(request: HttpRequest, response: Response) -> None:
        await stream(request, response)  # its last bytes and the TLS close may share a read
        response.closed = True

    with serving(closing, tls=server_context(trusting)) as server:

        async def main() -> list[RequestRecord]:
            async with StreamingClient(server.base_url, "m", 1, timeout_s=10) as client:
                return [await client.send(s, 0, 0.0, RunClock()) for s in make_requests(3)]

        records = run(main())
        assert server.connections == 3
    assert [r.status for r in records] == ["ok"] * 3, [r.error for r in records]
    assert all(r.output_tokens == 3 for r in records)
