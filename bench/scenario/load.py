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

``[arrival]`` makes the load open loop: ``kind`` = poisson | gamma | constant, ``rate_rps``
(requests/s), ``burstiness`` (gamma's shape; 1 = Poisson). A relative ``path`` is taken from
the scenario file's folder.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Literal

from bench.scenario.toml_table import Table

__all__ = ["ARRIVAL_KINDS", "WORKLOAD_KINDS", "ArrivalSpec", "WorkloadSpec", "read_arrival",
           "read_workload"]  # fmt: skip

WorkloadKind = Literal["synthetic", "sharegpt", "multiturn", "trace"]
WORKLOAD_KINDS: tuple[str, ...] = ("synthetic", "sharegpt", "multiturn", "trace")
ARRIVAL_KINDS: tuple[str, ...] = ("poisson", "gamma", "constant")

# Per workload kind: its keys and their types.
_KEYS: dict[str, dict[str, type]] = {
    "synthetic": {},
    "sharegpt": {"path": str, "max_input_tokens": int, "max_output_tokens": int},
    "multiturn": {
        "turns": int,
        "path": str,
        "system_prompt_tokens": int,
        "max_context_tokens": int,
    },
    "trace": {"path": str, "time_scale": float},
}


@dataclass(frozen=True)
class WorkloadSpec:
    """``[workload]`` (module docstring); parameters a kind does not take are None."""

    kind: WorkloadKind = "synthetic"
    path: str | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    turns: int | None = None
    system_prompt_tokens: int | None = None
    max_context_tokens: int | None = None
    time_scale: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @property
    def open_loop(self) -> bool:
        """A trace sets its own arrival times."""
        return self.kind == "trace"

    @property
    def sessions(self) -> bool:
        """Multi-turn sessions need closed-loop users."""
        return self.kind == "multiturn"


@dataclass(frozen=True)
class ArrivalSpec:
    """``[arrival]``: open-loop arrivals (loadgen.arrivals.ArrivalProcess's meaning)."""

    kind: Literal["poisson", "gamma", "constant"]
    rate_rps: float
    burstiness: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
    values = {key: sub.get(key, typ, None) for key, typ in _KEYS[kind].items()}
    sub.finish(f"for kind '{kind}'")
    needs_path = kind in ("sharegpt", "trace")
    if needs_path and values["path"] is None:
        raise sub.error("path", f"missing; kind '{kind}' reads its requests from a file")
    if kind == "multiturn" and values["path"] is None and values["turns"] is None:
        raise sub.error("turns", "missing; set turns (synthetic chats) or path (a ShareGPT file)")
    if values.get("path") is not None:
        values["path"] = _resolve(values["path"], source)
        sub.check("path", os.path.isfile(values["path"]), "no such file", values["path"])
    for key in ("max_input_tokens", "max_output_tokens", "turns", "max_context_tokens"):
        if values.get(key) is not None:
            sub.check(key, values[key] >= 1, "must be >= 1", values[key])
    if values.get("system_prompt_tokens") is not None:
        value = values["system_prompt_tokens"]
        sub.check("system_prompt_tokens", value >= 0, "must be >= 0 tokens", value)
        if values.get("path") is not None:
            raise sub.error(
                "system_prompt_tokens", "is for synthetic chats; a ShareGPT file has its own"
            )
    if kind == "trace":
        scale = values["time_scale"]
        if scale is not None:
            sub.check("time_scale", scale > 0, "must be > 0", scale)
    return WorkloadSpec(kind=kind, **values)


def read_arrival(table: Table) -> ArrivalSpec | None:
    """The ``[arrival]`` table, or None (closed loop) when absent."""
    sub = table.table("arrival")
    if sub is None:
        return None
    kind = sub.choice("kind", ARRIVAL_KINDS)
    rate = sub.get("rate_rps", float)
    burstiness = sub.get("burstiness", float, 1.0)
    sub.finish()
    sub.check("rate_rps", rate > 0, "must be > 0 requests/s", rate)
    sub.check("burstiness", burstiness > 0, "must be > 0 (the gamma shape)", burstiness)
    if kind != "gamma":
        sub.check("burstiness", burstiness == 1.0, "only kind 'gamma' takes burstiness", burstiness)
    return ArrivalSpec(kind, rate, burstiness)


def check_combination(
    top: Table,
    workload: WorkloadSpec,
    arrival: ArrivalSpec | None,
    has_input_len: bool,
    has_output_len: bool,
    has_shared_prefix: bool,
) -> None:
    """The rules between tables: which workloads take which lengths, and the loop they need."""
    kind = workload.kind
    from_file = workload.path is not None
    if kind == "synthetic" or (kind == "multiturn" and not from_file):
        for name, present in (("input_len", has_input_len), ("output_len", has_output_len)):
            if not present:
                raise top.error(name, f"missing; workload kind '{kind}' needs it (a table)")
    else:
        if has_input_len:
            raise top.error("input_len", f"workload kind '{kind}' takes its prompts from a file")
        takes_output = kind == "sharegpt"
        if has_output_len and not takes_output:
            raise top.error("output_len", f"workload kind '{kind}' takes lengths from its file")
    if has_shared_prefix and kind != "synthetic":
        raise top.error("shared_prefix", "only workload kind 'synthetic' takes shared prefixes")
    if arrival is not None and kind == "trace":
        raise top.error("arrival", "a trace sets its own arrival times; drop [arrival]")
    if arrival is not None and kind == "multiturn":
        raise top.error(
            "arrival", "multi-turn sessions run on closed-loop users; drop [arrival] or the turns"
        )
