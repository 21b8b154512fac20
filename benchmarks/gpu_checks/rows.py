"""A check's result, and the table and JSON document the results print as."""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

Status = Literal["PASS", "MISS", "SKIP"]
STATUSES: tuple[Status, ...] = ("PASS", "MISS", "SKIP")


@dataclass(frozen=True)
class Row:
    """One line of the table.

    ``check``: what is proved (the line's name); ``status``: PASS (the target is met), MISS
    (measured, and the target is not met, or the check failed: ``detail`` says how), SKIP (not
    measured here: ``detail`` says why); ``figure``: the measured figure against its target, as
    printed; ``values``: the same figures as numbers, in the JSON output; ``seconds``: the wall
    time the check took.
    """

    check: str
    status: Status
    figure: str = ""
    detail: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")


def passed(check: str, ok: bool, figure: str, detail: str = "", **values: Any) -> Row:
    """PASS when ``ok``, else MISS, with the figure and the values behind it."""
    return Row(check, "PASS" if ok else "MISS", figure, detail, values)


def skipped(check: str, reason: str) -> Row:
    return Row(check, "SKIP", detail=reason)


def render_table(rows: list[Row], title: str, width: int = 160) -> str:
    """The rows as one text table (check, status, figure, detail, seconds)."""
    table = Table(title=title, show_lines=False)
    for name in ("check", "status", "figure", "detail"):
        table.add_column(name, overflow="fold")
    table.add_column("s", justify="right")
    for row in rows:
        table.add_row(row.check, row.status, row.figure, row.detail, f"{row.seconds:.1f}")
    out = io.StringIO()
    Console(file=out, width=width, no_color=True, force_terminal=False).print(table)
    return out.getvalue()


def to_json(rows: list[Row], meta: dict[str, Any]) -> str:
    """The rows and ``meta`` (device, torch, total seconds) as one JSON document."""
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    return json.dumps(
        {**meta, "counts": counts, "rows": [asdict(r) for r in rows]}, indent=2, default=str
    )


def render_line(row: Row) -> str:
    """One row as the line printed the moment its check finishes."""
    parts = [f"{row.status:<4}", row.check, f"({row.seconds:.1f} s)"]
    said = (text for text in (row.figure, row.detail) if text)
    return "  ".join(parts) + "".join(f"\n      {text}" for text in said)
