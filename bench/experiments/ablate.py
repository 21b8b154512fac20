"""`bench ablate`: one scenario, one freshly started reference engine per switch setting.

Every setting runs the same scenario (same seed, so the same requests) against its own engine
process, so that one setting's cache or allocator state cannot leak into the next; each run
folder has its report.html, as a `bench run`'s has (bench.run.orchestrate.run_and_report). The
table reports each figure and its ratio to the first setting, which is the baseline.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from bench.experiments.ablation_metrics import ABLATION_COLUMNS, ablation_row
from bench.experiments.switch_quality import judged_quality, quality_text
from bench.run.end.interrupt import RunInterrupted, interruption_note
from bench.run.messages import print_path
from bench.run.orchestrate import RunError, RunOptions, reference_engine, run_and_report
from bench.run.terminal import print_table
from bench.scenario.engine_sets import SettingValue
from bench.scenario.scenario import Scenario
from engine.config import EngineConfig, SettingError
from perfmodel.files import JSONObject, atomic_write_text
from results.folder.folder_kinds import ABLATION_JSON
from results.folder.run_folder import load_run, sanitize_name
from results.validity.usability import DEFAULT_MAX_ERROR_RATE

# The file in an ablation's folder that holds its table (run_ablation, render_ablation).

# Every setting is an ablation switch but the name clients send, which changes no figure.
_NOT_SWITCHES = ("served_model_name",)


class AblationError(ValueError):
    """A --switch that names no engine setting or gives a value of the wrong type."""


@dataclass(frozen=True)
class Switch:
    name: str
    values: tuple[Any, ...]


def parse_switch(spec: str) -> Switch:
    """``NAME=V1,V2,...`` with NAME an engine setting (`bench serve --help` lists them), in
    snake or kebab case; each value is parsed as the setting's type (engine.config.Setting.parse:
    on/off for booleans, none for an unset value where the setting allows it).

    ``model`` switches presets (e.g. model=tiny,tiny-mha,tiny-mqa to see what GQA buys); the
    models must share a tokenizer, since every setting sends the same prompts.
    """
    name, sep, values = spec.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not values.strip():
        raise AblationError(
            f"--switch {spec!r}: expected NAME=V1,V2 (e.g. batching=continuous,static)"
        )
    if name in _NOT_SWITCHES:
        raise AblationError(f"--switch {spec!r}: {name} is not a switch: it changes no figure")
    try:
        setting = EngineConfig.setting(name)
        parsed = tuple(setting.parse(v) for v in values.split(","))
    except SettingError as e:
        raise AblationError(f"--switch {spec!r}: {e}") from e
    return Switch(name, parsed)


def settings_grid(switches: list[Switch], scenario: Scenario) -> list[dict[str, SettingValue]]:
    """Every combination of the switches' values; the first (all first values) is the baseline.

    Each combination is checked now, over the scenario's [engine] table as the run will merge
    it (bench.run.orchestrate.reference_engine), so a bad one fails before any run.
    """
    names = [s.name for s in switches]
    if len(set(names)) != len(names):
        raise AblationError(f"a switch is given twice: {', '.join(names)}")
    grid = [dict(zip(names, combo, strict=True)) for combo in itertools.product(
        *(s.values for s in switches)
    )]  # fmt: skip
    for setting in grid:
        try:
            reference_engine(scenario, setting)
        except RunError as e:
            raise AblationError(f"setting {label(setting)}: {e}") from e
    return grid


def label(setting: Mapping[str, SettingValue]) -> str:
    return ",".join(f"{k}={v}" for k, v in setting.items())


def run_ablation(
    scenario: Scenario,
    switches: list[Switch],
    runs_dir: Path,
    console: Console,
    live: bool = True,
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
    quality: bool = True,
) -> Path:
    """Run every setting; write <runs_dir>/<UTC>-ablate-<scenario>/ablation.json; return it.

    With ``quality``, each setting but the baseline is also judged against it in this process
    (ablation_quality: is its output right, what does it cost in logits), in float32.

    Each row keeps its run's usability verdict (summary.json's ``usability``), so a setting whose
    run is not usable is named after all of them ran. A signal ends it: ablation.json keeps the
    settings that finished, with "interrupted" (see bench.run.end.interrupt.interruption_note);
    RunInterrupted propagates when none had.
    """
    grid = settings_grid(switches, scenario)
    rows: list[dict[str, Any]] = []
    interrupted: dict[str, Any] | None = None
    for i, setting in enumerate(grid):
        console.rule(Text(f"setting {i + 1}/{len(grid)}: {label(setting)}", style="bold"))
        opts = RunOptions(
            scenario, None, "reference", None, None, runs_dir, live, setting,
            max_error_rate=max_error_rate,
        )  # fmt: skip
        try:
            folder, summary = run_and_report(opts, console)
        except RunInterrupted as exc:
            if not rows:
                raise
            interrupted = interruption_note(exc)
            break
        rows.append({"setting": setting, "label": label(setting), "run": str(folder),
                     **ablation_row(load_run(folder)),
                     "usability": summary.get("usability")})  # fmt: skip
    baseline = rows[0]
    if quality:
        for row in rows[1:]:
            row["quality"], row["quality_missing"] = ablation_quality(
                scenario, baseline["setting"], row["setting"]
            )
    for row in rows:
        row["ratios"] = {
            key: (row[key] / baseline[key]) if row[key] is not None and baseline[key] else None
            for key, _, _ in ABLATION_COLUMNS
        }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = runs_dir / f"{stamp}-ablate-{sanitize_name(scenario.name)}"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ABLATION_JSON
    doc = {
        "scenario": scenario.to_dict(),
        "switches": {s.name: list(s.values) for s in switches},
        "columns": [{"key": k, "title": t, "unit": u} for k, t, u in ABLATION_COLUMNS],
        "rows": rows,
    }
    if interrupted is not None:
        doc["interrupted"] = interrupted
    atomic_write_text(path, json.dumps(doc, indent=2, default=str) + "\n")
    return path


def ablation_quality(
    scenario: Scenario, baseline: Mapping[str, SettingValue], setting: Mapping[str, SettingValue]
) -> tuple[JSONObject | None, str | None]:
    """(the quality of ``setting`` against ``baseline``, bench.experiments.switch_quality's
    SwitchQuality as a dict, or None and why not). Engines of the scenario's model are built
    in this process, in float32, one at a time: a model too large for this host's memory
    says so instead."""
    flat = reference_engine(scenario, baseline).settings()
    on = {k: v for k, v in setting.items() if baseline.get(k) != v}
    try:
        got = judged_quality(flat, on)
    except (MemoryError, RuntimeError, ValueError) as exc:
        return None, f"could not be measured here: {str(exc).splitlines()[0][:120]}"
    if got is None:
        return None, "another model, dtype or device"
    return got.to_dict(), None


def ablation_verdicts(path: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """(label, run folder, usability verdict) of each row of ablation.json at ``path``."""
    rows = json.loads(path.read_text())["rows"]
    return [(str(row["label"]), Path(row["run"]), row.get("usability")) for row in rows]


def format_figure(value: Any, unit: str) -> str:
    """An ablation figure in its unit (ABLATION_COLUMNS): MiB, percent, counts, or a number."""
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value / 2**20:,.1f} MiB"
    if unit == "fraction":
        return f"{value * 100:.1f}%"
    if unit == "requests":
        return f"{value:,d}"
    return f"{value:,.1f}"


def render_ablation(path: Path, console: Console) -> None:
    """Print ablation.json as a table: each figure, and its ratio to the first setting."""
    from rich.table import Table

    doc = json.loads(path.read_text())
    table = Table(title=f"Ablation: {doc['scenario']['name']} (ratios to the first setting)")
    table.add_column("setting", overflow="fold", min_width=28)
    for col in doc["columns"]:
        table.add_column(col["title"], justify="right")
    table.add_column("quality against the first", overflow="fold", max_width=36)
    for i, row in enumerate(doc["rows"]):
        cells = [row["label"]]
        for col in doc["columns"]:
            value, ratio = row.get(col["key"]), row["ratios"].get(col["key"])
            text = format_figure(value, col["unit"])
            if i and ratio is not None:
                text += f"\n×{ratio:.2f}"
            cells.append(text)
        missing = row.get("quality_missing") or "not measured"
        cells.append(quality_text(row.get("quality"), missing) if i else "(baseline)")
        table.add_row(*cells)
    print_table(console, table)
    print_path(console, "ablation", path)
