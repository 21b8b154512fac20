"""`bench history` through Typer: add (runs, a --repeat group, a sweep, a runs folder), list
with its filters, sql, trend's table and page, and changes on a history with a known step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.history import register
from bench.cli.history_views import register as register_views
from results.folder.run_group import GROUP_FORMAT, GROUP_JSON
from tests.support.fingerprints import throttled
from tests.support.gate_fakes import write_fake_run


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def other() -> None:  # a second command, so that Typer keeps subcommands by name
        pass

    register(app)
    register_views(app)
    return app


def bench(app: typer.Typer, history: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["history", *args, "--history", str(history)])
    return result.exit_code, " ".join(result.output.split())


def at(run: Path, minute: int, commit: str = "abc123") -> Path:
    """Give a fake run its own start time (minutes after 2026-01-01) and commit."""
    document = json.loads((run / "run.json").read_text())
    document["started_utc"] = f"2026-01-01T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
    document["git_commit"] = commit
    (run / "run.json").write_text(json.dumps(document))
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder: two runs, a --repeat group of two, a sweep of two points beside it, and
    one run on a throttled GPU (not valid)."""
    root = tmp_path_factory.mktemp("runs")
    at(write_fake_run(root, seed=1), 0)
    at(write_fake_run(root, seed=2, scenario_name="other"), 1)
    group = root / "20260101T000200Z-synthetic-fake-x2"
    members = [at(write_fake_run(group, seed=s), 2 + s) for s in (3, 4)]
    (group / GROUP_JSON).write_text(
        json.dumps({"format": GROUP_FORMAT, "format_version": 1, "runs": [m.name for m in members]})
    )
    points = [at(write_fake_run(root, seed=s, users=u), 10 + s) for s, u in ((5, 1), (6, 2))]
    sweep = root / "20260101T001000Z-sweep-synthetic-users"
    sweep.mkdir()
    body = {"points": [{"value": i, "folder": str(p)} for i, p in enumerate(points)]}
    (sweep / "sweep.json").write_text(json.dumps(body))
    at(write_fake_run(root, seed=7, fingerprint=throttled(5.0)), 20)
    return root


def test_add_indexes_every_kind_of_folder_once(app: typer.Typer, runs: Path, tmp_path: Path):
    history = tmp_path / "history.duckdb"
    code, out = bench(app, history, "add", str(runs))
    assert code == 0 and "7 added, 0 unchanged, 0 moved" in out, out
    code, out = bench(app, history, "add", str(runs))
    assert code == 0 and "0 added, 7 unchanged" in out, out
    code, out = bench(
        app,
        history,
        "sql",
        "SELECT kind, count(*) AS n FROM collections "
        "JOIN collection_runs ON key = collection_key GROUP BY kind ORDER BY kind",
    )
    assert code == 0 and "group │ 2" in out and "sweep │ 2" in out, out


def test_a_folder_that_is_none_of_benchs_is_refused(app: typer.Typer, tmp_path: Path) -> None:
    code, out = bench(app, tmp_path / "h.duckdb", "add", str(tmp_path / "nowhere"))
    assert code == 2 and "no such folder" in out


def test_list_filters_and_leaves_invalid_runs_out(app: typer.Typer, runs: Path, tmp_path: Path):
    history = tmp_path / "history.duckdb"
    bench(app, history, "add", str(runs))
    code, out = bench(app, history, "list", "--metric", "throughput.output_tok_s")
    assert code == 0 and "6 run(s)" in out, out
    # What was left out is said, with the flag that shows it.
    assert "1 not valid or not usable left out (--include-invalid shows them)" in out, out
    code, out = bench(app, history, "list", "--include-invalid")
    assert "7 run(s)" in out and "left out" not in out
    assert "1 run(s)" in bench(app, history, "list", "--scenario", "other")[1]
    assert "0 run(s)" in bench(app, history, "list", "--since", "2026-01-01T00:17")[1]
    assert "2 run(s)" in bench(app, history, "list", "--since", "2026-01-01T00:15")[1]
    assert "0 run(s)" in bench(app, history, "list", "--hardware", "Other CPU")[1]
    assert "6 run(s)" in bench(app, history, "list", "--hardware", "Fake CPU")[1]
    code, out = bench(app, history, "list", "--metric", "ttft_ms.p98")
    assert code == 2 and "did you mean" in out and "ttft_ms.p99" in out


def test_sql_answers_over_the_runs_and_the_requests_view(
    app: typer.Typer, runs: Path, tmp_path: Path
) -> None:
    history = tmp_path / "history.duckdb"
    bench(app, history, "add", str(runs))
    code, out = bench(app, history, "sql", "SELECT count(*) AS n FROM requests")
    assert code == 0 and "│ 840 │" in out, out  # 7 runs of 120 requests
    code, out = bench(app, history, "sql", "SELECT nothing FROM runs")
    assert code == 2 and "query failed" in out


def test_trend_and_changes_find_a_known_step(app: typer.Typer, tmp_path: Path) -> None:
    pytest.importorskip("ruptures", reason="change points need the history extra (ruptures)")
    root, history = tmp_path / "runs", tmp_path / "history.duckdb"
    for i in range(16):  # eight runs, then eight 40% slower from commit "slow"
        slowdown, commit = (1.0, "fast") if i < 8 else (1.4, "slow")
        at(write_fake_run(root, seed=100 + i, requests=40, slowdown=slowdown), i, commit)
    bench(app, history, "add", str(root))
    code, out = bench(app, history, "changes", "tpot_ms.p50", "throughput.output_tok_s")
    assert code == 0 and "2 change point(s)" in out, out
    assert "fast -> slow" in out and "8/8" in out
    page = tmp_path / "trend.html"
    code, out = bench(app, history, "trend", "tpot_ms.p50", "--by", "commit", "-o", str(page))
    assert code == 0 and "16 run(s)" in out and "change +" in out, out
    text = page.read_text()
    assert "commit slow" in text and "report.html" in text and "plotly_click" in text


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_export_writes_a_row_per_run_or_per_request(
    app: typer.Typer, runs: Path, tmp_path: Path, fmt: str
) -> None:
    import pandas as pd

    def read(path: Path) -> pd.DataFrame:
        if fmt == "csv":
            return pd.read_csv(path)
        return pd.read_parquet(path) if fmt == "parquet" else pd.read_json(path, lines=True)

    out = tmp_path / f"runs.{fmt}"
    result = CliRunner().invoke(app, ["export", str(runs), "--format", fmt, "-o", str(out)])
    assert result.exit_code == 0 and "7 run row(s)" in result.output, result.output
    frame = read(out)
    assert len(frame) == 7 and {"run_id", "git_commit", "ttft_ms.p99"} <= set(frame.columns)
    history = tmp_path / "history.duckdb"
    bench(app, history, "add", str(runs))
    out = tmp_path / f"requests.{fmt}"
    args = ["export", str(history), "--requests", "--format", fmt, "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "840 request row(s)" in result.output, result.output
    assert {"run_key", "run_id", "request_id", "sent_s"} <= set(read(out))


SIM_SCENARIO = """
name = "sim-history"
users = 4
num_requests = 12
ignore_eos = true
[input_len]
kind = "uniform"
low = 16
high = 32
[output_len]
kind = "uniform"
low = 4
high = 8
[engine]
preset = "tiny"
"""


def test_a_run_adds_itself_when_it_ends_unless_told_not_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench.cli.simulate import register as register_simulate
    from results.history.store import History
    from results.history.target import ENV_VAR

    monkeypatch.setenv(ENV_VAR, "")  # unset: the runs folder's history; restored after
    app = typer.Typer()
    register_simulate(app)
    scenario = tmp_path / "sim.toml"
    scenario.write_text(SIM_SCENARIO)
    runs = tmp_path / "runs"
    base = ["simulate", "--scenario", str(scenario), "--gpu", "cpu", "--no-html"]
    result = CliRunner().invoke(app, [*base, "--runs-dir", str(runs)])
    assert result.exit_code == 0, result.output
    with History(runs / "history.duckdb").reading() as con:
        assert con.execute("SELECT scenario, count(*) FROM runs GROUP BY 1").fetchall() == [
            ("sim-history", 1)
        ]
    shared = tmp_path / "shared" / "history.duckdb"
    result = CliRunner().invoke(app, [*base, "--runs-dir", str(runs), "--history", str(shared)])
    assert result.exit_code == 0 and History(shared).path.is_file(), result.output
    result = CliRunner().invoke(app, [*base, "--runs-dir", str(runs), "--no-history"])
    assert result.exit_code == 0, result.output
    with History(runs / "history.duckdb").reading() as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    assert len([p for p in runs.iterdir() if (p / "run.json").is_file()]) == 3


def test_frontier_overlays_two_configurations(app: typer.Typer, tmp_path: Path) -> None:
    folders = []
    for name, slowdown in (("fast", 1.0), ("slow", 1.5)):
        sweep = tmp_path / f"20260101T000000Z-sweep-{name}-users"
        sweep.mkdir()
        runs = [write_fake_run(tmp_path / name, seed=u, users=u, slowdown=slowdown)
                for u in (1, 4, 8)]  # fmt: skip
        body = {"points": [{"value": i, "folder": str(r)} for i, r in enumerate(runs)]}
        (sweep / "sweep.json").write_text(json.dumps(body))
        folders.append(str(sweep))
    page = tmp_path / "frontier.html"
    args = ["frontier", *folders, "--label", "fast", "--label", "slow", "-o", str(page)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "Pareto frontier points" in out and "CPU core" in out
    assert out.count("│ fast") >= 1 and out.count("│ slow") >= 1
    text = page.read_text()
    assert "fast: frontier" in text and "slow: frontier" in text
    wrong = CliRunner().invoke(app, ["frontier", *folders, "--label", "one"])
    assert wrong.exit_code == 2 and "one per folder" in " ".join(wrong.output.split())


def test_a_trend_needs_no_change_point_library(
    app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's install has no history extra: the trend is drawn all the same, with one
    line saying change points need the extra; `history changes` still fails, saying so."""
    import sys

    monkeypatch.setitem(sys.modules, "ruptures", None)  # an import of it raises ImportError
    root, history = tmp_path / "runs", tmp_path / "history.duckdb"
    for i in range(4):
        at(write_fake_run(root, seed=200 + i, requests=20), i, "c")
    bench(app, history, "add", str(root))
    page = tmp_path / "trend.html"
    code, out = bench(app, history, "trend", "ttft_ms.p50", "-o", str(page))
    assert code == 0 and "4 run(s)" in out, out
    assert "no change points: change points need the history extra" in out
    assert page.is_file()
    code, out = bench(app, history, "changes", "ttft_ms.p50")
    assert code == 2 and "history extra" in out


def test_a_trend_skips_runs_not_valid_saying_so_and_draws_a_line_per_scenario(
    app: typer.Typer, runs: Path, tmp_path: Path
) -> None:
    """The runs fixture holds one throttled run (not valid) and a run of another scenario: the
    trend leaves the first out by default, counted, and shows it with --include-invalid; the
    two scenarios are two series, never one line."""
    history = tmp_path / "history.duckdb"
    assert bench(app, history, "add", str(runs))[0] == 0
    page = tmp_path / "trend.html"
    code, out = bench(app, history, "trend", "ttft_ms.p50", "-o", str(page))
    text = " ".join(out.split())
    assert code == 0 and "6 run(s); 1 not valid or not usable left out" in text, out
    assert "2 series, each its own line" in text, out
    html = page.read_text()  # plotly's JSON writes the middle dot escaped
    assert "synthetic \\u00b7 engine_version" in html and "other \\u00b7 engine_version" in html
    assert "not valid or not usable" not in html
    code, out = bench(app, history, "trend", "ttft_ms.p50", "--include-invalid", "-o", str(page))
    assert code == 0 and "7 run(s)" in out and "left out" not in out, out
    assert "not valid or not usable" in page.read_text()
    code, out = bench(app, history, "trend", "ttft_ms.p50", "--scenario", "other", "-o", str(page))
    assert code == 0 and "1 run(s)" in out and "series, each" not in out, out
