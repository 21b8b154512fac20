"""Multi-turn chats: sessions whose history grows turn by turn.

A session is a list of requests that one closed-loop user sends in order (see
``run_closed_loop(sessions=...)``). Turn ``k`` sends the whole conversation so far: every
earlier user message and assistant answer, then the new user message; so the prompt grows each
turn and an engine with prefix caching can reuse the previous turns' KV.

The assistant answers in the history are fixed in advance, not the text the server generated:
the workload must be identical between runs and engines (random-weight test models emit junk),
and what matters for the engine is the history's length, which equals the turn's
``max_tokens`` when ``ignore_eos`` is on. Two sources:

    * synthetic (:func:`synthetic_sessions`): user messages of ``input_len`` tokens, answers of
      ``output_len`` tokens (exact token counts), ``turns`` turns per session;
    * ShareGPT (:func:`sharegpt_sessions`): each conversation's own user and assistant messages,
      ``max_tokens`` of a turn being the token count of the answer that followed it.

On a conversation API (chat, Responses, Messages: results.schema.api_kinds) a turn carries the
messages list; for ``api="completions"`` its prompt is the transcript (``"User: ...\\nAssistant:
..."`` lines), which the server sees as one text.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec, SessionTurn
from loadgen.workloads.prompts import _clean_token_pool, exact_length_prompt
from loadgen.workloads.rows import RowRefused, RowReport, repeat_to
from loadgen.workloads.sharegpt import MIN_TOKENS, Turn, load_sharegpt
from loadgen.workloads.spec import LengthDist, WorkloadError
from results.schema.api_kinds import Api, api_kind

__all__ = ["sessions_turns", "sharegpt_sessions", "synthetic_sessions", "turn_request"]

_LABELS = {"user": "User", "assistant": "Assistant", "system": "System"}


def _transcript(history: list[Turn]) -> str:
    return "\n".join(f"{_LABELS[t.role]}: {t.text}" for t in history) + "\nAssistant:"


def turn_request(
    request_id: str,
    history: list[Turn],
    max_tokens: int,
    tokenizer: TokenizerLike,
    api: Api,
    ignore_eos: bool,
    temperature: float,
) -> RequestSpec:
    """The request of one turn: ``history`` ends with the new user message."""
    if api_kind(api).conversation:
        text = "\n".join(t.text for t in history)
        messages: tuple[tuple[str, str], ...] | None = tuple((t.role, t.text) for t in history)
    else:
        text, messages = _transcript(history), None
    return RequestSpec(
        request_id=request_id,
        prompt=text,
        prompt_tokens=len(tokenizer.encode(text, add_special_tokens=False)),
        max_tokens=max_tokens,
        api=api,
        ignore_eos=ignore_eos,
        temperature=temperature,
        messages=messages,
    )


def synthetic_sessions(
    tokenizer: TokenizerLike,
    num_requests: int,
    turns: int,
    input_len: LengthDist,
    output_len: LengthDist,
    seed: int,
    api: Api = "chat",
    ignore_eos: bool = True,
    temperature: float = 0.0,
    *,
    system_prompt_tokens: int = 0,
) -> list[list[RequestSpec]]:
    """Sessions of ``turns`` turns each, ``num_requests`` turns in all (the last may be short).

    Request ids are ``s{session:05d}-t{turn:03d}``, each request's ``session`` its session
    ``s{session:05d}`` and turn. With ``system_prompt_tokens`` every session
    starts with its own system message of that many tokens.
    """
    if turns < 1:
        raise WorkloadError(f"multiturn turns: expected >= 1, got {turns}")
    if num_requests < 0:
        raise WorkloadError(f"multiturn num_requests: expected >= 0, got {num_requests}")
    len_rng, text_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    user_lens = input_len.sample(len_rng, num_requests).tolist()
    answer_lens = output_len.sample(len_rng, num_requests).tolist()
    pool = _clean_token_pool(tokenizer, text_rng) if num_requests else None
    sessions: list[list[RequestSpec]] = []
    history: list[Turn] = []
    for i in range(num_requests):
        turn = i % turns
        if turn == 0:
            sessions.append([])
            history = []
            if system_prompt_tokens:
                text = exact_length_prompt(tokenizer, system_prompt_tokens, text_rng, pool)
                history.append(Turn("system", text))
        history.append(Turn("user", exact_length_prompt(tokenizer, user_lens[i], text_rng, pool)))
        sid = f"s{len(sessions) - 1:05d}"
        spec = turn_request(f"{sid}-t{turn:03d}", history, answer_lens[i], tokenizer, api,
                            ignore_eos, temperature)  # fmt: skip
        sessions[-1].append(replace(spec, session=SessionTurn(sid, turn)))
        answer = exact_length_prompt(tokenizer, answer_lens[i], text_rng, pool)
        history.append(Turn("assistant", answer))
    return sessions


def _session_of(
    conversation: list[Turn], tokenizer: TokenizerLike, api: Api, ignore_eos: bool,
    temperature: float, max_turns: int | None, limit: tuple[int, str] | None,
) -> tuple[list[RequestSpec], str | None]:  # fmt: skip
    """The turns of one conversation (ids to be given) and why it ended before its last user
    turn (None: it did not); RowRefused when not even its first turn can be sent. ``limit``:
    the most prompt plus answer tokens of a turn, and the key that sets it."""
    session: list[RequestSpec] = []
    history: list[Turn] = []
    cut: str | None = None
    for k, turn in enumerate(conversation):
        if turn.role == "system" and not history:
            history.append(turn)
        if turn.role != "user":
            continue  # answers join the history with the turn they answer
        if max_turns is not None and len(session) >= max_turns:
            break  # the scenario's own cap: not a cut
        answer = conversation[k + 1] if k + 1 < len(conversation) else None
        if answer is None or answer.role != "assistant":
            cut = "a user turn without an answer to take the length from"
            break
        max_tokens = len(tokenizer.encode(answer.text, add_special_tokens=False))
        if max_tokens < MIN_TOKENS:
            cut = f"an answer under {MIN_TOKENS} tokens"
            break
        history.append(turn)
        spec = turn_request("t", history, max_tokens, tokenizer, api, ignore_eos, temperature)
        if limit is not None and spec.prompt_tokens + max_tokens > limit[0]:
            cut = f"a turn over {limit[1]} ({limit[0]} tokens)"
            break
        session.append(spec)
        history.append(answer)
    if not session:
        raise RowRefused(f"first turn cannot be sent: {cut or 'no user turn'}")
    return session, cut


def sharegpt_sessions(
    path: str | Path,
    tokenizer: TokenizerLike,
    num_requests: int,
    seed: int,
    api: Api = "chat",
    ignore_eos: bool = True,
    temperature: float = 0.0,
    *,
    max_turns: int | None = None,
    max_context_tokens: int | None = None,
    context_tokens: int | None = None,
    report: RowReport | None = None,
) -> list[list[RequestSpec]]:
    """Sessions from a ShareGPT file's conversations (shuffled with ``seed``), ``num_requests``
    turns in all; a session ends at ``max_turns`` turns, or before a turn that cannot be sent:
    no answer to take its length from, an answer under 4 tokens, or a prompt plus answer over
    ``max_context_tokens`` or the served ``context_tokens``. ``report`` counts the conversations
    refused (not even a first turn), cut short, and reused when the file runs out.
    """
    report = report if report is not None else RowReport(str(path))
    conversations = load_sharegpt(path, report)
    report.read = sum(report.refused.values())
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x3A17])).permutation(
        len(conversations)
    )
    named = ((max_context_tokens, "max_context_tokens"), (context_tokens, "the served context"))
    limits = [(tokens, key) for tokens, key in named if tokens is not None]
    limit = min(limits) if limits else None
    built: list[list[RequestSpec]] = []
    for index in order.tolist():
        if sum(len(b) for b in built) >= num_requests:
            break
        report.read += 1
        try:
            session, cut = _session_of(
                conversations[index], tokenizer, api, ignore_eos, temperature, max_turns, limit
            )
        except RowRefused as refused:
            report.refuse(refused.reason)
            continue
        if cut is not None:
            report.cut[cut] += 1
        built.append(session)
    report.usable = len(built)
    return _renumbered(repeat_to(built, _sessions_needed(built, num_requests), report,
                                 "conversation"), num_requests)  # fmt: skip


def _sessions_needed(built: list[list[RequestSpec]], num_requests: int) -> int:
    """How many sessions, ``built`` cycled, hold ``num_requests`` turns."""
    turns, needed = 0, 0
    while built and turns < num_requests:
        turns += len(built[needed % len(built)])
        needed += 1
    return needed if built else (1 if num_requests else 0)


def _renumbered(sessions: list[list[RequestSpec]], num_requests: int) -> list[list[RequestSpec]]:
    """Each session's turns with ids ``s{session:05d}-t{turn:03d}``, the last cut to make
    ``num_requests`` turns in all."""
    out: list[list[RequestSpec]] = []
    left = num_requests
    for s, session in enumerate(sessions):
        take = session[:left]
        out.append([
            replace(spec, request_id=f"s{s:05d}-t{k:03d}", session=SessionTurn(f"s{s:05d}", k))
            for k, spec in enumerate(take)
        ])  # fmt: skip
        left -= len(take)
    return out


def sessions_turns(sessions: list[list[RequestSpec]]) -> int:
    """The number of requests in ``sessions``."""
    return sum(len(s) for s in sessions)
