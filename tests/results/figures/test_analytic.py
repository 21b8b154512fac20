"""results.figures.analytic: run.json's "analytic" section from an engine's description, and rebuilt
for a folder written before run.json had one."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfmodel.presets import TINY
from results.figures.analytic import analytic_section, engine_precision, roofs_reason, run_analytic
from tests.support.calibration import save_calibration

H100 = "NVIDIA H100 80GB HBM3"


def test_precision_from_the_engines_description() -> None:
    quantized = {"dtype": "bfloat16", "kv_cache_dtype": "float8_e4m3fn",
                 "engine_config": {"quantization": "int4"}}  # fmt: skip
    assert engine_precision(quantized, "float32") == {
        "weight_dtype": "int4",
        "kv_dtype": "fp8",
        "activation_dtype": "bf16",
    }
    assert engine_precision(None, "float16") == dict.fromkeys(
        ("weight_dtype", "kv_dtype", "activation_dtype"), "fp16"
    )


def test_a_local_gpu_engines_section_has_the_tables_roofs() -> None:
    description = {"model_config": TINY.to_dict(), "dtype": "bfloat16", "device": "cuda:0"}
    section = analytic_section(description, None, True, [H100], "cpu")
    assert section["model_config"] == TINY.to_dict() and section["tp"] == 1
    assert section["precision"]["activation_dtype"] == "bf16"
    assert section["roofs"]["name"] == "NVIDIA H100 SXM"
    assert section["roofs"]["ridge_flop_per_byte"] == pytest.approx(989.4e12 / 3.35e12)
    assert section["notes"] == []
    remote = analytic_section(description, None, False, [H100], "cpu")
    assert remote["roofs"] is None and remote["notes"] == [
        "the engine runs on another host; no roofs"
    ]


def test_an_engine_that_does_not_describe_itself(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    save_calibration(path, "Fake CPU")
    section = analytic_section(None, "tiny", True, [], "Fake CPU", path)
    assert section["model_config"]["name"] == TINY.name
    assert section["roofs"]["source"].startswith("bench calibrate")
    assert any("model shape from 'tiny'" in n for n in section["notes"])
    assert any("dtypes assumed" in n for n in section["notes"])
    unknown = analytic_section(None, "no-such-model", True, [], "Fake CPU", path)
    assert unknown["model_config"] is None and "unknown model" in unknown["notes"][0]


def test_an_older_run_json_gets_the_section_rebuilt() -> None:
    recorded = {"model_config": None, "roofs": None, "notes": ["model shape unknown"]}
    assert run_analytic({"analytic": recorded}) == recorded
    description = {"model_config": TINY.to_dict(), "dtype": "bfloat16", "device": "cuda:0"}
    old = {"engine": {"description": description}, "hardware": {"cpu": "x", "gpus": [H100]}}
    rebuilt = run_analytic(old)
    assert rebuilt["roofs"]["name"] == "NVIDIA H100 SXM"
    assert rebuilt["notes"][0].startswith("run.json has no analytic section")
    assert run_analytic({})["model_config"] is None


def test_an_old_simulated_folder_is_rebuilt_with_the_simulated_parts_roofs() -> None:
    """A simulated run.json without an analytic section: the rebuild reads the simulated
    device's peaks from the description, never this host's roofs."""
    bf16 = {"weight_dtype": "bf16", "kv_dtype": "bf16", "activation_dtype": "bf16"}
    description = {
        "model_config": {"name": "llama-3-70b"},
        "simulated": {
            "time_model": {
                "precision": bf16,
                "tp": 4,
                "roofs": {"name": "NVIDIA H100 SXM", "sources": {"peaks": "datasheet"},
                          "compute_dtype": "bf16", "peak_flops_per_s": 989e12,
                          "peak_bytes_per_s": 3.35e12},
            },
            "notes": [],
        },
    }  # fmt: skip
    old = {"engine": {"description": description}, "hardware": {"cpu": "Fake CPU", "gpus": []}}
    rebuilt = run_analytic(old)
    assert rebuilt["tp"] == 4 and rebuilt["roofs"]["flops_per_s"] == 989e12
    assert rebuilt["roofs"]["source"] == "simulated device: datasheet"
    assert "simulated device" in rebuilt["notes"]


def test_the_reason_for_no_roofs_is_recorded_once(tmp_path: Path) -> None:
    description = {"model_config": TINY.to_dict(), "dtype": "float32", "device": "cpu"}
    path = tmp_path / "calibration.json"
    none = analytic_section(description, None, True, [], "Fake CPU", path, notes=["first"])
    assert none["roofs"] is None and none["notes"][0] == "first"
    assert none["roofs_reason"] == roofs_reason(none)
    assert none["roofs_reason"].startswith("first; no calibration of this CPU: run `bench calibr")
    remote = analytic_section(description, None, False, [], "Fake CPU", path)
    assert roofs_reason(remote) == "the engine runs on another host; no roofs"
    save_calibration(path, "Fake CPU")
    measured = analytic_section(description, None, True, [], "Fake CPU", path)
    assert measured["roofs"] is not None and roofs_reason(measured) is None
    # A folder written before roofs_reason was recorded: its notes say why.
    assert roofs_reason({"roofs": None, "notes": ["a", "b"]}) == "a; b"
    assert roofs_reason(None) == "run.json has no analytic section"
