"""Agent sessions generated from distributions, or read from a trace, as the run's requests.

A generated session has a number of turns drawn from ``SessionShape.turns``; each turn adds a
user message of the scenario's input length, may generate its output length, and waits a delay
drawn from ``SessionShape.delay_s`` after the previous answer; with ``system_prompt_tokens``
every session opens with its own system message. :func:`agent_sessions` is what a run plans:
the sessions (generated, or read by loadgen.workloads.sessions.trace) as requests, and each
one's start in the trace (None where the sessions start by arrival rate or closed-loop users).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from loadgen.workloads.prompts import _clean_token_pool, exact_length_prompt
from loadgen.workloads.sessions.plan import (
    PlannedSession,
    PlannedTurn,
    planned_turns,
    session_requests,
)
from loadgen.workloads.sessions.trace import read_session_trace
from loadgen.workloads.spec import LengthDist, ParameterError, WorkloadSpec, check_type
from perfmodel.files import JSONObject, JSONView

__all__ = ["DELAY_KINDS", "DELAY_PARAMS", "DelayDist", "SessionShape", "agent_sessions"]

DelayKind = Literal["fixed", "uniform", "exponential"]
DELAY_KINDS: tuple[str, ...] = get_args(DelayKind)
# Per kind, its parameters (seconds).
DELAY_PARAMS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "exponential": ("mean",),
}
# Tokens of a synthetic tool result, unless the workload sets tool_result_tokens.
DEFAULT_TOOL_RESULT_TOKENS = 32


@dataclass(frozen=True)
class DelayDist:
    """The wait before a turn, seconds >= 0: ``fixed`` (``value``), ``uniform`` (``low``,
    ``high``), ``exponential`` (``mean``: a tool's run time or a user's thinking, memoryless)."""

    kind: DelayKind = "fixed"
    value: float | None = None
    low: float | None = None
    high: float | None = None
    mean: float | None = None

    def __post_init__(self) -> None:
        owner = "DelayDist"
        if self.kind not in DELAY_KINDS:
            raise ParameterError(owner, "kind", f"expected one of {list(DELAY_KINDS)}")
        for name in ("value", "low", "high", "mean"):
            value = getattr(self, name)
            if name not in DELAY_PARAMS[self.kind]:
                if value is not None:
                    raise ParameterError(owner, name, f"kind {self.kind!r} does not take it")
                continue
            if value is None:
                raise ParameterError(owner, name, f"missing; kind {self.kind!r} needs it")
            check_type(owner, name, value, float)
            if value < 0:
                raise ParameterError(owner, name, f"must be >= 0 seconds, got {value!r}")
        if self.kind == "uniform" and self.high < self.low:  # type: ignore[operator]
            raise ParameterError(owner, "high", f"must be >= low ({self.low})")

    def to_dict(self) -> JSONObject:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` delays, seconds."""
        if self.kind == "fixed":
            return np.full(n, float(self.value or 0.0))
        if self.kind == "uniform":
            return rng.uniform(self.low, self.high, size=n)
        return rng.exponential(self.mean, size=n) if self.mean else np.zeros(n)


@dataclass(frozen=True)
class SessionShape:
    """Generated sessions (a scenario's ``[sessions]`` table): turns per session and the delay
    before each turn after the first."""

    turns: LengthDist = field(default_factory=lambda: LengthDist("fixed", value=3))
    delay_s: DelayDist = field(default_factory=lambda: DelayDist("fixed", value=0.0))

    def to_dict(self) -> JSONObject:
        return {"turns": self.turns.to_dict(), "delay_s": self.delay_s.to_dict()}


class _Texts:
    """Synthetic texts of exact token counts, from one seeded stream."""

    def __init__(self, tokenizer: TokenizerLike, rng: np.random.Generator) -> None:
        self.tokenizer, self.rng = tokenizer, rng
        self.pool: np.ndarray | None = None

    def __call__(self, tokens: int) -> str:
        if self.pool is None:
            self.pool = _clean_token_pool(self.tokenizer, self.rng)
        return exact_length_prompt(self.tokenizer, tokens, self.rng, self.pool)


def _generated(
    shape: SessionShape, num_requests: int, input_len: LengthDist, output_len: LengthDist,
    texts: _Texts, rng: np.random.Generator, system_prompt_tokens: int, tool_tokens: int,
) -> list[PlannedSession]:  # fmt: skip
    """Sessions holding ``num_requests`` turns in all (the last one cut)."""
    out: list[PlannedSession] = []
    left = num_requests
    while left > 0:
        n = min(int(shape.turns.sample(rng, 1)[0]), left)
        ins, outs = input_len.sample(rng, n).tolist(), output_len.sample(rng, n).tolist()
        delays = shape.delay_s.sample(rng, n).tolist()
        turns = tuple(
            PlannedTurn(({"role": "user", "content": texts(i)},), o,
                        {"role": "assistant", "content": texts(o)}, d, None,
                        (texts(tool_tokens),))
            for i, o, d in zip(ins, outs, delays, strict=True)
        )  # fmt: skip
        system = (
            ({"role": "system", "content": texts(system_prompt_tokens)},)
            if system_prompt_tokens else ()
        )  # fmt: skip
        out.append(PlannedSession(f"s{len(out):05d}", turns, None, system))
        left -= n
    return out


def agent_sessions(
    workload: WorkloadSpec, shape: SessionShape | None, tokenizer: TokenizerLike,
    num_requests: int | None, seed: int, *, input_len: LengthDist | None,
    output_len: LengthDist | None, ignore_eos: bool, temperature: float,
    fields: JSONView | None = None,
) -> tuple[list[list[RequestSpec]], list[float] | None]:  # fmt: skip
    """The sessions of a ``kind = "sessions"`` workload as requests, ``num_requests`` turns in
    all (None: every turn of the trace), and each session's start in seconds (the trace's
    timestamps stretched by ``time_scale``; None unless it is set)."""
    len_rng, text_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    texts = _Texts(tokenizer, text_rng)
    tool_tokens = workload.tool_result_tokens or DEFAULT_TOOL_RESULT_TOKENS
    if workload.path is not None:
        planned = planned_turns(read_session_trace(workload.path, texts, tool_tokens), num_requests)
    else:
        assert input_len is not None and output_len is not None and num_requests is not None
        planned = _generated(
            shape or SessionShape(), num_requests, input_len, output_len, texts, len_rng,
            workload.system_prompt_tokens or 0, tool_tokens,
        )  # fmt: skip
    specs = [
        session_requests(s, i, tokenizer, ignore_eos=ignore_eos, temperature=temperature,
                         fields=fields)
        for i, s in enumerate(planned)
    ]  # fmt: skip
    if workload.time_scale is None:
        return specs, None
    starts = [s.start_s for s in planned]
    if any(t is None for t in starts):
        raise ParameterError(
            "workload", "time_scale", "replays the trace's timestamps; every session's first "
            "line needs a timestamp (ms), or drop time_scale",
        )  # fmt: skip
    return specs, [float(t) * workload.time_scale for t in starts]  # type: ignore[arg-type]
