"""The sides of `bench ab`: their options checked with one-line errors, and the `bench run`
options of a run of each kind."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bench.ab.revisions import Revision
from bench.ab.sides import AbError, Side, parse_sets, run_options, side_from_options
from bench.run.orchestrate import RunOptions
from bench.scenario.scenario import load_scenario
from tests.support.paths import REPO_ROOT

SMOKE = REPO_ROOT / "benchmarks" / "perf-gate" / "ab-smoke.toml"


def _base(tmp_path: Path) -> RunOptions:
    return RunOptions(load_scenario(str(SMOKE)), None, "reference", None, None, tmp_path, False)


def test_sets_are_parsed_by_each_settings_type() -> None:
    sets = parse_sets(["step-delay-ms=2.5", "enable_prefix_caching=off"], "--b-set")
    assert sets == {"step_delay_ms": 2.5, "enable_prefix_caching": False}


@pytest.mark.parametrize(
    ("sets", "fragment"),
    [
        (["step_delay_ms"], "--b-set 'step_delay_ms': expected NAME=VALUE"),
        (["no_such_setting=1"], "--b-set 'no_such_setting=1'"),
        (["step_delay_ms=-1"], "--b-set 'step_delay_ms=-1'"),
        (["step_delay_ms=fast"], "--b-set 'step_delay_ms=fast'"),
    ],
)
def test_bad_sets_name_the_option_and_value(sets: list[str], fragment: str) -> None:
    with pytest.raises(AbError) as info:
        parse_sets(sets, "--b-set")
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_kinds_of_engine_exclude_each_other(tmp_path: Path) -> None:
    scenario = _base(tmp_path).scenario
    with pytest.raises(AbError, match="--a-rev and --a-url exclude each other"):
        side_from_options("A", [], "HEAD", "http://127.0.0.1:1", None, scenario)
    with pytest.raises(AbError, match="--b-set sets the reference engine's settings"):
        side_from_options("B", ["step_delay_ms=1"], None, None, "vllm serve m", scenario)
    with pytest.raises(AbError, match="--a-url 'localhost:8000': expected http://HOST:PORT"):
        side_from_options("A", [], None, "localhost:8000", None, scenario)


def test_sets_are_checked_over_the_scenarios_engine_table(tmp_path: Path) -> None:
    scenario = _base(tmp_path).scenario
    # Each value is valid alone; the simulated device needs a GPU the scenario does not give.
    with pytest.raises(AbError, match=r"^--b-set: .*device='sim'"):
        side_from_options("B", ["device=sim"], None, None, None, scenario)


def test_a_settings_side_runs_this_checkouts_engine_with_its_settings(tmp_path: Path) -> None:
    side = side_from_options("B", ["step_delay_ms=3"], None, None, None, _base(tmp_path).scenario)
    opts = run_options(side, _base(tmp_path), tmp_path / "B")
    assert (opts.url, opts.launch, opts.engine_overrides) == (None, None, {"step_delay_ms": 3.0})
    assert opts.runs_dir == tmp_path / "B"
    assert side.describe() == "B: this checkout + step_delay_ms=3.0"


def test_a_url_side_and_a_launch_side(tmp_path: Path) -> None:
    url = Side("A", url="http://127.0.0.1:9")
    assert run_options(url, _base(tmp_path), tmp_path).url == "http://127.0.0.1:9"
    launch = Side("B", launch="llama-server --port {port}")
    assert run_options(launch, _base(tmp_path), tmp_path).launch == "llama-server --port {port}"


def test_a_rev_side_serves_from_its_own_virtualenv_in_isolated_mode(tmp_path: Path) -> None:
    revision = Revision("HEAD~1", "f" * 40, tmp_path / "revisions" / ("f" * 40))
    side = Side("A", {"step_delay_ms": 1.5}, rev="HEAD~1", revision=revision)
    opts = run_options(side, _base(tmp_path), tmp_path / "A")
    argv = shlex.split(opts.launch or "")
    assert argv[:5] == [str(revision.python), "-I", "-m", "bench", "serve"]
    # The scenario's [engine] table and the side's settings, as `bench serve` flags.
    assert "--step-delay-ms" in argv and argv[argv.index("--step-delay-ms") + 1] == "1.5"
    assert argv[argv.index("--num-threads") + 1] == "1"
    assert opts.tokenizer == "tiny" and opts.engine == "reference"
    assert side.describe() == f"A: rev HEAD~1 ({'f' * 10}) + step_delay_ms=1.5"
