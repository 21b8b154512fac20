"""What the client tolerates from a server before it ends a request as that server's error.

A load generator that trusts its server can be hung or fooled by it: a stream that never ends, a
server that sends its headers and then nothing, a line of a gigabyte, a stream that goes on long
past ``max_tokens``, or a ``usage`` of 10^15 tokens that would make every tokens/s figure absurd.
Each limit here ends one request, never the run, and never holds more than a bounded amount of
memory per request, whatever the server sends:

    * ``request_timeout_s``: the whole request, from sending it to the end of its answer
      (``--request-timeout``, scenario ``request_timeout_s``); generous by default, but finite.
    * ``read_timeout_s``: the longest silence between two reads of one answer, the head
      included (``--read-timeout``, scenario ``read_timeout_s``).
    * :data:`MAX_EVENT_BYTES`: one SSE line or event (loadgen.client.readers.sse).
    * :func:`output_cap` and :data:`CHUNK_CHARS`: the content chunks, and their text, that
      one stream may carry for its ``max_tokens`` (loadgen.client.readers.openai_stream).
    * :data:`MAX_ERROR_BODY_BYTES`: what is kept of an error page or any answer that is not a
      stream, for its message.
    * :func:`usage_problem`: a ``usage`` whose counts are negative or beyond belief is not used
      for any figure; the request fails, saying what the server claimed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfmodel.files import JSONView

__all__ = [
    "DEFAULT_READ_TIMEOUT_S",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "MAX_ERROR_BODY_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_USAGE_TOKENS",
    "output_cap",
    "usage_problem",
]

# A whole request: 4,096 tokens at 10 tokens/s after a minute in a queue still fits.
DEFAULT_REQUEST_TIMEOUT_S = 600.0
# Silence between two reads: a prefill of a long prompt behind a long queue may be this slow.
DEFAULT_READ_TIMEOUT_S = 300.0
# One SSE line or event (its data lines together), bytes: OpenAI-style chunks are a few hundred
# bytes, a chunk with top-20 logprobs a few KiB.
MAX_EVENT_BYTES = 1024 * 1024
# What is kept of an answer that is not a stream (an error body, a proxy's HTML page), bytes.
MAX_ERROR_BODY_BYTES = 16 * 1024
# A stream may carry this many content chunks per token asked for, plus OVERRUN_SLACK_CHUNKS,
# before it is a stream that does not stop (a server may split a token's text in two chunks).
OVERRUN_FACTOR = 2
OVERRUN_SLACK_CHUNKS = 32
# A stream's text may average this many characters per allowed chunk: a token's text is a few
# characters, a long whitespace or punctuation token a few dozen.
CHUNK_CHARS = 256
# The text's size is checked every this many chunks (so at most this many chunks of
# MAX_EVENT_BYTES past the cap are held before the check).
CHECK_EVERY = 16
# No request's usage counts more tokens than this (the longest contexts are ~10^7 tokens).
MAX_USAGE_TOKENS = 10**9
_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def output_cap(max_tokens: int | None) -> int | None:
    """The most content chunks (and output tokens) a stream may have for ``max_tokens``, or
    None for no cap (``max_tokens`` unknown)."""
    if max_tokens is None:
        return None
    return OVERRUN_FACTOR * max_tokens + OVERRUN_SLACK_CHUNKS


def _counts(usage: JSONView) -> list[tuple[str, Any]]:
    found = [(key, usage.get(key)) for key in _USAGE_COUNTS]
    details = usage.get("completion_tokens_details")
    if isinstance(details, Mapping):
        reasoning = details.get("reasoning_tokens")
        found.append(("completion_tokens_details.reasoning_tokens", reasoning))
    return [(key, value) for key, value in found if value is not None]


def usage_problem(usage: Any, max_tokens: int | None) -> str | None:
    """Why the server's ``usage`` object cannot be believed, or None when it can (or is absent).

    Absurd: not an object; a count that is negative or over :data:`MAX_USAGE_TOKENS`; a
    ``completion_tokens`` over :func:`output_cap` for ``max_tokens`` (a server cannot
    have generated far more than it was allowed). A count that is not an integer is left to
    loadgen.client.readers.token_counts, which ignores it (servers differ in what they fill).
    """
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        return f"the server's usage is not an object ({type(usage).__name__}): not trusted"
    for key, value in _counts(usage):
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if value < 0 or value > MAX_USAGE_TOKENS:
            return f"the server's usage says {key}={value:g}: an impossible count, not trusted"
    completion = usage.get("completion_tokens")
    cap = output_cap(max_tokens)
    if cap is not None and isinstance(completion, int | float) and completion > cap:
        return (
            f"the server's usage says completion_tokens={completion:g} for max_tokens "
            f"{max_tokens}: more than it may generate, not trusted"
        )
    return None
