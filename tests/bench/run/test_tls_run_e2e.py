"""`bench run --url https://...` against a TLS server on 127.0.0.1 (a self-signed certificate
the run trusts through SSL_CERT_FILE): the streams keep their kernel receive stamps through TLS,
and run.json says so per connection, with the asyncio driver and with Locust."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.support.openai_fakes import MODELS, openai_handler, serving, write_scenario
from tests.support.paths import REPO_ROOT
from tests.support.tls_certs import TlsCert, server_context, tls_cert

__all__ = ["tls_cert"]  # fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    "driver",
    [
        [],
        pytest.param(
            ["--driver", "locust", "--workers", "1"],
            marks=pytest.mark.skipif(
                importlib.util.find_spec("locust") is None, reason="locust is not installed"
            ),
        ),
    ],
    ids=["asyncio", "locust"],
)
def test_an_https_run_records_kernel_stamps_per_connection(
    tmp_path: Path, tls_cert: TlsCert, driver: list[str]
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SSL_CERT_FILE": str(tls_cert.cert)}
    with serving(openai_handler(MODELS), tls=server_context(tls_cert)) as server:
        url = server.base_url
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--scenario", str(write_scenario(tmp_path)),
             "--url", url, "--tokenizer", "tiny", "--runs-dir", str(tmp_path / "runs"),
             "--no-live", "--no-probes", "--no-calibrate", *driver],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert url.startswith("https://")
    (folder,) = (tmp_path / "runs").iterdir()
    source = "kernel" if sys.platform.startswith("linux") else "user"
    requests = pd.read_parquet(folder / "requests.parquet")
    assert (requests["status"] == "ok").all() and set(requests["stamps"]) == {source}
    stamps = json.loads((folder / "run.json").read_text())["load"]["receive_stamps"]
    assert stamps["source"] == source and stamps["connections"] >= 1
    for client in stamps["clients"]:
        assert client["endpoint"] == url
        assert all(conn["stamps"] == source for conn in client["connections"])
