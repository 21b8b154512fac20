"""Baseline files and run samples: the summary's figures reproduced, a faithful round trip, and
clear errors for malformed baselines and inconsistent run groups."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from bench.gate.baseline import (
    BaselineError,
    dumps_compact,
    load_baseline,
    load_run_group,
    save_baseline,
)
from bench.gate.rules import metric_spec
from bench.gate.stats import point_estimate
from bench.gate.verdict import unit_data
from results.folder.run_folder import load_run
from results.folder.run_group import GROUP_FORMAT, GROUP_JSON, expand_run_paths
from tests.support.gate_fakes import HARDWARE, write_fake_run
from tests.support.paths import REPO_ROOT

SLO = {"ttft_ms": 25.0, "tpot_ms": 9.0, "e2el_ms": None}


def test_point_estimates_reproduce_the_summary(tmp_path: Path) -> None:
    folder = write_fake_run(tmp_path, seed=1, requests=150, slo=SLO, errors=5, warmup_s=0.3)
    summary = load_run(folder).summary
    assert summary is not None
    group, _ = load_run_group([folder], "runs")
    expected = {
        "ttft_ms.p50": summary["ttft_ms"]["p50"],
        "ttft_ms.p99": summary["ttft_ms"]["p99"],
        "tpot_ms.mean": summary["tpot_ms"]["mean"],
        "itl_ms.p90": summary["itl_ms"]["p90"],
        "itl_ms.mean": summary["itl_ms"]["mean"],
        "e2el_ms.p90": summary["e2el_ms"]["p90"],
        "queueing_delay_ms.mean": summary["queueing_delay_ms"]["mean"],
        "per_user_tps.p10": summary["per_user_tps"]["p10"],
        "throughput.output_tok_s": summary["throughput"]["output_tok_s"],
        "throughput.total_tok_s": summary["throughput"]["total_tok_s"],
        "throughput.requests_per_s": summary["throughput"]["requests_per_s"],
        "goodput.requests_per_s": summary["goodput"]["requests_per_s"],
    }
    assert group.runs[0].num_requests == summary["ttft_ms"]["count"]
    for name, value in expected.items():
        got = point_estimate(unit_data(group, metric_spec(name)))
        assert got == pytest.approx(value, rel=1e-9), name


def test_a_baseline_round_trips(tmp_path: Path) -> None:
    folders = [write_fake_run(tmp_path / "runs", seed=s, slo=SLO) for s in range(2)]
    target = tmp_path / "out" / "base.json"
    document = save_baseline(folders, "smoke", target)
    assert json.loads(target.read_text()) == document
    assert document["format"] == "llm-perf-lab/baseline" and document["format_version"] == 1
    assert document["hardware"]["cpu"] == HARDWARE["cpu"] and len(document["runs"]) == 2
    assert document["runs"][0]["summary"]["counts"]["all"]["requests"] == 120
    loaded = load_baseline(target)
    original, _ = load_run_group(folders, "runs")
    assert loaded.label == "baseline smoke" and len(loaded.runs) == 2
    for a, b in zip(loaded.runs, original.runs, strict=True):
        np.testing.assert_allclose(a.ttft_ms, b.ttft_ms, atol=1e-3)
        np.testing.assert_allclose(a.done_s, b.done_s, atol=1e-6)
        assert a.good is not None and b.good is not None and (a.good == b.good).all()
        assert len(a.itl_ms) == len(b.itl_ms)
        np.testing.assert_allclose(np.concatenate(a.itl_ms), np.concatenate(b.itl_ms), atol=1e-3)
    # Lists of numbers stay on one line each (a committed baseline diffs by field).
    assert not re.search(r"^\s*-?[\d.]+,?$", target.read_text(), re.MULTILINE)


def test_dumps_compact_is_json() -> None:
    doc = {"a": [1, 2.5, None], "b": {"c": [[1, 2], []], "d": {}}, "e": [], "f": [{"g": 1}]}
    assert json.loads(dumps_compact(doc)) == doc


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.fixture(scope="module")
def good_document(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("good")
    return save_baseline([write_fake_run(root, seed=3)], "good", root / "b.json")


def broken(document: dict, edit: str) -> object:
    doc = json.loads(json.dumps(document))
    samples = doc["runs"][0]["samples"]
    if edit == "format":
        doc["format"] = "something-else"
    elif edit == "version":
        doc["format_version"] = 99
    elif edit == "no-runs-field":
        del doc["runs"]
    elif edit == "empty-runs":
        doc["runs"] = []
    elif edit == "uneven":
        samples["tpot_ms"] = samples["tpot_ms"][:-1]
    elif edit == "text-in-column":
        samples["ttft_ms"][0] = "fast"
    elif edit == "no-itl":
        del samples["itl_ms"]
    elif edit == "hardware-type":
        doc["hardware"] = "AMD"
    return doc


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("format", "not a baseline file"),
        ("version", "format_version 99 is newer"),
        ("no-runs-field", "missing field 'runs'"),
        ("empty-runs", "'runs' is empty"),
        ("uneven", "differ in length"),
        ("text-in-column", r"runs\[0\].samples.ttft_ms: expected a list of numbers"),
        ("no-itl", "missing field 'itl_ms'"),
        ("hardware-type", "'hardware' must be dict"),
    ],
)
def test_malformed_baselines_are_refused_naming_the_field(
    tmp_path: Path, good_document: dict, edit: str, message: str
) -> None:
    path = write_json(tmp_path / "b.json", broken(good_document, edit))
    with pytest.raises(BaselineError, match=message) as info:
        load_baseline(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object")],
)
def test_unreadable_baselines(tmp_path: Path, content: str, message: str) -> None:
    with pytest.raises(BaselineError, match=message):
        load_baseline(write_json(tmp_path / "b.json", content))
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path / "absent.json")


def test_group_folders_expand_and_mixed_groups_are_refused(tmp_path: Path) -> None:
    group = tmp_path / "group"
    runs = [write_fake_run(group, seed=s) for s in range(2)]
    manifest = {"format": GROUP_FORMAT, "runs": [r.name for r in runs]}
    (group / GROUP_JSON).write_text(json.dumps(manifest))
    assert expand_run_paths([group]) == runs
    loaded, meta = load_run_group([group], "runs")
    assert len(loaded.runs) == 2 and [m["run_id"] for m in meta] == [r.name for r in runs]

    other = write_fake_run(tmp_path / "x", seed=9, hardware={**HARDWARE, "cpu": "Other CPU"})
    with pytest.raises(BaselineError, match=r"differs from run .* in hardware.cpu: 'Fake CPU"):
        load_run_group([*runs, other], "baseline runs")
    with pytest.raises(BaselineError, match=r"lacks run\.json"):
        load_run_group([tmp_path / "x"], "runs")

    (group / GROUP_JSON).write_text('{"format": "nope"}')
    with pytest.raises(BaselineError, match="not a run-group manifest"):
        load_run_group([group], "runs")


def test_the_shipped_smoke_gate_is_consistent() -> None:
    from bench.gate.baseline import workloads
    from bench.scenario.scenario import load_scenario

    here = REPO_ROOT / "benchmarks" / "perf-gate"
    baseline = load_baseline(here / "smoke-baseline.json")
    scenario = load_scenario(here / "smoke.toml").to_dict()
    old, new = workloads([baseline.scenario, scenario])
    assert old == new
    assert len(baseline.runs) >= 3 and all(r.num_requests >= 40 for r in baseline.runs)
    assert baseline.hardware.get("cpu") and baseline.hardware.get("cpu_count_logical")
