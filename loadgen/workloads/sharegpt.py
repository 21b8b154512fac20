"""ShareGPT-format conversation files: real prompts and real answer lengths.

The format (the ShareGPT dumps, and what vLLM's and SGLang's benchmarks read) is a JSON list of
conversations::

    [{"id": "...", "conversations": [{"from": "human", "value": "..."},
                                     {"from": "gpt", "value": "..."}, ...]}, ...]

``from`` is ``human`` (or ``user``), ``gpt`` (or ``assistant``/``chatgpt``/``bard``) or
``system``; ``conversation`` (singular) is accepted for ``conversations``. Single-turn use
(:func:`sharegpt_requests`) follows vLLM: the first human turn is the prompt, and the answer
after it gives the output length in tokens (unless the scenario fixes the output length);
prompts or answers under 4 tokens, and those over the given caps, are skipped. Conversations
are shuffled with the seed before they are taken, so a seed picks a reproducible sample.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadgen.protocols import TokenizerLike
from loadgen.request_spec import Api, RequestSpec
from loadgen.workloads.spec import LengthDist, WorkloadError

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


def load_sharegpt(path: str | Path) -> list[list[Turn]]:
    """The conversations of a ShareGPT-format JSON file, in file order.

    Raises:
        WorkloadError: the file is missing, not JSON, or not in the format (the message names
            the file, the entry and what was expected).
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkloadError(f"ShareGPT file not found: {path}") from None
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
            if role is None or not isinstance(text, str):
                raise WorkloadError(
                    f"{path}: entry {i}, turn {j}: expected {{'from': one of "
                    f"{sorted(_ROLES)}, 'value': text}}, got {str(turn)[:80]!r}"
                )
            conversation.append(Turn(role, text))
        out.append(conversation)
    return out


def _first_exchange(conversation: list[Turn]) -> tuple[str, str] | None:
    """(first user message, the assistant answer right after it), or None."""
    for a, b in itertools.pairwise(conversation):
        if a.role == "user" and b.role == "assistant":
            return a.text, b.text
    return None


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
) -> list[RequestSpec]:
    """``n`` single-turn requests from a ShareGPT file (module docstring).

    ``max_tokens`` is the answer's token count, or a sample of ``output_len`` when given. When
    the file has fewer usable conversations than ``n``, they are reused in the same shuffled
    order (each request still has its own id).

    Raises:
        WorkloadError: the file is invalid, or no conversation passes the length filters.
    """
    if n < 0:
        raise WorkloadError(f"sharegpt_requests n: expected >= 0, got {n}")
    conversations = load_sharegpt(path)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5A6E]))
    order = rng.permutation(len(conversations))
    pairs: list[tuple[str, int, int]] = []
    for index in order.tolist():
        exchange = _first_exchange(conversations[index])
        if exchange is None:
            continue
        prompt, answer = exchange
        prompt_tokens = len(tokenizer.encode(prompt, add_special_tokens=False))
        answer_tokens = len(tokenizer.encode(answer, add_special_tokens=False))
        if prompt_tokens < MIN_TOKENS or (output_len is None and answer_tokens < MIN_TOKENS):
            continue
        if max_input_tokens is not None and prompt_tokens > max_input_tokens:
            continue
        if output_len is None and max_output_tokens is not None:
            answer_tokens = min(answer_tokens, max_output_tokens)
        pairs.append((prompt, prompt_tokens, answer_tokens))
        if len(pairs) >= n:
            break
    if n and not pairs:
        raise WorkloadError(
            f"{path}: no conversation has a user turn followed by an answer of >= {MIN_TOKENS} "
            f"tokens within the length caps (max_input_tokens={max_input_tokens})"
        )
    sampled = output_len.sample(rng, n).tolist() if output_len is not None else None
    specs = []
    for i in range(n):
        prompt, prompt_tokens, answer_tokens = pairs[i % len(pairs)]
        specs.append(
            RequestSpec(
                request_id=f"{id_prefix}-{i:06d}",
                prompt=prompt,
                prompt_tokens=prompt_tokens,
                max_tokens=int(sampled[i]) if sampled is not None else answer_tokens,
                api=api,
                ignore_eos=ignore_eos,
                temperature=temperature,
            )
        )
    return specs
