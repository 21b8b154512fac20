"""ShareGPT-format conversation files: real prompts and real answer lengths.

The format (the ShareGPT dumps, and what vLLM's and SGLang's benchmarks read) is a JSON list of
conversations::

    [{"id": "...", "conversations": [{"from": "human", "value": "..."},
                                     {"from": "gpt", "value": "..."}, ...]}, ...]

``from`` is ``human`` (or ``user``), ``gpt`` (or ``assistant``/``chatgpt``/``bard``) or
``system``; ``conversation`` (singular) is accepted for ``conversations``. Single-turn use
(:func:`sharegpt_requests`) follows vLLM: the first human turn is the prompt (on a conversation
API after the conversation's system prompt, when it opens with one), and the answer after it gives
the output length in tokens (unless the scenario fixes the output length). Conversations are
shuffled with the seed before they are taken, so a seed picks a reproducible sample.

The rules of every file of prompts hold (loadgen.workloads.rows): a conversation that cannot be
sent (an unknown role, no user turn, no answer to take the output length from, a prompt or
answer under 4 tokens, over the given caps or the served context) is refused and counted by
reason, and conversations reused to reach the request count are counted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import Message, RequestSpec
from loadgen.workloads.rows import RowRefused, RowReport, repeat_to
from loadgen.workloads.spec import LengthDist, WorkloadError
from results.schema.api_kinds import Api, api_kind

__all__ = ["Turn", "load_sharegpt", "sharegpt_requests"]

_USER_ROLES = {"human": "user", "user": "user"}
_ASSISTANT_ROLES = {"gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant"}
_ASSISTANT_ROLES["bard"] = "assistant"
_ROLES = {**_USER_ROLES, **_ASSISTANT_ROLES, "system": "system"}
MIN_TOKENS = 4  # vLLM's floor: shorter prompts or answers are noise, not workload


@dataclass(frozen=True)
class Turn:
    """One message of a conversation: ``role`` is "system", "user" or "assistant"."""

    role: str
    text: str


def load_sharegpt(path: str | Path, report: RowReport | None = None) -> list[list[Turn]]:
    """The conversations of a ShareGPT-format JSON file, in file order. With ``report``, a
    conversation with a turn of an unknown role is refused there (counted, left out) rather
    than failing the file.

    Raises:
        WorkloadError: the file is missing, not JSON, or not in the format (the message names
            the file, the entry or the line, and what was expected).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkloadError(f"ShareGPT file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            f"{path}: line {exc.lineno}, column {exc.colno}: not a readable JSON file ({exc.msg})"
        ) from None
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(data, list):
        raise WorkloadError(
            f"{path}: expected a JSON list of conversations, got {type(data).__name__}"
        )
    out: list[list[Turn]] = []
    for i, entry in enumerate(data):
        turns = None
        if isinstance(entry, dict):
            turns = entry.get("conversations", entry.get("conversation"))
        if not isinstance(turns, list):
            raise WorkloadError(
                f"{path}: entry {i}: expected an object with a 'conversations' list, got "
                f"{str(entry)[:80]!r}"
            )
        conversation = []
        for j, turn in enumerate(turns):
            role = _ROLES.get(str(turn.get("from", "")).lower()) if isinstance(turn, dict) else None
            text = turn.get("value") if isinstance(turn, dict) else None
            if role is not None and isinstance(text, str):
                conversation.append(Turn(role, text))
                continue
            if report is None:
                raise WorkloadError(
                    f"{path}: entry {i}, turn {j}: expected {{'from': one of "
                    f"{sorted(_ROLES)}, 'value': text}}, got {str(turn)[:80]!r}"
                )
            got = turn.get("from") if isinstance(turn, dict) else None
            report.refuse(f"a turn of unknown role {str(got)[:20]!r} or without a text")
            break
        else:
            out.append(conversation)
    return out


def _first_exchange(conversation: list[Turn], need_answer: bool) -> tuple[Turn | None, str, str]:
    """(the system turn that opens it, the first user message, the answer right after it: ""
    where there is none and none is needed); RowRefused saying what is missing."""
    system = conversation[0] if conversation and conversation[0].role == "system" else None
    for k, turn in enumerate(conversation):
        if turn.role != "user":
            continue
        answer = conversation[k + 1] if k + 1 < len(conversation) else None
        if answer is not None and answer.role == "assistant":
            return system, turn.text, answer.text
        if need_answer:
            raise RowRefused("no answer after the first user turn to take the length from")
        return system, turn.text, ""
    raise RowRefused("no user turn")


def _prompt(
    conversation: list[Turn], tokenizer: TokenizerLike, api: Api, need_answer: bool
) -> tuple[str, int, tuple[Message, ...] | None, int]:
    """(prompt, its tokens, the chat messages or None, the answer's tokens) of a conversation."""
    system, prompt, answer = _first_exchange(conversation, need_answer)
    prompt_tokens = len(tokenizer.encode(prompt, add_special_tokens=False))
    answer_tokens = len(tokenizer.encode(answer, add_special_tokens=False)) if answer else 0
    if prompt_tokens < MIN_TOKENS:
        raise RowRefused(f"first user turn under {MIN_TOKENS} tokens")
    if need_answer and answer_tokens < MIN_TOKENS:
        raise RowRefused(f"answer under {MIN_TOKENS} tokens")
    messages: tuple[Message, ...] | None = None
    if api_kind(api).conversation and system is not None:
        messages = (("system", system.text), ("user", prompt))
        prompt = f"{system.text}\n{prompt}"
        prompt_tokens = len(tokenizer.encode(prompt, add_special_tokens=False))
    return prompt, prompt_tokens, messages, answer_tokens


def sharegpt_requests(
    path: str | Path,
    tokenizer: TokenizerLike,
    n: int,
    seed: int,
    api: Api = "completions",
    *,
    output_len: LengthDist | None = None,
    max_input_tokens: int | None = None,
    max_output_tokens: int | None = None,
    ignore_eos: bool = False,
    temperature: float = 0.0,
    id_prefix: str = "req",
    context_tokens: int | None = None,
    report: RowReport | None = None,
) -> list[RequestSpec]:
    """``n`` single-turn requests from a ShareGPT file (module docstring).

    ``max_tokens`` is the answer's token count, or a sample of ``output_len`` when given. When
    the file has fewer usable conversations than ``n``, they are reused in the same shuffled
    order (each request still has its own id), counted in ``report`` with the refusals.

    Raises:
        WorkloadError: the file is invalid, or no conversation can be sent.
    """
    if n < 0:
        raise WorkloadError(f"sharegpt_requests n: expected >= 0, got {n}")
    report = report if report is not None else RowReport(str(path))
    conversations = load_sharegpt(path, report)
    report.read = sum(report.refused.values())
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5A6E]))
    order = rng.permutation(len(conversations))
    sampled = output_len.sample(rng, n).tolist() if output_len is not None else None
    cap = max(sampled) if sampled else None
    usable: list[tuple[str, int, tuple[Message, ...] | None, int]] = []
    for index in order.tolist():
        if len(usable) >= n:
            break
        report.read += 1
        try:
            prompt, tokens, messages, answer = _prompt(
                conversations[index], tokenizer, api, need_answer=output_len is None
            )
            if max_input_tokens is not None and tokens > max_input_tokens:
                raise RowRefused(f"prompt longer than max_input_tokens ({max_input_tokens})")
            if output_len is None and max_output_tokens is not None:
                answer = min(answer, max_output_tokens)
            if context_tokens is not None and tokens + (cap or answer) > context_tokens:
                raise RowRefused(f"prompt + answer over the served context ({context_tokens})")
        except RowRefused as refused:
            report.refuse(refused.reason)
            continue
        usable.append((prompt, tokens, messages, answer))
    report.usable = len(usable)
    specs = []
    chosen = repeat_to(usable, n, report, "conversation")
    for i, (prompt, tokens, messages, answer) in enumerate(chosen):
        specs.append(
            RequestSpec(
                request_id=f"{id_prefix}-{i:06d}", prompt=prompt, prompt_tokens=tokens,
                max_tokens=int(sampled[i]) if sampled is not None else answer, api=api,
                ignore_eos=ignore_eos, temperature=temperature, messages=messages,
            )
        )  # fmt: skip
    return specs
