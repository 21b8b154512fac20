"""The scenario's ``api`` and what goes with it: ``inputs_per_request`` for the pooling APIs,
and the rules between the API and the other tables.

``api`` is one of results.schema.api_kinds's APIS. The generation APIs (completions, chat,
responses, messages) stream tokens; the pooling ones (embeddings, rerank) answer once, so:

    * ``inputs_per_request`` (default 1) is how many texts one embeddings request embeds, or
      how many documents one rerank request ranks against its query; only they take it;
    * they have no first token nor output tokens: ``slo.ttft_ms`` and ``slo.tpot_ms`` are
      refused (``slo.e2el_ms`` is their latency), as are ``output_len`` checks that matter
      only to generation (its value is ignored) and multi-turn sessions;
    * ``[abandon]`` closes a stream mid-answer: completions and chat only.
"""

from __future__ import annotations

from typing import Any

from bench.scenario.toml_table import Table
from results.schema.api_kinds import API_KINDS, POOLING_APIS, api_kind

__all__ = ["check_api", "read_api"]


def read_api(top: Table) -> tuple[str, int | None]:
    """``api`` (default completions) and ``inputs_per_request`` (None when not given)."""
    api = top.choice("api", API_KINDS, "completions")
    inputs = top.get("inputs_per_request", int, None)
    if inputs is not None:
        top.check("inputs_per_request", inputs >= 1, "must be >= 1", inputs)
        if api not in POOLING_APIS:
            raise top.error(
                "inputs_per_request", f"only api 'embeddings' or 'rerank' takes it, not {api!r}"
            )
    return api, inputs


def check_api(top: Table, api: str, workload_kind: str, abandon: Any, slo: Any) -> None:
    """The rules between ``api`` and the rest of the scenario (module docstring)."""
    kind = api_kind(api)
    if abandon is not None and not kind.openai_chunks:
        raise top.error("abandon", f"abandoning a stream covers completions and chat, not {api!r}")
    if workload_kind == "sessions" and not kind.sessions:
        raise top.error(
            "api",
            f'agent sessions send chat messages and tool results: set api = "chat", not {api!r}',
        )
    if not kind.pooling:
        return
    for key in ("ttft_ms", "tpot_ms"):
        if getattr(slo, key) is not None:
            raise top.error(
                f"slo.{key}", f"api {api!r} has no first token; set slo.e2el_ms instead"
            )
    if workload_kind == "multiturn":
        raise top.error("workload.kind", f"api {api!r} sends no conversation; drop the turns")
