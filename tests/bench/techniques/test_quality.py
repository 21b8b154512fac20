"""The quality column of `bench techniques` (bench/techniques/quality.py): a technique's output
is judged right or wrong before its speed is shown, on the study's own model."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bench.experiments.switch_quality import quality_text
from bench.techniques.quality import WRONG_OUTPUT, row_quality
from bench.techniques.render import cell_texts
from bench.techniques.studies import study
from engine.model.quantization.linear import Int8Linear


def test_a_right_storage_is_right_and_costs_some_logits() -> None:
    got = row_quality(study("quantization"), "none", "int8")
    assert got is not None and got.kind == "lossy" and got.right, got
    assert got.against_off is not None and got.against_emulation is not None
    assert got.against_emulation.rel_error < got.against_off.rel_error
    assert quality_text(got.to_dict()).startswith("right (lossy): logit error ")


def test_a_path_that_misreads_its_storage_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """int8 weights read with every scale 5% too large: a plausible bug, far from the
    emulation of what int8 stores, which the column must call wrong."""
    forward = Int8Linear.forward

    def misread(self: Int8Linear, x: torch.Tensor) -> torch.Tensor:
        return forward(self, x) * 1.05

    monkeypatch.setattr(Int8Linear, "forward", misread)
    got = row_quality(study("quantization"), "none", "int8")
    assert got is not None and not got.right, got
    assert "misreads its storage" in got.reason
    assert quality_text(got.to_dict()).startswith("WRONG OUTPUT (lossy)")


def test_an_exact_technique_keeps_the_tokens_and_a_swapped_model_is_not_compared() -> None:
    got = row_quality(study("batching"), "static", "continuous")
    assert got is not None and got.kind == "exact" and got.right and got.greedy_identical, got
    assert got.against_off is not None and got.against_off.rel_error <= 1e-4
    assert row_quality(study("gqa"), "tiny-mha", "tiny") is None
    assert quality_text(None).startswith("- (another model")


def test_a_wrong_row_shows_what_is_wrong_and_no_speedup() -> None:
    quality = {"right": False, "kind": "lossy", "greedy_identical": False,
               "against_off": {"rel_error": 0.5, "top1_agreement": 0.2, "rows": 8},
               "reason": "0.6 from its emulated storage"}  # fmt: skip
    row: dict[str, Any] = {
        "placement": WRONG_OUTPUT, "quality": quality, "claimed": [1.5, 2.0], "claim": "c",
        "metric_title": "out tok/s", "ratio": "on/off", "unit": "tok/s", "predictions": [],
        "reason": "wrong output: 0.6 from its emulated storage",
        "measured": {"value": None, "value_of_wrong_output": 1.9, "off": 1.0, "on": 1.9,
                     "also": {}},
    }  # fmt: skip
    text = cell_texts({"rows": [row]})["rows"][0]["text"]
    assert text["measured"].startswith("wrong output") and "1.9" not in text["measured"]
    assert text["quality"].startswith("WRONG OUTPUT (lossy): logit error 0.5, top-1 20%")
