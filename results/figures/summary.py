"""A run's summary figures, computed from requests.parquet and tokens.parquet and nothing else.

Definitions follow docs/ARCHITECTURE.md and vLLM's ``bench serve`` where it defines the figure:

- TTFT = first_token_s - sent_s; also first_token_s - scheduled_s. E2EL = done_s - sent_s;
  also done_s - scheduled_s.
  Queueing delay = sent_s - scheduled_s.
- TPOT = (done_s - first_token_s) / (output_tokens - 1), for requests with > 1 output token.
- ITL: gaps between a request's consecutive content chunks. A gap before a chunk of k tokens is
  split into k gaps of gap/k, so each token has one ITL value (vLLM counts one value per chunk
  whatever its size; with one token per chunk, as vLLM streams, the two agree). Chunks with
  n_tokens < 1 carry no token and are skipped.
- Per-user TPS = 1 / TPOT for each request (tokens/s); its distribution is reported.
- Throughput: output tokens (the ``output_tokens`` column: usage, else tokenizer) and requests of
  ok requests in the measured window, divided by the window's duration.
- Goodput: ok requests in the window meeting every SLO given, per second. As in vLLM, a request
  with <= 1 output token has TPOT 0 for this test, and a metric equal to its SLO meets it.
- Reasoning (only when some request reasoned: ``reasoning_tokens`` > 0): TTFT stays the first
  token of any kind and TPOT, ITL and per-user TPS cover every generated token. Beside them:
  time to first answer token = first_answer_token_s - sent_s; answer tokens = output_tokens -
  reasoning_tokens; answer TPOT = (done_s - first_answer_token_s) / (answer tokens - 1), for
  requests with > 1 answer token, and answer per-user TPS = 1 / answer TPOT, the speed at which
  the user reads the answer once it has begun; reasoning share = reasoning tokens / output
  tokens. A run without reasoning has no ``reasoning`` section.
- Pooling (embeddings, rerank: requests.parquet's ``inputs`` set): no TTFT, ITL, TPOT or
  per-user TPS (absent, not zero), and a ``pooling`` section instead: latency, requests,
  inputs and input tokens per second (results.figures.workloads.pooling).
- Statistics: mean, std (population, ddof=0, as numpy and vLLM), min, percentiles with numpy's
  default linear interpolation (as vLLM), max; latencies in milliseconds.

Latency, token and throughput figures use the ok requests in the window; failed and cancelled
requests are counted (``counts``, ``errors``) and never dropped silently.
The result is JSON-safe (NaN and inf become None) and deterministic: the same tables, in any row
order, give the same dict, so it can be recomputed from a run folder and compared exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import cast, get_args

import numpy as np
import pandas as pd

from perfmodel.files import json_safe
from results.figures.itl import itl_distribution
from results.figures.workloads.pooling import TOKEN_FIGURES, is_pooling_run, pooling_section
from results.folder.records import (
    REQUEST_BACKFILLS,
    REQUEST_COLUMNS,
    TOKEN_BACKFILLS,
    TOKEN_COLUMNS,
    Status,
)
from results.folder.tables import backfill_frame
from results.folder.token_source import TokenSource, token_source
from results.schema import (
    SUMMARY_JSON_VERSION,
    Counts,
    Distribution,
    Errors,
    Goodput,
    Reasoning,
    StatusCounts,
    SummaryJson,
    Throughput,
    Tokens,
    Window,
)

__all__ = [
    "LATENCY_PERCENTILES",
    "SLO_KEYS",
    "TPS_PERCENTILES",
    "compute_summary",
    "distribution",
]

LATENCY_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
# For per-user TPS the bad tail is the slow users, so the low percentiles matter too.
TPS_PERCENTILES: tuple[float, ...] = (1.0, 5.0, 10.0, 50.0, 90.0, 95.0, 99.0)
SLO_KEYS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2el_ms")
STATUSES: tuple[str, ...] = get_args(Status)
# Every requests.parquet column but output_tokens_source, which frames from other tools may lack
# (their tokens then count as "unknown"), and the columns added later, which are backfilled.
REQUIRED_REQUEST_COLUMNS: tuple[str, ...] = tuple(
    name
    for name in REQUEST_COLUMNS
    if name != "output_tokens_source" and name not in REQUEST_BACKFILLS
)
REQUIRED_TOKEN_COLUMNS: tuple[str, ...] = tuple(
    name for name in TOKEN_COLUMNS if name not in TOKEN_BACKFILLS
)
# The measured window, also written into every summary so a reader need not look it up.
WINDOW_RULE = (
    "a request is measured when sent_s >= start_s and its end <= end_s; its end is done_s, else "
    "first_token_s, else sent_s; start_s = run_start_s + warmup_s with run_start_s the earliest "
    "scheduled_s or sent_s; end_s = run_end_s - cooldown_s with run_end_s the latest end"
)


def _pkey(p: float) -> str:
    return f"p{p:g}"


def distribution(values: np.ndarray, percentiles: Sequence[float]) -> Distribution:
    """count, mean, std, min, p<q> for each q in ``percentiles``, max of ``values`` (NaN dropped).

    Every figure but count is None when there are no values.
    """
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    stats: Distribution = {"count": int(values.size)}
    if values.size == 0:
        stats.update(dict.fromkeys(["mean", "std", "min", *map(_pkey, percentiles), "max"]))
        return stats
    stats["mean"] = float(np.mean(values))
    stats["std"] = float(np.std(values))
    stats["min"] = float(np.min(values))
    for p, v in zip(percentiles, np.percentile(values, list(percentiles)), strict=True):
        stats[_pkey(p)] = float(v)
    stats["max"] = float(np.max(values))
    return stats


def _check_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {', '.join(missing)}")


def _floats(frame: pd.DataFrame, column: str) -> np.ndarray:
    return frame[column].to_numpy(dtype=np.float64, na_value=np.nan)


def _normalize_slo(slo: Mapping[str, float | None] | None) -> dict[str, float]:
    if slo is None:
        return {}
    unknown = sorted(set(slo) - set(SLO_KEYS))
    if unknown:
        raise ValueError(f"slo: unknown keys {unknown}; known: {', '.join(SLO_KEYS)}")
    targets = {k: float(slo[k]) for k in SLO_KEYS if slo.get(k) is not None}  # type: ignore[arg-type]
    for key, value in targets.items():
        if not value > 0:
            raise ValueError(f"slo: {key} must be > 0 milliseconds, got {value!r}")
    return targets


def _status_counts(status: np.ndarray) -> StatusCounts:
    error = int(np.count_nonzero(status == "error"))
    return StatusCounts(
        requests=int(status.size),
        ok=int(np.count_nonzero(status == "ok")),
        error=error,
        cancelled=int(np.count_nonzero(status == "cancelled")),
        error_rate=error / status.size if status.size else None,
    )


def _errors(req: pd.DataFrame, status: np.ndarray) -> Errors:
    failed = req[status == "error"]
    messages = Counter(
        "(no message)" if pd.isna(m) else str(m) for m in failed["error"].to_numpy(dtype=object)
    )
    codes = Counter(
        "none" if pd.isna(c) else str(int(c)) for c in failed["http_status"].to_numpy(dtype=object)
    )

    def ordered(counter: Counter[str]) -> dict[str, int]:
        # Most frequent first; ties by text, so the order never depends on row order.
        return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))

    return Errors(by_message=ordered(messages), by_http_status=ordered(codes))


def compute_summary(
    requests_df: pd.DataFrame,
    tokens_df: pd.DataFrame | TokenSource,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    slo: Mapping[str, float | None] | None = None,
    *,
    span_s: tuple[float, float] | None = None,
) -> SummaryJson:
    """summary.json's request figures (results.schema.SummaryJson without the sections that
    results.run_summary adds; see the module docstring for every definition).

    ``requests_df``/``tokens_df`` have requests.parquet's and tokens.parquet's columns (times in
    seconds from the run's start); ``output_tokens_source`` is optional. ``warmup_s`` and
    ``cooldown_s`` (seconds) are cut from the run's start and end: see :data:`WINDOW_RULE`.
    ``slo`` maps ttft_ms/tpot_ms/e2el_ms to targets in ms (None: no target).
    ``span_s`` (run seconds: first start, last end) is the whole run's when ``requests_df`` is
    a part of it (one endpoint's requests, results.figures.fleet): the window is cut from the run's
    span, so a part's rates are per second of the same window as the run's.
    Raises ValueError for missing columns, unknown statuses, duplicate request ids or a bad SLO.
    """
    source = token_source(tokens_df)
    requests_df = _checked_requests(requests_df, source, warmup_s, cooldown_s)
    targets = _normalize_slo(slo)
    req, status = _sorted_requests(requests_df)

    scheduled, sent = _floats(req, "scheduled_s"), _floats(req, "sent_s")
    first, done = _floats(req, "first_token_s"), _floats(req, "done_s")
    output = req["output_tokens"].to_numpy(dtype=np.int64)
    prompt = req["prompt_tokens"].to_numpy(dtype=np.int64)
    # A request's end is the last moment it was seen; failed ones may never have finished.
    end = np.fmax(np.fmax(done, first), sent)

    window, in_window = _window(scheduled, sent, end, warmup_s, cooldown_s, span_s)
    duration = window["duration_s"]
    ok = in_window & (status == "ok")

    ttft_ms, e2el_ms = (first - sent) * 1000.0, (done - sent) * 1000.0
    many = output > 1
    tpot_ms = np.full(output.shape, np.nan)
    tpot_ms[many] = (done[many] - first[many]) / (output[many] - 1) * 1000.0
    tps = 1000.0 / tpot_ms[ok & (tpot_ms > 0)]

    def rate(amount: float) -> float | None:
        return amount / duration if duration else None

    tokens = _tokens(req, ok, output, prompt)
    out_tokens, in_tokens, n_ok = tokens["output_tokens"], tokens["prompt_tokens"], int(ok.sum())

    def latencies(ms: np.ndarray) -> Distribution:
        return distribution(ms[ok], LATENCY_PERCENTILES)

    summary = SummaryJson(
        schema_version=SUMMARY_JSON_VERSION,
        window=window,
        counts=Counts(all=_status_counts(status), window=_status_counts(status[in_window])),
        errors=_errors(req, status),
        tokens=tokens,
        throughput=Throughput(
            output_tok_s=rate(out_tokens),
            total_tok_s=rate(out_tokens + in_tokens),
            requests_per_s=rate(n_ok),
        ),
        goodput=_goodput(targets, ok, in_window, (ttft_ms, tpot_ms, e2el_ms), many, duration),
        ttft_ms=latencies(ttft_ms),
        itl_ms=itl_distribution(source.only(req.loc[ok, "request_id"]), LATENCY_PERCENTILES),
        tpot_ms=latencies(tpot_ms),
        e2el_ms=latencies(e2el_ms),
        e2el_from_scheduled_ms=latencies((done - scheduled) * 1000.0),
        # Open loop: from the planned send time, so queueing before the send is not hidden.
        ttft_from_scheduled_ms=latencies((first - scheduled) * 1000.0),
        queueing_delay_ms=latencies((sent - scheduled) * 1000.0),
        per_user_tps=distribution(tps, TPS_PERCENTILES),
    )
    reasoning = _reasoning(req, ok, sent, done, output)
    if reasoning is not None:
        summary["reasoning"] = reasoning
    if is_pooling_run(req):
        # Nothing was generated: token figures absent, never zero (workloads.pooling)
        for name in TOKEN_FIGURES:
            summary.pop(name, None)  # type: ignore[misc]
        summary["throughput"]["output_tok_s"] = None
        summary["pooling"] = pooling_section(req, ok, duration, dict(summary["e2el_ms"]))
    return cast(SummaryJson, json_safe(summary))


def _checked_requests(
    requests_df: pd.DataFrame, tokens: TokenSource, warmup_s: float, cooldown_s: float
) -> pd.DataFrame:
    """``requests_df`` with the columns old run folders lack backfilled; raises ValueError for
    a missing column of either table or a negative warmup or cooldown."""
    _check_columns(requests_df, REQUIRED_REQUEST_COLUMNS, "requests")
    columns = tokens.columns()
    missing = [c for c in REQUIRED_TOKEN_COLUMNS if c not in columns]
    if missing:
        raise ValueError(f"tokens: missing columns {', '.join(missing)}")
    if warmup_s < 0 or cooldown_s < 0:
        raise ValueError(f"warmup_s and cooldown_s must be >= 0, got {warmup_s}, {cooldown_s}")
    return backfill_frame(requests_df, REQUEST_BACKFILLS)


def _sorted_requests(requests_df: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The requests in request_id order, and their statuses; raises ValueError for a
    duplicate request id or an unknown status."""
    # A fixed row order makes every float sum, hence the whole dict, independent of input order.
    req = requests_df.sort_values("request_id", kind="mergesort").reset_index(drop=True)
    if req["request_id"].duplicated().any():
        dup = req.loc[req["request_id"].duplicated(), "request_id"].iloc[0]
        raise ValueError(f"requests: duplicate request_id {dup!r}")
    status = req["status"].to_numpy(dtype=object)
    bad = sorted({str(s) for s in status} - set(STATUSES))
    if bad:
        raise ValueError(f"requests: unknown status {bad}; expected one of {', '.join(STATUSES)}")
    return req, status


def _window(
    scheduled: np.ndarray,
    sent: np.ndarray,
    end: np.ndarray,
    warmup_s: float,
    cooldown_s: float,
    span_s: tuple[float, float] | None,
) -> tuple[Window, np.ndarray]:
    """summary.json's ``window`` (:data:`WINDOW_RULE`, run seconds) and which requests lie in
    it (sent at or after its start, last seen at or before its end)."""
    if len(sent) == 0:
        run_start = run_end = start = stop = duration = None
        in_window = np.zeros(0, dtype=bool)
    else:
        run_start = float(np.min(np.fmin(scheduled, sent)))
        run_end = float(np.max(end))
        if span_s is not None:
            run_start, run_end = span_s
        start, stop = run_start + warmup_s, run_end - cooldown_s
        duration = max(stop - start, 0.0)
        in_window = (sent >= start) & (end <= stop)
    window = Window(
        rule=WINDOW_RULE,
        warmup_s=float(warmup_s),
        cooldown_s=float(cooldown_s),
        run_start_s=run_start,
        run_end_s=run_end,
        start_s=start,
        end_s=stop,
        duration_s=duration,
    )
    return window, in_window


def _tokens(req: pd.DataFrame, ok: np.ndarray, output: np.ndarray, prompt: np.ndarray) -> Tokens:
    """summary.json's ``tokens``: the ok requests' prompt and output tokens and how their output
    tokens were counted (source -> requests; "unknown" where requests.parquet does not say)."""
    n_ok = int(ok.sum())
    if "output_tokens_source" in req.columns:
        sources = Counter(
            "unknown" if pd.isna(s) else str(s)
            for s in req.loc[ok, "output_tokens_source"].to_numpy(dtype=object)
        )
    else:
        sources = Counter({"unknown": n_ok}) if n_ok else Counter()
    source = (next(iter(sources)) if len(sources) == 1 else "mixed") if sources else None
    return Tokens(
        prompt_tokens=int(prompt[ok].sum()),
        output_tokens=int(output[ok].sum()),
        output_tokens_source=source,
        requests_by_output_tokens_source=dict(sorted(sources.items())),
    )


def _goodput(
    targets: dict[str, float],
    ok: np.ndarray,
    in_window: np.ndarray,
    latencies_ms: tuple[np.ndarray, np.ndarray, np.ndarray],
    many: np.ndarray,
    duration: float | None,
) -> Goodput:
    """summary.json's ``goodput``: the ok requests in the window within every target of
    ``targets``, per second of the window's ``duration`` (s). ``latencies_ms``: each request's
    TTFT, TPOT and E2EL (ms); ``many``: which requests have more than one output token."""
    goodput = Goodput(slo=targets, good_requests=None, requests_per_s=None, good_fraction=None)
    if targets:
        ttft_ms, tpot_ms, e2el_ms = latencies_ms
        good = ok.copy()
        # vLLM's rule: TPOT counts as 0 for requests with <= 1 output token. NaN never passes.
        per_request = {"ttft_ms": ttft_ms, "tpot_ms": np.where(many, tpot_ms, 0.0)}
        per_request["e2el_ms"] = e2el_ms
        for key, target in targets.items():
            good &= per_request[key] <= target
        n_good = int(good.sum())
        n_window = int(in_window.sum())
        # The fraction is of every request in the window: a failed request is not a good one.
        rate = n_good / duration if duration else None
        goodput.update(good_requests=n_good, requests_per_s=rate)
        goodput["good_fraction"] = n_good / n_window if n_window else None
    return goodput


def _reasoning(
    req: pd.DataFrame, ok: np.ndarray, sent: np.ndarray, done: np.ndarray, output: np.ndarray
) -> Reasoning | None:
    """The reasoning section (module docstring), or None when no request of the run reasoned.

    ``ok`` selects the ok requests of the window (as every figure); ``sent``, ``done`` (run
    seconds) and ``output`` (tokens) are ``req``'s columns as arrays."""
    thought = req["reasoning_tokens"].to_numpy(dtype=np.int64, na_value=0)
    if not (thought > 0).any():
        return None
    first_answer = _floats(req, "first_answer_token_s")
    answer = output - thought
    many = answer > 1
    answer_tpot_ms = np.full(answer.shape, np.nan)
    answer_tpot_ms[many] = (done[many] - first_answer[many]) / (answer[many] - 1) * 1000.0
    reasoned = ok & (thought > 0)
    sources = Counter(
        "unknown" if pd.isna(s) else str(s)
        for s in req.loc[reasoned, "reasoning_tokens_source"].to_numpy(dtype=object)
    )
    n_reasoning, n_output = int(thought[ok].sum()), int(output[ok].sum())
    return Reasoning(
        requests_with_reasoning=int(reasoned.sum()),
        reasoning_tokens=n_reasoning,
        answer_tokens=n_output - n_reasoning,
        reasoning_share=n_reasoning / n_output if n_output else None,
        requests_by_reasoning_tokens_source=dict(sorted(sources.items())),
        reasoning_tokens_per_request=distribution(thought[ok], LATENCY_PERCENTILES),
        answer_tokens_per_request=distribution(answer[ok], LATENCY_PERCENTILES),
        time_to_first_answer_token_ms=distribution(
            ((first_answer - sent) * 1000.0)[ok], LATENCY_PERCENTILES
        ),
        answer_tpot_ms=distribution(answer_tpot_ms[ok], LATENCY_PERCENTILES),
        answer_per_user_tps=distribution(
            1000.0 / answer_tpot_ms[ok & (answer_tpot_ms > 0)], TPS_PERCENTILES
        ),
    )
