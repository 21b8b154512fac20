"""The requests of a pooling API (embeddings, rerank) from a workload's prompts.

A workload makes prompts one per request; a pooling request may carry several texts:
``inputs_per_request`` texts to embed, or one query and ``inputs_per_request`` documents to
rank. :func:`group_inputs` takes consecutive prompts in order and makes each group one request:
the group's first prompt is the request's ``prompt`` (the first input, or the query), the rest
its ``inputs``, and ``prompt_tokens`` counts them all (what the server should report as its
input tokens, special tokens aside). A workload asked for ``n`` requests therefore makes
:func:`prompts_needed` prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from loadgen.request_spec import RequestSpec
from results.schema.api_kinds import POOLING_APIS, api_kind

__all__ = ["group_inputs", "prompts_needed"]


def _group_size(api: str, inputs_per_request: int) -> int:
    kind = api_kind(api)
    if not kind.pooling:
        raise ValueError(f"group_inputs: api {api!r} is not one of {sorted(POOLING_APIS)}")
    if inputs_per_request < 1:
        raise ValueError(f"inputs_per_request: expected >= 1, got {inputs_per_request!r}")
    return kind.prompts_per_request(inputs_per_request)


def prompts_needed(api: str, requests: int, inputs_per_request: int) -> int:
    """How many prompts ``requests`` pooling requests of ``api`` take."""
    return requests * _group_size(api, inputs_per_request)


def group_inputs(
    specs: Sequence[RequestSpec], api: str, inputs_per_request: int
) -> list[RequestSpec]:
    """One request per group of consecutive ``specs`` (module docstring); a last group cut
    short is dropped, so that every request carries the same number of inputs. Each request
    keeps its group's first request id."""
    size = _group_size(api, inputs_per_request)
    out: list[RequestSpec] = []
    for start in range(0, len(specs) - size + 1, size):
        group = specs[start : start + size]
        first = group[0]
        out.append(
            replace(
                first,
                api=api,  # type: ignore[arg-type]
                inputs=tuple(s.prompt for s in group[1:]),
                prompt_tokens=sum(s.prompt_tokens for s in group),
            )
        )
    return out
