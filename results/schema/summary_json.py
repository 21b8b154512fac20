"""summary.json: a run's figures, declared once (their definitions: results.figures.summary).

Written by results.folder.run_folder.RunFolder.write_summary (checked against :class:`SummaryJson`,
undeclared top-level keys refused); read by results.folder.run_folder.load_run through
:func:`upgrade_summary_json`. The request figures come from results.figures.summary.compute_summary;
results.run_summary.summarize_run adds per_user_tps_by_phase, attribution, probes,
engine_estimates and client (a summary of the request tables alone lacks them), each section
owned by the module that computes it and opaque here.

Versions:
- 1: every summary.json written so far (compute_summary wrote ``schema_version: 1`` from the
  start). ``ttft_from_scheduled_ms`` and summarize_run's sections are absent in the oldest. A
  summary.json without a version is read as version 1. ``usability`` and ``reasoning`` (a run
  of a reasoning model) were added later; summaries without ``reasoning`` are runs without
  reasoning.

Latencies are milliseconds, rates per second of the measured window, times seconds on the run's
clock; a figure that cannot be computed (no requests, no window) is null.
"""

# No `from __future__ import annotations`: TypedDict reads NotRequired from evaluated annotations
# only (Python 3.11 takes every string annotation as required).
from typing import NotRequired, TypedDict, cast

from perfmodel.files import JSONObject, JSONView
from results.schema.check import check_document, check_for_writing, schema_version_of, stamped

__all__ = [
    "SUMMARY_JSON_VERSION",
    "Counts",
    "Distribution",
    "Errors",
    "Goodput",
    "Reasoning",
    "StatusCounts",
    "SummaryJson",
    "Throughput",
    "Tokens",
    "TopError",
    "Usability",
    "Window",
    "check_summary_json",
    "upgrade_summary_json",
]

SUMMARY_JSON_VERSION = 1

# count, mean, std, min, p<q> for each percentile, max (results.figures.summary.distribution); every
# figure but count is null without values.
Distribution = dict[str, float | None]


class Window(TypedDict):
    """The measured window (``rule`` says which requests it holds); the *_s are null for a run
    without requests."""

    rule: str
    warmup_s: float
    cooldown_s: float
    run_start_s: float | None
    run_end_s: float | None
    start_s: float | None
    end_s: float | None
    duration_s: float | None


class StatusCounts(TypedDict):
    """Requests by status; error_rate = error / requests (null without requests)."""

    requests: int
    ok: int
    error: int
    cancelled: int
    error_rate: float | None


class Counts(TypedDict):
    """Status counts of the whole run and of the measured window."""

    all: StatusCounts
    window: StatusCounts


class Errors(TypedDict):
    """Failed requests by message and by HTTP status ("none" without one), most frequent first."""

    by_message: dict[str, int]
    by_http_status: dict[str, int]


class Tokens(TypedDict):
    """Tokens of the ok requests in the window; output_tokens_source is "usage", "tokenizer",
    "chunks", "unknown" or "mixed" (null without such requests)."""

    prompt_tokens: int
    output_tokens: int
    output_tokens_source: str | None
    requests_by_output_tokens_source: dict[str, int]


class Throughput(TypedDict):
    """Per second of the window: output tokens, prompt + output tokens, ok requests."""

    output_tok_s: float | None
    total_tok_s: float | None
    requests_per_s: float | None


class Goodput(TypedDict):
    """Requests meeting every SLO in ``slo`` (ms targets); null figures without SLOs."""

    slo: dict[str, float]
    good_requests: int | None
    requests_per_s: float | None
    good_fraction: float | None


class TopError(TypedDict):
    """One cause of failed requests: their error message and HTTP status (null without a
    response), how many failed so, and that count's share of all the run's requests (0..1)."""

    error: str
    http_status: int | None
    count: int
    share: float


class Usability(TypedDict):
    """Whether the run can be used (results.validity.usability): ``usable`` is false when it holds
    no
    request, none succeeded, or ``error_rate`` (failed / all requests of the run, warm-up and
    cool-down included) is above ``max_error_rate``; ``reasons`` says which, ``top_errors`` the
    most frequent causes, most frequent first."""

    usable: bool
    max_error_rate: float
    error_rate: float | None
    requests: int
    failed: int
    reasons: list[str]
    top_errors: list[TopError]


class Reasoning(TypedDict):
    """A reasoning model's run (present only when some request reasoned), over the ok requests
    of the window: reasoning and answer tokens (answer = output - reasoning), the reasoning
    share of output tokens, how the reasoning tokens were counted, tokens per request, time to
    first answer token (ms), the answer's TPOT (ms) and per-user TPS (tok/s)."""

    requests_with_reasoning: int
    reasoning_tokens: int
    answer_tokens: int
    reasoning_share: float | None
    requests_by_reasoning_tokens_source: dict[str, int]
    reasoning_tokens_per_request: Distribution
    answer_tokens_per_request: Distribution
    time_to_first_answer_token_ms: Distribution
    answer_tpot_ms: Distribution
    answer_per_user_tps: Distribution


class SummaryJson(TypedDict):
    """summary.json (module docstring)."""

    schema_version: int
    window: Window
    counts: Counts
    errors: Errors
    tokens: Tokens
    throughput: Throughput
    goodput: Goodput
    # The token figures; absent from a pooling run's (embeddings, rerank:
    # results.figures.workloads.pooling).
    ttft_ms: NotRequired[Distribution]
    itl_ms: NotRequired[Distribution]
    tpot_ms: NotRequired[Distribution]
    e2el_ms: Distribution
    e2el_from_scheduled_ms: Distribution
    ttft_from_scheduled_ms: NotRequired[Distribution]
    queueing_delay_ms: Distribution
    per_user_tps: NotRequired[Distribution]
    # A pooling run only: latency, requests, inputs and input tokens per second.
    pooling: NotRequired[JSONObject]
    reasoning: NotRequired[Reasoning]  # only for a run in which some request reasoned
    # results.run_summary.summarize_run's sections (results.figures.attribution,
    # results.figures.samples_summary,
    # results.figures.client_check).
    per_user_tps_by_phase: NotRequired[JSONObject]
    attribution: NotRequired[JSONObject]
    probes: NotRequired[JSONObject]
    machine_load: NotRequired[JSONObject]  # results.figures.machine_load; absent in older summaries
    engine_estimates: NotRequired[JSONObject | None]  # None: the engine exports no count
    client: NotRequired[JSONObject]
    # results.figures.engine_facts: the simulated device (None: a real one) and the prefix cache's
    # share
    # of the prompt tokens (None: the engine reports no prefix cache counters).
    simulated: NotRequired[JSONObject | None]
    prefix_cache: NotRequired[JSONObject | None]
    # Since run validity (results.validity.token_reconciliation, results.figures.energy_phase,
    # results.validity.run_validity); absent in older summaries.
    token_reconciliation: NotRequired[JSONObject]
    energy_by_phase: NotRequired[JSONObject]
    validity: NotRequired[JSONObject]
    # Only when the workload abandoned requests ([abandon]; results.figures.abandoned).
    abandoned: NotRequired[JSONObject]
    # Only when tools were offered ([tools]) or called (results.figures.workloads.tool_calls).
    tool_calls: NotRequired[JSONObject]
    # Only when images were sent ([images], a dataset's images; results.figures.workloads.images).
    images: NotRequired[JSONObject]
    # Only when the requests belong to sessions: figures per turn and per session
    # (results.figures.workloads.sessions).
    sessions: NotRequired[JSONObject]
    # Since the exit codes (results.validity.usability); absent in older summaries.
    usability: NotRequired[Usability]
    # A run ended early (results.validity.run_end): run.json's sections, and the one line that says
    # so.
    partial: NotRequired[str]
    interrupted: NotRequired[JSONObject]
    engine_died: NotRequired[JSONObject]
    incomplete: NotRequired[JSONObject]
    # A fleet run (several --url): the request figures per replica (results.figures.fleet).
    endpoints: NotRequired[JSONObject]
    # A run that sent several models ([[models]]): the request figures per model
    # (results.figures.models).
    models: NotRequired[JSONObject]


def check_summary_json(data: JSONView, source: str) -> SummaryJson:
    """``data`` as a SummaryJson to write: the current version, every key declared and of its
    type. Raises results.schema.SchemaError naming ``source``, the key and the fix."""
    check_for_writing(
        data, SummaryJson, SUMMARY_JSON_VERSION, source, "summary.json", "SUMMARY_JSON_VERSION"
    )
    return cast(SummaryJson, data)


def upgrade_summary_json(raw: JSONView, source: str) -> SummaryJson:
    """summary.json as read from ``source``, upgraded to :data:`SUMMARY_JSON_VERSION` and checked.

    Raises results.schema.SchemaError for a version newer than this code reads, or a document
    that does not fit :class:`SummaryJson`; keys it does not declare are kept as they are.
    """
    schema_version_of(raw, source, SUMMARY_JSON_VERSION, unversioned=1)
    data = stamped(raw, SUMMARY_JSON_VERSION)
    check_document(data, SummaryJson, source)
    return cast(SummaryJson, data)
