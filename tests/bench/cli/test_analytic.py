"""`bench roofline`, `bench capacity`, `bench calibrate` (CliRunner), calibration and nsys."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.analytic import register
from perfmodel import calibration as cal
from perfmodel.hardware import find_by_nvml_name, get_gpu, spec_from_calibration
from perfmodel.roofs import find_roofs
from probes.nsys import NsysUnavailable, find_nsys, nsys_command, report_path
from tests.support.cache import isolated_cache


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def invoke(app: typer.Typer, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_roofline_prints_a_table_and_writes_a_self_contained_figure(
    app: typer.Typer, tmp_path: Path
) -> None:
    out = tmp_path / "fig.html"
    args = ["--model", "llama-3-70b", "--gpu", "a100-80gb", "--tp", "4", "--batch", "1,64"]
    code, text = invoke(app, "roofline", *args, "--context", "2048", "--output", str(out))
    assert code == 0, text
    assert "prefill" in text and "decode" in text and "compute" in text and "memory" in text
    html = out.read_text()
    assert len(html) > 1_000_000  # plotly.js is embedded: the file opens offline
    assert "Plotly.newPlot" in html and "B=64" in html
    # The roofs are the hardware table's, named as the run dashboard names them; an A100 has
    # no fp8 peak, so no second (dashed) roof.
    assert "roofs: NVIDIA A100 80GB SXM bf16" in html
    assert "roofs: NVIDIA A100 80GB SXM fp8" not in html


def test_roofline_draws_a_second_roof_for_fp8_where_the_gpu_has_one(
    app: typer.Typer, tmp_path: Path
) -> None:
    out = tmp_path / "fig.html"
    code, text = invoke(app, "roofline", "--model", "llama-3-8b", "--gpu", "h100-sxm",
                        "--batch", "8", "--output", str(out))  # fmt: skip
    assert code == 0, text
    html = out.read_text()
    assert "roofs: NVIDIA H100 SXM bf16" in html and "roofs: NVIDIA H100 SXM fp8" in html


def test_roofline_marks_the_batches_that_do_not_fit_as_capacity_counts_them(
    app: typer.Typer, tmp_path: Path
) -> None:
    model = ["--model", "llama-3-8b", "--gpu", "h100-sxm", "--context", "4096"]
    code, text = invoke(app, "capacity", *model, "--json")
    most = json.loads(text)["max_users"]
    batches = f"{most},{most + 1}"
    code, text = invoke(app, "roofline", *model, "--batch", batches,
                        "--output", str(tmp_path / "fig.html"))  # fmt: skip
    assert code == 0, text
    fits = [line.rstrip(" │").split()[-1] for line in text.splitlines() if "│ decode" in line]
    assert fits == ["yes", "no"], text
    flat = " ".join(text.split())
    assert f"decode batch {most + 1}: does not fit: KV for {most + 1} x 4,096 tokens needs" in flat
    assert "GiB left per GPU" in flat and f"at most {most} users of 4,096 tokens" in flat
    assert f"decode batch {most}:" not in flat
    html = (tmp_path / "fig.html").read_text()
    assert "does not fit: KV for" in html


def test_capacity_json_gives_the_seeds_figures(app: typer.Typer) -> None:
    figures = {}
    for kv in ("fp16", "int4"):
        args = ["--model", "Llama-3-70B", "--gpu", "a100-80gb", "--tp", "4", "--kv-dtype", kv]
        code, text = invoke(app, "capacity", *args, "--context", "4096", "--json")
        assert code == 0, text
        figures[kv] = json.loads(text)
    fp16 = figures["fp16"]
    assert fp16["kv_bytes_per_token"] == 327_680 and fp16["fits"]
    assert fp16["max_users"] == fp16["max_tokens"] // 4096
    assert figures["int4"]["max_users"] / fp16["max_users"] == pytest.approx(4, rel=0.02)
    code, text = invoke(app, "capacity", "--model", "llama-3-70b", "--gpu", "a100-80gb")
    assert code == 0 and "no" in text and "do not fit" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "llama-9000", "--gpu", "h100"), "unknown model"),
        (("--model", "llama-3-8b", "--gpu", "h900"), "unknown GPU"),
        (("--model", "llama-3-8b", "--gpu", "a100", "--dtype", "fp8"), "no fp8 peak"),
        (("--model", "llama-3-70b", "--gpu", "h100", "--tp", "3"), "split evenly"),
    ],
)
def test_bad_input_is_named(app: typer.Typer, args: tuple[str, ...], message: str) -> None:
    code, text = invoke(app, "roofline", *args)
    assert code == 2 and message in text.replace("\n", " ")


def test_a_local_config_json_is_a_model(app: typer.Typer, tmp_path: Path) -> None:
    config = {"model_type": "llama", "vocab_size": 1000, "hidden_size": 512,
              "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 2, "max_position_embeddings": 4096}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, text = invoke(app, "capacity", "--model", str(tmp_path), "--gpu", "l4", "--json")
    assert code == 0, text
    # 2 layers x 2 KV heads x 64 dims x K and V x 2 bytes
    assert json.loads(text)["kv_bytes_per_token"] == 2 * 2 * 64 * 2 * 2


def test_calibrate_measures_saves_and_gives_roofs(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = isolated_cache(monkeypatch, tmp_path / "cache") / "calibration.json"
    code, text = invoke(app, "calibrate", "--seconds", "0.05", "--no-gpu")
    assert code == 0, text
    assert "fp32" in text and path.name in text.replace("\n", "")
    saved = cal.load()
    assert saved is not None and saved["cpu"]["triad_bytes_per_s"] > 1e8
    assert saved["mode"] == "full" and saved["budget_s"] == 0.05
    assert saved["cpu"]["matmul_flops_per_s"]["fp32"] > 1e8
    spec = spec_from_calibration(saved)
    assert spec.peak_for("float32") == saved["cpu"]["matmul_flops_per_s"]["fp32"]
    roofs, reason = find_roofs("cpu", "fp32", [], saved["host"]["cpu"])
    assert reason is None and roofs is not None
    assert roofs.bytes_per_s == saved["cpu"]["triad_bytes_per_s"]
    assert roofs.source.startswith("bench calibrate")
    roofs, reason = find_roofs("cpu", "fp32", [], "another CPU")
    assert roofs is None and "measured on" in reason
    path.unlink()
    roofs, reason = find_roofs("cpu", "fp32", [], "x")
    assert roofs is None and "bench calibrate" in reason


def test_gpu_roofs_come_from_the_table_by_nvml_name() -> None:
    roofs, reason = find_roofs("cuda:0", "bf16", ["NVIDIA H100 80GB HBM3"], "cpu")
    assert reason is None and roofs is not None
    assert roofs.flops_per_s == get_gpu("h100-sxm").peak_for("bf16")
    assert find_roofs("cuda", "bf16", ["NVIDIA H800"], "cpu")[0] is None
    assert find_by_nvml_name("NVIDIA A100-SXM4-40GB").key == "a100-40gb-sxm"


def test_nsys_is_said_missing_or_wraps_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_nsys() is None
    with pytest.raises(NsysUnavailable, match="not on PATH"):
        nsys_command(["python", "-m", "bench", "serve"], tmp_path / "trace")
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert find_nsys() == str(fake)
    command = nsys_command(["python", "-m", "bench", "serve"], tmp_path / "trace")
    assert command[:4] == [str(fake), "profile", "-t", "cuda,nvtx"]
    assert command[-4:] == ["python", "-m", "bench", "serve"]
    assert report_path(tmp_path / "trace") == tmp_path / "trace.nsys-rep"
    assert os.access(fake, os.X_OK)
