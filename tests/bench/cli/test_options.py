"""bench's options declared once (bench.cli.flags.shared): what each command receives from them.

The commands' runs are captured where they would start (bench.run.orchestrate.run_benchmark,
bench.ab.session.run_ab) and refused there, so these check the options without an engine;
one run goes end to end against an OpenAI-compatible test server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.app import app
from bench.cli.flags.shared import Live, declared
from bench.run.orchestrate import RunOptions, RunRefused
from engine_adapters.registry import ADAPTERS
from tests.support.openai_fakes import MODELS, openai_handler, serving, write_scenario

runner = CliRunner()


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[RunOptions]:
    """The RunOptions of every run the command would start; each run is refused (exit 2)."""
    got: list[RunOptions] = []

    def run_benchmark(opts: RunOptions, console: Any) -> Any:
        got.append(opts)
        raise RunRefused("captured")

    monkeypatch.setattr("bench.run.orchestrate.run_benchmark", run_benchmark)
    return got


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_set_reaches_the_reference_engine_typed(captured: list[RunOptions]) -> None:
    result = invoke("run", "--set", "max-num-seqs=3", "--set", "batching=static", "--no-live")
    assert "captured" in result.output
    (opts,) = captured
    assert opts.engine_overrides == {"max_num_seqs": 3, "batching": "static"}


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ("max_num_seq=3", "max_num_seq is not an engine setting; did you mean 'max_num_seqs'?"),
        ("max_num_seqs=abc", "max_num_seqs must be an integer, got 'abc'"),
        ("max_num_seqs=0", "max_num_seqs must be at least 1, got 0"),
        ("batching=dynamic", "batching must be one of continuous, static"),
        ("batching", "expected NAME=VALUE"),
    ],
)
def test_a_bad_set_is_one_line_naming_it(captured: list[RunOptions], item: str, says: str) -> None:
    result = invoke("run", "--set", item)
    assert result.exit_code == 2
    assert f"--set {item!r}: {says}" in " ".join(result.output.split())
    assert captured == []


def test_set_is_refused_for_an_engine_at_url(captured: list[RunOptions]) -> None:
    result = invoke("run", "--url", "http://127.0.0.1:1", "--set", "batching=static")
    assert result.exit_code == 2
    assert "the engine at --url runs with its own settings" in " ".join(result.output.split())
    assert captured == []


def test_load_overrides_replace_the_scenarios(captured: list[RunOptions]) -> None:
    invoke(
        "run", "--scenario", "100-users", "--users", "2", "--num-requests", "5",
        "--input-len", "16", "--output-len", "4",
    )  # fmt: skip
    (opts,) = captured
    scenario = opts.scenario.to_dict()
    assert (scenario["users"], scenario["num_requests"]) == (2, 5)
    assert scenario["input_len"]["kind"] == "fixed" and scenario["input_len"]["value"] == 16
    assert scenario["output_len"]["value"] == 4
    assert scenario["engine"] == captured[0].scenario.engine.to_dict()


def test_the_client_limits_override_the_scenarios(captured: list[RunOptions]) -> None:
    invoke("run", "--scenario", "1-user", "--request-timeout", "30", "--read-timeout", "2.5")
    (opts,) = captured
    assert (opts.scenario.request_timeout_s, opts.scenario.read_timeout_s) == (30.0, 2.5)
    assert "--request-timeout 30.0" in opts.scenario.source


def test_a_client_limit_of_zero_is_refused(captured: list[RunOptions]) -> None:
    result = invoke("run", "--request-timeout", "0")
    assert result.exit_code == 2 and "--request-timeout" in result.output and captured == []


def test_an_override_out_of_bounds_is_refused(captured: list[RunOptions]) -> None:
    result = invoke("run", "--users", "0")
    assert result.exit_code == 2 and "--users" in result.output and captured == []


def test_a_small_run_needs_no_toml_file(tmp_path: Path) -> None:
    with serving(openai_handler(MODELS)) as server:
        result = invoke(
            "run", "--scenario", str(write_scenario(tmp_path)), "--users", "1",
            "--num-requests", "3", "--url", server.base_url, "--tokenizer", "tiny",
            "--runs-dir", str(tmp_path / "runs"), "--no-live", "--no-probes",
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    (folder,) = (tmp_path / "runs").iterdir()
    scenario = json.loads((folder / "run.json").read_text())["scenario"]
    assert (scenario["users"], scenario["num_requests"]) == (1, 3)


def test_ab_sends_header_and_key_and_shows_neither(monkeypatch: pytest.MonkeyPatch) -> None:
    plans: list[Any] = []

    def run_ab(plan: Any, console: Any) -> Any:
        plans.append(plan)
        raise RunRefused("captured")

    monkeypatch.setattr("bench.ab.session.run_ab", run_ab)
    result = invoke(
        "ab", "--a-url", "http://127.0.0.1:1", "--b-url", "http://127.0.0.1:2",
        "--header", "X-Tenant: secret-tenant", "--api-key", "secret-key",
    )  # fmt: skip
    assert result.exit_code == 2 and "captured" in result.output
    headers = plans[0].base.headers.as_dict()
    assert headers["X-Tenant"] == "secret-tenant"
    assert headers["Authorization"] == "Bearer secret-key"
    assert "secret" not in result.output


def test_sweep_with_two_urls_is_a_fleet(captured: list[RunOptions]) -> None:
    a, b = "http://127.0.0.1:1", "http://127.0.0.1:2"
    invoke("sweep", "--users", "1", "--url", a, "--url", b, "--route", "least-outstanding")
    (opts,) = captured
    assert opts.url == a and opts.endpoints == (a, b) and opts.route == "least-outstanding"


def test_sweep_start_is_a_count_of_users(captured: list[RunOptions]) -> None:
    bad = invoke("sweep", "--slo", "ttft_p99=500", "--start", "2.5")
    assert bad.exit_code == 2
    assert "--start 2.5: a count of users is a whole number" in " ".join(bad.output.split())
    invoke("sweep", "--slo", "ttft_p99=500", "--start", "4")
    assert captured[0].scenario.users == 4


def test_sweep_takes_no_probes_and_no_calibrate(captured: list[RunOptions]) -> None:
    invoke("sweep", "--users", "1", "--no-probes", "--no-calibrate")
    assert (captured[0].probes, captured[0].calibrate) == (False, False)


@pytest.mark.parametrize("command", ["run", "sweep", "ab", "ablate", "simulate", "techniques"])
def test_help_shows_metavars_not_python_types(command: str) -> None:
    result = invoke(command, "--help")
    # typer's own --help line shows <bool> whatever the commands declare.
    lines = [line for line in result.output.splitlines() if "--help" not in line]
    assert result.exit_code == 0
    assert not [line for line in lines if "<list[" in line or "<bool>" in line]


def test_engine_names_come_from_the_registry(captured: list[RunOptions]) -> None:
    help_text = " ".join(invoke("run", "--help").output.split())
    assert all(f"{name}:" in help_text for name in ADAPTERS)
    result = invoke("run", "--engine", "nosuch")
    assert result.exit_code == 2 and "'nosuch' is not one of" in result.output
    assert captured == []


def test_live_has_one_default_everywhere(captured: list[RunOptions]) -> None:
    invoke("run")
    invoke("sweep", "--users", "1")
    assert [opts.live for opts in captured] == [True, True]


def test_a_command_cannot_write_another_default() -> None:
    def command(*, live: Live = False) -> None:
        del live

    with pytest.raises(TypeError, match="drop the one written here"):
        declared(command)
    app_ = typer.Typer()
    app_.command()(declared(lambda *, live=True: None))  # the same default is allowed
