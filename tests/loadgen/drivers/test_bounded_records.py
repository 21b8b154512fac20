"""A load streamed to a run folder holds no record past its flush: the client's memory does
not grow with the run's length (loadgen.drivers.driver.run_plan's ``keep_records``)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult, run_plan
from results.folder.parts.record_stream import RecordStream
from results.folder.parts.writer import REQUESTS_PARTS, read_parts
from results.folder.records import RequestRecord
from results.folder.tables import REQUESTS_SCHEMA
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import make_requests
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(120)

USERS = 8
CHUNKS = 3
# A part every few records: the stream's buffer holds at most FLUSH_ROWS rows (a record and
# its chunks), a bound that does not depend on how many requests the load sends.
FLUSH_ROWS = 40


def live_records() -> int:
    """RequestRecord instances alive now (after a full collection)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, RequestRecord))


async def load(n: int, folder: Path, keep_records: bool) -> tuple[LoadResult, int]:
    """``n`` requests by USERS closed-loop users, streamed to ``folder``; the result and the
    records alive at the load's end, before the stream is closed."""
    stream = RecordStream(folder, flush_s=60.0, flush_rows=FLUSH_ROWS)
    plan = LoadPlan("closed", [(spec,) for spec in make_requests(n, fail_every=50)], USERS)
    try:
        async with LocalServer(streaming_handler(CHUNKS, 0.0)) as server:
            result = await run_plan(
                plan, ClientConfig(server.base_url, "m"), RunClock(),
                on_record=stream.add, keep_records=keep_records,
            )  # fmt: skip
            alive = live_records()
    finally:
        stream.close()
    return result, alive


@pytest.mark.parametrize("n", [200, 800])
def test_streamed_load_holds_records_bounded_by_users_not_requests(n: int, tmp_path: Path) -> None:
    before = live_records()
    result, alive = run(load(n, tmp_path, keep_records=False), timeout_s=100)
    assert result.records == [] and result.recorded == n
    # What is left is the unflushed part of the stream's buffer: at most FLUSH_ROWS records,
    # whatever n is (n is 5 to 20 times that).
    assert alive - before <= FLUSH_ROWS
    # Nothing was dropped: every request has its row on disk, once.
    ids = read_parts(tmp_path, REQUESTS_PARTS, REQUESTS_SCHEMA).column("request_id").to_pylist()
    assert sorted(ids) == sorted(f"req-{i:03d}" for i in range(n))


def test_kept_records_are_counted_by_the_same_measure(tmp_path: Path) -> None:
    # The default (tests, `bench ab`, sweeps) keeps them: the count sees all n, so the bound
    # above is the stream's doing, not a blind spot of the counting.
    before = live_records()
    result, alive = run(load(200, tmp_path, keep_records=True), timeout_s=100)
    assert len(result.records) == result.recorded == 200
    assert alive - before >= 200
    assert all(r.chunks == [] for r in result.records if r.status == "ok")  # on disk, dropped
