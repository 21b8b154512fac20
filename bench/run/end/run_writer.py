"""The one writer of a run folder, for every command that makes one.

`bench run` (bench.run.orchestrate), `bench simulate` (bench.sim.simulate), and through
run_benchmark the runs of `bench run --repeat`, `bench sweep`, `bench ablate` and `bench ab`
all write their folders in the same steps, here:

1. :meth:`RunWriter.create`: the folder ``<runs_dir>/<UTC time>-<scenario>-<engine>/``
   (results.folder.run_folder.RunFolder);
2. :meth:`RunWriter.begin` (a run that streams its records, as `bench run` and `bench simulate`
   do): a first run.json, with ``incomplete`` saying how records are flushed, and the record
   stream (results.folder.parts.record_stream) the load appends every finished request to, so that
   a killed run keeps what was flushed and the client holds no chunks;
3. :meth:`RunWriter.write_tables`: requests.parquet and tokens.parquet (from the records, or
   sealed from the stream's parts), and steps.parquet and samples.parquet when the run has
   them (a served run writes client.parquet and arrival_plan.parquet beside them,
   bench.run.load_runner.record_load); :meth:`RunWriter.seal_samples`: samples.parquet sealed
   from the parts the probes streamed to the folder (probes.sample_stream);
4. :meth:`RunWriter.finish`: run.json (its ``schema_version`` and ``run_id`` the folder's, its
   ``recorded`` from :meth:`RunWriter.recorded`), then summary.json, computed from the written files
   (results.run_summary), never from memory, so recomputing it from the folder agrees; and
   the run adds itself to the history its command chose (results.history.target);
5. :func:`write_report`: report.html, the run's dashboard. A step of its own, taken once the
   command has shown the summary and its engine is stopped: drawing the page takes seconds,
   and a failure to draw it (or a signal meanwhile) costs the page, never the run.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console

from bench.run.end.interrupt import ReportSkipped, active_interrupts
from bench.run.messages import print_path, print_warning
from results.figures.client_check import CLIENT_PARQUET
from results.folder.parts.record_stream import RecordStream
from results.folder.parts.step_parts import StepParts
from results.folder.parts.writer import FLUSH_ROWS, FLUSH_S
from results.folder.records import RequestRecord
from results.folder.run_folder import RunFolder, load_run
from results.history.target import record_run
from results.run_summary import summarize_run
from results.schema import RUN_JSON_VERSION, Recorded, RunJson, SummaryJson

__all__ = ["RunWriter", "write_report"]


class RunWriter:
    """One run folder being written, in the order of the module docstring."""

    def __init__(self, folder: RunFolder) -> None:
        self.folder = folder
        self._steps = False
        self._samples = False
        self.stream: RecordStream | None = None

    @classmethod
    def create(cls, runs_dir: Path, scenario_name: str, engine_name: str) -> RunWriter:
        """Claim a new, uniquely named run folder under ``runs_dir`` (RunFolder.create)."""
        return cls(RunFolder.create(runs_dir, scenario_name, engine_name))

    @property
    def path(self) -> Path:
        return self.folder.path

    @property
    def run_id(self) -> str:
        return self.folder.run_id

    def begin(
        self, flush_s: float = FLUSH_S, flush_rows: int = FLUSH_ROWS, **sections: Any
    ) -> RecordStream:
        """Write the first run.json, of ``sections`` (what is known as the load begins; as
        :meth:`finish` takes them) with ``incomplete`` (``flush_s``, ``flush_rows``), and open
        the record stream; :meth:`write_tables` closes and seals it, :meth:`finish` replaces
        this run.json. Raises results.schema.SchemaError as :meth:`finish` does."""
        incomplete = {"flush_s": flush_s, "flush_rows": flush_rows}
        self.folder.write_run_json(
            RunJson(  # type: ignore[typeddict-item]
                schema_version=RUN_JSON_VERSION,
                run_id=self.run_id,
                **sections,
                incomplete=incomplete,
            )
        )
        self.stream = self.folder.open_stream(flush_s, flush_rows)
        return self.stream

    def discard_if_empty(self) -> None:
        """Remove the folder of a run that failed or was stopped before any record came."""
        if self.stream is not None:
            self.stream.close()
        if self.stream is None or self.stream.requests_written == 0:
            shutil.rmtree(self.path, ignore_errors=True)

    def write_tables(
        self,
        records: Sequence[RequestRecord] | None,
        steps: pd.DataFrame | None = None,
        samples: pd.DataFrame | None = None,
    ) -> None:
        """requests.parquet and tokens.parquet of ``records``, or (None) sealed from the
        stream that :meth:`begin` opened; steps.parquet and samples.parquet when given (None:
        the run has none, and run.json's ``recorded`` says so)."""
        if records is None:
            if self.stream is None:
                raise RuntimeError("write_tables(None) needs the record stream of begin()")
            self.stream.close()
            self.folder.seal_records()
        else:
            self.folder.write_requests(records)
            self.folder.write_tokens(records)
        if steps is not None:
            self.folder.write_steps(steps)
            self._steps = True
        if samples is not None:
            self.folder.write_samples(samples)
            self._samples = True

    def seal_steps(self, parts: StepParts) -> Path:
        """steps.parquet sealed from the engine steps streamed to ``parts`` (a simulation's,
        results.folder.parts.step_parts); run.json's ``recorded`` then has steps."""
        path = parts.seal()
        self._steps = True
        return path

    def seal_samples(self, t0_ns: int) -> bool:
        """samples.parquet sealed from the probes' ``samples.parts``, on the clock of the run
        that began at ``t0_ns`` (perf_counter_ns); call once the probes stopped. Returns whether
        there was any reading (then run.json's ``recorded`` has samples)."""
        sealed = self.folder.seal_samples(t0_ns) is not None
        self._samples = self._samples or sealed
        return sealed

    def recorded(self) -> Recorded:
        """run.json's ``recorded``: which optional tables the folder holds."""
        out = Recorded(steps=self._steps, samples=self._samples)
        if (self.path / CLIENT_PARQUET).is_file():
            out["client"] = True
        return out

    def finish(self, **sections: Any) -> SummaryJson:
        """Write run.json of ``sections`` (every results.schema.RunJson key but
        ``schema_version`` and ``run_id``, which are the folder's; ``recorded`` from
        :meth:`recorded`), then summary.json from the folder's files; returns the summary.

        Raises results.schema.SchemaError (run.json not written) naming a key that does not fit.
        """
        run_json = RunJson(  # type: ignore[typeddict-item]
            schema_version=RUN_JSON_VERSION,
            run_id=self.run_id,
            **sections,
        )
        self.folder.write_run_json(run_json)
        summary = summarize_run(load_run(self.path))
        self.folder.write_summary(summary)
        _, warning = record_run(self.path)
        if warning is not None:
            print_warning(Console(stderr=True), warning)
        return summary


def write_report(folder: Path, console: Console) -> Path | None:
    """Write ``folder/report.html`` and print where; returns its path, or None when it was not
    written: after a second signal (skipped), on a signal while it is drawn (abandoned), or on
    any failure to draw it (a warning naming `bench report FOLDER --html`, which retries).

    The dashboards are a view of the data: nothing here fails the run, whose files are written.
    """
    interrupts = active_interrupts()
    if interrupts.skip_report:
        print_warning(
            console,
            f"report.html skipped (signalled twice); write it with: bench report {folder} --html",
        )
        return None
    try:
        with interrupts.report():
            # Imported here: plotly loads only for a run that draws its page.
            from dashboards.pages.report import write_run_report

            path = write_run_report(folder)
    except ReportSkipped as exc:
        print_warning(console, f"{exc}; write it later with: bench report {folder} --html")
        return None
    except Exception as e:
        print_warning(
            console,
            f"report.html not written ({type(e).__name__}: {e}); "
            f"retry with: bench report {folder} --html",
        )
        return None
    print_path(console, "dashboard", path, f"(opens offline: {path.resolve().as_uri()})")
    return path
