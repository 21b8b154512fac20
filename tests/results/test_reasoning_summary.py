"""summary.json's reasoning section: known values for a reasoning run, absent for runs without
reasoning, and old folders (no reasoning columns) read as runs without reasoning."""

from __future__ import annotations

from pathlib import Path

import pytest

from results.figures.summary import compute_summary
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder, load_run
from tests.support.paths import TEST_FIXTURES


def _record(rid: str, thought: int, answer: int, sent: float, step: float) -> RequestRecord:
    """A request whose ``thought`` reasoning tokens then ``answer`` answer tokens arrive one per
    chunk, ``step`` seconds apart, the first 0.1 s after ``sent``."""
    kinds = [True] * thought + [False] * answer
    times = [sent + 0.1 + i * step for i in range(len(kinds))]
    chunks = [
        ChunkRecord(rid, i, t, 1, k) for i, (t, k) in enumerate(zip(times, kinds, strict=True))
    ]
    first_answer = times[thought] if answer else None
    return RequestRecord(
        rid, 0, sent, sent, times[0], times[-1], 5, len(kinds), "usage", "ok", None, 200, chunks,
        first_answer_token_s=first_answer, reasoning_tokens=thought,
        reasoning_tokens_source="usage" if thought else None,
    )  # fmt: skip


def _summary(tmp_path: Path, records: list[RequestRecord]) -> dict:
    folder = RunFolder.create(tmp_path, "s", "e")
    return dict(compute_summary(folder.write_requests(records), folder.write_tokens(records)))


def test_a_reasoning_run_reports_answer_and_reasoning_apart(tmp_path: Path) -> None:
    records = [_record("a", 6, 5, 0.0, 0.02), _record("b", 2, 3, 0.05, 0.04)]
    summary = _summary(tmp_path, records)
    reasoning = summary["reasoning"]
    assert reasoning["requests_with_reasoning"] == 2
    assert (reasoning["reasoning_tokens"], reasoning["answer_tokens"]) == (8, 8)
    assert reasoning["reasoning_share"] == pytest.approx(0.5)
    assert reasoning["requests_by_reasoning_tokens_source"] == {"usage": 2}
    assert reasoning["reasoning_tokens_per_request"]["mean"] == pytest.approx(4.0)
    assert reasoning["answer_tokens_per_request"]["max"] == pytest.approx(5.0)
    # a: first answer 0.1 + 6 * 0.02 after sent; b: 0.1 + 2 * 0.04.
    ttfat = reasoning["time_to_first_answer_token_ms"]
    assert (ttfat["min"], ttfat["max"]) == (pytest.approx(180.0), pytest.approx(220.0))
    assert summary["ttft_ms"]["max"] == pytest.approx(100.0)  # still the first token of any kind
    # One answer token per step: answer TPOT is the step, per-user TPS its inverse.
    assert reasoning["answer_tpot_ms"]["min"] == pytest.approx(20.0)
    assert reasoning["answer_tpot_ms"]["max"] == pytest.approx(40.0)
    assert reasoning["answer_per_user_tps"]["max"] == pytest.approx(50.0)
    assert summary["tokens"]["output_tokens"] == 16


def test_a_request_cut_while_reasoning_has_no_time_to_first_answer(tmp_path: Path) -> None:
    records = [_record("a", 4, 2, 0.0, 0.01), _record("b", 3, 0, 0.0, 0.01)]
    reasoning = _summary(tmp_path, records)["reasoning"]
    assert reasoning["time_to_first_answer_token_ms"]["count"] == 1
    assert reasoning["answer_tokens"] == 2 and reasoning["reasoning_tokens"] == 7


def test_a_run_without_reasoning_has_no_reasoning_section(tmp_path: Path) -> None:
    summary = _summary(tmp_path, [_record("a", 0, 4, 0.0, 0.01)])
    assert "reasoning" not in summary


def test_frames_without_the_reasoning_columns_are_runs_without_reasoning(tmp_path: Path) -> None:
    records = [_record("a", 3, 4, 0.0, 0.01)]
    folder = RunFolder.create(tmp_path, "s", "e")
    requests, tokens = folder.write_requests(records), folder.write_tokens(records)
    old = requests.drop(columns=["first_answer_token_s", "reasoning_tokens"])
    summary = compute_summary(old, tokens.drop(columns=["reasoning"]))
    assert "reasoning" not in summary


def test_the_old_run_folder_reads_with_every_token_an_answer_token() -> None:
    run = load_run(TEST_FIXTURES / "run-folder-v0")
    assert (run.requests["first_answer_token_s"] == run.requests["first_token_s"]).all()
    assert (run.requests["reasoning_tokens"] == 0).all()
    assert run.requests["reasoning_tokens_source"].isna().all()
    assert not run.tokens["reasoning"].any()
