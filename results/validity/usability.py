"""Whether a run can be used, from its requests table alone: summary.json's ``usability``.

A run is not usable when it holds no request, when none of its requests succeeded, or when the
share of failed requests (status "error", over all the run's requests, warm-up and cool-down
included) is above ``max_error_rate``, or when its engine died during the load (the figures
would describe a dying server). Cancelled requests (cut by the run's duration) are not
failures. The verdict lists its reasons and the most frequent causes of the failures, grouped by
error message and HTTP status, so a CI log shows why without opening the run folder.

The threshold is declared here once (:data:`DEFAULT_MAX_ERROR_RATE`); `bench run
--max-error-rate` records the one a run used in run.json's ``max_error_rate``, which
:func:`run_max_error_rate` reads back, so recomputing the summary from the folder gives the same
verdict.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from perfmodel.files import JSONView
from results.schema import TopError, Usability

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "TOP_ERRORS",
    "describe_failures",
    "run_max_error_rate",
    "usability",
]

# 5 %: a benchmark whose failures are rare can still be read (its latencies are those of the ok
# requests, and the errors are counted beside them), while one in twenty failing means the
# figures describe a server that is rejecting load, not serving it.
DEFAULT_MAX_ERROR_RATE = 0.05
# How many causes of failure the verdict lists.
TOP_ERRORS = 5
# Error messages are quoted up to this many characters (a server may echo the whole input).
_MESSAGE_CHARS = 200


def run_max_error_rate(run_json: JSONView) -> float:
    """The threshold a run was judged by: run.json's ``max_error_rate``, else the default."""
    value = run_json.get("max_error_rate")
    return DEFAULT_MAX_ERROR_RATE if value is None else float(value)


def _short(message: str) -> str:
    return message if len(message) <= _MESSAGE_CHARS else message[:_MESSAGE_CHARS] + "..."


def _top_errors(failed: pd.DataFrame, requests: int) -> list[TopError]:
    causes: Counter[tuple[str, int | None]] = Counter(
        (
            "(no message)" if pd.isna(message) else _short(str(message)),
            None if pd.isna(status) else int(status),
        )
        for message, status in zip(
            failed["error"].to_numpy(dtype=object),
            failed["http_status"].to_numpy(dtype=object),
            strict=True,
        )
    )
    # Most frequent first; ties by status, then text, so the order never depends on row order.
    ranked = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0][1] or 0, kv[0][0]))
    return [
        TopError(error=error, http_status=status, count=count, share=count / requests)
        for (error, status), count in ranked[:TOP_ERRORS]
    ]


def usability(
    requests_df: pd.DataFrame, max_error_rate: float, ended_early: str | None = None
) -> Usability:
    """The verdict on a run whose requests.parquet is ``requests_df`` (module docstring);
    ``ended_early`` (results.validity.run_end.ended_early: its engine died, or a signal cut
    its load) makes it unusable whatever its errors."""
    status = requests_df["status"].to_numpy(dtype=object)
    requests = int(status.size)
    failed_mask = status == "error"
    failed = int(np.count_nonzero(failed_mask))
    ok = int(np.count_nonzero(status == "ok"))
    error_rate = failed / requests if requests else None
    reasons: list[str] = [ended_early] if ended_early else []
    if requests == 0:
        reasons.append("the run holds no request")
    elif ok == 0:
        reasons.append(f"none of the {requests} requests succeeded")
    if error_rate is not None and error_rate > max_error_rate:
        reasons.append(
            f"{failed} of {requests} requests failed ({error_rate:.1%}), above "
            f"--max-error-rate {max_error_rate:g}"
        )
    return Usability(
        usable=not reasons,
        max_error_rate=float(max_error_rate),
        error_rate=error_rate,
        requests=requests,
        failed=failed,
        reasons=reasons,
        top_errors=_top_errors(requests_df[failed_mask], requests) if requests else [],
    )


def describe_failures(verdict: JSONView) -> list[str]:
    """Lines for a terminal or CI log: why the run is not usable, then its top causes."""
    lines = [f"run not usable: {'; '.join(verdict['reasons'])}"]
    if verdict["top_errors"]:
        lines.append("top causes of failure:")
    for cause in verdict["top_errors"]:
        status, error = cause["http_status"], cause["error"]
        # The client's messages already start with the status where there was one.
        if status is not None and f"HTTP {status}" not in error:
            error = f"HTTP {status}: {error}"
        lines.append(f"  {cause['count']} ({cause['share']:.1%} of requests): {error}")
    return lines
