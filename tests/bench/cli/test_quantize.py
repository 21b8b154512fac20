"""`bench quantize` end to end on a tiny model the test builds: llm-compressor makes each
method's checkpoint from a scenario's prompts, and the table compares them with the float
model; without llm-compressor, one line names the extra to install."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli.app import app
from tests.support.hf_fixtures import make_hf_model_dir

SCENARIO = """
name = "calibration"
users = 1
num_requests = 4
seed = 3

[input_len]
kind = "uniform"
low = 24
high = 40

[output_len]
kind = "fixed"
value = 8
"""


def _args(tmp_path: Path, *extra: str) -> list[str]:
    model = make_hf_model_dir(tmp_path / "model")
    scenario = tmp_path / "calibration.toml"
    scenario.write_text(SCENARIO)
    return [
        "quantize", str(model), "--out", str(tmp_path / "quantized"), "--group-size", "32",
        "--scenario", str(scenario), "--num-samples", "4", "--eval-prompts", "2",
        "--decode-tokens", "4", *extra,
    ]  # fmt: skip


def test_quantize_makes_each_method_and_tabulates_it(tmp_path: Path) -> None:
    pytest.importorskip("llmcompressor", reason="the [quantize] extra (llm-compressor) is absent")
    out = tmp_path / "table.json"
    args = _args(tmp_path, "--method", "rtn", "--method", "gptq", "--json", str(out))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = json.loads(out.read_text())
    assert [row["method"] for row in table["rows"]] == ["float", "rtn", "gptq"]
    assert table["scheme"] == "W4A16-g32-sym" and table["eval_prompts"] == 2
    float_row, *quantized = table["rows"]
    assert float_row["error"]["mean_kl"] == 0 and float_row["error"]["top1_agreement"] == 1
    for row in quantized:
        assert row["error"]["mean_kl"] > 0 and row["error"]["positions"] > 2 * 24
        assert row["speed"]["tokens_per_s"] > 0
        assert row["speed"]["weight_bytes"] < float_row["speed"]["weight_bytes"]
        config = json.loads((Path(row["checkpoint"]) / "config.json").read_text())
        assert config["quantization_config"]["quant_method"] == "compressed-tensors"
        assert (Path(row["checkpoint"]) / "tokenizer.json").is_file()
    assert "gptq" in result.output and "mean KL" in result.output


def test_without_llm_compressor_one_line_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llmcompressor", None)  # import llmcompressor fails
    result = CliRunner().invoke(app, _args(tmp_path, "--method", "rtn"))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    # rich wraps the message at the runner's 80 columns: one message, after the progress line
    assert lines[0].startswith("quantizing with rtn"), result.output
    message = " ".join(lines[1:])
    assert message.startswith("bench quantize needs llm-compressor"), result.output
    assert "pip install 'llm-perf-lab[quantize]'" in message


def test_unknown_method_is_refused_by_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, _args(tmp_path, "--method", "smoothquant"))
    assert result.exit_code == 2
    assert "--method 'smoothquant' is not one of rtn, gptq, awq" in result.output
