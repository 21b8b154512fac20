"""The dataset workload: a user's own prompts and chats from JSONL, JSON, CSV, Parquet and
datasets folders, the rows refused by reason, the rows reused, the request fields they carry."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.client.stream import StreamingClient
from loadgen.drivers.locust.job import spec_from_wire, spec_to_wire
from loadgen.workloads.dataset import DatasetSource, dataset_requests
from loadgen.workloads.dataset_files import read_rows
from loadgen.workloads.rows import RowReport
from loadgen.workloads.spec import LengthDist, WorkloadError, WorkloadSpec
from results.schema.api_kinds import Api
from tests.support.hf_hub_cache import lay_out_hub_repo
from tests.support.tokenizers import make_tokenizer

pytestmark = pytest.mark.timeout(60)

TOK = make_tokenizer()

CHATS: list[dict[str, Any]] = [
    {
        "messages": [
            {"role": "system", "content": "You answer in one line."},
            {"role": "user", "content": "kalo strings and more strings"},
            {"role": "assistant", "content": "kalo kalo kalo mi ne tra"},
        ],
        "request": {"top_k": 5},
    },
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "pro ion "}, "ed at th"]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "er ka lo"},
        ],
        "max_tokens": 9,
    },
    {"messages": [{"role": "robot", "content": "beep"}], "max_tokens": 4},
    {"messages": [{"role": "system", "content": "only a system prompt"}], "max_tokens": 4},
    {"messages": [{"role": "user", "content": "no length at all"}]},
    {"messages": [{"role": "user", "content": "sets max tokens"}], "request": {"max_tokens": 3}},
]


def _workload(path: Path, **kw: Any) -> WorkloadSpec:
    return WorkloadSpec(kind="dataset", path=str(path), **kw)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_chat_rows_send_every_role_and_refuse_what_cannot_be_sent(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "chats.jsonl", CHATS)
    report = RowReport(str(path))
    specs = dataset_requests(
        _workload(path),
        DatasetSource(),
        TOK,
        5,
        seed=0,
        api="chat",
        fields={"top_k": 1, "min_tokens": 2},
        report=report,
    )
    assert report.read == 6 and report.usable == 2 and report.requests == 5
    assert report.reused == 3
    assert dict(report.refused) == {
        "unknown role 'robot'": 1,
        "no user message": 1,
        "no output length (a max_tokens column, an answer, output_len)": 1,
        "request field 'max_tokens' (set by output_len, or a dataset's max_tokens column)": 1,
    }
    first, second = specs[0], specs[1]
    # The system prompt is sent; the last assistant answer is the length, not sent.
    assert first.messages == (
        ("system", "You answer in one line."),
        ("user", "kalo strings and more strings"),
    )
    assert first.max_tokens == len(TOK.encode("kalo kalo kalo mi ne tra"))
    assert first.fields == {"top_k": 5, "min_tokens": 2}  # the row's field wins
    # Multi-part content, a tool call and the tool's answer go as written.
    assert second.messages is not None and len(second.messages) == 3
    assert second.messages[0] == {
        "role": "user",
        "content": [{"type": "text", "text": "pro ion "}, {"type": "text", "text": "ed at th"}],
    }
    assert second.messages[1]["tool_calls"][0]["id"] == "c1"  # type: ignore[index]
    assert second.messages[2] == {"role": "tool", "content": "er ka lo", "tool_call_id": "c1"}
    assert second.max_tokens == 9 and second.fields == {"top_k": 1, "min_tokens": 2}
    assert [s.prompt for s in specs[2:]] == [first.prompt, second.prompt, first.prompt]
    assert len({s.request_id for s in specs}) == 5
    lines = report.lines()
    assert any("1 of 6 rows refused: unknown role 'robot'" in line for line in lines)
    assert lines[-1].endswith("2 usable rows repeated to make 5 requests (3 requests reuse a row)")


def _prompts(n: int) -> list[dict[str, Any]]:
    return [{"question": f"kalo {'ne ' * (i + 1)}strings", "len": 3 + i} for i in range(n)]


def _write(fmt: str, path: Path, rows: list[dict[str, Any]]) -> Path:
    if fmt == "jsonl":
        return _jsonl(path, rows)
    if fmt == "json":
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    elif fmt == "csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        datasets = pytest.importorskip("datasets")
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "hf"])
def test_every_format_reads_the_same_prompts(tmp_path: Path, fmt: str) -> None:
    rows = _prompts(6)
    path = _write(fmt, tmp_path / f"prompts.{fmt if fmt != 'hf' else 'd'}", rows)
    source = DatasetSource(
        format="hf" if fmt == "hf" else "auto", columns={"prompt": "question", "max_tokens": "len"}
    )
    specs = dataset_requests(_workload(path), source, TOK, 6, seed=0)
    assert [s.prompt for s in specs] == [r["question"] for r in rows]
    assert [s.max_tokens for s in specs] == [r["len"] for r in rows]
    assert all(s.api == "completions" and s.messages is None for s in specs)
    shuffled = dataset_requests(
        _workload(path),
        DatasetSource(format=source.format, order="shuffle", columns=source.columns),
        TOK,
        6,
        seed=1,
    )
    assert sorted(s.prompt for s in shuffled) == sorted(r["question"] for r in rows)
    assert [s.prompt for s in shuffled] != [s.prompt for s in specs]


def test_length_filters_and_the_context_refuse_rows(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "p.jsonl", _prompts(8))
    tokens = [len(TOK.encode(r["question"])) for r in _prompts(8)]
    cols = DatasetSource(columns={"prompt": "question", "max_tokens": "len"})
    low, high = tokens[2], tokens[5]
    report = RowReport("p")
    specs = dataset_requests(
        _workload(path, min_input_tokens=low, max_input_tokens=high),
        cols,
        TOK,
        4,
        0,
        report=report,
    )
    assert all(low <= s.prompt_tokens <= high for s in specs)
    assert report.refused[f"prompt shorter than min_input_tokens ({low})"] == 2
    context = tokens[3] + 6  # row 3 asks 6 tokens: it fits, row 4 (7 more) does not
    report = RowReport("p")
    fitting = dataset_requests(
        _workload(path), cols, TOK, 8, 0, context_tokens=context, report=report
    )
    assert all(s.prompt_tokens + s.max_tokens <= context for s in fitting)
    assert report.refused[f"prompt + max_tokens over the served context ({context} tokens)"] > 0
    fixed = dataset_requests(
        _workload(path, max_output_tokens=4),
        DatasetSource(columns={"prompt": "question"}),
        TOK,
        3,
        0,
        output_len=LengthDist("fixed", value=7),
    )
    assert {s.max_tokens for s in fixed} == {4}


@pytest.mark.parametrize("seed", [0, 4, 7])
def test_every_request_is_checked_with_its_own_output_length(tmp_path: Path, seed: int) -> None:
    # Sampled output lengths of 1..60 against a 60-token context: a row that fits with one
    # request's length may not fit with another's, so each must be checked with its own.
    path = _jsonl(tmp_path / "p.jsonl", _prompts(40))
    context = 60
    specs = dataset_requests(
        _workload(path), DatasetSource(columns={"prompt": "question"}), TOK, 20, seed,
        output_len=LengthDist("uniform", low=1, high=60), context_tokens=context,
    )  # fmt: skip
    over = [s.request_id for s in specs if s.prompt_tokens + s.max_tokens > context]
    assert not over, f"{len(over)} of {len(specs)} requests exceed the {context}-token context"
    assert len({s.max_tokens for s in specs}) > 1  # the samples, not one length for all


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_every_chat_api_sends_the_conversation(tmp_path: Path, api: Api) -> None:
    path = _jsonl(tmp_path / "c.jsonl", CHATS[:1])
    specs = dataset_requests(_workload(path), DatasetSource(), TOK, 1, 0, api=api)
    assert specs[0].api == api
    assert specs[0].messages == (
        ("system", "You answer in one line."),
        ("user", "kalo strings and more strings"),
    )
    assert specs[0].max_tokens == len(TOK.encode("kalo kalo kalo mi ne tra"))


def test_a_conversation_on_the_completions_api_is_refused(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "c.jsonl", CHATS[:1])
    with pytest.raises(WorkloadError, match=r"no row can be sent .*completions API"):
        dataset_requests(_workload(path), DatasetSource(), TOK, 2, 0, api="completions")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("bad.jsonl", '{"prompt": "a"}\n{"prompt": "b",\n', r"bad.jsonl: line 2: not JSON"),
        ("list.jsonl", '{"prompt": "a"}\n[1, 2]\n', r"line 2: expected a JSON object"),
        ("bad.json", '[\n {"prompt": "a"},\n {"prompt" "b"}\n]', r"line 3, column 12: not JSON"),
        ("bad.csv", "prompt,max_tokens\nab,3\ncd,4,5\n", r"bad.csv: line 3: more cells"),
        ("bad.parquet", "not parquet", r"not a readable Parquet file"),
        ("x.txt", "prompt", r"cannot tell the format from the suffix '.txt'"),
    ],
)
def test_a_file_that_does_not_parse_names_its_line(
    tmp_path: Path, name: str, content: str, match: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(WorkloadError, match=match) as caught:
        list(read_rows(str(path)))
    assert "\n" not in str(caught.value)


def test_a_hub_dataset_is_read_from_the_offline_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "repo"
    (source).mkdir()
    _jsonl(source / "train.jsonl", _prompts(3))
    _jsonl(source / "test.jsonl", _prompts(1))
    cache = tmp_path / "hub"
    lay_out_hub_repo(cache, "org/prompts", source, "a" * 40, repo_type="dataset")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    workload = WorkloadSpec(kind="dataset", hub="org/prompts")
    specs = dataset_requests(
        workload, DatasetSource(columns={"prompt": "question", "max_tokens": "len"}), TOK, 3, 0
    )
    assert [s.prompt for s in specs] == [r["question"] for r in _prompts(3)]
    with pytest.raises(WorkloadError, match=r"'org/missing': not in .*hf download"):
        dataset_requests(
            WorkloadSpec(kind="dataset", hub="org/missing"), DatasetSource(), TOK, 1, 0
        )


def test_a_rows_request_goes_on_the_wire_as_written(tmp_path: Path) -> None:
    """The client's body and Locust's wire form carry the messages and the fields."""
    path = _jsonl(tmp_path / "chats.jsonl", CHATS[:2])
    specs = dataset_requests(
        _workload(path), DatasetSource(), TOK, 2, 0, api="chat", fields={"top_k": 1},
        ignore_eos=True, temperature=0.5,
    )  # fmt: skip
    client = StreamingClient("http://127.0.0.1:1", "m", 1, extra_body={"top_k": 9, "x": 1})
    body = json.loads(client.request_body(specs[1]))
    assert body["messages"][0]["content"][0] == {"type": "text", "text": "pro ion "}
    assert body["messages"][2]["tool_call_id"] == "c1"
    assert body["top_k"] == 1 and body["x"] == 1  # the request's fields over the client's
    assert body["temperature"] == 0.5 and body["ignore_eos"] is True and body["stream"] is True
    first = json.loads(client.request_body(specs[0]))
    assert first["messages"][0] == {"role": "system", "content": "You answer in one line."}
    assert first["top_k"] == 5
    for spec in specs:
        assert spec_from_wire(json.loads(json.dumps(spec_to_wire(spec)))) == spec
