"""The messages between the server and its engine core process: one frozen dataclass per kind.

They travel pickled over one multiprocessing Pipe (engine.serving.core_process); each end
dispatches on the class with a match statement, and anything else that arrives is an error
naming what came and what was expected (``unexpected``).

  server -> core (ToCore):      AddRequest, AbortRequest, Call (a Query: Describe, StepsSince,
                                ResetPrefixCache, Embed), Shutdown
  core -> server, once first:   Ready, or StartupFailed
  core -> server, then (CoreEvent): StepOutputs (one per step), Idle, Rejected, CallResult,
                                CoreDied

The in-process front (engine.serving.async_engine.AsyncLLM) queues the same AddRequest and
AbortRequest and answers the same queries, so both fronts speak one vocabulary.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from engine.core.request import SamplingParams
from engine.llm_engine import RequestOutput, StepStats

# RequestOutput's fields in order: request_id, new_token_ids, num_prompt_tokens,
# num_output_tokens, finished, finish_reason, num_cached_tokens.
OutputRow = tuple[str, list[int], int, int, bool, str | None, int]


@dataclass(frozen=True)
class AddRequest:
    """Queue a request; the core answers Rejected if the engine refuses it."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class AbortRequest:
    """Stop a request and free its KV blocks (the client left, or a stop string matched)."""

    request_id: str


@dataclass(frozen=True)
class Describe:
    """Query: LLMEngine.describe(), the settings, model shape, dtypes and KV capacity."""


@dataclass(frozen=True)
class StepsSince:
    """Query: the per-step records (engine.core.telemetry) from step number ``since`` on."""

    since: int


@dataclass(frozen=True)
class ResetPrefixCache:
    """Query: empty the prefix cache (LLMEngine.reset_prefix_cache); answers whether it did
    (False while requests run)."""


@dataclass(frozen=True)
class Embed:
    """Query: the embeddings of ``prompts`` (token ids; LLMEngine.embed), answered between
    steps as ``{"embeddings": [[float, ...], ...]}`` or ``{"error": message}``."""

    prompts: list[list[int]]


Query = Describe | StepsSince | ResetPrefixCache | Embed


@dataclass(frozen=True)
class Call:
    """Answer ``query`` with a CallResult of the same ``call_id``."""

    call_id: int
    query: Query


@dataclass(frozen=True)
class Shutdown:
    """Stop serving and exit."""


ToCore = AddRequest | AbortRequest | Call | Shutdown


@dataclass(frozen=True)
class Ready:
    """The engine is built; its limits, for the server to check requests against."""

    max_model_len: int  # tokens
    kv_capacity_tokens: int
    served_model_name: str


@dataclass(frozen=True)
class StartupFailed:
    """The engine could not be built; ``reason`` is the child's exception, type first."""

    reason: str


CoreStartup = Ready | StartupFailed


@dataclass(frozen=True)
class StepOutputs:
    """One step's outputs and the engine's stats after it: one message per step, so the
    server wakes once per step, not once per token.

    ``rows`` hold RequestOutput's fields as plain tuples (OutputRow), built by hand: pickling
    tuples costs less than dataclasses, and dataclasses.astuple deep-copies every field (5% of
    the core's time at 100 streams).
    """

    rows: list[OutputRow]
    stats: StepStats

    @classmethod
    def of(cls, outputs: list[RequestOutput], stats: StepStats) -> StepOutputs:
        rows = [
            (o.request_id, o.new_token_ids, o.num_prompt_tokens, o.num_output_tokens,
             o.finished, o.finish_reason, o.num_cached_tokens)
            for o in outputs
        ]  # fmt: skip
        return cls(rows, stats)

    def outputs(self) -> list[RequestOutput]:
        return [RequestOutput(*row) for row in self.rows]


@dataclass(frozen=True)
class Idle:
    """The core has no work; sent every second, so that /metrics stays current."""

    kv_cache_usage: float  # fraction of KV blocks in use, 0..1


@dataclass(frozen=True)
class Rejected:
    """The engine refused an AddRequest; ``message`` names the limit and the fix."""

    request_id: str
    message: str


@dataclass(frozen=True)
class CallResult:
    """The JSON-safe answer to the Call of ``call_id``."""

    call_id: int
    value: Any


@dataclass(frozen=True)
class CoreDied:
    """The step loop raised; the core exits after this. ``reason``: the exception's repr."""

    reason: str


CoreEvent = StepOutputs | Idle | Rejected | CallResult | CoreDied


def unexpected(msg: object, expected: Any) -> str:
    """The error for ``msg`` arriving where one of the union ``expected`` belongs."""
    names = ", ".join(kind.__name__ for kind in typing.get_args(expected))
    return (
        f"the engine core pipe carried a {type(msg).__name__} ({msg!r:.100}) where one of "
        f"{names} belongs; the server and the core must run the same engine.serving code"
    )
