"""A Locust worker's records cross to the master as JSON and come back whole, reasoning too."""

from __future__ import annotations

import json

from loadgen.drivers.locust.job import record_from_wire, record_to_wire
from results.folder.records import ChunkRecord, RequestRecord


def test_a_record_with_reasoning_survives_the_wire() -> None:
    chunks = [ChunkRecord("r", 0, 0.25, 2, True), ChunkRecord("r", 1, 0.5, 1, False)]
    record = RequestRecord(
        "r", 1, 0.0, 0.125, 0.25, 0.75, 7, 3, "usage", "ok", None, 200, chunks,
        first_answer_token_s=0.5, reasoning_tokens=2, reasoning_tokens_source="usage",
    )  # fmt: skip
    back = record_from_wire(json.loads(json.dumps(record_to_wire(record))))
    assert back == record
    assert [c.reasoning for c in back.chunks] == [True, False]
