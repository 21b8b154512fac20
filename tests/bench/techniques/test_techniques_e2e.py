"""`bench techniques --quick` end to end on the tiny preset, for the two rows whose switches are
new (kv_cache off, naive attention): each runs through bench ablate's machinery against fresh
engines, is predicted on the four simulated GPUs, and lands in techniques.json, the terminal
table and the HTML page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.techniques.predictions import DEVICES
from bench.techniques.reasons import place
from results.folder.run_folder import load_run

ROWS = ("kv_cache", "flash_attention")


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    runs = tmp_path_factory.mktemp("runs")
    only = [a for row in ROWS for a in ("--only", row)]
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "techniques", "--quick", *only, "--runs-dir", str(runs)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (path,) = runs.glob("*-techniques-quick/techniques.json")
    return proc, path


def _doc(ran: tuple[Any, Path]) -> dict[str, Any]:
    return json.loads(ran[1].read_text())


def test_json_shape(ran: tuple[Any, Path]) -> None:
    doc = _doc(ran)
    assert doc["kind"] == "techniques" and doc["quick"] is True
    assert doc["devices"] == [d.label for d in DEVICES]
    assert [r["technique"] for r in doc["rows"]] == list(ROWS)
    for row in doc["rows"]:
        assert row["measured"]["value"] > 0
        assert len(row["predictions"]) == len(DEVICES)
        assert all(p["value"] > 0 for p in row["predictions"])
        assert set(row["text"]) == {"claimed", "measured", "quality", "predicted", "reason"}
        # Both rows' techniques are exact: float32 tokens identical to the technique off.
        assert row["quality"]["kind"] == "exact" and row["quality"]["right"], row["quality"]
        assert row["text"]["quality"].startswith("right (exact)")
        assert len(row["text"]["predicted"]) == len(DEVICES)
        # A reason is given exactly where a figure falls outside the claimed range.
        low, high = row["claimed"]
        values = [row["measured"]["value"], *(p["value"] for p in row["predictions"])]
        assert (row["reason"] is None) == all(place(v, low, high) == "within" for v in values)
        assert Path(row["ablation"]).is_file()


def test_kv_cache_off_recomputes_and_naive_attention_ran(ran: tuple[Any, Path]) -> None:
    kv, flash = _doc(ran)["rows"]
    off, on = (load_run(Path(p)) for p in kv["measured"]["runs"])
    assert off.run_json["engine"]["settings"]["kv_cache"] is False
    assert off.steps is not None and on.steps is not None
    assert off.steps["num_decode_tokens"].sum() == 0  # every step is a recompute
    assert on.steps["num_decode_tokens"].sum() > 0
    # Recomputing token i costs a prefill of prompt + i tokens: more than the prompts alone.
    ok = off.requests[off.requests["status"] == "ok"]
    assert off.steps["num_prefill_tokens"].sum() > ok["prompt_tokens"].sum()
    naive, fused = (load_run(Path(p)) for p in flash["measured"]["runs"])
    assert naive.run_json["engine"]["description"]["attention_backend"] == "naive"
    assert fused.run_json["engine"]["description"]["attention_backend"] in ("native", "torch")
    assert flash["predictions"][0]["how"].startswith("attention roofline")


def test_terminal_table(ran: tuple[Any, Path]) -> None:
    out = ran[0].stdout
    assert "What each optimization buys (--quick)" in out
    assert "KV cache" in out and "Flash Attention" in out
    assert "techniques.json" in out and "techniques.html" in out


def test_page_is_written_beside_the_json(ran: tuple[Any, Path]) -> None:
    """(tests/dashboards/pages/test_browser.py opens the page in the browser.)"""
    html = ran[1].with_name("techniques.html").read_text()
    assert "What each optimization buys" in html and "KV cache" in html
    assert "Flash Attention" in html and "Plotly.newPlot" in html
