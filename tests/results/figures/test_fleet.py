"""A fleet run's folder: each request's endpoint, and the figures per endpoint
(results.figures.fleet)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from results.figures.fleet import endpoint_section
from results.figures.summary import compute_summary
from results.folder.endpoints import fill_endpoints, fleet_endpoints
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from tests.support.paths import TEST_FIXTURES

OLD_RUN = TEST_FIXTURES / "run-folder-v0"
FAST, SLOW = "http://127.0.0.1:8001", "http://127.0.0.1:8002"


def test_a_folder_from_before_fleets_names_its_one_engine_on_every_request() -> None:
    assert not {"endpoint"} & set(pd.read_parquet(OLD_RUN / "requests.parquet").columns)
    run = load_run(OLD_RUN)
    url = run.run_json["engine"]["url"].rstrip("/")
    assert fleet_endpoints(run.run_json) == [url]
    assert (run.requests["endpoint"] == url).all()
    # One endpoint: no per-endpoint section, the summary as it was.
    assert "endpoints" not in summarize_run(run)


def _requests(endpoints: list[str], slow_factor: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Requests one after another per endpoint; ``SLOW``'s take ``slow_factor`` times longer."""
    rows, chunks = [], []
    for i, endpoint in enumerate(endpoints):
        scale = slow_factor if endpoint == SLOW else 1.0
        sent = 0.1 * i
        first = sent + 0.05 * scale
        done = first + 0.2 * scale
        rid = f"r{i:03d}"
        rows.append(
            dict(
                request_id=rid, user_id=i % 4, scheduled_s=sent, sent_s=sent,
                first_token_s=first, done_s=done, prompt_tokens=10, output_tokens=5,
                output_tokens_source="usage", status="ok" if i != 3 else "error",
                error=None if i != 3 else "boom", http_status=200 if i != 3 else 500,
                endpoint=endpoint,
            )
        )  # fmt: skip
        for k in range(5):
            chunks.append(dict(request_id=rid, index=k, t_s=first + k * 0.05 * scale, n_tokens=1))
    return pd.DataFrame(rows), pd.DataFrame(chunks)


def test_each_endpoint_has_the_run_figures_over_the_run_window() -> None:
    endpoints = [FAST, SLOW] * 5 + [FAST] * 2
    requests, tokens = _requests(endpoints, slow_factor=3.0)
    run_json = {"engine": {"url": FAST, "endpoints": [FAST, SLOW], "route": "round-robin"},
                "scenario": {}}  # fmt: skip
    total = compute_summary(requests, tokens)
    section = endpoint_section(requests, tokens, run_json, total["window"])
    assert section is not None and section["route"] == "round-robin"
    parts = section["by_endpoint"]
    assert list(parts) == [FAST, SLOW]
    assert parts[FAST]["share"] == pytest.approx(7 / 12)
    assert parts[SLOW]["share"] == pytest.approx(5 / 12)
    for name in ("requests", "ok", "error"):
        assert sum(p["counts"]["all"][name] for p in parts.values()) == total["counts"]["all"][name]
    assert parts[SLOW]["counts"]["all"]["error"] == 1  # request r003 went to SLOW
    assert parts[SLOW]["errors"]["by_message"] == {"boom": 1}
    for key in ("output_tok_s", "requests_per_s"):
        assert sum(p["throughput"][key] for p in parts.values()) == pytest.approx(
            total["throughput"][key]
        )
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2el_ms"):
        assert parts[SLOW][key]["p50"] == pytest.approx(3 * parts[FAST][key]["p50"]), key


def test_one_endpoint_has_no_section_and_nulls_are_only_filled_for_one(tmp_path: Path) -> None:
    requests, tokens = _requests([FAST] * 3, slow_factor=1.0)
    one = {"engine": {"url": FAST + "/"}}
    assert (
        endpoint_section(requests, tokens, one, compute_summary(requests, tokens)["window"]) is None
    )
    requests["endpoint"] = None
    assert (fill_endpoints(requests, one)["endpoint"] == FAST).all()
    # A fleet's request that reached no replica (cut before it was sent) keeps no endpoint.
    fleet = {"engine": {"url": FAST, "endpoints": [FAST, SLOW]}}
    assert fill_endpoints(requests, fleet)["endpoint"].isna().all()
    copied = Path(shutil.copytree(OLD_RUN, tmp_path / "old"))
    assert load_run(copied).requests["endpoint"].notna().all()
