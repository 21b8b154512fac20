"""A run that sent several models: each request's model, and the figures per model
(results.figures.models)."""

from __future__ import annotations

import pandas as pd
import pytest

from results.figures.models import model_names, model_section
from results.folder.endpoints import fill_models
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from tests.support.paths import TEST_FIXTURES

OLD_RUN = TEST_FIXTURES / "run-folder-v0"


def test_a_folder_from_before_models_names_its_one_model_on_every_request() -> None:
    assert "model" not in pd.read_parquet(OLD_RUN / "requests.parquet").columns
    run = load_run(OLD_RUN)
    assert (run.requests["model"] == run.run_json["engine"]["model"]).all()
    assert "models" not in summarize_run(run)


def requests(models: list[str | None]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One request after another, each of 4 one-token chunks; model ``b``'s twice as slow."""
    rows, chunks = [], []
    for i, model in enumerate(models):
        scale = 2.0 if model == "b" else 1.0
        sent, rid = 0.1 * i, f"r{i:03d}"
        first = sent + 0.02 * scale
        rows.append(
            dict(
                request_id=rid, user_id=0, scheduled_s=sent, sent_s=sent, first_token_s=first,
                done_s=first + 0.03 * scale, prompt_tokens=8, output_tokens=4,
                output_tokens_source="usage", status="ok", error=None, http_status=200,
                model=model,
            )
        )  # fmt: skip
        chunks += [
            dict(request_id=rid, index=k, t_s=first + 0.01 * k * scale, n_tokens=1)
            for k in range(4)
        ]
    return pd.DataFrame(rows), pd.DataFrame(chunks)


def test_each_model_has_the_run_figures_in_the_scenarios_order_then_the_others() -> None:
    req, tok = requests(["a", "b", "a", "c", "b", None])
    run_json = {
        "engine": {"model": "a"},
        "scenario": {"models": [{"name": "b", "share": 1.0}, {"name": "a", "share": 3.0}]},
    }
    req = fill_models(req, run_json)  # the request cut before it was sent: the run's model
    assert model_names(req, run_json) == ["b", "a", "c"]
    window = {"run_start_s": 0.0, "run_end_s": 1.0}
    section = model_section(req, tok, run_json, window)
    assert section is not None
    by_model = section["by_model"]
    assert list(by_model) == ["b", "a", "c"]
    assert [by_model[m]["counts"]["all"]["requests"] for m in by_model] == [2, 3, 1]
    assert [by_model[m]["share"] for m in by_model] == pytest.approx([2 / 6, 3 / 6, 1 / 6])
    assert by_model["b"]["planned_share"] == 0.25 and by_model["a"]["planned_share"] == 0.75
    assert by_model["c"]["planned_share"] is None
    assert by_model["b"]["tpot_ms"]["p50"] == pytest.approx(2 * by_model["a"]["tpot_ms"]["p50"])
    # One model: no section.
    one, one_tok = requests(["a", "a"])
    assert model_section(one, one_tok, {"scenario": {}}, window) is None
