"""`bench run` against a server that misbehaves every way at once ends, in bounded time, with
every request in requests.parquet and each one's error naming what the server did.

The misbehaving server's ``/mixed`` route answers its requests with every misbehaviour of
tests.support.misbehaving_server in turn (an endless stream, headers then silence, an oversized
line, invalid UTF-8, a bad JSON event, an HTML page, a reset, absurd usage, a redirect to
another port carrying the key ...); the run's --request-timeout and --read-timeout are short.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support.misbehaving_server import EXPECTED_ERRORS, MIXED, misbehaving
from tests.support.paths import REPO_ROOT

KEY = "sk-e2e-misbehaving-key"
SCENARIO = f"""
name = "misbehaving"
users = 2
num_requests = {len(MIXED)}
read_timeout_s = 30

[input_len]
kind = "fixed"
value = 8

[output_len]
kind = "fixed"
value = 4
"""
# The run's whole budget, s: start-up, every request's limit in the worst order, the report.
RUN_LIMIT_S = 240


@pytest.mark.slow
@pytest.mark.parametrize("driver", ["asyncio", "locust"])
def test_a_run_against_a_misbehaving_server_records_every_request(
    tmp_path: Path, driver: str
) -> None:
    scenario = tmp_path / "misbehaving.toml"
    scenario.write_text(SCENARIO)
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200", "OPENAI_API_KEY": KEY}
    with misbehaving() as server:
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable, "-m", "bench", "run", "--scenario", str(scenario),
                "--url", server.url("mixed"), "--tokenizer", "tiny", "--no-live",
                "--no-calibrate", "--no-probes", "--runs-dir", str(runs), "--driver", driver,
                "--read-timeout", "1", "--request-timeout", "3",
            ],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S,
        )  # fmt: skip
        took = time.monotonic() - started
        assert server.target.requests == []  # the redirect was not followed
    folders = sorted(runs.glob("*-misbehaving-*")) if runs.is_dir() else []
    assert folders, proc.stdout + proc.stderr
    requests = pd.read_parquet(folders[-1] / "requests.parquet")
    assert len(requests) == len(MIXED), proc.stdout + proc.stderr
    assert (requests["status"] == "error").all(), requests[["status", "error"]]
    errors = list(requests["error"])
    # Each misbehaviour's own message, each once (the routes are taken in turn).
    for route in MIXED:
        matching = [e for e in errors if re.search(EXPECTED_ERRORS[route], e)]
        assert matching, f"{route}: no error matches {EXPECTED_ERRORS[route]!r} in {errors}"
        errors.remove(matching[0])
    text = (folders[-1] / "requests.parquet").read_bytes() + proc.stdout.encode()
    assert KEY.encode() not in text and b"secret-token" not in text
    run_json = json.loads((folders[-1] / "run.json").read_text())
    # The command line's limits over the scenario's, recorded as the scenario run.
    assert run_json["scenario"]["request_timeout_s"] == 3.0
    assert run_json["scenario"]["read_timeout_s"] == 1.0
    assert took < RUN_LIMIT_S
