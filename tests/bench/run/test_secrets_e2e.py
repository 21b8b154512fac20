"""No key or header value is ever written: `bench run --api-key --header` against a
`bench serve --api-key` that bench launches with the key in its command line, probes on, two
worker processes; then every file of the run folder (parquet cells included) and the console are
searched for the canaries. A wrong or missing key fails the run with a message naming the fix."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from bench.cli.app import app
from engine.config import EngineConfig
from tests.support.server_fixture import running_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

SCENARIO = """
name = "canary"
users = 4
num_requests = 12
ignore_eos = true
seed = 3

[input_len]
kind = "uniform"
low = 8
high = 16

[output_len]
kind = "uniform"
low = 4
high = 8
"""
SERVE = (
    "env LLM_PERF_LAB_API_KEY={key} {python} -m bench serve --port {{port}} --model tiny "
    "--dtype float32 --device cpu --max-model-len 96"
)


def string_cells(path: Path) -> Iterator[str]:
    """Every string of a parquet file: cells, nested lists' items, and the schema's metadata."""
    table = pq.read_table(path)
    for meta in (table.schema.metadata or {}).items():
        yield from (m.decode("utf-8", "replace") for m in meta)
    for column in table.columns:
        for chunk in column.chunks:
            yield from _strings(chunk)


def _strings(array: pa.Array) -> Iterator[str]:
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        yield from (v for v in array.to_pylist() if v is not None)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from _strings(array.flatten())
    elif pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            yield from _strings(array.field(i))
    elif pa.types.is_dictionary(kind):
        yield from _strings(array.dictionary)


def test_no_key_or_header_value_is_written_anywhere(tmp_path: Path) -> None:
    key = f"sk-canary-{secrets.token_hex(8)}"
    header_value = f"hv-canary-{secrets.token_hex(8)}"
    scenario = tmp_path / "canary.toml"
    scenario.write_text(SCENARIO)
    runs = tmp_path / "runs"
    launch = SERVE.format(key=key, python=shlex.quote(sys.executable))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", str(scenario), "--runs-dir",
         str(runs), "--no-live", "--tokenizer", "tiny", "--workers", "2", "--launch", launch,
         "--api-key", key, "--header", f"X-Canary: {header_value}"],
        capture_output=True, text=True, timeout=360,
        env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
    )  # fmt: skip
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console
    assert "starting reference: env LLM_PERF_LAB_API_KEY=***" in console
    (folder,) = runs.iterdir()
    run_json = json.loads((folder / "run.json").read_text())
    assert run_json["engine"]["launch_command"][:2] == ["env", "LLM_PERF_LAB_API_KEY=***"]
    assert run_json["recorded"]["samples"], run_json["probes"]  # the probes scraped /metrics
    requests = pq.read_table(folder / "requests.parquet").to_pylist()
    assert len(requests) == 12 and {r["status"] for r in requests} == {"ok"}
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert {"run.json", "summary.json", "requests.parquet", "samples.parquet"} <= {
        p.name for p in files
    }
    for canary in (key, header_value):
        assert canary not in console
        for path in files:
            assert canary.encode() not in path.read_bytes(), path
            if path.suffix == ".parquet":
                assert not [s for s in string_cells(path) if canary in s], path


KEY = "sk-canary-wrong-key-test"
CONFIG = EngineConfig.from_flat(dict(model="tiny", dtype="float32", device="cpu", max_model_len=96))


@pytest.fixture(scope="module")
def guarded_url() -> Iterator[str]:
    with running_server(CONFIG, api_key=KEY) as url:
        yield url


@pytest.mark.parametrize("given", [None, "sk-not-the-key"], ids=["no-key", "wrong-key"])
def test_a_missing_or_wrong_key_fails_naming_the_option(
    tmp_path: Path, guarded_url: str, given: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    scenario = tmp_path / "canary.toml"
    scenario.write_text(SCENARIO)
    args = ["run", "--scenario", str(scenario), "--url", guarded_url, "--tokenizer", "tiny",
            "--runs-dir", str(tmp_path / "runs"), "--no-live", "--no-probes"]  # fmt: skip
    if given:
        args += ["--api-key", given]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    # Refused by the pre-flight check, before any load: a usage error, not a failed run.
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "HTTP 401" in text and "--api-key" in text and "$OPENAI_API_KEY" in text
    assert "Traceback" not in result.output and (given is None or given not in result.output)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_key_from_openai_api_key_is_enough(
    tmp_path: Path, guarded_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    scenario = tmp_path / "canary.toml"
    scenario.write_text(SCENARIO)
    result = CliRunner().invoke(
        app,
        ["run", "--scenario", str(scenario), "--url", guarded_url, "--tokenizer", "tiny",
         "--runs-dir", str(tmp_path / "runs"), "--no-live", "--no-probes"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "runs").iterdir()
    assert KEY.encode() not in (folder / "run.json").read_bytes()
