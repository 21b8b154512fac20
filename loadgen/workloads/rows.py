"""The rules every file of prompts follows (datasets, ShareGPT, multi-turn): what is refused, why,
and what is said.

A row (a prompt, a conversation) that cannot be sent as it is written (no prompt, a role no chat
API knows, no output length, longer than the context or the length filters) is refused before
the load and counted by its reason, never sent altered nor dropped without a word; rows reused
to reach the run's request count are counted too. :class:`RowReport` holds those counts; its
:meth:`RowReport.lines` are what `bench run` prints and :meth:`RowReport.to_json` what run.json's
``load.rows`` records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from loadgen.request_images import ImageError, as_images
from loadgen.request_spec import Message
from loadgen.workloads.spec import WorkloadError
from perfmodel.files import JSONObject
from results.schema.api_kinds import CHAT_APIS

__all__ = [
    "CHAT_ROLES",
    "RowRefused",
    "RowReport",
    "chat_message",
    "repeat_to",
    "row_images",
]

T = TypeVar("T")

# The roles OpenAI's chat API takes (developer: the newer name of system).
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
# The keys a chat message may carry besides role and content, sent as they are.
_MESSAGE_KEYS = ("name", "tool_calls", "tool_call_id", "refusal")


def row_images(raw: Any, api: str, folder: Path | None) -> tuple[str, ...]:
    """A row's images cell (loadgen.request_images.as_images: URLs, bytes, paths relative to
    ``folder``) as image URLs; () for none. Refused on an API without images, and for an image
    that cannot be read (the reason names the first problem, cut short)."""
    try:
        images = as_images(raw, folder)
    except ImageError as exc:
        raise RowRefused(f"images: {str(exc)[:80]}") from None
    if images and api not in CHAT_APIS:
        raise RowRefused(f"images on the {api} API (set api = 'chat', 'responses' or 'messages')")
    return images


class RowRefused(Exception):
    """One row cannot be sent; ``reason`` is the count's key, short and the same for every row
    refused for it (e.g. ``"no prompt"``, ``"unknown role 'robot'"``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class RowReport:
    """What became of a file's rows: ``read`` rows, ``usable`` of them kept, ``refused`` by
    reason, ``cut`` (a conversation sent up to a turn that could not be, by reason), and
    ``requests`` made from the usable ones (sessions, for conversations; more than ``usable``
    when rows were reused to reach the run's request count)."""

    source: str
    read: int = 0
    usable: int = 0
    requests: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)

    def refuse(self, reason: str) -> None:
        self.refused[reason] += 1

    @property
    def reused(self) -> int:
        """Requests that repeat a row already sent (0 when every row went once at most)."""
        return max(0, self.requests - self.usable)

    def lines(self) -> list[str]:
        """What to tell the user: the refusals by reason, and the reuse, one line each."""
        out = [
            f"{self.source}: {count} of {self.read} rows refused: {reason}"
            for reason, count in sorted(self.refused.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        out += [
            f"{self.source}: {count} conversations sent up to {reason}"
            for reason, count in sorted(self.cut.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        if self.reused:
            out.append(
                f"{self.source}: {self.usable} usable rows repeated to make {self.requests} "
                f"requests ({self.reused} requests reuse a row)"
            )
        return out

    def to_json(self) -> JSONObject:
        """run.json's ``load.rows``."""
        return {
            "source": self.source,
            "read": self.read,
            "usable": self.usable,
            "requests": self.requests,
            "reused": self.reused,
            "refused": dict(sorted(self.refused.items())),
            "cut": dict(sorted(self.cut.items())),
        }


def repeat_to(items: Sequence[T], n: int, report: RowReport, noun: str = "row") -> list[T]:
    """The first ``n`` of ``items``, cycled from the start when there are fewer (counted in
    ``report.requests``); WorkloadError naming the refusals when none is usable."""
    if n and not items:
        reasons = "; ".join(f"{c}: {r}" for r, c in report.refused.most_common()) or "none read"
        raise WorkloadError(f"{report.source}: no {noun} can be sent (refused {reasons})")
    out = [items[i % len(items)] for i in range(n)]
    report.requests += len(out)
    return out


def _content(value: Any) -> str | list[JSONObject]:
    """A message's content: a string, or a list of text parts (OpenAI's multi-part form)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:
        parts = []
        for part in value:
            if isinstance(part, str):
                part = {"type": "text", "text": part}
            if not isinstance(part, Mapping) or part.get("type", "text") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise RowRefused(f"content part of type {kind!r} (only text parts are sent)")
            if not isinstance(part.get("text"), str):
                raise RowRefused("content part without a text")
            parts.append({"type": "text", "text": part["text"]})
        return parts
    raise RowRefused("message without a text content")


def chat_message(raw: Any) -> Message:
    """One OpenAI chat message of a file, checked: its role one of :data:`CHAT_ROLES`, its
    content a text or text parts (an assistant's tool call may have none). Returned as a (role,
    text) pair where that is all it holds, else as the message object with only its known keys.

    Raises:
        RowRefused: not a message, a role no chat API takes, or content that is not text.
    """
    if not isinstance(raw, Mapping):
        raise RowRefused("message that is not an object")
    role = raw.get("role")
    if role not in CHAT_ROLES:
        raise RowRefused(f"unknown role {str(role)[:20]!r}")
    extra = {k: raw[k] for k in _MESSAGE_KEYS if raw.get(k) is not None}
    if raw.get("content") is None and role == "assistant" and "tool_calls" in extra:
        return {"role": role, "content": None, **extra}
    content = _content(raw.get("content"))
    if isinstance(content, str) and not extra:
        return (role, content)
    return {"role": role, "content": content, **extra}
