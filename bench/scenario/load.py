"""The scenario's ``[workload]`` and ``[arrival]`` tables: what is sent, and when.

``[workload]`` (default ``kind = "synthetic"``)::

    kind = "synthetic"   # prompts of input_len tokens, max_tokens from output_len
    kind = "sharegpt"    # path (a ShareGPT JSON file); max_input_tokens, max_output_tokens;
                         # output_len optional (default: each answer's own length)
    kind = "multiturn"   # turns (per session), system_prompt_tokens: synthetic chats of
                         # input_len-token messages and output_len-token answers; or path (a
                         # ShareGPT file: its conversations), turns then caps them;
                         # max_context_tokens
    kind = "trace"       # path (JSONL: timestamp ms or t_s, input_length, output_length),
                         # time_scale; replayed open loop at the trace's times
    kind = "dataset"     # path (JSONL, JSON, CSV, Parquet, a datasets folder) or hub (a Hub
                         # dataset id): the user's own prompts or chats; min_input_tokens,
                         # max_input_tokens, max_output_tokens; output_len optional; read as
                         # its [dataset] table says (bench.scenario.request_tables)
    kind = "sessions"    # agent sessions: path (a JSONL trace, one turn a line) or generated
                         # by [sessions] (turns, delay_s) with input_len/output_len;
                         # system_prompt_tokens, tool_result_tokens, time_scale (the trace's
                         # session starts, open loop)

``[sessions]`` (only with ``kind = "sessions"`` and no path,
``loadgen.workloads.sessions.generate.SessionShape``): ``turns`` (a length table: turns per
session) and ``delay_s`` (``kind`` = fixed | uniform | exponential, with ``value``, ``low`` /
``high`` or ``mean`` in seconds: the wait before each turn after the first).

``[trace]`` (only with ``kind = "trace"``) says how the trace is replayed
(``loadgen.workloads.trace.TraceReplay``): ``format`` (auto | mooncake | azure), ``speed``
(timestamps divided by it) or ``target_rate_rps`` (timestamps squeezed to that mean rate),
``start_s`` / ``end_s`` (a time slice of the trace's own clock), ``block_tokens`` (tokens per
hash id, 512).

``[abandon]`` (``loadgen.workloads.abandon.AbandonShare``): ``share`` (0..1) of the requests
are abandoned by the client after ``after_tokens`` tokens or ``after_s`` seconds.

``[arrival]`` makes the load open loop: ``kind`` = poisson | gamma | constant, ``rate_rps``
(requests/s), ``burstiness`` (gamma's shape; 1 = Poisson). A relative ``path`` is taken from
the scenario file's folder.

The tables become the load generator's own types (``loadgen.workloads.spec.WorkloadSpec``,
``loadgen.workloads.arrivals.ArrivalProcess``), which check their values; this module reads the
TOML and reports what they reject at the file's key (:func:`construct`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from bench.scenario.toml_table import Table
from loadgen.workloads.abandon import AbandonShare
from loadgen.workloads.arrivals import ARRIVAL_KINDS, ArrivalProcess
from loadgen.workloads.sessions.generate import DELAY_KINDS, DELAY_PARAMS, DelayDist, SessionShape
from loadgen.workloads.spec import WORKLOAD_KINDS, WORKLOAD_PARAMS, ParameterError, WorkloadSpec
from loadgen.workloads.trace import TRACE_FORMATS, TraceReplay

__all__ = [
    "check_combination",
    "construct",
    "read_abandon",
    "read_arrival",
    "read_sessions",
    "read_trace",
    "read_workload",
]

T = TypeVar("T")


def construct(table: Table, factory: Callable[..., T], **values: Any) -> T:
    """``factory(**values)``: a load generator type, which checks itself; a parameter it rejects
    is reported at that key of ``table``, naming the file."""
    try:
        return factory(**values)
    except ParameterError as exc:
        raise table.error(exc.field, exc.problem) from exc


def _resolve(path: str, source: str) -> str:
    """``path`` relative to the scenario file's folder (or the working directory)."""
    if os.path.isabs(path):
        return path
    base = os.path.dirname(source) if os.path.isfile(source) else os.getcwd()
    return os.path.abspath(os.path.join(base, path))


def read_workload(table: Table, source: str) -> WorkloadSpec:
    """The ``[workload]`` table, or the synthetic default when absent."""
    sub = table.table("workload")
    if sub is None:
        return WorkloadSpec()
    kind = sub.choice("kind", WORKLOAD_KINDS)
    values = {key: sub.get(key, typ, None) for key, typ in WORKLOAD_PARAMS[kind].items()}
    sub.finish(f"for kind '{kind}'")
    if values.get("path") is not None:
        values["path"] = _resolve(values["path"], source)
    workload = construct(sub, WorkloadSpec, kind=kind, **values)
    if workload.path is not None:
        # A dataset may be a datasets folder (save_to_disk) as well as a file.
        found = os.path.exists if kind == "dataset" else os.path.isfile
        sub.check("path", found(workload.path), "no such file", workload.path)
    return workload


def read_arrival(table: Table) -> ArrivalProcess | None:
    """The ``[arrival]`` table, or None (closed loop) when absent."""
    sub = table.table("arrival")
    if sub is None:
        return None
    kind = sub.choice("kind", ARRIVAL_KINDS)
    rate = sub.get("rate_rps", float)
    burstiness = sub.get("burstiness", float, 1.0)
    sub.finish()
    return construct(sub, ArrivalProcess, kind=kind, rate_rps=rate, burstiness=burstiness)


def read_trace(table: Table) -> TraceReplay | None:
    """The ``[trace]`` table, or None (the trace as recorded) when absent."""
    sub = table.table("trace")
    if sub is None:
        return None
    values = {
        "format": sub.choice("format", TRACE_FORMATS, "auto"),
        **{key: sub.get(key, float, None) for key in ("speed", "target_rate_rps")},
        **{key: sub.get(key, float, None) for key in ("start_s", "end_s")},
        "block_tokens": sub.get("block_tokens", int, TraceReplay.block_tokens),
    }
    sub.finish()
    return construct(sub, TraceReplay, **values)


def read_sessions(table: Table, read_length: Callable[[Table, str], Any]) -> SessionShape | None:
    """The ``[sessions]`` table, or None when absent; ``read_length`` reads its ``turns`` as
    a length table."""
    sub = table.table("sessions")
    if sub is None:
        return None
    turns = read_length(sub, "turns")
    delay = sub.table("delay_s")
    sub.finish()
    shape = SessionShape() if turns is None else SessionShape(turns=turns)
    if delay is None:
        return shape
    kind = delay.choice("kind", DELAY_KINDS)
    values = {key: delay.get(key, float) for key in DELAY_PARAMS[kind]}
    delay.finish(f"for kind '{kind}'")
    return SessionShape(shape.turns, construct(delay, DelayDist, kind=kind, **values))


def read_abandon(table: Table) -> AbandonShare | None:
    """The ``[abandon]`` table, or None (every stream read to its end) when absent."""
    sub = table.table("abandon")
    if sub is None:
        return None
    share = sub.get("share", float)
    after_tokens = sub.get("after_tokens", int, None)
    after_s = sub.get("after_s", float, None)
    sub.finish()
    return construct(sub, AbandonShare, share=share, after_tokens=after_tokens, after_s=after_s)


def check_combination(
    top: Table,
    workload: WorkloadSpec,
    arrival: ArrivalProcess | None,
    has_input_len: bool,
    has_output_len: bool,
    has_shared_prefix: bool,
    trace: TraceReplay | None = None,
    has_dataset: bool = False,
    has_sessions: bool = False,
) -> None:
    """The rules between tables: which workloads take which lengths, and the loop they need."""
    kind = workload.kind
    from_file = workload.path is not None
    if has_sessions and (kind != "sessions" or from_file):
        raise top.error(
            "sessions", "only generated agent sessions take it (kind 'sessions', no path)"
        )
    if kind == "sessions" and not from_file and workload.time_scale is not None:
        raise top.error("workload.time_scale", "replays a trace's timestamps; set path or drop it")
    if kind == "sessions" and arrival is not None and workload.time_scale is not None:
        raise top.error(
            "workload.time_scale", "set one start: drop it (the trace's times) or [arrival]"
        )
    if kind == "synthetic" or (kind in ("multiturn", "sessions") and not from_file):
        for name, present in (("input_len", has_input_len), ("output_len", has_output_len)):
            if not present:
                raise top.error(name, f"missing; workload kind '{kind}' needs it (a table)")
    else:
        if has_input_len:
            raise top.error("input_len", f"workload kind '{kind}' takes its prompts from a file")
        takes_output = kind in ("sharegpt", "dataset")
        if has_output_len and not takes_output:
            raise top.error("output_len", f"workload kind '{kind}' takes lengths from its file")
    if has_shared_prefix and kind != "synthetic":
        raise top.error("shared_prefix", "only workload kind 'synthetic' takes shared prefixes")
    if has_dataset and kind != "dataset":
        raise top.error("dataset", f"only workload kind 'dataset' takes it (kind is '{kind}')")
    if trace is not None and kind != "trace":
        raise top.error("trace", f"only workload kind 'trace' takes it (kind is '{kind}')")
    paced = trace is not None and (trace.speed is not None or trace.target_rate_rps is not None)
    if paced and workload.time_scale is not None:
        raise top.error(
            "workload.time_scale", "set the pace once: drop it, or trace.speed/target_rate_rps"
        )
    if arrival is not None and kind == "trace":
        raise top.error("arrival", "a trace sets its own arrival times; drop [arrival]")
    if arrival is not None and kind == "multiturn":
        raise top.error(
            "arrival", "multi-turn sessions run on closed-loop users; drop [arrival] or the turns"
        )
