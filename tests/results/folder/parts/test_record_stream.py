"""Records streamed into a run folder: parts flushed by rows and by time, chunks let go once on
disk, a sealed folder equal to one written at once, and an unsealed one read as incomplete."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from results.folder.parts.writer import REQUESTS_PARTS, TOKENS_PARTS, has_parts
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder, load_run
from results.run_summary import summarize_run
from tests.support.run_json import fake_run_json


def record(i: int, chunks: int = 4) -> RequestRecord:
    sent = 0.1 * i
    out = RequestRecord(
        f"r{i:04d}", i % 3, sent, sent, sent + 0.05, sent + 0.05 + 0.01 * chunks, 10, chunks,
        "usage", "ok", None, 200,
    )  # fmt: skip
    out.first_answer_token_s = out.first_token_s
    out.chunks = [
        ChunkRecord(out.request_id, k, sent + 0.05 + 0.01 * k + 0.001 * (i % 7), 1)
        for k in range(chunks)
    ]
    return out


def parts(folder: Path, name: str) -> list[Path]:
    return sorted((folder / name).glob("part-*.parquet"))


def test_parts_flush_at_the_row_bound_and_let_go_of_chunks(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    # 5 rows a record (1 request + 4 chunks): 12 rows flush after the third record.
    stream = folder.open_stream(flush_s=3600.0, flush_rows=12)
    records = [record(i) for i in range(7)]
    for r in records[:3]:
        stream.add(r)
    assert len(parts(tmp_path, REQUESTS_PARTS)) == 1 and len(parts(tmp_path, TOKENS_PARTS)) == 1
    assert pq.read_table(parts(tmp_path, TOKENS_PARTS)[0]).num_rows == 12
    assert all(r.chunks == [] for r in records[:3])
    for r in records[3:]:
        stream.add(r)
    assert stream.requests_written == 6 and len(records[6].chunks) == 4  # the 7th is buffered
    stream.close()
    assert stream.requests_written == 7 and stream.chunks_written == 28
    folder.seal_records()
    assert not has_parts(tmp_path) and not (tmp_path / REQUESTS_PARTS).exists()
    tokens = pq.ParquetFile(tmp_path / "tokens.parquet")
    assert tokens.metadata.num_rows == 28 and tokens.metadata.num_row_groups == 3


def test_a_quiet_spell_is_flushed_by_the_timer(tmp_path: Path) -> None:
    stream = RunFolder(tmp_path).open_stream(flush_s=0.2, flush_rows=10**9)
    stream.add(record(0))
    deadline = time.monotonic() + 30.0
    while not parts(tmp_path, REQUESTS_PARTS) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pq.read_table(parts(tmp_path, REQUESTS_PARTS)[0])) == 1
    stream.close()
    with pytest.raises(RuntimeError, match="closed"):
        stream.add(record(1))


def test_a_sealed_stream_summarizes_as_a_folder_written_at_once(tmp_path: Path) -> None:
    whole, streamed = RunFolder(tmp_path / "whole"), RunFolder(tmp_path / "streamed")
    for folder in (whole, streamed):
        folder.path.mkdir()
        folder.write_run_json(fake_run_json(folder.run_id))
    whole.write_requests([record(i) for i in range(40)])
    whole.write_tokens([record(i) for i in range(40)])
    stream = streamed.open_stream(flush_s=3600.0, flush_rows=23)
    stream.extend(record(i) for i in range(40))
    stream.close()
    streamed.seal_records()
    a, b = summarize_run(load_run(whole.path)), summarize_run(load_run(streamed.path))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert "incomplete" not in b


def test_an_unsealed_folder_reads_as_incomplete(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.write_run_json({**fake_run_json(folder.run_id), "incomplete": {"flush_s": 2.0}})
    stream = folder.open_stream(flush_s=3600.0, flush_rows=10)
    stream.extend(record(i) for i in range(5))  # two parts of two records, one buffered
    # The process dies here: no close, no seal, no summary.json.
    run = load_run(tmp_path)
    assert run.summary is None and len(run.requests) == 4 and len(run.tokens) == 16
    assert run.run_json["incomplete"] == {"flush_s": 2.0, "requests_flushed": 4}
    summary = summarize_run(run)
    assert summary["counts"]["all"]["ok"] == 4
    assert summary["incomplete"]["requests_flushed"] == 4
    assert summary["partial"].startswith("incomplete run: it stopped without closing its folder")
    assert "4 requests flushed to disk" in summary["partial"]
    stream.close()
