"""Engine steps streamed into a run folder in parts (results.folder.parts.writer).

A simulation of many requests runs millions of engine steps; held until the end they grow with
the run, and the engine's recorder keeps only its last million. :class:`StepParts` is the
sink of an engine's step recorder (engine.core.telemetry.StepRecorder.drain_to): each batch
of steps it is handed becomes one part, ``steps.parts/part-NNNNNN.parquet``;
:meth:`StepParts.seal` makes steps.parquet of
the parts, one row group per part, reading one at a time, and removes them. steps.parquet is
then the table :func:`results.folder.engine_steps.steps_frame` gives of all the steps at once.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from results.folder.engine_steps import STEPS_SCHEMA, steps_frame
from results.folder.parts.writer import STEPS_PARTS, PartWriter, seal_parts
from results.folder.run_folder import STEPS_PARQUET

__all__ = ["STEPS_PART_STEPS", "StepParts"]

# Steps per part: the most a drained recorder holds (one int64 a column: 144 bytes a step).
STEPS_PART_STEPS = 50_000


class StepParts:
    """Batches of engine steps appended to ``folder`` as parts (module docstring).

    ``t0_ns``: the run's start on the steps' clock (perf_counter_ns); steps that began
    before it are left out, as steps_frame does.
    """

    def __init__(self, folder: Path, t0_ns: int = 0) -> None:
        self.folder = Path(folder)
        self.t0_ns = t0_ns
        self._parts = PartWriter(self.folder / STEPS_PARTS)

    @property
    def parts_written(self) -> int:
        return self._parts.parts_written

    @property
    def steps_written(self) -> int:
        return self._parts.rows_written

    def __call__(self, columns: dict[str, list[int]]) -> None:
        """Write one part of ``columns`` (engine.core.telemetry.StepRecorder.since's form);
        none when no step of them began at or after t0_ns."""
        table = pa.Table.from_pandas(
            steps_frame(columns, self.t0_ns), schema=STEPS_SCHEMA, preserve_index=False
        )
        if table.num_rows == 0:
            return
        self._parts.write(table)

    def seal(self) -> Path:
        """steps.parquet of the parts written (an empty table of STEPS_SCHEMA for none); the
        parts removed. Returns its path."""
        return seal_parts(self.folder, STEPS_PARTS, STEPS_PARQUET, STEPS_SCHEMA)
