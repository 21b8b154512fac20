"""Trace replay: a JSONL file of arrival times and lengths, replayed open loop.

One JSON object per line (blank lines and lines starting with ``#`` are skipped)::

    {"timestamp": 0, "input_length": 812, "output_length": 96}
    {"timestamp": 137, "input_length": 1530, "output_length": 212}

``timestamp`` is in milliseconds (the Mooncake / AIPerf trace convention) unless the line gives
``t_s`` (seconds) instead; the first arrival is moved to time 0 and the gaps kept (scaled by
``time_scale``: 0.5 replays twice as fast). ``input_length`` and ``output_length`` are token
counts; other keys (``hash_ids``, ``session_id``, ...) are ignored. Lines must be in time order:
a trace out of order is more likely broken than meant, so it is an error naming the line.

Prompts are synthetic text of exactly ``input_length`` tokens (see
:mod:`loadgen.workloads.prompts`),
``max_tokens`` is ``output_length``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import Api, RequestSpec
from loadgen.workloads.prompts import _clean_token_pool, exact_length_prompt
from loadgen.workloads.spec import WorkloadError

__all__ = ["TraceEntry", "load_trace", "trace_requests"]


@dataclass(frozen=True)
class TraceEntry:
    """One trace line: ``t_s`` seconds after the first arrival, lengths in tokens."""

    t_s: float
    input_length: int
    output_length: int


def _length(obj: dict, key: str, where: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{where}: '{key}' must be an integer >= 1 (tokens), got {value!r}")
    return value


def load_trace(path: str | Path, time_scale: float = 1.0) -> list[TraceEntry]:
    """The entries of a JSONL trace (module docstring), times from 0, scaled by ``time_scale``.

    Raises:
        WorkloadError: missing file, a line that is not a JSON object, a missing or invalid
            field, times that go backwards, or no entry at all; the message names file and line.
    """
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise WorkloadError(f"trace time_scale: expected a number > 0, got {time_scale!r}")
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise WorkloadError(f"trace file not found: {path}") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the trace ({exc})") from None
    raw: list[tuple[float, int, int]] = []
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
        if raw and t_s < raw[-1][0]:
            raise WorkloadError(
                f"{where}: time {t_s:.3f} s is before the previous line's {raw[-1][0]:.3f} s; "
                "sort the trace by time"
            )
        raw.append((t_s, _length(obj, "input_length", where), _length(obj, "output_length", where)))
    if not raw:
        raise WorkloadError(f"{path}: the trace has no entries")
    t0 = raw[0][0]
    return [TraceEntry((t - t0) * time_scale, i, o) for t, i, o in raw]


def trace_requests(
    entries: list[TraceEntry],
    tokenizer: TokenizerLike,
    seed: int,
    api: Api = "completions",
    ignore_eos: bool = True,
    temperature: float = 0.0,
    *,
    max_requests: int | None = None,
    id_prefix: str = "req",
) -> tuple[list[RequestSpec], np.ndarray]:
    """The requests of ``entries`` (the first ``max_requests``) and their schedule (s from 0)."""
    chosen = entries if max_requests is None else entries[:max_requests]
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7ACE]))
    pool = _clean_token_pool(tokenizer, rng) if chosen else None
    specs = [
        RequestSpec(
            request_id=f"{id_prefix}-{i:06d}",
            prompt=exact_length_prompt(tokenizer, e.input_length, rng, pool),
            prompt_tokens=e.input_length,
            max_tokens=e.output_length,
            api=api,
            ignore_eos=ignore_eos,
            temperature=temperature,
        )
        for i, e in enumerate(chosen)
    ]
    return specs, np.asarray([e.t_s for e in chosen], dtype=np.float64)
