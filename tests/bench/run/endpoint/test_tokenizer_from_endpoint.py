"""`bench run --url` without --tokenizer: the served model's root, then the server's /tokenize.

Real `bench serve` apps on 127.0.0.1 (tests/support/server_fixture.py) and the real run; prompt
lengths are checked against what the server says it was charged (usage.prompt_tokens).
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bench.run.load_plan import build_plan
from bench.run.orchestrate import RunError, RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine.config import EngineConfig
from engine.tokenizer.tokenizer import Tokenizer
from perfmodel.presets import PRESETS
from results.folder.run_folder import load_run
from tests.support.hf_fixtures import make_hf_model_dir
from tests.support.hf_hub_cache import lay_out_hub_repo, tokenizer_repo_files
from tests.support.server_fixture import running_server
from tests.support.threaded_http import SeenRequest, threaded_server

SCENARIO = """
name = "tok"
users = 4
num_requests = 24
ignore_eos = true
seed = 5

[input_len]
kind = "uniform"
low = 5
high = 60

[output_len]
kind = "uniform"
low = 2
high = 6
"""
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hub cache, offline: a hub-id attempt never reaches the network."""
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "hub"


def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tok.toml"
    path.write_text(SCENARIO)
    return path


def run(tmp_path: Path, url: str, tokenizer: str | None = None) -> tuple[Path, str]:
    """Run the scenario against ``url``; returns the folder and what the console printed."""
    out = io.StringIO()
    opts = RunOptions(
        load_scenario(scenario_file(tmp_path)), url, "reference", None, tokenizer,
        tmp_path / "runs", live=False,
    )  # fmt: skip
    folder, _ = run_benchmark(opts, Console(file=out, width=200))
    return folder, out.getvalue()


def assert_prompt_lengths_exact(folder: Path, tokenizer: Tokenizer, tmp_path: Path) -> None:
    """Every request ok, and charged exactly its planned prompt length (plus the BOS the
    completion route adds to a text prompt)."""
    requests = load_run(folder).requests.set_index("request_id")
    assert (requests["status"] == "ok").all(), requests["error"].dropna().tolist()
    planned = pd.Series(
        {
            r.request_id: r.prompt_tokens
            for r in build_plan(load_scenario(scenario_file(tmp_path)), tokenizer).requests
        }
    )
    specials = len(tokenizer.encode("", add_special_tokens=True))
    assert specials == 1
    assert planned.nunique() > 5  # lengths vary: exactness is not luck on one length
    assert (requests["prompt_tokens"] == planned.loc[requests.index] + specials).all()


def test_the_served_models_root_folder_is_the_tokenizer(tmp_path: Path) -> None:
    model_dir = make_hf_model_dir(tmp_path / "models" / "tiny-hf")
    config = EngineConfig.from_flat(dict(model=str(model_dir), dtype="float32", device="cpu"))
    with running_server(config) as url:
        folder, printed = run(tmp_path, url)
    tokenizer = json.loads((folder / "run.json").read_text())["tokenizer"]
    assert tokenizer == {
        "source": "folder",
        "name": str(model_dir),
        "prompt_lengths": "client tokenizer",
    }
    assert f"tokenizer: folder {model_dir}" in printed
    assert_prompt_lengths_exact(folder, Tokenizer.from_dir(model_dir), tmp_path)


def test_where_the_client_finds_no_tokenizer_the_servers_tokenize_builds_exact_prompts(
    tmp_path: Path,
) -> None:
    model_dir = make_hf_model_dir(tmp_path / "models" / "tiny-hf")
    tokenizer = Tokenizer.from_dir(model_dir)
    config = EngineConfig.from_flat(dict(model=str(model_dir), dtype="float32", device="cpu"))
    with running_server(config) as url:
        # The server has loaded it; the client can no longer find it at /v1/models' root.
        shutil.move(model_dir, tmp_path / "elsewhere")
        folder, printed = run(tmp_path, url)
    run_json = json.loads((folder / "run.json").read_text())
    assert run_json["tokenizer"] == {
        "source": "server",
        "name": "tiny-hf",
        "prompt_lengths": "server /tokenize",
    }
    assert_prompt_lengths_exact(folder, tokenizer, tmp_path)
    # Batched and cached: the pool (two calls per candidate, at most 192) and about one call
    # per prompt, not two calls per vocabulary id.
    calls = int(re.search(r"prompt lengths checked by the server: (\d+) calls", printed)[1])
    assert 24 < calls < 2 * 192 + 4 + 2 * 24, calls
    # No server call counts tokens during the load: the usage does.
    assert (load_run(folder).requests["output_tokens_source"] == "usage").all()


def test_a_hub_id_tokenizer_from_the_offline_cache_drives_a_cli_run(
    tmp_path: Path, offline_hub: Path
) -> None:
    files = tokenizer_repo_files(tmp_path / "repo", vocab_size=PRESETS["tiny"].vocab_size)
    lay_out_hub_repo(offline_hub, "acme/tiny-chat", files, COMMIT)
    config = EngineConfig.from_flat(dict(model="tiny", dtype="float32", device="cpu"))
    with running_server(config) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--scenario", str(scenario_file(tmp_path)),
             "--url", url, "--tokenizer", "acme/tiny-chat", "--runs-dir", str(tmp_path / "runs"),
             "--no-live"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = (tmp_path / "runs").iterdir()
    assert json.loads((folder / "run.json").read_text())["tokenizer"] == {
        "source": "hub",
        "name": "acme/tiny-chat",
        "revision": COMMIT,
        "prompt_lengths": "client tokenizer",
    }
    assert_prompt_lengths_exact(folder, Tokenizer.from_dir(files), tmp_path)


def test_nothing_resolves_one_line_naming_every_attempt(tmp_path: Path) -> None:
    models = {"data": [{"id": "served", "object": "model", "root": "acme/not-cached"}]}

    def route(request: SeenRequest) -> tuple[int, dict[str, str], bytes]:
        if request.path == "/v1/models":
            return 200, {"Content-Type": "application/json"}, json.dumps(models).encode()
        return 404, {}, b"not found"

    with threaded_server(route) as (url, seen), pytest.raises(RunError) as info:
        run(tmp_path, url)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"--url {url} (model 'served'): no tokenizer found: ")
    for attempt in (
        "folder acme/not-cached: no such directory",
        "hub acme/not-cached: not in the Hugging Face cache",
        "folder served: no such directory",
        "hub: not an id of the form org/name[@revision]",
        "server tokenization: POST /tokenize answered HTTP 404",
    ):
        assert attempt in message, attempt
    assert message.endswith(
        "pass --tokenizer with a local folder, a preset or a Hugging Face Hub id (org/name)"
    )
    assert [r.path for r in seen] == ["/v1/models", "/tokenize"]


def test_a_launched_engine_without_a_tokenizer_is_told_by_its_own_flag(tmp_path: Path) -> None:
    scenario = load_scenario(scenario_file(tmp_path))
    sink = Console(file=io.StringIO())
    launch = RunOptions(scenario, None, "llamacpp", None, None, tmp_path / "runs",
                        live=False, launch="llama-server --port {port}")  # fmt: skip
    expected = (
        r"^--launch 'llama-server --port \{port\}': .* pass --tokenizer \(a folder, a preset or "
        r"a Hub id\) or --launch-model$"
    )
    with pytest.raises(RunError, match=expected):
        run_benchmark(launch, sink)
    gguf = RunOptions(scenario, None, "llamacpp", None, None, tmp_path / "runs",
                      live=False, launch_model="model.gguf")  # fmt: skip
    with pytest.raises(RunError, match=r"^--launch-model 'model\.gguf': folder model\.gguf: no "):
        run_benchmark(gguf, sink)
    assert not (tmp_path / "runs").exists()  # refused before anything was launched or written
