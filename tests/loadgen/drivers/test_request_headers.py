"""--api-key and --header reach the server from every driver: this process, --workers
processes, and Locust workers (given them by the master); the Locust job file never holds them."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from loadgen.client.auth import HEADERS_ENV, RequestHeaders
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult
from loadgen.drivers.locust.driver import run_locust
from loadgen.drivers.locust.job import (
    LocustJob,
    client_from_wire,
    client_to_wire,
    read_job,
    write_job,
)
from loadgen.drivers.workers import run_load
from tests.support.http_server import Handler, HttpRequest, LocalServer, Response, run
from tests.support.loadgen_requests import make_requests
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(180)

KEY = "sk-canary-drivers-93be"
HEADER = "X-Canary: hv-canary-41d0"
HEADERS = RequestHeaders.from_options(KEY, [HEADER])


def guarded_handler() -> Handler:
    inner = streaming_handler(2, 0.002)

    async def handler(request: HttpRequest, response: Response) -> None:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            await response.send_json(401, {"error": "Unauthorized"})
            return
        await inner(request, response)

    return handler


def drive(driver: str, workers: int) -> tuple[LoadResult, list[HttpRequest]]:
    plan = LoadPlan("closed", [[s] for s in make_requests(8)], users=4)

    async def main() -> tuple[LoadResult, list[HttpRequest]]:
        async with LocalServer(guarded_handler()) as server:
            config = ClientConfig(server.base_url, "m", headers=HEADERS, timeout_s=30)
            if driver == "asyncio":
                result = await run_load(plan, config, RunClock(), None, workers)
            else:
                result = await asyncio.to_thread(
                    run_locust, plan, config, RunClock(), workers, run_time_s=60
                )
            return result, server.requests

    return run(main(), timeout_s=150)


@pytest.mark.parametrize(
    ("driver", "workers"),
    [
        ("asyncio", 1),
        ("asyncio", 2),
        pytest.param(
            "locust",
            2,
            marks=pytest.mark.skipif(
                importlib.util.find_spec("locust") is None, reason="locust is not installed"
            ),
        ),
    ],
    ids=["asyncio", "workers-2", "locust-2"],
)
def test_every_request_carries_the_key_and_the_header(driver: str, workers: int) -> None:
    result, requests = drive(driver, workers)
    assert [r.status for r in result.records] == ["ok"] * 8, [r.error for r in result.records]
    completions = [r for r in requests if r.path == "/v1/completions"]
    assert len(completions) == 8
    for r in completions:
        assert r.headers["authorization"] == f"Bearer {KEY}"
        assert r.headers["x-canary"] == "hv-canary-41d0"


def test_the_locust_job_file_holds_no_header_and_the_master_reads_them_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = LoadPlan("closed", [[s] for s in make_requests(2)], users=1)
    config = ClientConfig("http://127.0.0.1:1", "m", headers=HEADERS)
    job = LocustJob(
        plan=plan, client=config, t0_ns=0, workers=1, bind_host="127.0.0.1", bind_port=1,
        out_dir=str(tmp_path), join_timeout_s=1.0, worker_timeout_s=1.0, run_time_s=1.0,
    )  # fmt: skip
    path = write_job(job, tmp_path / "job.pkl")
    data = path.read_bytes()
    assert KEY.encode() not in data and b"hv-canary-41d0" not in data
    monkeypatch.delenv(HEADERS_ENV, raising=False)
    assert not read_job(path).client.headers
    monkeypatch.setenv(HEADERS_ENV, HEADERS.to_env()[HEADERS_ENV])
    assert read_job(path).client.headers.as_dict() == HEADERS.as_dict()
    # What the workers are sent by message carries them, and reads back the same.
    wire = client_to_wire(read_job(path).client)
    assert client_from_wire(wire).headers.as_dict() == HEADERS.as_dict()
