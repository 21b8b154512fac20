"""Mooncake and Azure traces: their reading, the replay window and pace, and hash-id prompts."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.workloads.spec import ParameterError, WorkloadError
from loadgen.workloads.trace import TraceReplay, detect_format, load_trace, replay_entries
from loadgen.workloads.trace_prompts import trace_requests
from tests.support.tokenizers import make_tokenizer
from tests.support.traces import write_azure_trace, write_mooncake_trace

pytestmark = pytest.mark.timeout(60)

TOK = make_tokenizer()


def test_azure_csv_reads_datetimes_as_offsets(tmp_path: Path) -> None:
    path = write_azure_trace(tmp_path / "code.csv", [(0.0, 40, 5), (0.25, 12, 3), (1.5, 7, 9)])
    assert detect_format(path) == "azure"
    entries = load_trace(path)
    assert [e.t_s for e in entries] == pytest.approx([0.0, 0.25, 1.5], abs=1e-6)
    assert [(e.input_length, e.output_length, e.hash_ids) for e in entries] == [
        (40, 5, ()), (12, 3, ()), (7, 9, ()),
    ]  # fmt: skip
    # The format is told by the content too, and can be forced.
    renamed = path.rename(tmp_path / "code.trace")
    assert detect_format(renamed) == "azure" and len(load_trace(renamed, format="azure")) == 3


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", r"missing column.*GeneratedTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n", r":2: 'TIMESTAMP' must"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,0\n",
         r":2: 'GeneratedTokens' must be an integer >= 1"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\n"
         "2023-11-16 18:15:45,3,4\n", r":3: TIMESTAMP .* sort the trace"),
    ],
)  # fmt: skip
def test_bad_azure_rows_are_named(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=match):
        load_trace(path)


def test_window_speed_and_target_rate(tmp_path: Path) -> None:
    path = write_mooncake_trace(
        tmp_path / "m.jsonl", [(1000 * i, 10, 2, ()) for i in range(6)]
    )  # arrivals at 0, 1, ..., 5 s
    entries = load_trace(path)
    assert [e.t_s for e in replay_entries(entries, TraceReplay(speed=4.0))] == pytest.approx(
        [0.0, 0.25, 0.5, 0.75, 1.0, 1.25]
    )
    sliced = replay_entries(entries, TraceReplay(start_s=2.0, end_s=5.0))
    assert [e.t_s for e in sliced] == pytest.approx([0.0, 1.0, 2.0])
    first = replay_entries(entries, TraceReplay(start_s=1.0), max_requests=2)
    assert [e.t_s for e in first] == pytest.approx([0.0, 1.0])
    # Squeezed so that (n - 1) / span is the asked rate: 5 gaps at 10/s span 0.5 s.
    fast = replay_entries(entries, TraceReplay(target_rate_rps=10.0))
    assert fast[-1].t_s == pytest.approx(0.5) and (len(fast) - 1) / fast[-1].t_s == 10.0
    with pytest.raises(WorkloadError, match="holds no arrival"):
        replay_entries(entries, TraceReplay(start_s=9.0))
    with pytest.raises(WorkloadError, match="no rate to squeeze"):
        replay_entries(entries, TraceReplay(target_rate_rps=1.0), max_requests=1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"speed": 2.0, "target_rate_rps": 1.0}, "target_rate_rps"),
        ({"speed": 0.0}, "speed"),
        ({"start_s": 3.0, "end_s": 2.0}, "end_s"),
        ({"block_tokens": 0}, "block_tokens"),
        ({"format": "parquet"}, "format"),
    ],
)
def test_replay_parameters_are_checked(kwargs: dict, field: str) -> None:
    with pytest.raises(ParameterError) as info:
        TraceReplay(**kwargs)
    assert info.value.field == field


def test_equal_hash_ids_build_equal_blocks(tmp_path: Path) -> None:
    block = 16
    path = write_mooncake_trace(
        tmp_path / "m.jsonl",
        [
            (0, 3 * block, 4, (0, 1, 2)),
            (10, 2 * block + 5, 4, (0, 1, 7)),  # shares two full blocks, then a partial one
            (20, 2 * block, 4, (9, 1)),  # same id 1, but after another first block
            (30, 20, 4, ()),  # no ids: fresh text of exactly its length
        ],
    )
    entries = load_trace(path)
    specs, schedule = trace_requests(entries, TOK, seed=5, block_tokens=block)
    ids = [TOK.encode(s.prompt) for s in specs]
    assert [len(i) for i in ids] == [s.prompt_tokens for s in specs]
    pairs = zip(specs, entries, strict=True)
    assert all(abs(s.prompt_tokens - e.input_length) <= 2 for s, e in pairs)
    assert specs[3].prompt_tokens == 20
    # The first two requests begin with the same two blocks' tokens (a boundary merge may
    # touch the last token of the second block).
    shared = 2 * block - 1
    assert ids[0][:shared] == ids[1][:shared]
    assert ids[0][:block] != ids[2][:block] and ids[3][:8] != ids[0][:8]
    # The same seed gives the same prompts; another seed others.
    again, _ = trace_requests(entries, TOK, seed=5, block_tokens=block)
    other, _ = trace_requests(entries, TOK, seed=6, block_tokens=block)
    assert [s.prompt for s in again] == [s.prompt for s in specs]
    assert other[0].prompt != specs[0].prompt
    assert schedule.tolist() == pytest.approx([0.0, 0.01, 0.02, 0.03])


def test_bad_hash_ids_are_named(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": 3}\n')
    with pytest.raises(WorkloadError, match=r"m.jsonl:1: 'hash_ids' must be a list"):
        load_trace(path)
    unknown = tmp_path / "m.trace"
    unknown.write_text("what is this\n")
    with pytest.raises(WorkloadError, match=r"set trace\.format"):
        load_trace(unknown)
