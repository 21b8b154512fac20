"""The live display of a running load: requests done, in flight, output tokens/s, errors.

Fed by the closed-loop driver's callbacks from the event loop thread; rich refreshes it from its
own thread four times a second, reading plain counters, so the load's hot path pays only for a
few integer updates per request.
"""

from __future__ import annotations

import time
from collections import deque

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from loadgen.drivers.sending import LiveCounters
from results.folder.records import RequestRecord

_RATE_WINDOW_S = 10.0


class LiveDisplay:
    def __init__(
        self,
        console: Console,
        total: int | None,
        duration_s: float | None,
        enabled: bool = True,
    ) -> None:
        self.console = console
        self.total = total
        self.duration_s = duration_s
        self.enabled = enabled and console.is_terminal
        self.counters = LiveCounters()
        self._t0 = time.monotonic()
        self._recent: deque[tuple[float, int]] = deque()
        self._live: Live | None = None

    def on_record(self, record: RequestRecord) -> None:
        now = time.monotonic()
        self._recent.append((now, record.output_tokens))
        # Pruned here too, not only when drawn: without a terminal nothing draws it, and a
        # long run's records would pile up.
        self._prune(now)

    def _prune(self, now: float) -> None:
        while self._recent and now - self._recent[0][0] > _RATE_WINDOW_S:
            self._recent.popleft()

    def _recent_rate(self, now: float) -> float:
        self._prune(now)
        span = min(_RATE_WINDOW_S, now - self._t0)
        return sum(n for _, n in self._recent) / span if span > 0 else 0.0

    def __rich__(self) -> RenderableType:
        now = time.monotonic()
        elapsed = now - self._t0
        c = self.counters
        table = Table.grid(padding=(0, 2))
        for _ in range(6):
            table.add_column(justify="right")
        table.add_row(
            "elapsed", f"{elapsed:6.1f} s",
            "done", f"{c.done}" + (f"/{self.total}" if self.total else ""),
            "in flight", f"{c.in_flight}",
        )  # fmt: skip
        table.add_row(
            "out tok/s", f"{self._recent_rate(now):8.1f}",
            "errors", f"[{'red' if c.errors else 'green'}]{c.errors}[/]",
            "cancelled", f"{c.cancelled}",
        )  # fmt: skip
        if self.total:
            bar = ProgressBar(total=self.total, completed=c.done, width=60)
        elif self.duration_s:
            bar = ProgressBar(total=self.duration_s, completed=min(elapsed, self.duration_s))
        else:
            return table
        return Group(table, bar)

    def __enter__(self) -> LiveDisplay:
        self._t0 = time.monotonic()
        if self.enabled:
            self._live = Live(self, console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None
        elif not exc or exc[0] is None:
            c = self.counters
            self.console.print(
                f"load done: {c.done} requests, {c.errors} errors, "
                f"{c.output_tokens} output tokens in {time.monotonic() - self._t0:.1f} s"
            )
