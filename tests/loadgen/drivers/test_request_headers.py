"""--api-key and --header reach the server from every driver: this process, --workers
processes, and Locust workers; the Locust job file never holds them."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from loadgen.client.auth import RequestHeaders
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult
from loadgen.drivers.locust_driver import run_locust
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


def drive(driver: str, workers: int, jobs: list[bytes]) -> tuple[LoadResult, list[HttpRequest]]:
    plan = LoadPlan("closed", [[s] for s in make_requests(8)], users=4)

    async def main() -> tuple[LoadResult, list[HttpRequest]]:
        async with LocalServer(guarded_handler()) as server:
            config = ClientConfig(server.base_url, "m", headers=HEADERS, timeout_s=30)
            if driver == "asyncio":
                result = await run_load(plan, config, RunClock(), None, workers)
            else:

                def keep_job(job: Path, _: list[str]) -> None:
                    jobs.append(job.read_bytes())

                result = await asyncio.to_thread(
                    run_locust, plan, config, RunClock(), None, workers, run_time_s=60,
                    on_job=keep_job,
                )  # fmt: skip
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
    jobs: list[bytes] = []
    result, requests = drive(driver, workers, jobs)
    assert [r.status for r in result.records] == ["ok"] * 8, [r.error for r in result.records]
    completions = [r for r in requests if r.path == "/v1/completions"]
    assert len(completions) == 8
    for r in completions:
        assert r.headers["authorization"] == f"Bearer {KEY}"
        assert r.headers["x-canary"] == "hv-canary-41d0"
    if driver == "locust":
        (job,) = jobs
        assert KEY.encode() not in job and b"hv-canary-41d0" not in job
