"""A run folder written before run.json had a schema_version still opens everywhere.

tests/fixtures/run-folder-v0 is a real `bench run` of the tiny preset (2 users, 8 requests, the
reference engine on a CPU) by the code of the layout commit d56e600, before results.schema: its
run.json has no schema_version (version 0), its summary.json version 1, and its requests.parquet
the older column order (output_tokens_source last). Only the engine's launch command was edited,
to hold no path of the machine that ran it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli.app import app
from dashboards.pages.report import write_run_report
from dashboards.runview import load_run_view
from results.folder.records import REQUEST_COLUMNS
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from results.schema import RUN_JSON_VERSION, SUMMARY_JSON_VERSION
from tests.support.paths import TEST_FIXTURES

OLD_RUN = TEST_FIXTURES / "run-folder-v0"


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    """A copy of the fixture, for commands that write into the folder (report.html)."""
    return Path(shutil.copytree(OLD_RUN, tmp_path / OLD_RUN.name))


def test_the_fixture_is_of_the_old_format() -> None:
    raw = json.loads((OLD_RUN / "run.json").read_text(encoding="utf-8"))
    assert "schema_version" not in raw
    assert json.loads((OLD_RUN / "summary.json").read_text(encoding="utf-8"))["schema_version"] == 1


def test_load_run_upgrades_it_to_the_current_versions() -> None:
    raw = json.loads((OLD_RUN / "run.json").read_text(encoding="utf-8"))
    run = load_run(OLD_RUN)
    assert run.run_json["schema_version"] == RUN_JSON_VERSION
    assert next(iter(run.run_json)) == "schema_version"
    # Only the tokenizer changed shape since (version 2): its name, of a source not recorded.
    tokenizer = {
        "source": "unrecorded",
        "name": raw["tokenizer"],
        "prompt_lengths": "client tokenizer",
    }
    assert {k: v for k, v in run.run_json.items() if k != "schema_version"} == {
        **raw,
        "tokenizer": tokenizer,
    }
    assert run.summary is not None and run.summary["schema_version"] == SUMMARY_JSON_VERSION
    assert list(run.requests.columns) == list(REQUEST_COLUMNS)
    assert len(run.requests) == 8 and (run.requests["status"] == "ok").all()
    assert run.steps is not None and run.samples is not None


def test_its_summary_recomputes_to_what_the_old_code_wrote() -> None:
    """The figures of the old folder are unchanged by reading it with today's code."""
    run = load_run(OLD_RUN)
    recomputed = dict(summarize_run(run))
    # The usability verdict came after the folder was written; its 8 requests all succeeded.
    assert recomputed.pop("usability")["usable"] is True
    # So did the reason MFU and MBU are missing: the folder recorded no roofs, and says why.
    attribution = dict(recomputed.pop("attribution"))
    # And the engine facts: a real CPU, whose prefix cache held none of the 8 prompts.
    assert recomputed.pop("simulated") is None
    reuse = recomputed.pop("prefix_cache")
    assert reuse["prefix_cache_hit_tokens"] == 0
    assert (
        reuse["prompt_tokens"] == reuse["prefilled_tokens"] == run.requests["prompt_tokens"].sum()
    )
    assert attribution.pop("mfu_reason").startswith("no roofs: no calibration of this CPU")
    # And run validity: the folder kept no per-source token counts and no fingerprint, and its
    # CPU recorded no energy; nothing marks it.
    assert recomputed.pop("token_reconciliation")["available"] is False
    assert recomputed.pop("energy_by_phase")["available"] is False
    assert recomputed.pop("validity")["violations"] == []
    # And the client's read delay and its threshold: its chunks were stamped in user space.
    client = recomputed["client"] = dict(recomputed["client"])
    client["thresholds"] = dict(client["thresholds"])
    assert client["thresholds"].pop("read_delay_p99_ms") == 20.0
    assert client.pop("read_delay") == {
        "available": False,
        "reason": "no chunk had a kernel receive stamp",
    }
    # And the CPU work per token: its CPU probe recorded no process CPU counters yet.
    probes = dict(recomputed.pop("probes"))
    assert probes.pop("cpu_work")["available"] is False
    assert {**recomputed, "probes": probes, "attribution": attribution} == run.summary


def test_bench_report_prints_it_and_writes_its_dashboard(old_run: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(old_run), "--html"])
    assert result.exit_code == 0, result.output
    assert "TTFT" in result.output and "Per-user TPS" in result.output
    assert "summary.json is missing" not in result.output
    assert (old_run / "report.html").is_file()


def test_the_dashboard_reads_it(old_run: Path) -> None:
    view = load_run_view(old_run)
    assert view.run_json["run_id"] == "20261201T093907Z-fixture-tiny-reference"
    assert view.summary["counts"]["all"]["ok"] == 8
    page = write_run_report(old_run).read_text(encoding="utf-8")
    assert "fixture-tiny" in page
