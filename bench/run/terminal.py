"""Output that fits the terminal: the console every command prints to, and tables that never cut.

rich squeezes a table wider than the console by shrinking its columns, and a figure such as
``2,495.12`` that cannot wrap is then cut to ``2,49…``. :func:`print_table` instead stacks such a
table: it splits the columns into parts that each fit at their natural width, repeating the
leading key columns (the row labels) in every part, so every cell prints whole and no column is
dropped. A column that does not fit even alone next to the keys (a long run-folder name) folds
onto several lines instead of being cut.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

__all__ = ["PIPED_WIDTH", "fit_table", "print_table", "terminal_console"]

PIPED_WIDTH = 132
"""Columns of a console whose output is piped (CI logs, files) and no ``COLUMNS`` is set: rich
would otherwise assume 80 and stack tables that a log viewer shows whole."""

_UNBOUNDED = 10_000  # wide enough to measure any table at its natural (unwrapped) width


def terminal_console(*, stderr: bool = False, piped_width: int = PIPED_WIDTH) -> Console:
    """The console of a command: the terminal's width, or ``COLUMNS`` when set (honoured also
    when piped, so ``COLUMNS=80 bench run ...`` renders as an 80-column terminal would), else
    ``piped_width`` columns for piped output."""
    stream = sys.stderr if stderr else sys.stdout
    sized = stream.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(stderr=stderr, width=None if sized else piped_width)


def _natural_width(console: Console, table: Table) -> int:
    """Columns ``table`` takes when nothing in it wraps (borders and padding included)."""
    options = console.options.update_width(_UNBOUNDED)
    return Measurement.get(console, options, table).maximum


def _part(table: Table, columns: list[Column], first: bool, last: bool) -> Table:
    """A table of ``columns`` with ``table``'s style; the title goes on the first part, the
    caption on the last (a copy: ``table`` is not changed)."""
    part = copy.copy(table)
    part.columns = [dataclasses.replace(c, _index=i) for i, c in enumerate(columns)]
    part.rows = list(table.rows)
    if not first:
        part.title = f"{table.title} (continued)" if table.title else None
    if not last:
        part.caption = None
    return part


def fit_table(table: Table, console: Console, keys: int = 1) -> list[Table]:
    """``table`` as parts that each fit ``console.width`` without cutting a cell.

    A table that fits is returned as is. Otherwise its columns after the first ``keys`` (the
    row labels, repeated in every part) are dealt out in order into as few parts as fit; a
    column too wide to fit even alone beside the keys gets a part of its own with its cells
    folded, so nothing is cut or dropped. A table without headers (a key/value list) only
    folds: splitting would separate the values from their labels' meaning.
    """
    width = console.width
    if _natural_width(console, table) <= width:
        return [table]
    if not table.show_header or len(table.columns) <= keys + 1:
        return [_folded(table)]
    key_columns, rest = table.columns[:keys], table.columns[keys:]
    groups: list[list[Column]] = []
    for column in rest:
        if groups and _natural_width(console, _part(table, key_columns + groups[-1] + [column],
                                                    True, True)) <= width:  # fmt: skip
            groups[-1].append(column)
        else:
            groups.append([column])
    groups = _balanced(table, console, key_columns, rest, len(groups)) or groups
    parts = [
        _part(table, key_columns + group, i == 0, i == len(groups) - 1)
        for i, group in enumerate(groups)
    ]
    return [p if _natural_width(console, p) <= width else _folded(p) for p in parts]


def _balanced(
    table: Table, console: Console, keys: list[Column], rest: list[Column], count: int
) -> list[list[Column]] | None:
    """``rest`` dealt into ``count`` parts of near-equal column counts (5 + 4 rather than the
    greedy 8 + 1, which leaves a stub part), or None where such a part would not fit."""
    size = -(-len(rest) // count)
    groups = [rest[i : i + size] for i in range(0, len(rest), size)]
    for group in groups:
        if _natural_width(console, _part(table, keys + group, True, True)) > console.width:
            return None
    return groups


def _folded(table: Table) -> Table:
    """``table`` with every column folding long cells onto further lines instead of cutting."""
    folded = copy.copy(table)
    folded.columns = [dataclasses.replace(c, overflow="fold", no_wrap=False) for c in table.columns]
    return folded


def print_table(console: Console, table: Table, keys: int = 1) -> None:
    """Print ``table`` whole at the console's width: stacked into parts where it is too wide
    (see :func:`fit_table`)."""
    for part in fit_table(table, console, keys):
        console.print(part)
