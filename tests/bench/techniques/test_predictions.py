"""The two predictions that are not simulated runs: GQA from the capacity model, Flash
Attention from the roofline of attention alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.techniques.claims import claim
from bench.techniques.predictions import DEVICES, Device, SimCache, attention_times_s, predict
from bench.techniques.studies import study


def test_gqa_prediction_is_one_over_the_group_and_more_users(tmp_path: Path) -> None:
    s = study("gqa")
    preds = predict(
        claim("gqa"), s, s.scenario(quick=True), "tiny-mha", "tiny",
        {"sequence_length": 2048}, SimCache(tmp_path),
    )  # fmt: skip
    assert [p["device"] for p in preds] == [d.label for d in DEVICES]
    # Llama-3-8B: 8 KV heads for 32 query heads; 70B: 8 for 64, split over 4 GPUs.
    assert preds[0]["value"] == pytest.approx(8 / 32)
    assert preds[2]["value"] == pytest.approx(8 / 64)
    for p in preds:
        off_users, on_users = p["also"]["max_running"]
        assert on_users > off_users > 0 and p["how"] == "capacity model"
    assert not list(tmp_path.iterdir())  # nothing simulated


def test_naive_attention_costs_more_the_longer_the_prompt() -> None:
    device = Device("llama-3-8b", "h100-sxm", 1)
    short, long = attention_times_s(device, 128), attention_times_s(device, 4096)
    assert short["naive"] > short["fused"] and long["naive"] > long["fused"]
    assert long["naive"] / long["fused"] > short["naive"] / short["fused"]
