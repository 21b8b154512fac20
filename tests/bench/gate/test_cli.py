"""`bench baseline save` and `bench gate` through Typer: exit codes, messages and report files."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.gate import register
from tests.support.fingerprints import throttled
from tests.support.gate_fakes import HARDWARE, write_fake_run, write_loaded_run

RULES = """
resamples = 1000
[metrics]
"throughput.output_tok_s" = { max_drop_pct = 10 }
"tpot_ms.p50" = { max_rise_pct = 10 }
"ttft_ms.p90" = { max_rise_pct = 25 }
"""


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def other() -> None:  # a second command, so that Typer keeps subcommands by name
        pass

    register(app)
    return app


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, app: typer.Typer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gate")
    base_runs = [write_fake_run(root / "base", seed=s) for s in range(3)]
    rules = root / "rules.toml"
    rules.write_text(RULES)
    baseline = root / "baseline.json"
    result = CliRunner().invoke(
        app, ["baseline", "save", *map(str, base_runs), "--name", "fake", "-o", str(baseline)]
    )
    assert result.exit_code == 0, result.output
    assert "3 run(s), 360 measured requests" in result.output
    return {"root": root, "baseline": baseline, "rules": rules}


def gate(app: typer.Typer, setup: dict[str, Path], runs: list[Path], *extra: str):
    args = ["gate", *map(str, runs), "--baseline", str(setup["baseline"])]
    return CliRunner().invoke(app, [*args, "--rules", str(setup["rules"]), *extra])


def test_same_configuration_passes_with_reports(app: typer.Typer, setup: dict[str, Path]) -> None:
    runs = [write_fake_run(setup["root"] / "same", seed=s) for s in (10, 11, 12)]
    junit, markdown = setup["root"] / "r" / "gate.xml", setup["root"] / "r" / "gate.md"
    result = gate(app, setup, runs, "--junit", str(junit), "--markdown", str(markdown))
    assert result.exit_code == 0, result.output
    assert "PASS: 3 run(s) against baseline fake (3 run(s))" in result.output
    suite = ET.fromstring(junit.read_text())
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "0", "0")
    names = [c.get("name") for c in suite.iter("testcase")]
    assert names == ["throughput.output_tok_s", "tpot_ms.p50", "ttft_ms.p90"]
    text = markdown.read_text()
    assert text.startswith("### Performance gate: ✅ pass")
    assert "| `tpot_ms.p50` (ms) |" in text


def test_a_slower_engine_fails(app: typer.Typer, setup: dict[str, Path]) -> None:
    runs = [write_fake_run(setup["root"] / "slow", seed=s, slowdown=1.5) for s in (20, 21, 22)]
    junit = setup["root"] / "slow.xml"
    result = gate(app, setup, runs, "--junit", str(junit))
    assert result.exit_code == 1, result.output
    assert "regression: the whole 95% CI" in result.output
    failures = ET.fromstring(junit.read_text()).findall("testcase/failure")
    assert {f.get("type") for f in failures} == {"regression"} and len(failures) == 3


def test_too_few_samples_are_inconclusive(app: typer.Typer, setup: dict[str, Path]) -> None:
    run = write_fake_run(setup["root"] / "few", seed=30, requests=12)
    result = gate(app, setup, [run], "--force")  # --force: 12 requests is another workload
    assert result.exit_code == 2, result.output
    assert "too few samples: the candidate has" in result.output
    allowed = gate(app, setup, [run], "--force", "--allow-inconclusive")
    assert allowed.exit_code == 0 and "allowed by --allow-inconclusive" in allowed.output


def test_a_busy_candidate_is_not_judged_unless_allowed(
    app: typer.Typer, setup: dict[str, Path]
) -> None:
    quiet = [write_fake_run(setup["root"] / "quiet", seed=s) for s in (40, 41)]
    busy = write_loaded_run(setup["root"] / "busy", other_share=0.35, seed=42)
    result = gate(app, setup, [*quiet, busy])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())  # the console wraps long notes
    assert "INCONCLUSIVE" in output.upper()
    named = f"run {busy.name}: other processes used 35% of the CPU during this run"
    assert f"not judged, busy machine: candidate runs, {named}" in output
    assert "--allow-busy" in output
    allowed = gate(app, setup, [*quiet, busy], "--allow-busy")
    assert allowed.exit_code == 0, allowed.output
    output = " ".join(allowed.output.split())
    assert "PASS: 3 run(s)" in output
    assert f"busy machine, judged by --allow-busy: candidate runs, {named}" in output


def test_other_hardware_is_refused_unless_forced(app: typer.Typer, setup: dict[str, Path]) -> None:
    other = {**HARDWARE, "cpu": "Other CPU", "cpu_count_logical": 64}
    runs = [write_fake_run(setup["root"] / "hw", seed=s, hardware=other) for s in (40, 41)]
    markdown = setup["root"] / "hw.md"
    refused = gate(app, setup, runs, "--markdown", str(markdown))
    assert refused.exit_code == 2
    assert "hardware.cpu: 'Fake CPU 9000' -> 'Other CPU'" in refused.output
    assert "hardware.cpu_count_logical: 2 -> 64" in refused.output
    assert markdown.read_text().startswith("### Performance gate: ⚠️ unusable input")
    forced = gate(app, setup, runs, "--force")
    assert forced.exit_code == 0, forced.output
    assert "forced: the baseline was made on other hardware" in forced.output
    # A CI machine without a baseline of its own: said so, not judged, not failed.
    skipped = gate(app, setup, runs, "--skip-other-hardware", "--markdown", str(markdown))
    assert skipped.exit_code == 0, skipped.output
    assert "not judged" in skipped.output and "Other CPU" in skipped.output
    assert markdown.read_text().startswith("**Performance gate not judged.**")


def test_a_metric_the_runs_lack_is_a_clear_error(app: typer.Typer, setup: dict[str, Path]) -> None:
    rules = setup["root"] / "goodput.toml"
    rules.write_text('[metrics]\n"goodput.requests_per_s" = { max_drop_pct = 5 }\n')
    run = write_fake_run(setup["root"] / "goodput", seed=50)
    args = ["gate", str(run), "--baseline", str(setup["baseline"]), "--rules", str(rules)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "goodput.requests_per_s: the baseline fake runs have no SLO" in result.output


def test_unusable_input_exits_2_with_a_junit_error(
    app: typer.Typer, setup: dict[str, Path]
) -> None:
    bad = setup["root"] / "bad.json"
    bad.write_text('{"format": "llm-perf-lab/baseline", "format_version": 1}')
    junit = setup["root"] / "bad.xml"
    run = write_fake_run(setup["root"] / "bad", seed=60)
    args = ["gate", str(run), "--baseline", str(bad), "--junit", str(junit)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "missing field 'name'" in result.output
    (error,) = ET.fromstring(junit.read_text()).findall("testcase/error")
    assert error.get("type") == "unusable-input"
    missing = CliRunner().invoke(app, ["gate", str(setup["root"] / "nope"), "--baseline", str(bad)])
    assert missing.exit_code == 2


def test_baseline_save_refuses_a_non_run_folder(app: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["baseline", "save", str(tmp_path), "--name", "x"])
    assert result.exit_code == 2 and "not a run folder" in result.output


def test_bench_module_exposes_the_commands() -> None:
    from bench.cli.app import app as bench_app

    names = {c.name for c in bench_app.registered_commands}
    if "gate" not in names:
        pytest.skip("bench/cli/app.py does not register bench.cli.gate yet")
    out = subprocess.run(
        [sys.executable, "-m", "bench", "gate", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "--baseline" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "bench", "baseline", "save", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "--name" in out.stdout


def test_an_invalid_candidate_is_not_judged_unless_allowed(
    app: typer.Typer, setup: dict[str, Path]
) -> None:
    quiet = [write_fake_run(setup["root"] / "cool", seed=s) for s in (50, 51)]
    hot = write_fake_run(setup["root"] / "hot", seed=52, fingerprint=throttled(12.0))
    result = gate(app, setup, [*quiet, hot])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    named = f"run {hot.name}: gpu_throttle: GPU 0 (NVIDIA H100 80GB HBM3) was held below its"
    assert f"not judged, not a valid measurement: candidate runs, {named}" in output
    assert "--allow-invalid" in output
    allowed = gate(app, setup, [*quiet, hot], "--allow-invalid")
    assert allowed.exit_code == 0, allowed.output
    output = " ".join(allowed.output.split())
    assert (
        "PASS: 3 run(s)" in output
        and f"judged by --allow-invalid: candidate runs, {named}" in output
    )


@pytest.fixture(scope="module")
def history(setup: dict[str, Path]) -> Path:
    """A run history holding the baseline's three runs (`bench history add`)."""
    from results.history.store import History

    target = setup["root"] / "history.duckdb"
    for run in sorted((setup["root"] / "base").iterdir()):
        History(target).add(run)
    return target


@pytest.mark.parametrize(
    ("case", "extra"),
    [
        ("same", ()),
        ("slow", ()),
        ("few", ("--force",)),
        ("busy", ()),
        ("hardware", ()),
        ("hardware", ("--force",)),
        ("hardware", ("--skip-other-hardware",)),
    ],
)
def test_the_history_gives_the_baselines_verdicts(
    app: typer.Typer, setup: dict[str, Path], history: Path, case: str, extra: tuple[str, ...]
) -> None:
    pytest.importorskip("ruptures", reason="change points need the history extra (ruptures)")
    root = setup["root"] / f"history-{case}-{len(extra)}"
    other = {**HARDWARE, "cpu": "Other CPU", "cpu_count_logical": 64}
    made = {
        "same": lambda: [write_fake_run(root, seed=s) for s in (60, 61)],
        "slow": lambda: [write_fake_run(root, seed=s, slowdown=1.5) for s in (62, 63)],
        "few": lambda: [write_fake_run(root, seed=64, requests=12)],
        "busy": lambda: [write_loaded_run(root, other_share=0.35, seed=65)],
        "hardware": lambda: [write_fake_run(root, seed=66, hardware=other)],
    }[case]()
    by_file = gate(app, setup, made, *extra)
    args = ["gate", *map(str, made), "--history", str(history), "--rules", str(setup["rules"])]
    by_history = CliRunner().invoke(app, [*args, *extra])
    assert by_history.exit_code == by_file.exit_code, (by_file.output, by_history.output)
    for word in ("PASS", "FAIL", "INCONCLUSIVE", "not judged"):
        assert (word in by_history.output) == (word in by_file.output), by_history.output
    if case == "same":
        assert "baseline: 3 run(s) of the history since its first run" in by_history.output


def test_the_history_or_a_baseline_not_both(app: typer.Typer, setup: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["gate", str(setup["root"])])
    assert result.exit_code == 2
    assert "give one of --baseline FILE and --history PATH" in result.output
