"""Small trace files of the two public formats, written into a test's folder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

__all__ = ["write_azure_trace", "write_mooncake_trace"]

# (timestamp in ms, input tokens, output tokens, hash ids)
MooncakeLine = tuple[float, int, int, Sequence[int]]
# (seconds after the first row, context tokens, generated tokens)
AzureRow = tuple[float, int, int]


def write_mooncake_trace(path: Path, lines: Sequence[MooncakeLine]) -> Path:
    """A Mooncake JSONL trace (``hash_ids`` left out of lines that give none)."""
    out = []
    for t_ms, n_in, n_out, ids in lines:
        obj: dict = {"timestamp": t_ms, "input_length": n_in, "output_length": n_out}
        if ids:
            obj["hash_ids"] = list(ids)
        out.append(json.dumps(obj))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def write_azure_trace(path: Path, rows: Sequence[AzureRow]) -> Path:
    """An Azure LLM inference trace CSV, timestamps with seven fractional digits as published."""
    start = datetime(2023, 11, 16, 18, 15, 46, 680590)
    out = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for offset_s, context, generated in rows:
        stamp = (start + timedelta(seconds=offset_s)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        out.append(f"{stamp},{context},{generated}")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path
