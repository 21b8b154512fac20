"""Every table bench prints stays whole at 80 columns: no cell cut ("…"), no column dropped."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from bench.cli.dashboards import deltas_table
from bench.experiments.ablate import render_ablation
from bench.experiments.ablation_metrics import ABLATION_COLUMNS
from bench.experiments.sweep import SweepPoint, SweepResult
from bench.gate.report import render_gate
from bench.gate.verdict import GateReport, MetricResult
from bench.run.end.report import render_summary
from bench.run.live import LiveDisplay
from bench.run.terminal import fit_table, print_table
from results.figures.summary import LATENCY_PERCENTILES, TPS_PERCENTILES
from results.folder.records import RequestRecord

REPO = Path(__file__).resolve().parents[3]
WIDE = 12_345.67  # a figure as wide as a long-context run's ITL max in ms


def _console(width: int = 80) -> Console:
    return Console(width=width, record=True, color_system=None)


def _assert_whole(text: str, *expected: str) -> None:
    assert "…" not in text, text
    for line in text.splitlines():
        assert len(line.rstrip()) <= 80, line
    for item in expected:
        assert item in text, f"{item!r} missing from:\n{text}"


def _stats(value: float) -> dict[str, Any]:
    keys = ["mean", "std", "min", "max", *(f"p{p:g}" for p in LATENCY_PERCENTILES)]
    keys += [f"p{p:g}" for p in TPS_PERCENTILES]
    return {"count": 123_456, **dict.fromkeys(keys, value)}


def _summary(value: float = WIDE) -> dict[str, Any]:
    latencies = ("ttft_ms", "itl_ms", "tpot_ms", "e2el_ms", "e2el_from_scheduled_ms")
    summary: dict[str, Any] = {key: _stats(value) for key in (*latencies, "queueing_delay_ms")}
    summary["per_user_tps"] = _stats(value)
    summary["reasoning"] = {
        "reasoning_tokens": 1_234_567,
        "answer_tokens": 7_654_321,
        "reasoning_share": 0.14,
        "requests_with_reasoning": 1_000,
        "time_to_first_answer_token_ms": _stats(value),
        "answer_tpot_ms": _stats(value),
    }
    summary["throughput"] = {"output_tok_s": value, "total_tok_s": value, "requests_per_s": value}
    summary["counts"] = {
        scope: {"requests": 123_456, "ok": 123_456, "error": 0, "cancelled": 0, "error_rate": 0}
        for scope in ("window", "all")
    }
    return summary


def test_a_table_too_wide_is_stacked_with_its_keys_in_every_part() -> None:
    table = Table(title="wide")
    table.add_column("metric")
    headers = [f"column {i}" for i in range(12)]
    for header in headers:
        table.add_column(header, justify="right")
    table.add_row("TTFT", *(f"{WIDE + i:,.2f}" for i in range(12)))
    console = _console()
    parts = fit_table(table, console)
    assert len(parts) > 1
    assert all(part.columns[0].header == "metric" for part in parts)
    assert [c.header for part in parts for c in part.columns[1:]] == headers
    for part in parts:
        console.print(part)
    _assert_whole(console.export_text(), *headers, *(f"{WIDE + i:,.2f}" for i in range(12)))


def test_a_table_that_fits_is_printed_as_is() -> None:
    table = Table("a", "b")
    table.add_row("1", "2")
    assert fit_table(table, _console()) == [table]


def test_the_run_summary_fits_80_columns() -> None:
    console = _console()
    render_summary(_summary(), console)
    headers = [f"p{p:g}" for p in LATENCY_PERCENTILES] + ["mean", "std", "max", "min"]
    _assert_whole(console.export_text(), *headers, f"{WIDE:,.2f}", "Reasoning", "Answer TPOT")


def test_the_gate_report_fits_80_columns() -> None:
    result = MetricResult(
        metric="ttft_p99_ms", unit="ms", higher_is_better=False, max_regression_pct=5.0,
        limit_text="+5.0%", verdict="fail", reason="slower", baseline=WIDE, candidate=WIDE * 2,
        change_pct=100.0, ci_low_pct=95.5, ci_high_pct=104.5, samples_baseline=12_345,
        samples_candidate=12_345,
    )  # fmt: skip
    report = GateReport(
        "fail", (result,), (), 0.95, 2000, 0, "baseline-main", ("run-1",), 3, "gate.toml"
    )
    console = _console()
    render_gate(report, console)
    headers = ("metric", "baseline", "candidate", "change", "CI", "allowed", "n (base/cand)")
    _assert_whole(console.export_text(), *headers, "verdict", "ttft_p99_ms [ms]")


def test_the_sweep_table_shows_whole_run_folder_names() -> None:
    folder = Path("runs/20261201T074512Z-100-users-reference-u128")
    figures = {
        "per_user_tps_p50": WIDE, "per_user_tps_p10": WIDE, "output_tok_s": WIDE,
        "ttft_p99_ms": WIDE, "tpot_p99_ms": WIDE, "error_rate": 0.0, "client_bound": False,
    }  # fmt: skip
    result = SweepResult("100-users", "users", [SweepPoint(128, folder, figures, [])])
    from bench.cli.sweep import render_sweep

    console = _console()
    render_sweep(result, console)
    headers = ("users", "per-user TPS p50", "p10", "out tok/s", "TTFT p99 ms", "TPOT p99 ms")
    _assert_whole(console.export_text(), *headers, "client-bound", "SLO", folder.name)


def _ablation_value(unit: str) -> float | int:
    return {"bytes": 1.5e9, "fraction": 0.5, "requests": 123_456}.get(unit, WIDE)


@pytest.mark.parametrize("width", [80, 120])
def test_the_ablation_table_keeps_every_column(tmp_path: Path, width: int) -> None:
    columns = [{"key": k, "title": t, "unit": u} for k, t, u in ABLATION_COLUMNS]
    rows = [
        {
            "label": f"batching={name},max_num_seqs=256",
            "run": str(tmp_path / name),
            **{c["key"]: _ablation_value(c["unit"]) for c in columns},
            "ratios": {c["key"]: 1.25 for c in columns},
        }
        for name in ("continuous", "static")
    ]
    path = tmp_path / "ablation.json"
    path.write_text(
        json.dumps({"scenario": {"name": "100-users"}, "columns": columns, "rows": rows})
    )
    console = _console(width)
    render_ablation(path, console)
    text = console.export_text()
    assert "…" not in text
    for title in (c["title"] for c in columns):
        assert all(word in text for word in title.split()), title
    assert text.count("×1.25") == len(columns)  # the second row's ratio in every column


def test_the_compare_table_fits_80_columns() -> None:
    labels = ["20261201T074512Z-1-user-reference", "20261201T081010Z-1-user-vllm"]
    table = deltas_table([_summary(), _summary(WIDE * 2)], labels)
    console = _console()
    print_table(console, table)
    _assert_whole(console.export_text(), "Output throughput", "+100.0%", f"{WIDE * 2:,.0f}")


def _bench(*args: str, cwd: Path) -> str:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_roofline_and_capacity_fit_80_columns(tmp_path: Path) -> None:
    out = _bench("roofline", "--model", "llama-3-70b", "--gpu", "h100-sxm", cwd=tmp_path)
    _assert_whole(out, "tok/s per user", "time ms", "bound", "weights GB")
    out = _bench("capacity", "--model", "llama-3-70b", "--gpu", "h100-sxm", cwd=tmp_path)
    _assert_whole(out, "max users at 4,096 tokens", "KV memory left per GPU")


def test_calibrate_fits_80_columns(tmp_path: Path) -> None:
    out = _bench("calibrate", "--seconds", "0.05", "--no-gpu", "--output", "cal.json", cwd=tmp_path)
    _assert_whole(out, "matmul FLOP/s by dtype", "triad bytes/s", "GB/s")


def test_bench_run_at_80_columns_cuts_no_cell(tmp_path: Path) -> None:
    """The issue's check, verbatim: ``COLUMNS=80 bench run --scenario 1-user --no-live``."""
    out = _bench("run", "--scenario", "1-user", "--no-live", cwd=tmp_path)
    _assert_whole(out, "p99.9", "Per-user TPS", "run folder:")


def test_the_live_rate_forgets_old_records_without_a_terminal() -> None:
    # Nothing draws a display without a terminal; the records it rates must not pile up.
    display = LiveDisplay(Console(file=io.StringIO()), total=None, duration_s=None)
    assert not display.enabled
    record = RequestRecord("r", 0, 0.0, 0.0, 0.1, 0.2, 8, 4, "usage", "ok", None, 200)
    for _ in range(100):
        display.on_record(record)
    assert len(display._recent) == 100  # all within the rate's window
    display._recent = type(display._recent)((t - 60.0, n) for t, n in display._recent)
    display.on_record(record)
    assert len(display._recent) == 1


@pytest.mark.parametrize(
    ("gpus", "nvml_said", "expected"),
    [
        # No GPU: the probes' start line said it (no GPU readings and no energy figures).
        ([], True, None),
        # The same summary read back later (`bench report`): one line.
        ([], False, "no energy figures, per token or by phase: no GPU readings (NVML)"),
        # A GPU without an energy counter: one line with the reason, whatever was said before.
        (["0"], True, "no energy figures, per token or by phase: no NVML energy readings"),
    ],
)
def test_a_run_without_energy_says_so_once(
    gpus: list[str], nvml_said: bool, expected: str | None
) -> None:
    summary = _summary()
    reason = "no NVML energy readings in the window"
    summary["probes"] = {"available": True, "energy": {"available": False, "reason": reason},
                         "gpu": {"gpus": gpus} if gpus else {"power_w": None}}  # fmt: skip
    summary["energy_by_phase"] = {"available": False, "reason": "fewer than two NVML readings"}
    console = Console(width=200, record=True, color_system=None)
    render_summary(summary, console, nvml_said=nvml_said)
    lines = [ln for ln in console.export_text().splitlines() if "energy" in ln.lower()]
    assert lines == ([] if expected is None else [ln for ln in lines if expected in ln]), lines
    assert len(lines) == (0 if expected is None else 1), lines
