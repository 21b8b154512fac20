"""Attribution and probe figures in summary.json, from a run folder the test writes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfmodel.presets import TINY
from perfmodel.roofline import Batch, CostModel, Precision
from results.figures.samples_summary import histogram_quantile
from results.folder.engine_steps import STEP_COUNT_COLUMNS
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder, load_run
from results.run_summary import summarize_run
from tests.support.run_json import fake_run_json

FP32 = Precision("fp32", "fp32", "fp32")
# Roofs with a ridge of 5 FLOP/B: in fp32, tiny's 80-token prefill (about 16 FLOP/B: the
# weights dominate) and the 32-token mixed step (about 9) are compute-bound, its two-sequence
# decodes (about 1) memory-bound.
ROOFS = {"name": "test roofs", "source": "test", "compute_dtype": "fp32",
         "flops_per_s": 50e9, "bytes_per_s": 10e9, "ridge_flop_per_byte": 5.0}  # fmt: skip
# Steps as (start_s, duration_s, [(new tokens, context after), ...]), decodes (q=1) first.
STEPS = [
    (0.000, 0.020, [(40, 40), (40, 40)]),
    *((0.020 + 0.01 * i, 0.010, [(1, 41 + i), (1, 41 + i)]) for i in range(5)),
    (0.070, 0.030, [(1, 46), (1, 46), (30, 30)]),
]


def steps_frame() -> pd.DataFrame:
    rows = []
    for i, (start, duration, chunks) in enumerate(STEPS):
        decodes = [c for c in chunks if c[0] == 1]
        prefills = [c for c in chunks if c[0] > 1]
        row = dict.fromkeys(STEP_COUNT_COLUMNS, 0)
        row.update(
            step=i, start_s=start, end_s=start + duration, forward_s=duration * 0.9,
            num_seqs=len(chunks), num_prefill_seqs=len(prefills), num_decode_seqs=len(decodes),
            num_prefill_tokens=sum(q for q, _ in prefills),
            num_decode_tokens=len(decodes), context_tokens=sum(c for _, c in chunks),
            decode_context_tokens=sum(c for _, c in decodes),
            attn_pairs=Batch.from_chunks(chunks).attn_pairs,
        )  # fmt: skip
        rows.append(row)
    return pd.DataFrame(rows)


def record(
    rid: str, sent: float, first: float, done: float, prompt: int, out: int
) -> RequestRecord:
    times = [first + (done - first) * k / max(out - 1, 1) for k in range(out)]
    chunks = [ChunkRecord(rid, k, t, 1) for k, t in enumerate(times)]
    return RequestRecord(rid, 0, sent, sent, first, done, prompt, out, "usage", "ok", None, 200,
                         chunks)  # fmt: skip


def samples() -> pd.DataFrame:
    rows = []
    for t, e0, e1 in ((0.0, 1000.0, 500.0), (0.05, 1010.0, 505.0), (0.1, 1030.0, 510.0)):
        rows += [
            (t, "nvml", "energy_j", e0, '{"gpu":"0"}'),
            (t, "nvml", "energy_j", e1, '{"gpu":"1"}'),
        ]
        rows += [(t, "nvml", "gpu_util_pct", 50.0 + 100 * t, '{"gpu":"0"}')]
    hist = "request_prefill_time_seconds"
    for t, sum_s, count, cum in ((0.0, 0.0, 0, (0, 0, 0, 0)), (0.1, 0.3, 3, (1, 2, 3, 3))):
        label = '{"metric":"vllm:%s"}' % hist  # noqa: UP031 - JSON braces
        rows += [
            (t, "engine", hist + "_sum", sum_s, label),
            (t, "engine", hist + "_count", count, label),
        ]
        for le, c in zip(("0.05", "0.1", "0.25", "+Inf"), cum, strict=True):
            rows.append(
                (t, "engine", hist + "_bucket", c, json.dumps({"le": le}, separators=(",", ":")))
            )
        rows.append(
            (t, "engine", "kv_cache_usage", 0.1 + t, '{"metric":"vllm:kv_cache_usage_perc"}')
        )
    rows.append((-0.5, "nvml", "energy_j", 900.0, '{"gpu":"0"}'))  # before the load: not counted
    return pd.DataFrame(rows, columns=["t_s", "source", "name", "value", "labels"])


def write_run(tmp_path: Path, roofs: dict | None, with_steps: bool = True) -> Path:
    folder = RunFolder.create(tmp_path, "attr", "reference")
    records = [
        record("a", 0.0, 0.020, 0.080, 40, 7),
        record("b", 0.0, 0.020, 0.100, 40, 7),
        record("c", 0.0, 0.100, 0.100, 30, 1),
    ]
    folder.write_requests(records)
    folder.write_tokens(records)
    if with_steps:
        folder.write_steps(steps_frame())
    folder.write_samples(samples())
    analytic = {"model_config": TINY.to_dict(), "precision": FP32.to_dict(), "tp": 1,
                "roofs": roofs}  # fmt: skip
    scenario = {"warmup_s": 0.0, "cooldown_s": 0.0}
    folder.write_run_json(fake_run_json(folder.run_id, scenario=scenario, analytic=analytic))
    return folder.path


def test_time_is_split_between_prefill_and_decode_and_by_bound(tmp_path: Path) -> None:
    summary = summarize_run(load_run(write_run(tmp_path, ROOFS)))
    attr = summary["attribution"]
    assert attr["available"] and attr["steps"] == 7
    assert attr["steps_by_kind"] == {"prefill_only": 1, "decode_only": 5, "mixed": 1}
    assert attr["busy_s"] == pytest.approx(0.1)
    assert attr["prefill"]["time_s"] + attr["decode"]["time_s"] == pytest.approx(0.1)
    # The first step is all prefill, the decode-only ones all decode; the mixed one is split.
    assert 0.02 < attr["prefill"]["time_s"] < 0.05 and 0.05 < attr["decode"]["time_s"] < 0.08
    assert attr["bound_time_s"] == pytest.approx({"compute": 0.05, "memory": 0.05})
    # FLOPs and bytes equal the analytic model's for the exact chunks (no chunked prefill here,
    # so the decode context estimate is exact).
    model = CostModel(TINY, FP32)
    exact = [model.step(Batch.from_chunks(chunks)) for *_, chunks in STEPS]
    assert attr["flops"] == pytest.approx(sum(s.flops for s in exact))
    assert attr["bytes"] == pytest.approx(sum(s.bytes for s in exact))
    assert attr["prefill"]["bytes"] + attr["decode"]["bytes"] == pytest.approx(attr["bytes"])
    assert attr["prefill"]["tokens"] == 110 and attr["decode"]["tokens"] == 12
    assert attr["mfu"] == pytest.approx(attr["flops"] / 0.09 / 50e9)
    assert attr["mbu"] == pytest.approx(attr["bytes"] / 0.09 / 10e9)
    assert attr["prefill"]["arithmetic_intensity"] > 5 > attr["decode"]["arithmetic_intensity"]


def test_energy_per_output_token_and_engine_figures(tmp_path: Path) -> None:
    summary = summarize_run(load_run(write_run(tmp_path, ROOFS)))
    energy = summary["probes"]["energy"]
    # GPU 0 used 30 J and GPU 1 10 J between 0 and 0.1 s; the reading at -0.5 s is outside.
    assert energy["joules"] == pytest.approx(40.0) and energy["gpus"] == 2
    assert energy["interval_s"] == pytest.approx(0.1)
    # Tokens received in (0, 0.1]: 7 + 7 + 1 (all chunks land between 0.02 and 0.1 s).
    assert energy["output_tokens"] == 15
    assert energy["joules_per_output_token"] == pytest.approx(40 / 15)
    assert energy["mean_power_w"] == pytest.approx(400.0)
    prefill = summary["probes"]["engine"]["request_prefill_time_seconds"]
    assert prefill["requests"] == 3 and prefill["mean_s"] == pytest.approx(0.1)
    assert prefill["p50_s"] == pytest.approx(0.075)
    assert summary["probes"]["engine"]["kv_cache_usage"]["max"] == pytest.approx(0.2)
    tps = summary["per_user_tps_by_phase"]
    assert tps["prefill_tok_s"]["max"] == pytest.approx(40 / 0.02)
    assert tps["decode_tok_s"]["count"] == 2  # one-token requests have no decode rate
    assert tps["decode_tok_s"]["max"] == pytest.approx(6 / 0.06)


def test_without_roofs_the_split_is_by_flops_and_no_mfu(tmp_path: Path) -> None:
    attr = summarize_run(load_run(write_run(tmp_path, None)))["attribution"]
    assert attr["apportioned_by"].startswith("FLOPs")
    assert attr["mfu"] is None and attr["bound_time_s"] is None
    assert attr["mfu_reason"].startswith("no roofs: ")
    assert attr["prefill"]["time_s"] + attr["decode"]["time_s"] == pytest.approx(0.1)


def test_without_steps_attribution_says_why_and_the_rest_stands(tmp_path: Path) -> None:
    folder = write_run(tmp_path, ROOFS, with_steps=False)
    summary = summarize_run(load_run(folder))
    assert summary["attribution"] == {
        "available": False,
        "reason": "no steps.parquet: the engine records no steps",
    }
    assert summary["probes"]["energy"]["available"]
    # Deterministic: the same files give the same summary, through JSON and back.
    assert json.loads(json.dumps(summary)) == summarize_run(load_run(folder))


def test_a_remote_engines_missing_steps_are_said_to_be_remote(tmp_path: Path) -> None:
    folder = write_run(tmp_path, ROOFS, with_steps=False)
    run_json = json.loads((folder / "run.json").read_text())
    run_json["engine"]["url"] = "http://10.0.0.7:8000"
    (folder / "run.json").write_text(json.dumps(run_json))
    assert summarize_run(load_run(folder))["attribution"] == {
        "available": False,
        "reason": "no steps.parquet: the engine at http://10.0.0.7:8000 runs on another host",
    }
    run_json["engine"]["url"] = "http://127.0.0.1:8000"
    (folder / "run.json").write_text(json.dumps(run_json))
    reason = summarize_run(load_run(folder))["attribution"]["reason"]
    assert reason == "no steps.parquet: the engine records no steps"


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    import numpy as np

    bounds = np.array([0.1, 0.5, 1.0, np.inf])
    assert histogram_quantile(bounds, np.array([10.0, 30.0, 40.0, 40.0]), 0.5) == pytest.approx(0.3)
    # A quantile in the +Inf bucket is the highest finite edge.
    assert histogram_quantile(bounds, np.array([0.0, 0.0, 1.0, 5.0]), 0.99) == 1.0
    assert histogram_quantile(bounds, np.zeros(4), 0.5) is None
