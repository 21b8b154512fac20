"""The Azure LLM inference trace CSV (AzurePublicDataset, AzureLLMInferenceTrace_code / _conv).

Three columns, one row per request, in arrival order::

    TIMESTAMP,ContextTokens,GeneratedTokens
    2023-11-16 18:15:46.6805900,374,44

``TIMESTAMP`` is a datetime (any ISO 8601 form pandas reads; the published files carry seven
fractional digits), ``ContextTokens`` the prompt's tokens, ``GeneratedTokens`` the answer's.
The trace has no block hashes, so its prompts share nothing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from loadgen.workloads.spec import WorkloadError

__all__ = ["AZURE_COLUMNS", "read_azure_csv"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def read_azure_csv(path: Path) -> list[tuple[float, int, int]]:
    """The trace's rows as (seconds from the Unix epoch, context tokens, generated tokens), in
    file order (loadgen.workloads.trace.load_trace makes them entries from 0).

    Raises:
        WorkloadError: unreadable file, a missing column, a timestamp or length that is not
            valid, or rows out of time order; the message names the file and the row (the
            file's line number, header = line 1).
    """
    try:
        frame = pd.read_csv(path, dtype=str, skipinitialspace=True)
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{path}: cannot read the trace as CSV ({exc})") from None
    missing = [c for c in AZURE_COLUMNS if c not in frame.columns]
    if missing:
        raise WorkloadError(
            f"{path}: missing column(s) {missing}; an Azure trace has {list(AZURE_COLUMNS)} "
            "(or set trace.format)"
        )
    times = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce")
    rows: list[tuple[float, int, int]] = []
    for row, (stamp, raw_time, context, generated) in enumerate(
        zip(times, frame["TIMESTAMP"], frame["ContextTokens"], frame["GeneratedTokens"],
            strict=True),
        start=2,
    ):  # fmt: skip
        where = f"{path}:{row}"
        if pd.isna(stamp):
            raise WorkloadError(f"{where}: 'TIMESTAMP' must be a datetime, got {raw_time!r}")
        lengths = []
        for name, value in (("ContextTokens", context), ("GeneratedTokens", generated)):
            text = "" if value is None or pd.isna(value) else str(value).strip()
            if not text.isdigit() or int(text) < 1:
                raise WorkloadError(
                    f"{where}: '{name}' must be an integer >= 1 (tokens), got {value!r}"
                )
            lengths.append(int(text))
        t_s = stamp.value / 1e9
        if rows and t_s < rows[-1][0]:
            raise WorkloadError(f"{where}: TIMESTAMP {raw_time} is before the previous row's; "
                                "sort the trace by time")  # fmt: skip
        rows.append((t_s, lengths[0], lengths[1]))
    return rows
