"""Signals during a `bench run` (and runs of runs): stop the load, keep what was recorded.

A command decorated with :func:`catching_signals` handles SIGINT (Ctrl-C; a terminal sends it
to the whole foreground process group) and SIGTERM in three phases:

- **setup** (tokenizer, engine start, between the runs of a sweep): nothing is recorded yet, so
  the first signal raises :class:`RunInterrupted` at once (no folder); the engine that was
  starting is stopped on the way out.
- **load** (:meth:`Interrupts.load`): the first signal sets the load's
  :class:`~loadgen.drivers.stop.LoadStop`: nothing new is sent, the requests in flight are
  cancelled and recorded, and the normal path writes the run folder, run.json's ``interrupted``
  section (:func:`interruption_section`) and the summary, then stops the probes and the engine.
  ``run_benchmark`` raises :class:`RunInterrupted` with the folder at its end.
- **report** (:meth:`Interrupts.report`): drawing report.html; a signal here abandons the report
  (:class:`ReportSkipped`); the tables are already written.

A second signal in any phase after setup means "hurry": the tables are still written and the
engine still stopped, but report.html is skipped. The exit status is the shell's: 128 + the
first signal's number (130 for SIGINT, 143 for SIGTERM).

SIGINT that was ignored when the process started (a background job of a non-interactive shell,
``nohup``-like launchers) stays ignored, as Python's own handling leaves it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Literal, ParamSpec, TypeVar

from bench.run.launch.engine_watch import EngineWatch, engine_death_section
from loadgen.drivers.stop import LoadStop
from perfmodel.files import JSONObject
from results.folder.outcomes import Outcome
from results.schema import Interruption

__all__ = [
    "HANDLED_SIGNALS",
    "Interrupts",
    "ReportSkipped",
    "RunInterrupted",
    "active_interrupts",
    "catching_signals",
    "interruption_note",
    "interruption_section",
    "run_end_sections",
]

HANDLED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)

Phase = Literal["setup", "load", "finish", "report"]
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Received:
    """One signal: its name ("SIGINT"), number, arrival (time.perf_counter_ns) and UTC time."""

    name: str
    signum: int
    t_ns: int
    utc: str
    phase: Phase

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class RunInterrupted(BaseException):
    """A run (or a run of runs) ended by a signal. ``folder`` and ``summary`` are the partial run
    written (None when the signal came before the load); ``skip_report`` after a second signal.

    A BaseException, as KeyboardInterrupt is: raised from the handler wherever the program is,
    it must pass the ``except Exception`` of code that keeps going after a failure (a probe
    that cannot start, a report that cannot be drawn)."""

    def __init__(
        self,
        received: Received,
        folder: Path | None = None,
        summary: Any = None,
        skip_report: bool = False,
    ) -> None:
        where = f"; the partial run is in {folder}" if folder else ": nothing was recorded"
        when = {"setup": "before the load", "load": "during the load"}.get(
            received.phase, "after the load"
        )
        super().__init__(f"interrupted by {received.name} {when}{where}")
        self.received = received
        self.folder = folder
        self.summary = summary
        self.skip_report = skip_report

    @property
    def exit_code(self) -> int:
        """128 + the signal's number: 130 for SIGINT, 143 for SIGTERM."""
        return self.received.exit_code


class ReportSkipped(BaseException):
    """A signal arrived while report.html was drawn: the report is abandoned (a BaseException
    for the reason RunInterrupted is one)."""


def _say(text: str) -> None:
    # os.write: safe to call from a signal handler, whatever the console is doing.
    with contextlib.suppress(OSError):
        os.write(2, f"\n{text}\n".encode())


class Interrupts:
    """What signals arrived, and what the current phase does with the next one (module doc)."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._phase: Phase = "setup"
        self._stop: LoadStop | None = None
        self._shield = 0

    @property
    def first(self) -> Received | None:
        return self.received[0] if self.received else None

    @property
    def skip_report(self) -> bool:
        """True after a second signal: write the tables, skip report.html."""
        return len(self.received) >= 2

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        """The signal handler (module docstring)."""
        name = signal.Signals(signum).name
        got = Received(name, signum, time.perf_counter_ns(), datetime.now(UTC).isoformat(),
                       self._phase)  # fmt: skip
        self.received.append(got)
        if len(self.received) == 1:
            if self._stop is not None:
                self._stop.set(f"the run was interrupted ({name})")
                _say(f"{name}: stopping the load; the run folder is written with every request "
                     "recorded so far (signal again to skip the report)")  # fmt: skip
                return
            if self._phase == "setup" and not self._shield:
                raise RunInterrupted(got)
            if self._phase == "finish":
                _say(f"{name}: the load had finished; the run folder is still written (signal "
                     "again to skip the report)")  # fmt: skip
        if self._phase == "report" and not self._shield:
            raise ReportSkipped(f"{name}: report.html skipped")
        if len(self.received) == 2:
            _say(f"{name} again: the tables are still written and the engine stopped; "
                 "report.html is skipped")  # fmt: skip

    def begin_run(self) -> None:
        """A run starts (its setup phase); one signalled already (between the runs of a sweep,
        while the last one's report was drawn) ends it before it starts."""
        if self.first is not None:
            raise RunInterrupted(self.first)
        self._phase = "setup"

    @contextlib.contextmanager
    def load(self, stop: LoadStop) -> Iterator[None]:
        """While the load runs: a signal sets ``stop``; after it, signals are only noted."""
        self._phase, self._stop = "load", stop
        try:
            yield
        finally:
            self._stop, self._phase = None, "finish"

    @contextlib.contextmanager
    def report(self) -> Iterator[None]:
        """While report.html is drawn: a signal raises :class:`ReportSkipped`."""
        previous, self._phase = self._phase, "report"
        try:
            yield
        finally:
            self._phase = previous

    @contextlib.contextmanager
    def shielded(self) -> Iterator[None]:
        """Signals are noted, never raised (stopping an engine must not be cut short)."""
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1

    def raise_if_interrupted(self, folder: Path | None, summary: Any) -> None:
        """Raise :class:`RunInterrupted` for the run just written when a signal arrived."""
        if self.first is not None:
            raise RunInterrupted(self.first, folder, summary, self.skip_report)


# The handler of the command running now (None: signals keep their usual behaviour).
_active: Interrupts | None = None
# What the last command's handler received (for the status of a command that did not catch it).
_last_received: list[Received] = []


def active_interrupts() -> Interrupts:
    """The running command's :class:`Interrupts`; a dormant one (no handler, so it never sees
    a signal) when none is installed, as for `run_benchmark` called from a library or a test."""
    return _active if _active is not None else Interrupts()


@contextlib.contextmanager
def _catch_signals() -> Iterator[Interrupts]:
    global _active
    if _active is not None or threading.current_thread() is not threading.main_thread():
        yield active_interrupts()
        return
    interrupts = Interrupts()
    previous: dict[signal.Signals, Any] = {}
    for sig in HANDLED_SIGNALS:
        current = signal.getsignal(sig)
        if sig == signal.SIGINT and current == signal.SIG_IGN:
            continue  # the module docstring's last paragraph
        previous[sig] = current
        signal.signal(sig, interrupts.handle)
    _active = interrupts
    try:
        yield interrupts
    finally:
        _active = None
        _last_received[:] = interrupts.received
        for sig, handler in previous.items():
            # A command ended by a signal is on its way out: one more (Ctrl-C pressed again)
            # must not turn the exit into a traceback.
            signal.signal(sig, signal.SIG_IGN if interrupts.received else handler)


def catching_signals(command: Callable[P, R]) -> Callable[P, R]:
    """Decorate a command: SIGINT and SIGTERM are handled as the module docstring says while it
    runs (once, however the commands nest); after, the previous handlers are restored, or, when
    a signal ended the command, both are ignored while the process exits."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with _catch_signals():
                return command(*args, **kwargs)
        except (RunInterrupted, ReportSkipped) as exc:
            # Signalled where the command does not catch it (reading its options, importing):
            # one line and the signal's status, never a traceback.
            _say(str(exc))
            first = exc.received if isinstance(exc, RunInterrupted) else _last_received[0]
            raise SystemExit(first.exit_code) from None

    return wrapper


def interruption_section(
    interrupts: Interrupts,
    t0_ns: int,
    records: Sequence[Outcome],
    stop: LoadStop,
    planned: int | None,
) -> Interruption | None:
    """run.json's ``interrupted`` section, or None when no signal arrived.

    ``planned`` is the number of requests the load would have sent (None for a load bounded by
    its duration only); ``not_sent`` is then what the cut left unsent (those have no row).
    """
    got = interrupts.first
    if got is None:
        return None
    message = stop.message()
    cancelled = sum(1 for r in records if r.status == "cancelled" and r.error == message)
    return Interruption(
        signal=got.name,
        signals=len(interrupts.received),
        t_s=(got.t_ns - t0_ns) / 1e9,
        utc=got.utc,
        phase="load" if got.phase == "load" else "after the load",
        requests_recorded=len(records),
        cancelled_in_flight=cancelled,
        requests_planned=planned,
        not_sent=None if planned is None else max(planned - len(records), 0),
    )


def run_end_sections(
    interrupts: Interrupts,
    watch: EngineWatch,
    stop: LoadStop,
    base_url: str,
    health_path: str,
    records: Sequence[Outcome],
    t0_ns: int,
    planned: int | None,
) -> JSONObject:
    """run.json's keys for a run that ended early: ``interrupted`` (a signal) and
    ``engine_died`` (bench.run.launch.engine_watch); {} for a run that ran its course."""
    out: JSONObject = {}
    if (section := interruption_section(interrupts, t0_ns, records, stop, planned)) is not None:
        out["interrupted"] = section
    died = engine_death_section(watch, base_url, health_path, records, t0_ns, planned)
    if died is not None:
        out["engine_died"] = died
    return out


def interruption_note(exc: RunInterrupted) -> JSONObject:
    """What a run of runs (sweep, ablation, repeat) records of the signal that ended it: the
    signal, its UTC time, the exit status, and the partial run's folder (None before a load)."""
    return {
        "signal": exc.received.name,
        "utc": exc.received.utc,
        "exit_code": exc.exit_code,
        "partial_run": str(exc.folder) if exc.folder is not None else None,
    }
