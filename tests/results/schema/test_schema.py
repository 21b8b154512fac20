"""run.json and summary.json through results.schema: versions written, round trips, upgrades of
older files, and clear one-line refusals of documents that do not fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from results.figures.summary import compute_summary
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder, RunFolderError, load_run
from results.schema import (
    RUN_JSON_VERSION,
    SUMMARY_JSON_VERSION,
    SchemaError,
    SummaryJson,
    check_run_json,
    upgrade_run_json,
)
from tests.support.run_json import fake_run_json

ROOFS = {"name": "Fake GPU", "source": "test", "compute_dtype": "bf16",
         "flops_per_s": 100e12, "bytes_per_s": 2e12, "ridge_flop_per_byte": 50.0}  # fmt: skip


def _folder(tmp_path: Path) -> tuple[RunFolder, SummaryJson]:
    """A folder with one ok request's tables (no JSON written yet) and their summary."""
    folder = RunFolder.create(tmp_path, "s", "e")
    chunks = [ChunkRecord("a", 0, 0.1, 1), ChunkRecord("a", 1, 0.2, 1)]
    record = RequestRecord("a", 0, 0.0, 0.0, 0.1, 0.2, 5, 2, "usage", "ok", None, 200, chunks)
    requests, tokens = folder.write_requests([record]), folder.write_tokens([record])
    return folder, compute_summary(requests, tokens, 0.0, 0.0, {"ttft_ms": 500.0})


def _write_raw(folder: RunFolder, name: str, document: dict) -> None:
    (folder.path / name).write_text(json.dumps(document), encoding="utf-8")


def test_both_documents_are_written_with_their_version_first(tmp_path: Path) -> None:
    folder, summary = _folder(tmp_path)
    analytic = {"model_config": None, "tp": 1, "roofs": ROOFS, "notes": []}
    folder.write_run_json(fake_run_json(folder.run_id, analytic=analytic))
    folder.write_summary(summary)
    for name, version in (("run.json", RUN_JSON_VERSION), ("summary.json", SUMMARY_JSON_VERSION)):
        text = (folder.path / name).read_text(encoding="utf-8")
        assert text.startswith(f'{{\n  "schema_version": {version},'), name

    run = load_run(folder.path)
    assert run.run_json == fake_run_json(folder.run_id, analytic=analytic)
    assert run.summary == summary


def test_an_unversioned_run_json_is_read_as_version_0_and_upgraded(tmp_path: Path) -> None:
    folder, written = _folder(tmp_path)
    old = dict(fake_run_json(folder.run_id))
    del old["schema_version"]
    _write_raw(folder, "run.json", old)
    summary = dict(written)
    del summary["schema_version"]  # read as version 1, the only one ever written
    _write_raw(folder, "summary.json", summary)

    run = load_run(folder.path)
    assert run.run_json == {"schema_version": RUN_JSON_VERSION, **old}
    assert next(iter(run.run_json)) == "schema_version"
    assert run.summary == {"schema_version": SUMMARY_JSON_VERSION, **summary}


def test_a_file_that_states_version_0_comes_back_at_the_current_version() -> None:
    old = {**fake_run_json("r"), "schema_version": 0}
    upgraded = upgrade_run_json(old, "old/run.json")
    assert upgraded["schema_version"] == RUN_JSON_VERSION
    assert next(iter(upgraded)) == "schema_version"


def test_a_version_1_tokenizer_name_is_read_as_an_unrecorded_source() -> None:
    old = {**fake_run_json("r"), "schema_version": 1, "tokenizer": "synthetic-bpe-4096"}
    upgraded = upgrade_run_json(old, "old/run.json")
    assert upgraded["tokenizer"] == {
        "source": "unrecorded",
        "name": "synthetic-bpe-4096",
        "prompt_lengths": "client tokenizer",
    }
    assert upgrade_run_json({**old, "tokenizer": None}, "old/run.json")["tokenizer"] is None


def test_undeclared_keys_of_an_older_file_are_kept() -> None:
    old = {**fake_run_json("r"), "retired_section": {"x": 1}}
    del old["schema_version"]
    assert upgrade_run_json(old, "old/run.json")["retired_section"] == {"x": 1}  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("name", "current"), [("run.json", RUN_JSON_VERSION), ("summary.json", SUMMARY_JSON_VERSION)]
)  # fmt: skip
def test_a_future_version_is_refused_naming_the_file_and_the_fix(
    tmp_path: Path, name: str, current: int
) -> None:
    folder, summary = _folder(tmp_path)
    folder.write_run_json(fake_run_json(folder.run_id))
    folder.write_summary(summary)
    document = json.loads((folder.path / name).read_text(encoding="utf-8"))
    document["schema_version"] = current + 1
    _write_raw(folder, name, document)

    with pytest.raises(RunFolderError) as info:
        load_run(folder.path)
    message = str(info.value)
    assert "\n" not in message
    assert str(folder.path / name) in message
    assert f"schema_version {current + 1} is newer than this llm-perf-lab reads" in message
    assert "read it with the llm-perf-lab version that wrote it, or a newer one" in message


@pytest.mark.parametrize("version", ["1", -1, 1.0, True])
def test_a_version_that_is_not_a_count_is_refused(version: object) -> None:
    document = {**fake_run_json("r"), "schema_version": version}
    with pytest.raises(SchemaError, match=r"^x/run\.json: schema_version must be a non-negative"):
        upgrade_run_json(document, "x/run.json")


def test_a_misspelt_section_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    folder, _ = _folder(tmp_path)
    document = {**fake_run_json(folder.run_id), "analytc": {"tp": 1}}
    with pytest.raises(SchemaError) as info:
        folder.write_run_json(document)  # type: ignore[arg-type]
    message = str(info.value)
    assert message.startswith(f"{folder.path / 'run.json'}: unknown key 'analytc'")
    assert "did you mean 'analytic'?" in message and "\n" not in message
    assert not (folder.path / "run.json").exists()


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({"engine": {"adapter": "x", "launched": "yes"}},
         "r.json: engine.launched: expected true or false, got a string ('yes')"),
        ({"analytic": {"roofs": {**ROOFS, "flops_per_s": "fast"}}},
         "r.json: analytic.roofs.flops_per_s: expected a number, got a string ('fast')"),
        ({"analytic": {"roofs": {"name": "x", "flops_per_s": 1.0}}},
         "r.json: analytic.roofs: missing source, compute_dtype, bytes_per_s (Roofs requires it)"),
        ({"hardware": {"gpus": ["A100", 3]}},
         "r.json: hardware.gpus[1]: expected a string, got an integer (3)"),
        ({"client": {"clock": "virtual", "t0_ns": 0.5}},
         "r.json: client.t0_ns: expected an integer, got a number (0.5)"),
        ({"tokenizer": 3},
         "r.json: tokenizer: expected an object (TokenizerSection), got an integer (3)"),
        ({"tokenizer": {"source": "web", "name": "x", "prompt_lengths": "client tokenizer"}},
         "r.json: tokenizer.source: expected one of 'folder', 'preset', 'hub', 'server', "
         "'unrecorded', got a string ('web')"),
        ({"versions": {"torch": None}}, "r.json: versions.torch: expected a string, got null"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_named_by_its_path(sections: dict, expected: str) -> None:
    with pytest.raises(SchemaError) as info:
        check_run_json(fake_run_json("r", **sections), "r.json")
    assert str(info.value) == expected


def test_a_missing_required_key_and_a_stale_version_are_refused_on_write() -> None:
    document = dict(fake_run_json("r"))
    del document["started_utc"]
    with pytest.raises(
        SchemaError, match=r"^r\.json: missing started_utc \(RunJson requires it\)$"
    ):
        check_run_json(document, "r.json")
    stale = {**fake_run_json("r"), "schema_version": 0}
    with pytest.raises(
        SchemaError, match=rf"a run\.json being written is version {RUN_JSON_VERSION}"
    ):
        check_run_json(stale, "r.json")


def test_a_summary_that_does_not_fit_is_not_written(tmp_path: Path) -> None:
    folder, written = _folder(tmp_path)
    summary = dict(written)
    summary["counts"] = {"all": summary["counts"]["all"]}
    with pytest.raises(SchemaError, match=r"summary\.json: counts: missing window \(Counts"):
        folder.write_summary(summary)  # type: ignore[arg-type]
    assert not (folder.path / "summary.json").exists()


def test_a_run_json_that_does_not_fit_makes_load_run_name_the_file(tmp_path: Path) -> None:
    folder, _ = _folder(tmp_path)
    _write_raw(folder, "run.json", {**fake_run_json(folder.run_id), "hardware": []})
    with pytest.raises(RunFolderError, match=r"run\.json: hardware: expected an object \(Hardware"):
        load_run(folder.path)
