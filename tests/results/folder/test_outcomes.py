"""Outcomes read back from a sealed run folder (results.folder.outcomes): the fields the end of
a run needs, for every request, as the records that were streamed had them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from results.folder.outcomes import OUTCOME_COLUMNS, read_outcomes
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _records(n: int) -> list[RequestRecord]:
    """``n`` records: every third failed, every fifth cut in flight (no end), the rest ok."""
    out: list[RequestRecord] = []
    for i in range(n):
        sent_s = 0.1 * i
        if i % 5 == 4:
            out.append(RequestRecord.unanswered(
                f"r{i}", i % 4, sent_s, sent_s, None, 3, "cancelled", "interrupted by SIGINT"
            ))  # fmt: skip
        elif i % 3 == 2:
            out.append(RequestRecord.unanswered(
                f"r{i}", i % 4, sent_s, sent_s, sent_s + 0.05, 3, "error", f"HTTP 500 #{i}"
            ))  # fmt: skip
        else:
            out.append(RequestRecord(
                request_id=f"r{i}", user_id=i % 4, scheduled_s=sent_s, sent_s=sent_s,
                first_token_s=sent_s + 0.02, done_s=sent_s + 0.04, prompt_tokens=3,
                output_tokens=2, output_tokens_source="usage", status="ok", error=None,
                http_status=200,
                chunks=[ChunkRecord(f"r{i}", k, sent_s + 0.02 * (k + 1), 1) for k in range(2)],
            ))  # fmt: skip
    return out


def test_outcomes_of_a_streamed_and_sealed_folder_match_the_records(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "s", "e", now=NOW)
    records = _records(23)
    expected = [tuple(getattr(r, name) for name in OUTCOME_COLUMNS) for r in records]
    stream = folder.open_stream(60.0, 7)  # a part every few records: several row groups
    stream.extend(records)
    stream.close()
    folder.seal_records()
    assert stream.parts_written > 2
    got = read_outcomes(folder.path)
    assert [tuple(getattr(o, name) for name in OUTCOME_COLUMNS) for o in got] == expected


def test_outcomes_of_a_folder_without_requests_are_none(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "s", "e", now=NOW)
    folder.open_stream(60.0, 7).close()
    folder.seal_records()
    assert read_outcomes(folder.path) == []
