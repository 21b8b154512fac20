"""The answer to a pooling request: embeddings (POST /v1/embeddings) and rerank (POST
/v1/rerank), each one JSON body, not a stream.

A pooling request generates nothing, so it has no first token, no chunks and no output tokens:
its record holds when it was sent and when its body ended (``done_s``), the inputs it carried
(``inputs``: texts embedded, or documents ranked) and its input tokens. Those come from the
server's ``usage.prompt_tokens`` (vLLM, OpenAI), else ``usage.total_tokens`` (Jina, vLLM's
rerank), else the workload's own count; Cohere's answer has no token count at all.

The body is checked, not trusted: an embeddings answer must hold one ``data`` item with an
``embedding`` per input, a rerank answer ``results`` (vLLM, Jina, Cohere: ``index`` and
``relevance_score``) for no more documents than were sent; otherwise the request is an error
saying what came back. A body over :data:`MAX_BODY_BYTES` fails the request rather than
holding the client's memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from loadgen.client.readers.token_counts import usage_int
from loadgen.clock import RunClock
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from results.folder.records import RequestRecord, Status

__all__ = [
    "MAX_BODY_BYTES",
    "PoolingAccumulator",
    "embeddings_body",
    "embeddings_problem",
    "rerank_body",
    "rerank_problem",
]

# The largest answer kept: 4,096 inputs of 4,096 floats as JSON text is about 300 MiB, far past
# any request a benchmark sends; a body past this is a server that does not stop.
MAX_BODY_BYTES = 256 * 1024**2
_MAX_MESSAGE_CHARS = 200


def embeddings_body(spec: RequestSpec, model: str) -> JSONObject:
    """The JSON body of an embeddings ``spec``: its prompt and inputs as ``input``."""
    return {"model": model, "input": [spec.prompt, *spec.inputs], "encoding_format": "float"}


def rerank_body(spec: RequestSpec, model: str) -> JSONObject:
    """The JSON body of a rerank ``spec``: ``query`` and ``documents`` (vLLM, Jina and Cohere
    take the same two fields)."""
    documents = list(spec.inputs) or [spec.prompt]
    return {"model": model, "query": spec.prompt, "documents": documents}


def embeddings_problem(obj: JSONObject, expected: int) -> str | None:
    """What is wrong with an embeddings answer for ``expected`` inputs, or None."""
    data = obj.get("data")
    if not isinstance(data, list):
        return "no 'data' list"
    if len(data) != expected:
        return f"{len(data)} embeddings for {expected} inputs"
    if not all(isinstance(d, dict) and d.get("embedding") for d in data):
        return "a 'data' item without an 'embedding'"
    return None


def rerank_problem(obj: JSONObject, expected: int) -> str | None:
    """What is wrong with a rerank answer for ``expected`` documents, or None."""
    results = obj.get("results", obj.get("data"))
    if not isinstance(results, list):
        return "no 'results' list"
    if len(results) > expected:
        return f"{len(results)} results for {expected} documents"
    if not all(isinstance(r, dict) and "relevance_score" in r for r in results):
        return "a result without a 'relevance_score'"
    return None


# What is wrong with a parsed answer for a number of inputs, or None.
AnswerCheck = Callable[[JSONObject, int], "str | None"]


class PoolingAccumulator:
    """Collects one pooling answer's body (a loadgen.client.readers.reader.BodyReader);
    :meth:`problem` checks it with ``check`` once it has ended; ``texts`` stays empty."""

    __slots__ = (
        "_api",
        "_body",
        "_check",
        "_expected",
        "_size",
        "done_ns",
        "finish_reason",
        "texts",
        "usage",
    )

    def __init__(self, spec: RequestSpec, check: AnswerCheck) -> None:
        self._api = spec.api
        self._check = check
        self._expected = spec.num_inputs or 1
        self._body: list[bytes] = []
        self._size = 0
        self.texts: list[str] = []
        self.usage: JSONObject | None = None
        self.finish_reason: str | None = None
        self.done_ns: int | None = None

    def add_body(self, data: bytes, t_ns: int) -> None:
        """One read of the body, and its arrival time (the last one is the answer's end)."""
        self._size += len(data)
        if self._size <= MAX_BODY_BYTES:
            self._body.append(data)
        self.done_ns = t_ns

    def problem(self) -> str | None:
        """Check the whole body; None when it is a good answer (its usage then kept), else the
        error message (and the answer is not done)."""
        if self._size > MAX_BODY_BYTES:
            self.done_ns = None
            return f"the {self._api} answer exceeded {MAX_BODY_BYTES} bytes; the request failed"
        raw = b"".join(self._body)
        try:
            obj = json.loads(raw)
        except ValueError:
            self.done_ns = None
            text = raw[:_MAX_MESSAGE_CHARS].decode("utf-8", "replace")
            return f"the {self._api} answer is not JSON: {text!r}"
        problem = self._check(obj, self._expected) if isinstance(obj, dict) else None
        if not isinstance(obj, dict) or problem is not None:
            self.done_ns = None
            return f"unexpected {self._api} answer: {problem or 'not a JSON object'}"
        usage = obj.get("usage")
        self.usage = usage if isinstance(usage, dict) else None
        self.finish_reason = "stop"
        return None

    def to_record(
        self, *, spec: RequestSpec, user_id: int, scheduled_s: float, sent_ns: int, end_ns: int,
        clock: RunClock, tokenizer: TokenizerLike | None, status: Status, error: str | None,
        http_status: int | None,
    ) -> RequestRecord:  # fmt: skip
        """The request's record (module docstring); ``end_ns`` when the body never ended."""
        served = usage_int(self.usage, "prompt_tokens")
        if served is None:
            served = usage_int(self.usage, "total_tokens")
        return RequestRecord(
            request_id=spec.request_id, user_id=user_id, scheduled_s=scheduled_s,
            sent_s=clock.to_s(sent_ns), first_token_s=None,
            done_s=clock.to_s(self.done_ns if self.done_ns is not None else end_ns),
            prompt_tokens=spec.prompt_tokens if served is None else served, output_tokens=0,
            output_tokens_source="usage" if self.usage is not None else "chunks",
            status=status, error=error, http_status=http_status,
            client_prompt_tokens=spec.prompt_tokens, usage_prompt_tokens=served,
            usage_output_tokens=None, client_output_tokens=None, inputs=spec.num_inputs,
        )  # fmt: skip
