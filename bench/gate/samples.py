"""The per-request values of one run that the gate's statistics resample.

The gate compares distributions, not summary figures, so it needs what the summary was computed
from: for every measured request (status ok, inside the measured window, exactly the requests
``results.figures.summary.compute_summary`` counts) its TTFT, TPOT, E2EL, queueing delay,
completion time,
token counts, SLO verdict and ITL values. :class:`RunSamples` holds them; it is built from a run
folder (:func:`samples_from_run`) or read from a baseline file (:meth:`RunSamples.from_dict`).

The statistics on these values reproduce the summary's: the pooled percentile of one run's
``ttft_ms`` is the summary's TTFT percentile, and the sum over :func:`throughput_windows` divided
by the window's duration is the summary's throughput.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject
from results.figures.cpu_work import GROUPS, cpu_work_windows, window_cpu_readings
from results.figures.itl import itl_by_request
from results.folder.run_folder import RunData
from results.folder.token_source import TokenSource
from results.run_summary import request_summary

__all__ = [
    "PER_REQUEST_FIELDS",
    "LazyItl",
    "RunSamples",
    "samples_from_run",
    "throughput_windows",
]

# Per-request latency arrays, ms; NaN where undefined (TPOT of a one-token answer).
PER_REQUEST_FIELDS: tuple[str, ...] = (
    "ttft_ms",
    "tpot_ms",
    "e2el_ms",
    "e2el_from_scheduled_ms",
    "queueing_delay_ms",
)
# Throughput windows are at least this long and span this many median E2ELs: a closed-loop
# user completes about two requests per window, so a window's count depends little on where its
# neighbours' requests started, and consecutive windows are nearly independent.
MIN_WINDOW_S = 0.5
WINDOW_E2ELS = 2.0


@dataclass(frozen=True)
class RunSamples:
    """One run's measured requests, one array element per request (sorted by request id).

    ``done_s`` is seconds from the run's start; ``good`` says whether a request met every SLO
    (None when the run had none); ``itl_ms`` holds each request's inter-token latencies (read
    from the run's tokens.parquet on first use, :class:`LazyItl`: most rules never need them).
    ``window_start_s``/``window_end_s`` bound the measured window (summary.json's ``window``).
    ``cpu_windows`` maps each process group the CPU probe read ("engine", "client") to its
    (CPU seconds, output tokens) per window (results.figures.cpu_work.cpu_work_windows); empty
    for a run made without the probe, or a baseline file written before it was kept.
    """

    run_id: str
    window_start_s: float
    window_end_s: float
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2el_ms: np.ndarray
    e2el_from_scheduled_ms: np.ndarray
    queueing_delay_ms: np.ndarray
    done_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    good: np.ndarray | None
    itl_ms: Sequence[np.ndarray]
    cpu_windows: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def num_requests(self) -> int:
        return int(self.ttft_ms.size)

    @property
    def duration_s(self) -> float:
        return max(self.window_end_s - self.window_start_s, 0.0)

    def per_user_tps(self) -> np.ndarray:
        """1 / TPOT per request in tokens/s, for requests with TPOT > 0 (as the summary)."""
        tpot = self.tpot_ms[~np.isnan(self.tpot_ms)]
        return 1000.0 / tpot[tpot > 0]

    def to_dict(self) -> JSONObject:
        """Columnar JSON for a baseline file: ms and s rounded to 1 µs, NaN as null."""

        def col(values: np.ndarray, digits: int) -> list[float | None]:
            return [None if math.isnan(v) else round(float(v), digits) for v in values]

        data: JSONObject = {
            "run_id": self.run_id,
            "window_start_s": self.window_start_s,
            "window_end_s": self.window_end_s,
        }
        for name in PER_REQUEST_FIELDS:
            data[name] = col(getattr(self, name), 3)
        data["done_s"] = col(self.done_s, 6)
        data["prompt_tokens"] = [int(v) for v in self.prompt_tokens]
        data["output_tokens"] = [int(v) for v in self.output_tokens]
        data["good"] = None if self.good is None else [bool(v) for v in self.good]
        data["itl_ms"] = [[round(float(v), 3) for v in gaps] for gaps in self.itl_ms]
        data["cpu_windows"] = {
            group: {"cpu_s": col(cpu_s, 6), "output_tokens": [int(v) for v in tokens]}
            for group, (cpu_s, tokens) in self.cpu_windows.items()
        }
        return data

    @classmethod
    def from_dict(cls, data: JSONObject, where: str) -> RunSamples:
        """The inverse of :meth:`to_dict`; raises ValueError naming ``where`` and the field."""

        def need(key: str) -> Any:
            if key not in data:
                raise ValueError(f"{where}: missing field '{key}'")
            return data[key]

        def floats(key: str) -> np.ndarray:
            values = need(key)
            if not isinstance(values, list):
                raise ValueError(f"{where}.{key}: expected a list of numbers")
            try:
                return np.array([np.nan if v is None else float(v) for v in values])
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{key}: expected a list of numbers") from None

        def ints(key: str) -> np.ndarray:
            values = need(key)
            if not isinstance(values, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in values
            ):
                raise ValueError(f"{where}.{key}: expected a list of integers")
            return np.array(values, dtype=np.int64)

        columns = {name: floats(name) for name in (*PER_REQUEST_FIELDS, "done_s")}
        prompt, output = ints("prompt_tokens"), ints("output_tokens")
        good_raw = need("good")
        if good_raw is not None and not (
            isinstance(good_raw, list) and all(isinstance(v, bool) for v in good_raw)
        ):
            raise ValueError(f"{where}.good: expected null or a list of booleans")
        itl_raw = need("itl_ms")
        if not isinstance(itl_raw, list) or not all(isinstance(g, list) for g in itl_raw):
            raise ValueError(f"{where}.itl_ms: expected a list of lists of numbers")
        try:
            itl = tuple(np.array(g, dtype=np.float64) for g in itl_raw)
        except (TypeError, ValueError):
            raise ValueError(f"{where}.itl_ms: expected a list of lists of numbers") from None
        good = None if good_raw is None else np.array(good_raw, dtype=bool)
        cpu_windows = _cpu_windows_from(data.get("cpu_windows", {}), f"{where}.cpu_windows")
        n = columns["ttft_ms"].size
        lengths = {key: len(value) for key, value in (*columns.items(), ("itl_ms", itl))}
        lengths.update(prompt_tokens=prompt.size, output_tokens=output.size)
        if good is not None:
            lengths["good"] = good.size
        uneven = {key: size for key, size in lengths.items() if size != n}
        if uneven:
            raise ValueError(f"{where}: columns differ in length from ttft_ms ({n}): {uneven}")
        start, end = need("window_start_s"), need("window_end_s")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (start, end)):
            raise ValueError(f"{where}: window_start_s and window_end_s must be numbers")
        return cls(
            run_id=str(need("run_id")),
            window_start_s=float(start),
            window_end_s=float(end),
            done_s=columns.pop("done_s"),
            prompt_tokens=prompt,
            output_tokens=output,
            good=good,
            itl_ms=itl,
            cpu_windows=cpu_windows,
            **columns,
        )


def _cpu_windows_from(raw: Any, where: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """:meth:`RunSamples.to_dict`'s ``cpu_windows`` read back; raises ValueError naming it."""
    wrong = ValueError(
        f"{where}: expected {{group: {{cpu_s: [seconds], output_tokens: [integers]}}}}"
        f" with groups among {', '.join(GROUPS)} and lists of one length"
    )
    if not isinstance(raw, dict):
        raise wrong
    out = {}
    for group, table in raw.items():
        if group not in GROUPS or not isinstance(table, dict):
            raise wrong
        cpu_s, tokens = table.get("cpu_s"), table.get("output_tokens")
        if not (isinstance(cpu_s, list) and isinstance(tokens, list)) or len(cpu_s) != len(tokens):
            raise wrong
        try:
            out[group] = (np.array(cpu_s, dtype=np.float64), np.array(tokens, dtype=np.float64))
        except (TypeError, ValueError):
            raise wrong from None
    return out


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame[column].to_numpy(dtype=np.float64, na_value=np.nan)


class LazyItl(Sequence[np.ndarray]):
    """Each of ``request_ids``' ITL values in ms, in their order, the summary's rule
    (results.figures.itl: a gap before a chunk of k tokens counts k times as gap / k; chunks
    without tokens are skipped), read from ``tokens`` where it lies on first use only: a run of
    10^6 requests holds 2 GB of them (8 bytes a token), which no rule but an ITL one needs."""

    def __init__(self, tokens: TokenSource, request_ids: np.ndarray) -> None:
        self._tokens = tokens
        self._ids = request_ids

    @functools.cached_property
    def _values(self) -> tuple[np.ndarray, ...]:
        ids = self._ids
        by_request = itl_by_request(self._tokens.only(str(r) for r in ids))
        empty = np.zeros(0)
        return tuple(by_request.get(str(rid), empty) for rid in ids)

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[np.ndarray]: ...
    def __getitem__(self, index: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        return self._values[index]

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter(self._values)


def samples_from_run(run: RunData) -> RunSamples:
    """The measured requests of a run folder, as the summary selects them.

    The window comes from summary.json (recomputed from the tables when the run has none), so
    the selection is the summary's: status ok, sent_s >= start_s and end <= end_s.
    """
    summary = run.summary if run.summary is not None else request_summary(run)
    window = summary.get("window") or {}
    start, stop = window.get("start_s"), window.get("end_s")
    req = run.requests.sort_values("request_id", kind="mergesort").reset_index(drop=True)
    scheduled, sent = _floats(req, "scheduled_s"), _floats(req, "sent_s")
    first, done = _floats(req, "first_token_s"), _floats(req, "done_s")
    if start is None or stop is None:
        ok = np.zeros(len(req), dtype=bool)
        start = stop = 0.0
    else:
        end = np.fmax(np.fmax(done, first), sent)
        ok = (sent >= start) & (end <= stop) & (req["status"].to_numpy(dtype=object) == "ok")
    output = req["output_tokens"].to_numpy(dtype=np.int64)[ok]
    prompt = req["prompt_tokens"].to_numpy(dtype=np.int64)[ok]
    sent, first, done, scheduled = sent[ok], first[ok], done[ok], scheduled[ok]
    many = output > 1
    tpot = np.full(output.shape, np.nan)
    tpot[many] = (done[many] - first[many]) / (output[many] - 1) * 1000.0
    ttft, e2el = (first - sent) * 1000.0, (done - sent) * 1000.0
    targets = {k: v for k, v in ((summary.get("goodput") or {}).get("slo") or {}).items() if v}
    good = None
    if targets:
        good = np.ones(output.shape, dtype=bool)
        per_request = {"ttft_ms": ttft, "tpot_ms": np.where(many, tpot, 0.0), "e2el_ms": e2el}
        for key, target in targets.items():
            good &= per_request[key] <= float(target)
    return RunSamples(
        run_id=str(run.run_json.get("run_id") or run.path.name),
        window_start_s=float(start),
        window_end_s=float(stop),
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2el_ms=e2el,
        e2el_from_scheduled_ms=(done - scheduled) * 1000.0,
        queueing_delay_ms=(sent - scheduled) * 1000.0,
        done_s=done,
        prompt_tokens=prompt,
        output_tokens=output,
        good=good,
        itl_ms=LazyItl(run.token_source, req["request_id"].to_numpy(dtype=object)[ok]),
        cpu_windows=_cpu_windows_of(run, float(start), float(stop)),
    )


def _cpu_windows_of(
    run: RunData, start: float, stop: float
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each process group's CPU work windows inside the measured window (none without it)."""
    readings = window_cpu_readings(run.samples, start, stop)
    if stop <= start or readings.empty:
        return {}
    windows = cpu_work_windows(readings, run.token_source)
    return {group: w for group, w in windows.items() if w[0].size and w[0].sum() > 0}


def throughput_windows(run: RunSamples, amount: str) -> tuple[np.ndarray, np.ndarray]:
    """Split the measured window into equal windows; returns (amount per window, seconds).

    A request counts, whole, in the window where it completed, so the windows' amounts add up to
    the summary's numerator and amount.sum() / seconds.sum() is the summary's rate. ``amount`` is
    "output_tokens", "total_tokens", "requests" or "good_requests". Windows span at least
    MIN_WINDOW_S and WINDOW_E2ELS median E2ELs; a run too short for two gives one window.
    """
    duration = run.duration_s
    if duration <= 0:
        return np.zeros(0), np.zeros(0)
    # A run whose requests all failed still has its window: its rate is 0, a real regression.
    median_e2el_s = float(np.nanmedian(run.e2el_ms)) / 1000.0 if run.num_requests else 0.0
    target_s = max(MIN_WINDOW_S, WINDOW_E2ELS * median_e2el_s)
    count = max(1, int(duration // target_s))
    width = duration / count
    index = np.clip(((run.done_s - run.window_start_s) // width).astype(np.int64), 0, count - 1)
    if amount == "output_tokens":
        weights = run.output_tokens.astype(np.float64)
    elif amount == "total_tokens":
        weights = (run.output_tokens + run.prompt_tokens).astype(np.float64)
    elif amount == "requests":
        weights = np.ones(run.num_requests)
    elif amount == "good_requests":
        if run.good is None:
            raise ValueError(f"run {run.run_id} has no SLO, so no goodput")
        weights = run.good.astype(np.float64)
    else:
        raise ValueError(f"unknown throughput amount {amount!r}")
    return np.bincount(index, weights=weights, minlength=count), np.full(count, width)
