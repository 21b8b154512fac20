"""A run folder read for drawing: the required tables, whatever optional ones exist, and notes
saying plainly what the run did not record.

Required (a RunFolderError otherwise, from results.folder.run_folder): run.json, requests.parquet,
tokens.parquet. Optional, each read defensively (a file that cannot be read becomes a note, not
an exception): summary.json (recomputed from the tables when absent), steps.parquet,
samples.parquet (long format: t_s, source, name, value, labels).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.itl import itl_cdf
from results.folder.records import REQUEST_BACKFILLS
from results.folder.run_folder import (
    REQUESTS_PARQUET,
    RUN_JSON,
    SAMPLES_PARQUET,
    STEPS_PARQUET,
    SUMMARY_JSON,
    TOKENS_PARQUET,
    RunData,
    RunFolderError,
    load_run,
)
from results.folder.tables import backfill_frame
from results.folder.token_source import TokenSource, token_source
from results.run_summary import request_summary
from results.validity.run_end import run_end_summary

__all__ = ["SAMPLES_COLUMNS", "Note", "RunView", "load_run_view"]

SAMPLES_COLUMNS: tuple[str, ...] = ("t_s", "source", "name", "value")
# The most points of a CDF drawn from the chunk rows (a few thousand, whatever the run's length).
CDF_POINTS = 2000

# The steps.parquet columns the figures use; a file of another version may hold more or fewer.
STEPS_COLUMNS_USED: tuple[str, ...] = (
    "start_s", "end_s", "forward_s", "num_seqs", "num_prefill_seqs", "num_decode_seqs",
    "num_prefill_tokens", "num_decode_tokens", "context_tokens", "attn_pairs", "kv_blocks_used",
    "kv_blocks_total", "num_running", "num_waiting",
)  # fmt: skip


@dataclass(frozen=True)
class Note:
    """One thing a page says about missing data. ``topic`` names the section it belongs to
    ("run", "timeline", "steps", "roofline", "errors") so it can be shown there too."""

    topic: str
    text: str


@dataclass(frozen=True)
class RunView:
    """Everything a dashboard draws from one run folder.

    ``requests`` gains the derived per-request columns (milliseconds, tokens/s): ttft_ms,
    tpot_ms, e2el_ms, queueing_delay_ms, tps, end_s (the last moment a request was seen),
    measured (ok and inside summary.json's measured window), and for reasoning
    answer_tokens, time_to_first_answer_token_ms and answer_tps (results.figures.summary's
    definitions; a folder without the reasoning columns reads as all answer).
    """

    path: Path
    label: str
    run_json: JSONObject
    requests: pd.DataFrame
    # tokens.parquet's rows, or where they lie: read by DuckDB a batch at a time.
    tokens: pd.DataFrame | TokenSource
    summary: JSONObject
    steps: pd.DataFrame | None
    samples: pd.DataFrame | None
    notes: list[Note] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.run_json.get("run_id") or self.path.name)

    @property
    def run_end_s(self) -> float:
        """The latest moment anything was recorded, seconds (0 for an empty run)."""
        ends = [float(np.nanmax(self.requests["end_s"])) if len(self.requests) else 0.0]
        if self.steps is not None and len(self.steps):
            ends.append(float(self.steps["end_s"].max()))
        return max(0.0, *ends)

    def notes_for(self, topic: str) -> list[str]:
        return [n.text for n in self.notes if n.topic == topic]

    def itl_cdf(self, max_points: int = CDF_POINTS) -> tuple[np.ndarray, np.ndarray]:
        """The ITL values' (one per token after the first chunk, measured requests only) CDF,
        at most ``max_points`` points: results.figures.itl, in bounded memory."""
        ids = self.requests.loc[self.requests["measured"], "request_id"]
        return itl_cdf(token_source(self.tokens).only(ids), max_points)


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame[column].to_numpy(dtype=np.float64, na_value=np.nan)


def _derive(requests: pd.DataFrame, window: JSONObject) -> pd.DataFrame:
    """Per-request figures by docs/metrics.md's definitions, and the measured-window mask."""
    req = backfill_frame(requests, REQUEST_BACKFILLS).copy()
    sched, sent = _floats(req, "scheduled_s"), _floats(req, "sent_s")
    first, done = _floats(req, "first_token_s"), _floats(req, "done_s")
    out = req["output_tokens"].to_numpy(dtype=np.float64)
    req["end_s"] = np.fmax(np.fmax(done, first), sent)
    req["ttft_ms"] = (first - sent) * 1000.0
    req["e2el_ms"] = (done - sent) * 1000.0
    req["queueing_delay_ms"] = (sent - sched) * 1000.0
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (done - first) / (out - 1) * 1000.0, np.nan)
        req["tpot_ms"] = tpot
        req["tps"] = np.where(tpot > 0, 1000.0 / tpot, np.nan)
        first_answer = _floats(req, "first_answer_token_s")
        answer = out - req["reasoning_tokens"].to_numpy(dtype=np.float64, na_value=0.0)
        req["answer_tokens"] = answer
        req["time_to_first_answer_token_ms"] = (first_answer - sent) * 1000.0
        answer_s = done - first_answer
        req["answer_tps"] = np.where((answer > 1) & (answer_s > 0), (answer - 1) / answer_s, np.nan)
    start, stop = window.get("start_s"), window.get("end_s")
    measured = (req["status"] == "ok").to_numpy(dtype=bool, copy=True)
    if start is not None and stop is not None:
        measured &= (sent >= start) & (req["end_s"].to_numpy(dtype=np.float64) <= stop)
    req["measured"] = measured
    return req


def _read_samples(
    path: Path, loaded: pd.DataFrame | None, notes: list[Note]
) -> pd.DataFrame | None:
    """samples.parquet as loaded by results.folder.run_folder, else read here leniently."""
    file = path / SAMPLES_PARQUET
    if loaded is None and not file.is_file():
        notes.append(
            Note(
                "timeline",
                "No samples.parquet: this run recorded no probe time series (GPU and CPU "
                "utilization, DRAM bandwidth, power, engine metrics over time).",
            )
        )
        return None
    frame = loaded
    if frame is None:
        try:
            frame = pd.read_parquet(file)
        except Exception as exc:  # any unreadable file is reported, never fatal for the page
            notes.append(Note("timeline", f"samples.parquet could not be read: {exc}"))
            return None
    missing = [c for c in SAMPLES_COLUMNS if c not in frame.columns]
    if missing:
        notes.append(Note("timeline", f"samples.parquet lacks columns {', '.join(missing)}."))
        return None
    frame = frame.copy()
    frame["labels"] = frame["labels"].map(_labels_text) if "labels" in frame.columns else ""
    frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
    frame["t_s"] = pd.to_numeric(frame["t_s"], errors="coerce")
    frame["source"] = frame["source"].astype(str)
    frame["name"] = frame["name"].astype(str)
    return frame.dropna(subset=["t_s"]).sort_values("t_s", kind="mergesort")


def _read_steps(path: Path, loaded: pd.DataFrame | None, notes: list[Note]) -> pd.DataFrame | None:
    """steps.parquet as loaded by results.folder.run_folder, else read here leniently."""
    file = path / STEPS_PARQUET
    if loaded is not None:
        return loaded
    if not file.is_file():
        notes.append(
            Note(
                "steps",
                "No steps.parquet: the engine exposed no per-step records (an external engine, "
                "or one on another host), so there are no per-step batch and token figures.",
            )
        )
        return None
    try:
        frame = pd.read_parquet(file)
    except Exception as exc:
        notes.append(Note("steps", f"steps.parquet could not be read: {exc}"))
        return None
    missing = [c for c in STEPS_COLUMNS_USED if c not in frame.columns]
    if missing:
        notes.append(Note("steps", f"steps.parquet lacks columns {', '.join(missing)}."))
        return None
    return frame


def _load(path: Path) -> tuple[RunData, str | None]:
    """results.folder.run_folder.load_run, except that an optional file it refuses (one written by
    another version of the tool) is left out: steps and samples for the lenient readers above,
    summary.json to be recomputed. Returns the data and why summary.json was left out, if it
    was."""
    try:
        return load_run(path), None
    except RunFolderError as exc:
        why = str(exc)
    optional = {name: name in why for name in (STEPS_PARQUET, SAMPLES_PARQUET, SUMMARY_JSON)}
    if not any(optional.values()):
        raise RunFolderError(why)
    with tempfile.TemporaryDirectory(prefix="dashboards-") as tmp:
        names = [RUN_JSON, REQUESTS_PARQUET, TOKENS_PARQUET]
        for name in names if optional[SUMMARY_JSON] else [*names, SUMMARY_JSON]:
            if (path / name).is_file():
                (Path(tmp) / name).symlink_to((path / name).resolve())
        data = load_run(tmp)
    return replace(data, path=path), why if optional[SUMMARY_JSON] else None


def _labels_text(labels: Any) -> str:
    """Labels as one short text ("gpu=0"), whatever form the writer used (dict, pairs, str)."""
    if labels is None or (isinstance(labels, float) and np.isnan(labels)):
        return ""
    if isinstance(labels, str) and labels.startswith("{"):
        try:
            labels = json.loads(labels)
        except ValueError:
            return labels
    if isinstance(labels, dict):
        # The engine's own metric name is in the labels too; the legend has the normalized one.
        return ",".join(
            f"{k}={v}" for k, v in sorted(labels.items()) if v is not None and k != "metric"
        )
    if isinstance(labels, list | tuple | np.ndarray):
        pairs = [tuple(p) for p in labels if isinstance(p, list | tuple) and len(p) == 2]
        return ",".join(f"{k}={v}" for k, v in sorted(pairs)) if pairs else str(list(labels))
    return str(labels)


def _request_summary(path: Path, data: RunData) -> JSONObject:
    """The request figures of a folder without summary.json, and the words for a run that
    ended early (a killed run's folder has none)."""
    try:
        summary: JSONObject = dict(request_summary(data))
    except ValueError as exc:
        raise RunFolderError(f"{path}: no summary.json and it cannot be recomputed: {exc}") from exc
    summary.update(run_end_summary(data.run_json))
    return summary


def load_run_view(
    path: Path | str, label: str | None = None, summary: JSONView | None = None
) -> RunView:
    """Read ``path`` for drawing; ``summary``: the folder's summary, computed by the caller
    from its tables, for a folder without summary.json (else its request figures are computed
    here). Raises RunFolderError if it is not a run folder at all."""
    path = Path(path)
    data, unreadable = _load(path)
    notes: list[Note] = []
    if data.summary is not None:
        summary = data.summary
    else:
        summary = dict(summary) if summary is not None else _request_summary(path, data)
        why = "is missing" if unreadable is None else f"could not be read ({unreadable})"
        notes.append(
            Note("run", f"summary.json {why}; its figures were recomputed from the tables.")
        )
    steps = _read_steps(path, data.steps, notes)
    gpus = (data.run_json.get("hardware") or {}).get("gpus")
    if not gpus:
        notes.append(
            Note("timeline", "No GPU: run.json lists none, so GPU figures could not be recorded.")
        )
    samples = _read_samples(path, getattr(data, "samples", None), notes)
    window = summary.get("window") or {}
    return RunView(
        path=path,
        label=label or str(data.run_json.get("run_id") or path.name),
        run_json=data.run_json,
        requests=_derive(data.requests, window),
        tokens=data.token_source,
        summary=summary,
        steps=steps,
        samples=samples,
        notes=notes,
    )
