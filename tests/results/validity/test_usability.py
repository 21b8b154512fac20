"""The usability verdict of a requests table: the threshold, what counts as a failure, the
causes in a fixed order."""

from __future__ import annotations

import pandas as pd

from results.validity.usability import DEFAULT_MAX_ERROR_RATE, describe_failures, usability


def table(*rows: tuple[str, str | None, int | None]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["status", "error", "http_status"]).astype(
        {"http_status": "Int64"}
    )


def test_failures_at_the_threshold_pass_and_above_it_do_not() -> None:
    rows = [("ok", None, None)] * 19 + [("error", "HTTP 500: boom", 500)]
    at = usability(table(*rows), 0.05)
    assert at["usable"] and at["error_rate"] == 0.05 and at["reasons"] == []
    above = usability(table(*rows), 0.04)
    assert not above["usable"]
    assert above["reasons"] == ["1 of 20 requests failed (5.0%), above --max-error-rate 0.04"]


def test_cancelled_requests_are_not_failures_but_a_run_of_none_ok_is_unusable() -> None:
    cut = usability(table(("ok", None, None), ("cancelled", "cut at duration_s", None)), 0.0)
    assert cut["usable"] and cut["failed"] == 0
    none_ok = usability(table(("cancelled", "cut", None)), 1.0)
    assert not none_ok["usable"] and none_ok["reasons"] == ["none of the 1 requests succeeded"]
    empty = usability(table(), DEFAULT_MAX_ERROR_RATE)
    assert empty["error_rate"] is None and empty["reasons"] == ["the run holds no request"]


def test_causes_are_grouped_most_frequent_first_and_messages_cut_short() -> None:
    long = "x" * 500
    rows = (
        [("error", "HTTP 400: too long", 400)] * 3
        + [("error", None, None)] * 3
        + [("error", long, None)]
        + [("ok", None, None)] * 3
    )
    verdict = usability(table(*rows[::-1]), DEFAULT_MAX_ERROR_RATE)
    causes = [(c["error"][:20], c["http_status"], c["count"]) for c in verdict["top_errors"]]
    # Ties (3 and 3) by status, no status first, then by message.
    assert causes == [
        ("(no message)", None, 3),
        ("HTTP 400: too long", 400, 3),
        ("x" * 20, None, 1),
    ]
    assert len(verdict["top_errors"][2]["error"]) == 203
    assert verdict["top_errors"][1]["share"] == 0.3
    lines = describe_failures(verdict)
    assert lines[0].startswith("run not usable: 7 of 10 requests failed (70.0%)")
    assert lines[2] == "  3 (30.0% of requests): (no message)"
    assert lines[3] == "  3 (30.0% of requests): HTTP 400: too long"
