"""The pre-flight check of a run: the scenario against the endpoint, before any load is sent.

Once the plan is built and the engine is up, :func:`preflight` asks the endpoint what it serves
and refuses (:class:`PreflightError`, `bench run` exits 2) a run that could only fail:

- the endpoint is not an OpenAI-compatible server: ``GET /v1/models`` answers 404 (a plain HTTP
  server), or something that is not JSON; or it asks for a key (401/403);
- ``--model``, or a model the plan's requests name (a scenario's ``[[models]]``, a workload's
  per-row model), is not among the served models (the refusal lists them);
- the longest request of the plan (prompt tokens under the workload's tokenizer plus its
  ``max_tokens``) does not fit the served context; the refusal names the scenario keys to change
  and gives the figures.

The served context, in tokens, is read where each engine states it: ``max_model_len`` of the
model's entry in /v1/models (vLLM's ``ModelCard``, SGLang, `bench serve`); else the adapter's
``context_path`` document (llama.cpp's /props ``default_generation_settings.n_ctx``, the context
of one slot; TGI's /info ``max_total_tokens``); else llama.cpp's /v1/models
``meta.n_ctx_train`` (the context the model was trained for, which the server may cut). Where
the endpoint states none, the check says so in one note and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.scenario.scenario import Scenario
from engine_adapters.base import EngineAdapter
from loadgen.client.answers import auth_refusal
from loadgen.client.readers.openai_stream import error_message_from_body
from loadgen.drivers.driver import LoadPlan
from loadgen.request_spec import RequestSpec
from loadgen.workloads.spec import LengthDist

__all__ = [
    "KeyRefused",
    "Preflight",
    "PreflightError",
    "ServedModel",
    "context_from_document",
    "first_model",
    "keys_to_change",
    "longest_request",
    "preflight",
    "served_context",
    "served_models",
]

# Seconds the whole check may take per document (connect included).
PREFLIGHT_TIMEOUT_S = 5.0
# Where a served context may stand in a document, in order: (path of keys, what to call it).
_CONTEXT_KEYS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("default_generation_settings", "n_ctx"), "default_generation_settings.n_ctx"),
    (("max_total_tokens",), "max_total_tokens"),
)


# The parameter that bounds a length distribution from above, where it is not ``max``.
_UPPER_PARAM = {"fixed": "value", "uniform": "high"}


class PreflightError(RuntimeError):
    """The scenario cannot run against this endpoint; the message says why and what to change."""


class KeyRefused(PreflightError):
    """The endpoint answered 401/403: the message says whether a key was sent, and the fix."""


@dataclass(frozen=True)
class ServedModel:
    """One entry of /v1/models: its id and the context it states (tokens), if any."""

    id: str
    max_model_len: int | None = None
    # Where max_model_len was read, e.g. "/v1/models max_model_len".
    context_source: str | None = None


@dataclass(frozen=True)
class Preflight:
    """What the check found: the model to send, the served context (tokens, None where the
    endpoint states none, with ``context_source`` saying where it was read), the longest
    request's tokens (prompt + max_tokens), and notes for the user."""

    model: str
    max_model_len: int | None
    context_source: str | None
    longest_tokens: int | None
    notes: list[str] = field(default_factory=list)


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def served_models(document: Any) -> list[ServedModel]:
    """The entries of a /v1/models answer (OpenAI's ``{"data": [{"id": ...}, ...]}``), with the
    context each states: ``max_model_len`` (vLLM; a LoRA card without it takes its parent's), or
    llama.cpp's ``meta.n_ctx_train``."""
    data = document.get("data") if isinstance(document, dict) else None
    entries = (
        [e for e in data if isinstance(e, dict) and "id" in e] if isinstance(data, list) else []
    )
    by_id: dict[str, int] = {}
    models: list[ServedModel] = []
    for entry in entries:
        length, source = _positive_int(entry.get("max_model_len")), "/v1/models max_model_len"
        if length is None and isinstance(entry.get("parent"), str):
            length = by_id.get(entry["parent"])
        meta = entry.get("meta")
        if length is None and isinstance(meta, dict):
            length, source = _positive_int(meta.get("n_ctx_train")), "/v1/models meta.n_ctx_train"
        model = ServedModel(str(entry["id"]), length, source if length is not None else None)
        if length is not None:
            by_id[model.id] = length
        models.append(model)
    return models


def context_from_document(document: Any) -> tuple[int, str] | None:
    """The served context (tokens) and its key from an engine's own document (/props, /info)."""
    for path, name in _CONTEXT_KEYS:
        value: Any = document
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if (length := _positive_int(value)) is not None:
            return length, name
    return None


def longest_request(plan: LoadPlan) -> RequestSpec | None:
    """The plan's request with the most prompt tokens plus max_tokens (None for an empty plan)."""
    return max(plan.requests, key=lambda r: r.prompt_tokens + r.max_tokens, default=None)


def _upper_key(name: str, dist: LengthDist) -> str:
    """The scenario key that bounds ``dist`` from above."""
    if dist.max is not None or dist.kind not in _UPPER_PARAM:
        return f"{name}.max"
    return f"{name}.{_UPPER_PARAM[dist.kind]}"


def keys_to_change(scenario: Scenario) -> list[str]:
    """The scenario keys whose lower values shorten the longest request (dotted TOML keys)."""
    workload = scenario.workload
    keys: list[str] = []
    if workload.kind == "trace":
        return [f"the trace's input_length and output_length ({workload.path})"]
    if workload.kind == "sessions" and workload.path is not None:
        return [f"the session trace's turns and output_length ({workload.path})"]
    if workload.kind == "sessions":
        keys += ["sessions.turns", "workload.system_prompt_tokens"]
    if workload.kind == "multiturn":
        keys.append("workload.max_context_tokens")
        if workload.path is None:
            keys += ["workload.turns", "workload.system_prompt_tokens"]
    if scenario.shared_prefix is not None:
        keys.append("shared_prefix.tokens")
    if workload.kind in ("sharegpt", "dataset"):
        keys.append("workload.max_input_tokens")
    elif scenario.input_len is not None:
        keys.append(_upper_key("input_len", scenario.input_len))
    if scenario.output_len is not None:
        keys.append(_upper_key("output_len", scenario.output_len))
    if workload.kind in ("sharegpt", "dataset") and scenario.output_len is None:
        keys.append("workload.max_output_tokens")
    return keys


def _get(url: str, headers: Mapping[str, str]) -> httpx.Response:
    """GET ``url``; PreflightError naming it when nothing answers in time."""
    try:
        return httpx.get(
            url, headers={"Accept": "application/json", **headers}, timeout=PREFLIGHT_TIMEOUT_S
        )
    except httpx.TimeoutException:
        raise PreflightError(
            f"{url} did not answer within {PREFLIGHT_TIMEOUT_S:g} s; is the server up and "
            "listening there? Check --url or start the server first"
        ) from None
    except httpx.HTTPError as exc:
        raise PreflightError(
            f"cannot reach {url} ({type(exc).__name__}: {exc}); start the server or fix --url"
        ) from None


def models_document(base_url: str, headers: Mapping[str, str]) -> Any:
    """The JSON of ``base_url``'s /v1/models; PreflightError saying what answered instead
    (nothing, a key wanted, 404 from a server that is no LLM server, not JSON)."""
    root = base_url.rstrip("/")
    url = (root if root.endswith("/v1") else root + "/v1") + "/models"
    response = _get(url, headers)
    status = response.status_code
    if status in (401, 403):
        refusal = auth_refusal(status, error_message_from_body(response.content), headers)
        raise KeyRefused(f"{url} answered {refusal}")
    if status == 404:
        raise PreflightError(
            f"{base_url} answered 404 on /v1/models: not an OpenAI-compatible server? check --url"
        )
    if status >= 400:
        raise PreflightError(
            f"{url} answered HTTP {status}: {error_message_from_body(response.content)}; the "
            "server is not ready to serve (check its log)"
        )
    try:
        return response.json()
    except ValueError:
        raise PreflightError(
            f"{url} answered something that is not JSON: not an OpenAI-compatible server? check "
            "--url"
        ) from None


def _adapter_context(
    base_url: str, adapter: EngineAdapter, headers: Mapping[str, str]
) -> tuple[int, str] | None:
    if adapter.context_path is None:
        return None
    response = _get(base_url.rstrip("/").removesuffix("/v1") + adapter.context_path, headers)
    if response.status_code != 200:
        return None
    try:
        found = context_from_document(response.json())
    except ValueError:
        return None
    return None if found is None else (found[0], f"{adapter.context_path} {found[1]}")


def _choose(models: Sequence[ServedModel], wanted: str | None, base_url: str) -> ServedModel:
    ids = [m.id for m in models]
    if wanted is None:
        if not models:
            raise PreflightError(f"{base_url} lists no model at /v1/models; pass --model NAME")
        return models[0]
    for model in models:
        if model.id == wanted:
            return model
    if not models:
        # A server that lists nothing may still serve the name asked for.
        return ServedModel(wanted)
    raise PreflightError(
        f"--model {wanted!r}: {base_url} does not serve it; it serves {', '.join(map(repr, ids))}"
    )


def served_context(
    base_url: str, adapter: EngineAdapter, model: str | None, headers: Mapping[str, str]
) -> tuple[ServedModel, int | None, str | None]:
    """The model to send (``model``, else the first served) and the context it is served with,
    in tokens, with where it was read (None, None where the endpoint states none).

    Raises:
        PreflightError: the endpoint is no LLM server, wants a key, or does not serve ``model``.
    """
    chosen = _choose(served_models(models_document(base_url, headers)), model, base_url)
    length, source = chosen.max_model_len, chosen.context_source
    if adapter.context_path is not None:
        # The engine's own document states the context it runs with (llama.cpp: per slot), which
        # wins over the model's trained context.
        found = _adapter_context(base_url, adapter, headers)
        if found is not None and source != "/v1/models max_model_len":
            length, source = found
    return chosen, length, source


def first_model(scenario: Scenario) -> str | None:
    """The model a run without --model sends to: its first ``[[models]]`` entry (None: the
    endpoint's first served model)."""
    return scenario.models[0].name if scenario.models else None


def _check_plan_models(
    scenario: Scenario, plan: LoadPlan, models: Sequence[ServedModel], base_url: str
) -> None:
    """Refuse a plan whose requests name a model the endpoint does not list (a server that lists
    nothing may still serve them)."""
    ids = [m.id for m in models]
    # The scenario's [[models]] in file order first, so that the refusal names the first typo.
    named = dict.fromkeys([m.name for m in scenario.models])
    named.update(dict.fromkeys(spec.model for spec in plan.requests if spec.model is not None))
    unknown = [name for name in named if ids and name not in ids]
    if unknown:
        listed = any(m.name == unknown[0] for m in scenario.models)
        where = "[[models]] name" if listed else "the workload's model"
        raise PreflightError(
            f"{scenario.source}: {where} {unknown[0]!r}: {base_url} does not serve it; it "
            f"serves {', '.join(map(repr, ids))}"
        )


def preflight(
    scenario: Scenario,
    plan: LoadPlan,
    base_url: str,
    adapter: EngineAdapter,
    model: str | None,
    headers: Mapping[str, str] | None = None,
) -> Preflight:
    """Check ``plan`` (built from ``scenario``) against the endpoint at ``base_url`` (module
    docstring); ``model`` is ``--model`` (None: the first served one), ``headers`` are sent
    with every request of the check (a key, where the server wants one).

    Raises:
        PreflightError: the endpoint is no LLM server, wants a key, does not serve ``model``, or
            the longest request cannot fit its context.
    """
    headers = headers or {}
    models = served_models(models_document(base_url, headers))
    _check_plan_models(scenario, plan, models, base_url)
    # With [[models]] and no --model, the run's model (run.json's engine.model) is the first.
    wanted = model or first_model(scenario)
    chosen, length, source = served_context(base_url, adapter, wanted, headers)
    notes: list[str] = []
    longest = longest_request(plan)
    longest_tokens = longest.prompt_tokens + longest.max_tokens if longest else None
    if length is None:
        notes.append(
            f"{base_url} states no context length for {chosen.id!r} (no max_model_len in "
            "/v1/models): the pre-flight cannot check that the prompts fit"
        )
    elif longest is not None and longest_tokens is not None and longest_tokens > length:
        keys = ", ".join(keys_to_change(scenario))
        raise PreflightError(
            f"{scenario.source}: the longest request cannot fit {chosen.id!r}: longest prompt "
            f"{longest.prompt_tokens} tokens + output {longest.max_tokens} = {longest_tokens} > "
            f"max_model_len {length} ({source}); lower {keys}"
        )
    return Preflight(chosen.id, length, source, longest_tokens, notes)
