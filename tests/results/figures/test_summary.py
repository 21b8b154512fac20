"""compute_summary on hand-built tables whose answers are known."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pandas as pd
import pytest

from perfmodel.files import json_safe
from results.figures.summary import compute_summary, distribution


def _req(request_id: str, **fields: Any) -> dict[str, Any]:
    """One requests.parquet row: an ok request sent at 0 with 1 s of answer, unless overridden."""
    row = {
        "request_id": request_id,
        "user_id": 0,
        "scheduled_s": 0.0,
        "sent_s": 0.0,
        "first_token_s": 0.1,
        "done_s": 1.0,
        "prompt_tokens": 10,
        "output_tokens": 10,
        "status": "ok",
        "error": None,
        "http_status": 200,
        "output_tokens_source": "usage",
    }
    row.update(fields)
    return row


def _frames(
    rows: list[dict[str, Any]], chunks: list[tuple[str, int, float, int]] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    tokens = pd.DataFrame(chunks or [], columns=["request_id", "index", "t_s", "n_tokens"])
    requests = pd.DataFrame(rows, columns=list(_req("").keys()))
    return requests, tokens.astype({"index": "int64", "t_s": "float64", "n_tokens": "int64"})


def test_request_latencies_have_known_values() -> None:
    rows = [
        _req("a", scheduled_s=0.0, sent_s=0.5, first_token_s=1.0, done_s=1.5, output_tokens=6),
        _req("b", first_token_s=0.2, done_s=0.2, output_tokens=1),  # no TPOT: 1 token
    ]
    s = compute_summary(*_frames(rows))
    assert s["ttft_ms"]["count"] == 2
    assert s["ttft_ms"]["max"] == pytest.approx(500.0)
    assert s["ttft_ms"]["min"] == pytest.approx(200.0)
    assert s["tpot_ms"]["count"] == 1 and s["tpot_ms"]["mean"] == pytest.approx(100.0)
    assert s["per_user_tps"]["count"] == 1 and s["per_user_tps"]["p50"] == pytest.approx(10.0)
    assert s["e2el_ms"]["max"] == pytest.approx(1000.0)
    assert s["e2el_from_scheduled_ms"]["max"] == pytest.approx(1500.0)
    assert s["queueing_delay_ms"]["max"] == pytest.approx(500.0)
    assert s["queueing_delay_ms"]["min"] == 0.0


def test_itl_splits_a_multi_token_chunk_and_weights_it() -> None:
    # Chunks at 1.0 (1 token), 1.3 (3 tokens), 1.5 (1 token): the 300 ms gap holds 3 tokens.
    rows = [_req("a", first_token_s=1.0, done_s=1.5, output_tokens=5)]
    chunks = [("a", 0, 1.0, 1), ("a", 1, 1.3, 3), ("a", 2, 1.5, 1)]
    itl = compute_summary(*_frames(rows, chunks))["itl_ms"]
    assert itl["count"] == 4  # one value per token after the first chunk
    assert itl["mean"] == pytest.approx(125.0)  # (100 * 3 + 200) / 4
    assert itl["p50"] == pytest.approx(100.0)
    assert itl["max"] == pytest.approx(200.0)
    assert itl["min"] == pytest.approx(100.0)


def test_itl_is_per_request_skips_empty_chunks_and_failed_requests() -> None:
    rows = [
        _req("a", output_tokens=2),
        _req("b", output_tokens=2, sent_s=5.0, first_token_s=5.1, done_s=6.0),
        _req("c", status="error", error="reset", output_tokens=2),
    ]
    chunks = [
        ("a", 0, 0.1, 1),
        ("a", 1, 0.2, 0),  # carries no token: the gap runs to the next token-bearing chunk
        ("a", 2, 0.4, 1),
        ("b", 0, 5.1, 1),  # the 4.7 s between a's last and b's first chunk is no ITL
        ("b", 1, 5.15, 1),
        ("c", 0, 0.1, 1),
        ("c", 1, 0.9, 1),  # failed request: not in the latency figures
    ]
    itl = compute_summary(*_frames(rows, chunks))["itl_ms"]
    assert itl["count"] == 2
    assert itl["max"] == pytest.approx(300.0)
    assert itl["min"] == pytest.approx(50.0)


def test_percentiles_and_std_match_numpy_linear_and_population_std() -> None:
    values = np.arange(1.0, 101.0)
    stats = distribution(values, (50.0, 99.0, 99.9))
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["p99"] == pytest.approx(99.01)
    assert stats["p99.9"] == pytest.approx(99.901)
    assert stats["std"] == pytest.approx(np.std(values))  # ddof=0, as vLLM
    assert distribution(np.array([np.nan, 2.0]), (50.0,)) == {
        "count": 1,
        "mean": 2.0,
        "std": 0.0,
        "min": 2.0,
        "p50": 2.0,
        "max": 2.0,
    }


def test_window_cuts_warmup_and_cooldown() -> None:
    rows = [
        _req("early", sent_s=0.0, first_token_s=0.5, done_s=2.0, output_tokens=100),
        _req("mid", sent_s=3.0, first_token_s=3.5, done_s=6.0, output_tokens=40),
        _req("late", sent_s=7.0, first_token_s=7.5, done_s=10.0, output_tokens=100),
    ]
    s = compute_summary(*_frames(rows), warmup_s=2.5, cooldown_s=3.0)
    window = s["window"]
    assert (window["run_start_s"], window["run_end_s"]) == (0.0, 10.0)
    assert (window["start_s"], window["end_s"], window["duration_s"]) == (2.5, 7.0, 4.5)
    assert s["counts"]["window"]["requests"] == 1 and s["counts"]["all"]["requests"] == 3
    assert s["tokens"]["output_tokens"] == 40
    assert s["throughput"]["output_tok_s"] == pytest.approx(40 / 4.5)
    assert s["throughput"]["total_tok_s"] == pytest.approx(50 / 4.5)
    assert s["throughput"]["requests_per_s"] == pytest.approx(1 / 4.5)
    assert s["ttft_ms"]["count"] == 1 and s["ttft_ms"]["mean"] == pytest.approx(500.0)

    uncut = compute_summary(*_frames(rows))
    assert uncut["window"]["duration_s"] == 10.0
    assert uncut["throughput"]["output_tok_s"] == pytest.approx(24.0)

    empty = compute_summary(*_frames(rows), warmup_s=6.0, cooldown_s=6.0)
    assert empty["window"]["duration_s"] == 0.0
    assert empty["counts"]["window"]["requests"] == 0
    assert empty["throughput"]["output_tok_s"] is None


def test_failed_requests_are_counted_never_dropped() -> None:
    rows = [
        _req("ok1"),
        _req("e1", status="error", error="HTTP 500: boom", http_status=500, first_token_s=None),
        _req("e2", status="error", error="HTTP 500: boom", http_status=500, first_token_s=None),
        _req("e3", status="error", error=None, http_status=None, first_token_s=None, done_s=None),
        _req("c1", status="cancelled", error="run ended", done_s=0.5),
    ]
    s = compute_summary(*_frames(rows))
    assert s["counts"]["all"] == {
        "requests": 5,
        "ok": 1,
        "error": 3,
        "cancelled": 1,
        "error_rate": 0.6,
    }
    assert s["counts"]["window"]["error"] == 3
    assert s["errors"]["by_message"] == {"HTTP 500: boom": 2, "(no message)": 1}
    assert s["errors"]["by_http_status"] == {"500": 2, "none": 1}
    assert s["ttft_ms"]["count"] == 1 and s["e2el_ms"]["count"] == 1
    # The cancelled request has times and 10 tokens, but only ok requests make latency figures.
    assert s["tpot_ms"]["count"] == 1 and s["per_user_tps"]["count"] == 1
    assert s["tokens"]["output_tokens"] == 10  # only the ok request's tokens
    assert s["throughput"]["requests_per_s"] == pytest.approx(1.0)

    # An error outside the window leaves the window's counts but stays in the whole run's.
    late_error = _req("e4", status="error", sent_s=9.0, done_s=9.5)
    cut = compute_summary(*_frames([*rows, late_error]), warmup_s=0.0, cooldown_s=1.0)
    assert cut["counts"]["all"]["error"] == 4 and cut["counts"]["window"]["error"] == 3


def test_goodput_counts_requests_meeting_every_slo() -> None:
    rows = [
        _req("fast", first_token_s=0.1, done_s=1.0, output_tokens=10),  # TTFT 100, TPOT 100
        _req("slow_ttft", first_token_s=0.3, done_s=1.2, output_tokens=10),  # TTFT 300
        _req("slow_tpot", first_token_s=0.1, done_s=2.0, output_tokens=10),  # TPOT ~211
        _req("one_token", first_token_s=0.15, done_s=0.15, output_tokens=1),  # TPOT counts as 0
        _req("failed", status="error", error="x", first_token_s=None, done_s=0.1),
    ]
    s = compute_summary(*_frames(rows), slo={"ttft_ms": 200.0, "tpot_ms": 150.0, "e2el_ms": None})
    goodput = s["goodput"]
    assert goodput["slo"] == {"ttft_ms": 200.0, "tpot_ms": 150.0}
    assert goodput["good_requests"] == 2
    assert goodput["requests_per_s"] == pytest.approx(2 / 2.0)
    assert goodput["good_fraction"] == pytest.approx(2 / 5)

    at_limit = compute_summary(*_frames(rows[:1]), slo={"e2el_ms": 1000.0})
    assert at_limit["goodput"]["good_requests"] == 1  # equal to the SLO meets it, as in vLLM

    none = compute_summary(*_frames(rows))["goodput"]
    assert none == {"slo": {}, "good_requests": None, "requests_per_s": None, "good_fraction": None}


def test_output_token_source_is_reported() -> None:
    rows = [_req("a"), _req("b", output_tokens_source="tokenizer")]
    s = compute_summary(*_frames(rows))
    assert s["tokens"]["output_tokens_source"] == "mixed"
    assert s["tokens"]["requests_by_output_tokens_source"] == {"tokenizer": 1, "usage": 1}
    assert compute_summary(*_frames(rows[:1]))["tokens"]["output_tokens_source"] == "usage"
    legacy = pd.DataFrame(rows).drop(columns="output_tokens_source")
    assert compute_summary(legacy, _frames([])[1])["tokens"]["output_tokens_source"] == "unknown"


def test_empty_run_is_json_safe() -> None:
    s = compute_summary(*_frames([]))
    json.dumps(s, allow_nan=False)
    assert s["counts"]["all"]["requests"] == 0 and s["counts"]["all"]["error_rate"] is None
    assert s["ttft_ms"] == {"count": 0} | dict.fromkeys(
        ["mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max"]
    )
    assert s["throughput"]["output_tok_s"] is None


def test_row_order_does_not_change_the_summary() -> None:
    rng = np.random.default_rng(0)
    rows = [
        _req(f"r{i}", sent_s=i * 0.1, first_token_s=i * 0.1 + rng.random(), done_s=i * 0.1 + 3)
        for i in range(30)
    ]
    chunks = [(f"r{i}", j, i * 0.1 + 1 + j * rng.random(), 1) for i in range(30) for j in range(5)]
    requests, tokens = _frames(rows, chunks)
    expected = compute_summary(requests, tokens, 0.5, 0.5, {"ttft_ms": 600})
    shuffled = compute_summary(
        requests.sample(frac=1, random_state=1),
        tokens.sample(frac=1, random_state=2),
        0.5,
        0.5,
        {"ttft_ms": 600},
    )
    assert shuffled == expected
    assert json.loads(json.dumps(expected)) == expected


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r, t: (r.drop(columns="sent_s"), t), "requests: missing columns sent_s"),
        (lambda r, t: (r.assign(status="done"), t), "unknown status ['done']"),
        (lambda r, t: (pd.concat([r, r]), t), "duplicate request_id 'a'"),
        (lambda r, t: (r, t.drop(columns="n_tokens")), "tokens: missing columns n_tokens"),
    ],
)
def test_bad_tables_are_rejected(mutate: Any, message: str) -> None:
    requests, tokens = mutate(*_frames([_req("a")]))
    with pytest.raises(ValueError, match=re.escape(message)):
        compute_summary(requests, tokens)


def test_bad_slo_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        compute_summary(*_frames([_req("a")]), slo={"ttft": 1.0})
    with pytest.raises(ValueError, match="must be > 0"):
        compute_summary(*_frames([_req("a")]), slo={"ttft_ms": 0})


def test_json_safe_cleans_numpy_and_non_finite_values() -> None:
    data = {"a": np.float64("nan"), "b": np.int64(3), "c": (1.0, math.inf), 4: np.bool_(True)}
    assert json_safe(data) == {"a": None, "b": 3, "c": [1.0, None], "4": True}
    with pytest.raises(TypeError, match="cannot write object"):
        json_safe({"x": object()})


def test_report_renders_figures_and_errors() -> None:
    from rich.console import Console

    from bench.run.end.report import render_summary

    rows = [_req("a"), _req("e", status="error", error="HTTP 500: boom", first_token_s=None)]
    console = Console(record=True, width=140)
    render_summary(compute_summary(*_frames(rows), slo={"ttft_ms": 200.0}), console)
    text = console.export_text()
    for part in ("TTFT", "ITL", "TPOT", "E2EL", "p99.9", "Per-user TPS", "Goodput", "boom"):
        assert part in text
    assert "100.00" in text  # TTFT of the ok request, ms
    render_summary(compute_summary(*_frames([])), console)  # an empty run renders too
    render_summary(None, console)
    assert "no summary.json" in console.export_text()
