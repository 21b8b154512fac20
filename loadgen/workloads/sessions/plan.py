"""Sessions planned as requests: each turn sends the whole conversation so far.

A session (:class:`PlannedSession`, read from a trace or generated) is a list of turns
(:class:`PlannedTurn`): the messages the turn adds (a user message, the tool results that
answer the previous answer's calls), the tokens it may generate, the delay before it, its tools
and the answer that joins the history after it. :func:`session_requests` makes the requests:
turn ``k`` carries every earlier turn's messages and answer, then its own messages, with a
:class:`loadgen.request_spec.SessionTurn` saying where it stands, so that the driver can wait
the turn's delay and rebuild its history from the server's tool calls
(loadgen.workloads.sessions.history).

As in multi-turn chats (loadgen.workloads.multiturn), an answer in the history is the planned
one, not the text the server generated: the workload stays identical between runs and engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import Message, RequestSpec, SessionTurn
from loadgen.workloads.sessions.history import transcript
from loadgen.workloads.spec import WorkloadError
from perfmodel.files import JSONView

__all__ = ["PlannedSession", "PlannedTurn", "planned_turns", "session_requests"]


@dataclass(frozen=True)
class PlannedTurn:
    """One turn: ``messages`` it adds (at least one), ``max_tokens`` (>= 1), ``delay_s``
    before it (seconds after the previous answer; None: the scenario's think time), ``answer``
    (the assistant message the history gets after it), ``tools`` (OpenAI tool definitions
    sent with it, None: none), ``tool_results`` (texts answering the previous answer's calls
    when the turn's messages hold none)."""

    messages: tuple[Message, ...]
    max_tokens: int
    answer: Message
    delay_s: float | None = None
    tools: tuple[JSONView, ...] | None = None
    tool_results: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.messages:
            raise WorkloadError("a session turn must add at least one message")
        if self.max_tokens < 1:
            raise WorkloadError(f"a session turn's max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class PlannedSession:
    """``session_id`` (recorded per request), ``start_s`` (its first turn's time in the trace,
    s from the trace's first session; None: generated) and its turns."""

    session_id: str
    turns: tuple[PlannedTurn, ...]
    start_s: float | None = None
    system: tuple[Message, ...] = field(default=())


def session_requests(
    session: PlannedSession, index: int, tokenizer: TokenizerLike, *,
    ignore_eos: bool, temperature: float, fields: JSONView | None = None,
) -> list[RequestSpec]:  # fmt: skip
    """The chat requests of ``session`` (the ``index``-th of the run: ids
    ``s{index:05d}-t{turn:03d}``), each carrying ``fields`` and its turn's tools."""
    history: list[Message] = list(session.system)
    specs: list[RequestSpec] = []
    for k, turn in enumerate(session.turns):
        history.extend(turn.messages)
        messages = tuple(history)
        prompt = transcript(messages)
        body = dict(fields or {})
        specs.append(
            RequestSpec(
                request_id=f"s{index:05d}-t{k:03d}", prompt=prompt,
                prompt_tokens=len(tokenizer.encode(prompt, add_special_tokens=False)),
                max_tokens=turn.max_tokens, api="chat", ignore_eos=ignore_eos,
                temperature=temperature, messages=messages, fields=body or None,
                tools=turn.tools or (),
                session=SessionTurn(
                    session.session_id, k, None if k == 0 else turn.delay_s,
                    new_messages=len(turn.messages) + (len(session.system) if k == 0 else 0),
                    tool_results=turn.tool_results,
                ),
            )
        )  # fmt: skip
        history.append(turn.answer)
    return specs


def planned_turns(
    sessions: Sequence[PlannedSession], num_requests: int | None
) -> list[PlannedSession]:
    """``sessions`` holding ``num_requests`` turns in all (the last one cut; None: all)."""
    if num_requests is None:
        return list(sessions)
    out: list[PlannedSession] = []
    left = num_requests
    for session in sessions:
        if left <= 0:
            break
        out.append(PlannedSession(session.session_id, session.turns[:left], session.start_s,
                                  session.system))  # fmt: skip
        left -= len(out[-1].turns)
    return out
