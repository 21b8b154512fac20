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

For ``api="chat"`` a turn carries the messages list; for ``api="completions"`` its prompt is the
transcript (``"User: ...\\nAssistant: ..."`` lines), which the server sees as one text.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import Api, RequestSpec
from loadgen.workloads.prompts import _clean_token_pool, exact_length_prompt
from loadgen.workloads.sharegpt import MIN_TOKENS, Turn, load_sharegpt
from loadgen.workloads.spec import LengthDist, WorkloadError

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
    if api == "chat":
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

    Request ids are ``s{session:05d}-t{turn:03d}``. With ``system_prompt_tokens`` every session
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
        rid = f"s{len(sessions) - 1:05d}-t{turn:03d}"
        sessions[-1].append(
            turn_request(rid, history, answer_lens[i], tokenizer, api, ignore_eos, temperature)
        )
        answer = exact_length_prompt(tokenizer, answer_lens[i], text_rng, pool)
        history.append(Turn("assistant", answer))
    return sessions


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
) -> list[list[RequestSpec]]:
    """Sessions from a ShareGPT file's conversations (shuffled with ``seed``), ``num_requests``
    turns in all; a session ends at ``max_turns`` turns or before the turn whose prompt plus
    answer would pass ``max_context_tokens``. Conversations are reused when the file runs out.
    """
    conversations = load_sharegpt(path)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x3A17])).permutation(
        len(conversations)
    )
    sessions: list[list[RequestSpec]] = []
    produced = 0
    for rounds, index in enumerate(itertools.cycle(order.tolist())):
        if produced >= num_requests:
            break
        if rounds >= len(order) and not sessions:
            break  # a whole pass gave nothing: no usable conversation
        session: list[RequestSpec] = []
        history: list[Turn] = []
        conversation = conversations[index]
        for k, turn in enumerate(conversation):
            if turn.role == "system" and not history:
                history.append(turn)
            if turn.role != "user":
                continue  # answers join the history with the turn they answer
            answer = conversation[k + 1] if k + 1 < len(conversation) else None
            if answer is None or answer.role != "assistant":
                break
            max_tokens = len(tokenizer.encode(answer.text, add_special_tokens=False))
            if max_tokens < MIN_TOKENS:
                break
            history.append(turn)
            rid = f"s{len(sessions):05d}-t{len(session):03d}"
            spec = turn_request(rid, history, max_tokens, tokenizer, api, ignore_eos, temperature)
            if max_context_tokens is not None and (
                spec.prompt_tokens + max_tokens > max_context_tokens
            ):
                break
            session.append(spec)
            produced += 1
            if produced >= num_requests or (max_turns is not None and len(session) >= max_turns):
                break
            history.append(answer)
        if session:
            sessions.append(session)
    if num_requests and not sessions:
        raise WorkloadError(
            f"{path}: no conversation starts with a user turn and an answer of >= {MIN_TOKENS} "
            f"tokens within max_context_tokens={max_context_tokens}"
        )
    return sessions


def sessions_turns(sessions: list[list[RequestSpec]]) -> int:
    """The number of requests in ``sessions``."""
    return sum(len(s) for s in sessions)
