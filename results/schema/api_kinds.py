"""The APIs the load generator speaks, each declared once: what it takes and which figures
apply to it.

    name         path under /v1        takes              answer    figures
    completions  /completions          a text prompt      a stream  generation
    chat         /chat/completions     a conversation     a stream  generation
    responses    /responses            a conversation     a stream  generation
    messages     /messages             a conversation     a stream  generation
    embeddings   /embeddings           texts              one body  pooling
    rerank       /rerank               a query and texts  one body  pooling

Workloads, scenarios and the simulated engine read these traits; how the client speaks each
API (its body, headers and the reader of its answer) is loadgen.client.apis's entry for it,
which carries the same :class:`ApiKind`. Nothing else tells APIs apart by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["APIS", "API_KINDS", "CHAT_APIS", "POOLING_APIS", "Api", "ApiKind", "api_kind"]

Api = Literal["completions", "chat", "responses", "messages", "embeddings", "rerank"]


@dataclass(frozen=True)
class ApiKind:
    """One API (module docstring).

    ``conversation``: it sends messages through the server's chat template, and so takes
    tools, tool turns and images. ``pooling``: it generates nothing (one JSON answer, no
    stream, no first token, no output tokens: no TTFT, TPOT or ITL), and carries
    several inputs. ``query_apart``: a pooling request's first text is a query beside the
    inputs (rerank), not one of them (embeddings). ``openai_chunks``: it streams OpenAI's
    chunks, the one stream the abandoning reader (loadgen.client.abandon) and Locust's workers
    read. ``sessions``: agent
    sessions may use it (their tool results are sent as chat messages).
    """

    name: Api
    path: str
    conversation: bool = False
    pooling: bool = False
    query_apart: bool = False
    openai_chunks: bool = False
    sessions: bool = False

    def inputs(self, extra_inputs: int) -> int | None:
        """The inputs a request of this API carries with ``extra_inputs`` texts beside its
        prompt (requests.parquet's ``inputs``): embeddings embed the prompt too, rerank ranks
        the extra texts (or the prompt alone); None for a generation API."""
        if not self.pooling:
            return None
        return max(1, extra_inputs) if self.query_apart else 1 + extra_inputs

    def prompts_per_request(self, inputs_per_request: int) -> int:
        """The workload's prompts one pooling request takes: its inputs, and its query."""
        return inputs_per_request + (1 if self.query_apart else 0)


APIS: dict[Api, ApiKind] = {
    kind.name: kind
    for kind in (
        ApiKind("completions", "/completions", openai_chunks=True),
        ApiKind("chat", "/chat/completions", conversation=True, openai_chunks=True, sessions=True),
        ApiKind("responses", "/responses", conversation=True),
        ApiKind("messages", "/messages", conversation=True),
        ApiKind("embeddings", "/embeddings", pooling=True),
        ApiKind("rerank", "/rerank", pooling=True, query_apart=True),
    )
}
API_KINDS: tuple[Api, ...] = get_args(Api)
assert tuple(APIS) == API_KINDS, "every API of the Literal has its entry, in its order"
CHAT_APIS: frozenset[str] = frozenset(k.name for k in APIS.values() if k.conversation)
POOLING_APIS: frozenset[str] = frozenset(k.name for k in APIS.values() if k.pooling)


def api_kind(name: str) -> ApiKind:
    """The entry of ``name``; ValueError naming the APIs for one that is none of them."""
    try:
        return APIS[name]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"api: expected one of {list(API_KINDS)}, got {name!r}") from None
