"""A pooling run's summary (embeddings, rerank): no token figures, absent rather than zero,
and its own latency, requests, inputs and input tokens per second, with known values; the
terminal and the run page show only what is there."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd
from rich.console import Console

from bench.run.end.report import render_summary
from dashboards.figures.headline import headline_tiles
from results.figures.summary import compute_summary
from results.figures.workloads.pooling import TOKEN_FIGURES
from results.schema import check_summary_json


def _row(request_id: str, sent_s: float, done_s: float, **fields: Any) -> dict[str, Any]:
    row = {
        "request_id": request_id, "user_id": 0, "scheduled_s": sent_s, "sent_s": sent_s,
        "first_token_s": None, "done_s": done_s, "prompt_tokens": 30, "output_tokens": 0,
        "output_tokens_source": "usage", "status": "ok", "error": None, "http_status": 200,
        "inputs": 3,
    }  # fmt: skip
    row.update(fields)
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    requests = pd.DataFrame(rows)
    requests["first_token_s"] = requests["first_token_s"].astype("float64")
    tokens = pd.DataFrame({"request_id": [], "index": [], "t_s": [], "n_tokens": []}).astype(
        {"index": "int64", "t_s": "float64", "n_tokens": "int64"}
    )
    return dict(compute_summary(requests, tokens, slo={"e2el_ms": 150.0}))


ROWS = [
    _row("a", 0.0, 0.1),
    _row("b", 0.5, 0.7, prompt_tokens=24),
    _row("c", 1.0, 2.0),
    _row("d", 1.5, 1.6, status="error", error="HTTP 400: no"),
]


def test_a_pooling_run_has_no_token_figures_and_its_own() -> None:
    summary = _summary(ROWS)
    for name in TOKEN_FIGURES:
        assert name not in summary
    assert summary["throughput"]["output_tok_s"] is None
    pooling = summary["pooling"]
    # The window is 0 .. 2 s; three ok requests of 3 inputs, 30 + 24 + 30 input tokens.
    assert pooling["requests"] == 3 and pooling["inputs"] == 9
    assert pooling["input_tokens"] == 84 and pooling["inputs_per_request"] == 3
    assert pooling["requests_per_s"] == 1.5 and pooling["inputs_per_s"] == 4.5
    assert pooling["input_tok_s"] == 42.0
    assert pooling["latency_ms"] == summary["e2el_ms"]
    assert summary["e2el_ms"]["count"] == 3 and summary["e2el_ms"]["max"] == 1000.0
    assert summary["goodput"]["good_requests"] == 1  # 100 ms; 200 ms and 1 s miss 150 ms
    check_summary_json({**summary}, "test")


def test_a_generation_run_has_no_pooling_section() -> None:
    rows = [_row("a", 0.0, 1.0, first_token_s=0.2, output_tokens=5, inputs=None)]
    summary = _summary(rows)
    assert "pooling" not in summary and summary["ttft_ms"]["count"] == 1


def test_the_terminal_shows_inputs_and_no_ttft() -> None:
    out = io.StringIO()
    render_summary(_summary(ROWS), Console(file=out, width=160))
    text = out.getvalue()
    assert "Input throughput" in text and "4.50 inputs/s" in text and "42.00 tok/s" in text
    rows = {line.split()[0] for line in text.splitlines() if line.split()}
    assert "E2EL" in rows and not {"TTFT", "ITL", "TPOT"} & rows
    assert "Per-user TPS (" not in text and "Output throughput" not in text
    assert "nothing is generated, so there is no TTFT" in text


def test_the_headline_shows_inputs_and_no_token_tiles() -> None:
    keys = [tile.key for tile in headline_tiles(_summary(ROWS))]
    assert {"requests_per_s", "inputs_per_s", "input_tok_s", "e2el_ms"} <= set(keys)
    assert not {"ttft_ms", "itl_ms", "tpot_ms", "per_user_tps", "output_tok_s"} & set(keys)
