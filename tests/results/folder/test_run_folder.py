"""Run folders: naming, the parquet schemas, round trips, and recomputing the summary exactly."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from results.figures.summary import compute_summary
from results.folder.run_folder import (
    REQUESTS_SCHEMA,
    TOKENS_SCHEMA,
    RunFolder,
    RunFolderError,
    load_run,
    requests_frame,
)
from results.schema import RUN_JSON_VERSION
from tests.support.run_json import fake_run_json

REQUEST_COLUMNS = [
    "request_id",
    "user_id",
    "scheduled_s",
    "sent_s",
    "first_token_s",
    "done_s",
    "prompt_tokens",
    "output_tokens",
    "output_tokens_source",
    "status",
    "error",
    "http_status",
    "first_answer_token_s",
    "reasoning_tokens",
    "reasoning_tokens_source",
    "client_prompt_tokens",
    "usage_prompt_tokens",
    "usage_output_tokens",
    "client_output_tokens",
    "abandoned",
    "endpoint",
    "stamps",
    "model",
    "inputs",
    "num_tool_calls",
    "session_id",
    "turn",
    "cached_tokens",
    "images",
    "image_tokens",
]
NOW = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass
class Chunk:
    request_id: str
    index: int
    t_s: float
    n_tokens: int


@dataclass
class Record:
    """Duck-typed like results.folder.records.RequestRecord: the run folder needs only
    attributes."""

    request_id: str
    user_id: int = 0
    scheduled_s: float = 0.0
    sent_s: float = 0.0
    first_token_s: float | None = 0.1
    done_s: float | None = 0.4
    prompt_tokens: int = 12
    output_tokens: int = 4
    output_tokens_source: str = "usage"
    status: str = "ok"
    error: str | None = None
    http_status: int | None = 200
    chunks: list[Chunk] = field(default_factory=list)


def _records() -> list[Record]:
    ok = Record("r0")
    ok.chunks = [Chunk("r0", 0, 0.1, 1), Chunk("r0", 1, 0.2, 1), Chunk("r0", 2, 0.35, 2)]
    slow = Record("r1", user_id=1, sent_s=0.05, first_token_s=0.3, done_s=0.9, output_tokens=2)
    slow.chunks = [Chunk("r1", 0, 0.3, 1), Chunk("r1", 1, 0.9, 1)]
    failed = Record("r2", user_id=2, first_token_s=None, done_s=0.02, output_tokens=0)
    failed.status, failed.error, failed.http_status = "error", "HTTP 503: overloaded", 503
    return [ok, slow, failed]


def test_create_names_sanitises_and_stays_unique(tmp_path: Path) -> None:
    first = RunFolder.create(tmp_path / "runs", "100-users", "reference", now=NOW)
    assert first.path == tmp_path / "runs" / "20240102T030405Z-100-users-reference"
    assert first.path.is_dir() and first.run_id == first.path.name
    second = RunFolder.create(tmp_path / "runs", "100-users", "reference", now=NOW)
    assert second.path.name == "20240102T030405Z-100-users-reference-2"
    odd = RunFolder.create(tmp_path, "my scenario/../x", "vllm@http://h:8000", now=NOW)
    assert odd.path.parent == tmp_path
    assert odd.path.name == "20240102T030405Z-my_scenario_.._x-vllm_http_h_8000"
    local = datetime(2024, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))
    assert RunFolder.create(tmp_path, "s", "", now=local).path.name == "20240102T030405Z-s-unnamed"


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "s", "e", now=NOW)
    records = _records()
    requests = folder.write_requests(records)
    tokens = folder.write_tokens(records)
    folder.write_run_json(
        fake_run_json(folder.run_id, scenario={"name": "s", "where": tmp_path, "lag_s": math.nan})
    )

    assert list(requests.columns) == REQUEST_COLUMNS
    assert pq.read_schema(folder.path / "requests.parquet").names == REQUEST_COLUMNS
    assert pq.read_schema(folder.path / "tokens.parquet").names == [
        "request_id",
        "index",
        "t_s",
        "n_tokens",
        "reasoning",
        "read_s",
    ]
    assert len(tokens) == 5 and tokens["n_tokens"].sum() == 6
    text = (folder.path / "run.json").read_text()
    # indent 2, version first
    assert text.startswith(f'{{\n  "schema_version": {RUN_JSON_VERSION},\n  "run_id"')
    assert json.loads(text)["scenario"] == {"name": "s", "where": str(tmp_path), "lag_s": None}

    loaded = RunFolder.load(folder.path)
    assert loaded.summary is None  # not written yet: recomputable from the tables
    assert loaded.requests.dtypes.to_dict() == requests.dtypes.to_dict()
    assert loaded.tokens.dtypes.to_dict() == tokens.dtypes.to_dict()
    assert loaded.requests.equals(requests) and loaded.tokens.equals(tokens)
    row = loaded.requests.set_index("request_id").loc["r2"]
    assert row["status"] == "error" and row["http_status"] == 503
    assert math.isnan(row["first_token_s"])


def test_summary_recomputed_from_the_folder_is_identical(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "s", "e", now=NOW)
    records = _records()
    slo = {"ttft_ms": 150.0, "tpot_ms": None, "e2el_ms": None}
    requests, tokens = folder.write_requests(records), folder.write_tokens(records)
    summary = compute_summary(requests, tokens, 0.0, 0.0, slo)
    folder.write_summary(summary)
    folder.write_run_json(fake_run_json(folder.run_id))

    loaded = load_run(folder.path)
    assert loaded.summary == summary
    assert compute_summary(loaded.requests, loaded.tokens, 0.0, 0.0, slo) == loaded.summary
    assert summary["counts"]["all"]["error"] == 1
    assert summary["errors"]["by_message"] == {"HTTP 503: overloaded": 1}
    assert summary["itl_ms"]["count"] == 4  # r0: 100, 75, 75 ms; r1: 600 ms


def test_empty_run_writes_typed_parquet(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "s", "e", now=NOW)
    folder.write_requests([])
    folder.write_tokens([])
    folder.write_run_json(fake_run_json(folder.run_id))
    assert pq.read_schema(folder.path / "requests.parquet").types == REQUESTS_SCHEMA.types
    assert pq.read_schema(folder.path / "tokens.parquet").types == TOKENS_SCHEMA.types
    loaded = load_run(folder.path)
    assert len(loaded.requests) == 0 and list(loaded.requests.columns) == REQUEST_COLUMNS
    assert loaded.requests.dtypes.to_dict() == requests_frame(_records()).dtypes.to_dict()
    summary = compute_summary(loaded.requests, loaded.tokens)
    assert summary["counts"]["all"]["requests"] == 0 and summary["ttft_ms"]["mean"] is None


def test_records_that_do_not_fit_are_rejected() -> None:
    class NoUser:
        request_id = "x"

    expected = "request record #0 (NoUser) has no attribute 'user_id'"
    with pytest.raises(TypeError, match=re.escape(expected)):
        requests_frame([NoUser()])
    unset = Record("r", status=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="request record #1: status is None; it must be set"):
        requests_frame([Record("q"), unset])
    wrong = Record("r", user_id="seven")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="do not fit the run folder schema"):
        requests_frame([wrong])


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(RunFolderError) as info:
        load_run(tmp_path)
    message = str(info.value)
    assert "not a run folder" in message and str(tmp_path) in message
    assert "lacks run.json, requests.parquet, tokens.parquet" in message

    (tmp_path / "run.json").write_text("[1]")
    (tmp_path / "requests.parquet").write_text("not parquet")
    (tmp_path / "tokens.parquet").write_text("")
    with pytest.raises(RunFolderError, match="expected a JSON object"):
        load_run(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps(fake_run_json("r")))
    with pytest.raises(
        RunFolderError, match=re.escape("requests.parquet: cannot be read as parquet")
    ):
        load_run(tmp_path)

    pq.write_table(pa.table({"request_id": ["a"]}), tmp_path / "requests.parquet")
    with pytest.raises(RunFolderError, match="missing columns user_id, scheduled_s"):
        load_run(tmp_path)


def test_real_request_records_are_accepted(tmp_path: Path) -> None:
    records = pytest.importorskip("results.folder.records")
    chunk = records.ChunkRecord(request_id="a", index=0, t_s=0.2, n_tokens=3)
    record = records.RequestRecord(
        request_id="a",
        user_id=7,
        scheduled_s=0.0,
        sent_s=0.01,
        first_token_s=0.2,
        done_s=0.2,
        prompt_tokens=5,
        output_tokens=3,
        output_tokens_source="usage",
        status="ok",
        error=None,
        http_status=200,
        chunks=[chunk],
    )
    folder = RunFolder.create(tmp_path, "s", "e", now=NOW)
    frame = folder.write_requests([record])
    assert frame.loc[0, "user_id"] == 7 and folder.write_tokens([record]).loc[0, "n_tokens"] == 3
