"""Trace replay: production arrival times and lengths, replayed open loop.

Two public formats are read (:func:`load_trace`; ``format = "auto"`` picks by the file's
extension, then by its first line):

* ``mooncake``: Mooncake's JSONL (FAST'25 traces; also AIPerf's and Dynamo's), one object a
  line (blank lines and lines starting with ``#`` are skipped)::

      {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, ..., 13]}

  ``timestamp`` is in milliseconds (or ``t_s`` in seconds instead); ``input_length`` and
  ``output_length`` are token counts; ``hash_ids`` (optional) name the prompt's blocks of
  ``block_tokens`` (512) tokens in order: two requests with the same id at the same position
  share that block, and every block before it (:mod:`loadgen.workloads.trace_prompts`).
* ``azure``: the Azure LLM inference trace CSV (AzurePublicDataset's
  AzureLLMInferenceTrace_code / _conv): ``TIMESTAMP`` (a datetime), ``ContextTokens``,
  ``GeneratedTokens`` (:mod:`loadgen.workloads.trace_azure`).

Lines must be in time order: a trace out of order is more likely broken than meant, so it is an
error naming the line. The first arrival is time 0 and the gaps are kept, then
:class:`TraceReplay` (a scenario's ``[trace]`` table) cuts a window and rescales the times.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

from loadgen.workloads.spec import ParameterError, WorkloadError, check_type
from loadgen.workloads.trace_azure import read_azure_csv

__all__ = [
    "TRACE_FORMATS",
    "TraceEntry",
    "TraceFormat",
    "TraceReplay",
    "detect_format",
    "load_trace",
    "replay_entries",
]

TraceFormat = Literal["auto", "mooncake", "azure"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
# Mooncake's traces hash prompts in blocks of 512 tokens.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceEntry:
    """One trace line: ``t_s`` seconds after the first arrival, lengths in tokens, and the
    hash ids of the prompt's blocks (empty when the trace has none)."""

    t_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class TraceReplay:
    """How a trace is replayed: a scenario's ``[trace]`` table. Times in seconds.

    Attributes:
        format: ``auto`` (by extension, then the first line), ``mooncake`` or ``azure``.
        speed: replay this many times faster (timestamps divided by it); None: as recorded.
        target_rate_rps: squeeze (or stretch) the timestamps so the mean arrival rate,
            (n - 1) / span, is this many requests/s; exclusive with ``speed``.
        start_s, end_s: keep the arrivals in [start_s, end_s) on the trace's own clock
            (seconds from its first line, before any rescaling); None: from the start / to the
            end. The first N requests are the scenario's ``num_requests``, taken after this.
        block_tokens: tokens per hash id (Mooncake: 512).

    Raises:
        ParameterError: a value out of its range, or speed and target_rate_rps together.
    """

    format: TraceFormat = "auto"
    speed: float | None = None
    target_rate_rps: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def __post_init__(self) -> None:
        owner = "TraceReplay"
        if self.format not in TRACE_FORMATS:
            problem = f"expected one of {list(TRACE_FORMATS)}, got {self.format!r}"
            raise ParameterError(owner, "format", problem)
        for name in ("speed", "target_rate_rps", "start_s", "end_s"):
            if (value := getattr(self, name)) is not None:
                check_type(owner, name, value, float)
        check_type(owner, "block_tokens", self.block_tokens, int)
        for name in ("speed", "target_rate_rps"):
            if (value := getattr(self, name)) is not None and value <= 0:
                raise ParameterError(owner, name, f"must be > 0, got {value!r}")
        if self.speed is not None and self.target_rate_rps is not None:
            problem = "give speed or target_rate_rps, not both (both set the replay's pace)"
            raise ParameterError(owner, "target_rate_rps", problem)
        if self.start_s is not None and self.start_s < 0:
            raise ParameterError(owner, "start_s", f"must be >= 0 seconds, got {self.start_s!r}")
        if self.end_s is not None and self.end_s <= (self.start_s or 0.0):
            problem = f"must be > start_s ({self.start_s or 0.0}), got {self.end_s!r}"
            raise ParameterError(owner, "end_s", problem)
        if self.block_tokens < 1:
            raise ParameterError(owner, "block_tokens", f"must be >= 1, got {self.block_tokens}")

    def to_dict(self) -> dict[str, Any]:
        """The parameters that are set (run.json's scenario ``trace``)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


def detect_format(path: Path, asked: TraceFormat = "auto") -> Literal["mooncake", "azure"]:
    """The trace's format: ``asked`` unless it is ``auto``, else by extension, then content."""
    if asked != "auto":
        return asked
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "azure"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "mooncake"
    try:
        with path.open(encoding="utf-8") as fh:
            first = next((line.strip() for line in fh if line.strip()), "")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the trace ({exc})") from None
    if first.startswith("{") or first.startswith("#"):
        return "mooncake"
    if "TIMESTAMP" in first:
        return "azure"
    raise WorkloadError(
        f"{path}: cannot tell the trace's format from its name or first line; set "
        f"trace.format to one of {list(TRACE_FORMATS[1:])}"
    )


def _length(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{where}: '{key}' must be an integer >= 1 (tokens), got {value!r}")
    return value


def _hash_ids(obj: dict, where: str) -> tuple[int, ...]:
    value = obj.get("hash_ids", [])
    if not isinstance(value, list) or any(
        isinstance(h, bool) or not isinstance(h, int) for h in value
    ):
        raise WorkloadError(f"{where}: 'hash_ids' must be a list of integers, got {value!r}")
    return tuple(value)


def _read_mooncake(path: Path) -> list[TraceEntry]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the trace ({exc})") from None
    entries: list[TraceEntry] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise WorkloadError(f"{where}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{where}: expected a JSON object, got {text[:60]!r}")
        if "t_s" in obj:
            t, unit = obj["t_s"], 1.0
        elif "timestamp" in obj:
            t, unit = obj["timestamp"], 1e-3
        else:
            raise WorkloadError(f"{where}: expected 'timestamp' (ms) or 't_s' (s)")
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t):
            raise WorkloadError(f"{where}: the time must be a number, got {t!r}")
        t_s = float(t) * unit
        if entries and t_s < entries[-1].t_s:
            raise WorkloadError(
                f"{where}: time {t_s:.3f} s is before the previous line's "
                f"{entries[-1].t_s:.3f} s; sort the trace by time"
            )
        entries.append(
            TraceEntry(
                t_s, _length(obj, "input_length", where), _length(obj, "output_length", where),
                _hash_ids(obj, where),
            )
        )  # fmt: skip
    return entries


def load_trace(
    path: str | Path, time_scale: float = 1.0, format: TraceFormat = "auto"
) -> list[TraceEntry]:
    """The entries of a trace (module docstring), times from 0, multiplied by ``time_scale``.

    Raises:
        WorkloadError: missing file, an unknown format, a line or row that is not valid, times
            that go backwards, or no entry at all; the message names file and line.
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise WorkloadError(f"trace time_scale: expected a number > 0, got {time_scale!r}")
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"trace file not found: {path}")
    if detect_format(path, format) == "azure":
        entries = [TraceEntry(t, i, o) for t, i, o in read_azure_csv(path)]
    else:
        entries = _read_mooncake(path)
    if not entries:
        raise WorkloadError(f"{path}: the trace has no entries")
    t0 = entries[0].t_s
    return [replace(e, t_s=(e.t_s - t0) * time_scale) for e in entries]


def replay_entries(
    entries: list[TraceEntry], replay: TraceReplay, max_requests: int | None = None
) -> list[TraceEntry]:
    """The entries sent: those in the time slice, the first ``max_requests`` of them, moved so
    the first is at 0 and rescaled by ``speed`` or to ``target_rate_rps`` (TraceReplay).

    Raises:
        WorkloadError: the window holds no arrival, or a rate is asked of arrivals that span
            no time.
    """
    lo = replay.start_s if replay.start_s is not None else -math.inf
    hi = replay.end_s if replay.end_s is not None else math.inf
    chosen = [e for e in entries if lo <= e.t_s < hi]
    if max_requests is not None:
        chosen = chosen[:max_requests]
    if not chosen:
        raise WorkloadError(
            f"trace window [{replay.start_s or 0.0}, {replay.end_s or 'end'}) s holds no "
            f"arrival (the trace spans 0..{entries[-1].t_s:.3f} s); widen trace.start_s/end_s"
        )
    t0 = chosen[0].t_s
    span = chosen[-1].t_s - t0
    factor = 1.0
    if replay.speed is not None:
        factor = 1.0 / replay.speed
    elif replay.target_rate_rps is not None:
        if len(chosen) < 2 or span <= 0:
            raise WorkloadError(
                f"trace.target_rate_rps: {len(chosen)} arrival(s) spanning {span:.3f} s have no "
                "rate to squeeze; use a wider window, or trace.speed"
            )
        factor = (len(chosen) - 1) / replay.target_rate_rps / span
    return [replace(e, t_s=(e.t_s - t0) * factor) for e in chosen]
