"""The pre-flight's check of what the requests carry beyond a prompt: their request fields
(``[request]``, ``--extra-body``, a dataset's rows) and ``ignore_eos``.

Where the plan's requests carry fields, or ask for ``ignore_eos`` of an engine whose adapter
does not know whether it takes it (the plain ``openai`` one), :func:`check_request_fields`
sends one short request with the same body fields before the load (a prompt of its own, so
that no prompt of the load is cached ahead of it; not streamed; :data:`PROBE_MAX_TOKENS`
tokens), one more for each other set of field names the rows carry (at most
:data:`MAX_PROBES` in all), and reads the answer:

* the fields refused (HTTP 4xx, also without ``ignore_eos``): the run is refused
  (:class:`PreflightError`), naming the server's message and the fields to drop;
* ``ignore_eos`` refused (the same body is taken without it): ``rejected``; the caller sends
  the load without it, and says so: outputs end where the model stops, so the output lengths
  reported are those served, not those asked;
* ``ignore_eos`` asked and the answer stopped (``finish_reason`` ``stop``) before
  ``max_tokens``: ``ignored``, with the same note;
* ``ignore_eos`` asked and all :data:`PROBE_MAX_TOKENS` tokens came: ``kept`` (a server that
  ignores it but had not reached an end yet reads the same; the output lengths in
  requests.parquet tell);
* a server error or no answer: a note; the load will tell.

A chat request's tools (a scenario's ``[tools]``, a dataset's ``tools`` column) are checked
the same way, as the field names ``tools`` and ``tool_choice``: a server that refuses them
(vLLM started without a tool-call parser, the reference engine) refuses the run before the
load, saying how an engine takes them. So are its images (a scenario's ``[images]``, a
dataset's ``images`` column): the check sends one image beside its prompt, a small picture of
its own for a data URL (so that no image of the load is cached ahead of it), the request's first
URL for one the server fetches; a server that refuses it (a text-only model, the reference
engine) refuses the run before the load.

An engine whose adapter vouches for ``ignore_eos`` (vLLM, SGLang, llama.cpp, the reference
engine) is sent no check for it alone: the check's tokens would count in the engine's own
counters, which the run's token reconciliation reads. run.json's ``load.request_check`` records
the outcome; the fields recorded (:func:`fields_section`) hide the values of secret-looking
names (results.folder.redact).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

import httpx
import numpy as np

from bench.run.endpoint.preflight import PREFLIGHT_TIMEOUT_S, PreflightError
from loadgen.client.image_bodies import CHAT_IMAGES, with_images
from loadgen.client.readers.openai_stream import error_message_from_body
from loadgen.client.tool_bodies import chat_tools
from loadgen.drivers.driver import LoadPlan
from loadgen.request_images import data_url
from loadgen.request_spec import RequestSpec
from loadgen.workloads.images import synthetic_image
from perfmodel.files import JSONObject, JSONView
from results.folder.redact import REDACTED, is_secret_flag
from results.schema.api_kinds import APIS

__all__ = [
    "MAX_PROBES",
    "PROBE_MAX_TOKENS",
    "FieldCheck",
    "check_request_fields",
    "fields_section",
    "redact_fields",
]

# What a check says of ignore_eos (FieldCheck.ignore_eos adds "not asked").
_Outcome = Literal["kept", "ignored", "rejected", "unchecked"]

PROBE_MAX_TOKENS = 16
MAX_PROBES = 4
# A prompt no workload sends, so that the probe warms no prefix of the load's prompts.
PROBE_PROMPT = "Pre-flight check of the request fields: count from one to twenty in words."


@dataclass
class FieldCheck:
    """What the check found: the field names sent, what became of ``ignore_eos`` (``"not
    asked"``, ``"kept"``, ``"ignored"``, ``"rejected"``, ``"unchecked"``), and notes for the
    user."""

    fields: list[str] = field(default_factory=list)
    ignore_eos: str = "not asked"
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> JSONObject:
        """run.json's ``load.request_check``."""
        return {"fields": self.fields, "ignore_eos": self.ignore_eos, "notes": self.notes}


def redact_fields(fields: JSONView) -> JSONObject:
    """``fields`` with the value of every secret-looking name (``api_key``, ``*_token``) hidden,
    at any depth."""
    out: JSONObject = {}
    for key, value in fields.items():
        if is_secret_flag(str(key)):
            out[key] = REDACTED
        elif isinstance(value, Mapping):
            out[key] = redact_fields(value)
        else:
            out[key] = value
    return out


def fields_section(plan: LoadPlan) -> JSONObject:
    """run.json's ``load.request_fields``: the fields every request carried (values, secrets
    hidden), and how many requests carried each field that not all of them did."""
    requests = plan.requests
    counts: Counter[str] = Counter(k for r in requests for k in (r.fields or {}))
    common = {k for k, n in counts.items() if n == len(requests)}
    first = requests[0].fields or {} if requests else {}
    same = {k: v for k, v in first.items() if k in common and all(
        (r.fields or {}).get(k) == v for r in requests)}  # fmt: skip
    return {
        "every_request": redact_fields(same),
        "per_request": dict(sorted((k, n) for k, n in counts.items() if k not in same)),
    }


def _probes(plan: LoadPlan) -> list[RequestSpec]:
    """The first request of each set of field names the plan's requests carry."""
    seen: dict[frozenset[str], RequestSpec] = {}
    for spec in plan.requests:
        names = frozenset(_names(spec))
        if names not in seen:
            seen[names] = spec
        if len(seen) >= MAX_PROBES:
            break
    return list(seen.values())


def _as_chat(spec: RequestSpec) -> bool:
    """Whether ``spec`` is checked as a chat request: the check speaks OpenAI's chat and
    completions only, so a chat request's body goes as chat, every other API's as a completion
    (without the tools and images only a conversation takes)."""
    return spec.kind.conversation and spec.kind.openai_chunks


def _tools(spec: RequestSpec) -> JSONObject:
    """The tool fields checked: a chat request's (:func:`_as_chat`)."""
    return chat_tools(spec.tools, spec.tool_choice) if _as_chat(spec) and spec.tools else {}


@functools.cache
def _probe_image() -> str:
    """The check's own image: a 32 x 32 PNG no load sends (the seed is the check's)."""
    return data_url(synthetic_image(32, 32, "png", np.random.default_rng(0x9F1)))


def _images(spec: RequestSpec) -> tuple[str, ...]:
    """The image a check of a chat request with images sends (module docstring), or ()."""
    if not _as_chat(spec) or not spec.images:
        return ()
    first = spec.images[0]
    return (first if first.startswith(("http://", "https://")) else _probe_image(),)


def _names(spec: RequestSpec) -> list[str]:
    """The body fields a check of ``spec`` sends beyond the prompt: its fields, its tools',
    and ``images`` for its image."""
    return [*(spec.fields or {}), *_tools(spec), *(["images"] if _images(spec) else [])]


def _body(spec: RequestSpec, model: str, ignore_eos: bool) -> JSONObject:
    body: JSONObject = {"model": model, "max_tokens": PROBE_MAX_TOKENS,
                            "temperature": spec.temperature, "stream": False}  # fmt: skip
    if _as_chat(spec):
        turns = [{"role": "user", "content": PROBE_PROMPT}]
        body["messages"] = with_images(CHAT_IMAGES, turns, _images(spec))
    else:
        body["prompt"] = PROBE_PROMPT
    if ignore_eos:
        body["ignore_eos"] = True
    body.update(_tools(spec))
    body.update(spec.fields or {})
    return body


def _send(url: str, body: JSONObject, headers: Mapping[str, str]) -> httpx.Response | str:
    """The answer, or a note of why none came."""
    try:
        return httpx.post(url, json=body, headers=dict(headers), timeout=4 * PREFLIGHT_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return f"the check of the request fields got no answer ({type(exc).__name__})"


def _url(base_url: str, spec: RequestSpec) -> str:
    root = base_url.rstrip("/")
    root = root if root.endswith("/v1") else root + "/v1"
    return root + (APIS["chat"] if _as_chat(spec) else APIS["completions"]).path


def _eos_outcome(answer: Any) -> _Outcome:
    """``kept`` or ``ignored`` from a completion's answer (``unchecked`` when it says neither)."""
    choices = answer.get("choices") if isinstance(answer, dict) else None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if not choices or not isinstance(usage, dict) or not isinstance(choices[0], dict):
        return "unchecked"
    tokens, reason = usage.get("completion_tokens"), choices[0].get("finish_reason")
    if isinstance(tokens, int) and tokens < PROBE_MAX_TOKENS and reason == "stop":
        return "ignored"
    return "kept" if tokens == PROBE_MAX_TOKENS else "unchecked"


def check_request_fields(
    plan: LoadPlan,
    base_url: str,
    model: str,
    headers: Mapping[str, str] | None = None,
    check_ignore_eos: bool = False,
) -> FieldCheck | None:
    """Send the plan's request fields, and ``ignore_eos`` where asked, once each (module
    docstring); ``check_ignore_eos``: send a check for ``ignore_eos`` alone too. None when
    nothing was checked. ``ignore_eos == "rejected"`` in the result: send the load without it.

    Raises:
        PreflightError: the server refuses the fields; the message names what to drop.
    """
    headers = headers or {}
    asked = any(r.ignore_eos for r in plan.requests)
    probes = [p for p in _probes(plan) if _names(p)]
    if not probes and asked and check_ignore_eos:
        probes = plan.requests[:1]
    if not probes:
        return None
    check = FieldCheck(sorted({k for p in probes for k in _names(p)}),
                       "unchecked" if asked else "not asked")  # fmt: skip
    for spec in probes:
        with_eos = asked and check.ignore_eos != "rejected"
        outcome, note = _check_one(spec, base_url, model, headers, with_eos)
        if note is not None:
            check.notes.append(note)
        elif outcome == "rejected" or check.ignore_eos not in ("ignored", "rejected"):
            check.ignore_eos = outcome if asked else "not asked"
    if check.ignore_eos in ("ignored", "rejected"):
        how = "refuses it: requests are sent without it" if check.ignore_eos == "rejected" else (
            f"ignores it (a check of {PROBE_MAX_TOKENS} tokens stopped early)")  # fmt: skip
        check.notes.append(
            f"{base_url} {how}: ignore_eos cannot hold, outputs end where the model stops, so "
            "output lengths are as served, not as asked"
        )
    return check


def _check_one(
    spec: RequestSpec, base_url: str, model: str, headers: Mapping[str, str], ignore_eos: bool
) -> tuple[_Outcome, str | None]:
    """What one check found of ignore_eos, and a note where no usable answer came."""
    url = _url(base_url, spec)
    answer = _send(url, _body(spec, model, ignore_eos), headers)
    if not isinstance(answer, str) and 400 <= answer.status_code < 500 and ignore_eos:
        first = answer
        answer = _send(url, _body(spec, model, False), headers)
        if not isinstance(answer, str) and answer.status_code < 400:
            return "rejected", None
        if not isinstance(answer, str) and answer.status_code < 500:
            _refuse(spec, url, first)
    if isinstance(answer, str):
        return "unchecked", answer
    if answer.status_code >= 500:
        return "unchecked", (
            f"the check of the request fields got HTTP {answer.status_code}: "
            f"{error_message_from_body(answer.content)}; the load will tell"
        )
    if answer.status_code >= 400:
        _refuse(spec, url, answer)
    try:
        return _eos_outcome(answer.json()), None
    except ValueError:
        return "unchecked", None


def _refuse(spec: RequestSpec, url: str, answer: httpx.Response) -> NoReturn:
    """Raise the PreflightError of refused fields, naming them."""
    message = error_message_from_body(answer.content)
    names = ", ".join(sorted(spec.fields or {}))
    extras = []
    what = (
        f"the request fields ({names}): drop them from [request], --extra-body or the rows"
        if names
        else "a plain request: check the server, --model and --api-key"
    )
    if _tools(spec):
        extras.append(
            "tools: start it with tool calling on (vLLM: --enable-auto-tool-choice "
            "--tool-call-parser NAME), or drop [tools] and the rows' tools"
        )
    if _images(spec):
        extras.append(
            "images: run against a vision-language model's server, or drop [images] and the "
            "rows' images"
        )
    if extras:
        what = ", or ".join([what, *extras] if names else extras)
    raise PreflightError(
        f"{url} refused a request before the load (HTTP {answer.status_code}: {message}); "
        f"it does not take {what}"
    )
