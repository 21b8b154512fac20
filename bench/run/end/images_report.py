"""The terminal table of a run whose requests sent different numbers of images: TTFT by count.

Reads summary.json's ``images`` (results.figures.workloads.images); for a run without images,
or one whose every request sent the same count (its latency table says it all),
:func:`images_table` gives None.
"""

from __future__ import annotations

from collections.abc import Mapping

from rich import box
from rich.table import Table

from perfmodel.files import JSONView
from results.figures.workloads.images import ttft_by_images_rows

__all__ = ["images_table"]


def images_table(summary: JSONView) -> Table | None:
    """TTFT p50 and p99 (ms) of the ok requests at each image count, or None (module
    docstring)."""
    section = summary.get("images")
    rows = ttft_by_images_rows(section if isinstance(section, Mapping) else None)
    if not rows:
        return None
    table = Table(title="TTFT by images per request (ms, ok requests)", box=box.SIMPLE_HEAVY)
    for col in ("images", "requests", "TTFT p50", "TTFT p99"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    return table
