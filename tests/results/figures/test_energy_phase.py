"""Energy by phase (results.figures.energy_phase), through summarize_run on a folder the test
writes:
GPU power known to the joule, steps known to the millisecond."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfmodel.presets import TINY
from perfmodel.roofline import Batch, Precision
from results.figures.energy_phase import energy_by_phase, energy_phase_line
from results.folder.engine_steps import STEP_COUNT_COLUMNS
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder, load_run
from results.run_summary import summarize_run
from tests.support.run_json import fake_run_json

FP32 = Precision("fp32", "fp32", "fp32")
ANALYTIC = {"model_config": TINY.to_dict(), "precision": FP32.to_dict(), "tp": 1, "roofs": None}


def step_row(i: int, start: float, duration: float, chunks: list[tuple[int, int]]) -> dict:
    decodes = [c for c in chunks if c[0] == 1]
    prefills = [c for c in chunks if c[0] > 1]
    row = dict.fromkeys(STEP_COUNT_COLUMNS, 0)
    row.update(
        step=i, start_s=start, end_s=start + duration, forward_s=duration,
        num_seqs=len(chunks), num_prefill_seqs=len(prefills), num_decode_seqs=len(decodes),
        num_prefill_tokens=sum(q for q, _ in prefills), num_decode_tokens=len(decodes),
        context_tokens=sum(c for _, c in chunks), decode_context_tokens=sum(c for _, c in decodes),
        attn_pairs=Batch.from_chunks(chunks).attn_pairs,
    )  # fmt: skip
    return row


def steps() -> pd.DataFrame:
    # A 20 ms prefill of two 40-token prompts, then five 10 ms decodes of both; idle after 70 ms.
    rows = [step_row(0, 0.0, 0.02, [(40, 40), (40, 40)])]
    rows += [step_row(1 + i, 0.02 + 0.01 * i, 0.01, [(1, 41 + i), (1, 41 + i)]) for i in range(5)]
    return pd.DataFrame(rows)


def energy_samples() -> pd.DataFrame:
    # 200 W until 50 ms, then 400 W: a counter of 0, 10 and 30 J; two GPUs sharing it half each.
    rows = []
    for t, joules in ((0.0, 0.0), (0.05, 10.0), (0.1, 30.0)):
        for gpu in ("0", "1"):
            rows.append((t, "nvml", "energy_j", 5000.0 + joules / 2, f'{{"gpu":"{gpu}"}}'))
    return pd.DataFrame(rows, columns=["t_s", "source", "name", "value", "labels"])


WINDOW = {"start_s": 0.0, "end_s": 0.1, "duration_s": 0.1}


def test_joules_split_by_the_steps_time() -> None:
    split = energy_by_phase(energy_samples(), steps(), ANALYTIC, WINDOW, 10.0)
    assert split["available"] and split["steps"] == 6
    assert split["joules"] == pytest.approx(30.0)
    # Prefill: 20 ms at 200 W. Decode: 30 ms at 200 W and 20 ms at 400 W. The rest is idle.
    assert split["prefill_j"] == pytest.approx(4.0)
    assert split["decode_j"] == pytest.approx(14.0)
    assert split["idle_j"] == pytest.approx(12.0)
    assert split["prefill_tokens"] == 80 and split["decode_tokens"] == 10
    assert split["joules_per_prefill_token"] == pytest.approx(0.05)
    assert split["joules_per_decode_token"] == pytest.approx(1.4)
    assert split["mean_power_w"] == pytest.approx(300.0)
    assert split["good_requests_per_joule"] == pytest.approx(10.0 / 300.0)
    line = energy_phase_line(split)
    assert line is not None and "prefill 0.05 J/token, decode 1.4 J/token" in line


def test_without_energy_steps_or_window_it_says_why() -> None:
    no_energy = energy_samples().assign(name="power_w")
    assert (
        "energy readings" in energy_by_phase(no_energy, steps(), ANALYTIC, WINDOW, None)["reason"]
    )
    assert "steps" in energy_by_phase(energy_samples(), None, ANALYTIC, WINDOW, None)["reason"]
    assert "window" in energy_by_phase(energy_samples(), steps(), ANALYTIC, {}, None)["reason"]
    assert "model shape" in energy_by_phase(energy_samples(), steps(), {}, WINDOW, None)["reason"]


def test_summary_json_carries_it(tmp_path: Path) -> None:
    folder = RunFolder.create(tmp_path, "energy", "reference")
    records = []
    for rid in ("a", "b"):
        chunks = [ChunkRecord(rid, k, 0.02 + 0.01 * k, 1) for k in range(6)]
        records.append(RequestRecord(rid, 0, 0.0, 0.0, 0.02, 0.07, 40, 6, "usage", "ok", None,
                                     200, chunks=chunks))  # fmt: skip
    folder.write_requests(records)
    folder.write_tokens(records)
    folder.write_steps(steps())
    folder.write_samples(energy_samples())
    folder.write_run_json(fake_run_json(
        folder.run_id, scenario={"warmup_s": 0.0, "cooldown_s": 0.0, "slo": {"ttft_ms": 100.0}},
        analytic=ANALYTIC,
    ))  # fmt: skip
    summary = summarize_run(load_run(folder.path))
    split = summary["energy_by_phase"]
    assert split["available"] and split["prefill_j"] == pytest.approx(4.0)
    # Both requests met the TTFT SLO: goodput per watt is that rate over the mean power.
    good = summary["goodput"]["requests_per_s"]
    assert good and split["good_requests_per_joule"] == pytest.approx(good / split["mean_power_w"])
