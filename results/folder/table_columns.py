"""The columns of the run folder's tables that other packages produce, declared once.

The engine records its steps (engine.core.telemetry, served at /debug/steps) and the probes
their readings (probes.sampler) in these columns; results.folder.engine_steps and
results.folder.tables build steps.parquet's and samples.parquet's schemas from the same names.
Plain tuples and types, no pandas or pyarrow: the engine and the probe processes import this.
"""

from __future__ import annotations

__all__ = [
    "SAMPLE_COLUMNS",
    "SAMPLE_PART_SAMPLER",
    "STEP_ADDED_COLUMNS",
    "STEP_COUNT_COLUMNS",
    "STEP_RECORD_COLUMNS",
    "STEP_TIME_COLUMNS",
]

# A step's times in the engine's record, perf_counter_ns of its host; steps.parquet holds them
# in seconds from the run's start, named with _s for _ns (start_s, end_s, forward_s).
STEP_TIME_COLUMNS: tuple[str, ...] = (
    "start_ns",
    "end_ns",
    "forward_ns",  # inside the executor: model forward, logits and sampling
)

# Counts per step, int64, as recorded and in steps.parquet.
STEP_COUNT_COLUMNS: tuple[str, ...] = (
    "num_seqs",
    "num_prefill_seqs",
    "num_decode_seqs",
    "num_prefill_tokens",
    "num_decode_tokens",
    "context_tokens",  # sum of the scheduled sequences' context lengths after the step
    "decode_context_tokens",  # the same over the decode sequences alone
    "attn_pairs",  # (query, key) pairs attended: sum over new tokens of position + 1
    "kv_blocks_used",
    "kv_slots_used",  # token slots of running requests that hold K/V (reserved: blocks)
    "kv_blocks_total",
    "num_running",
    "num_waiting",
    "num_preemptions",
    "cuda_graph",  # 1 when the step's forward was the replay of a CUDA graph, else 0
)

# Counts added after steps.parquet was first written: a folder or an engine from before them
# lacks them, and they read as null (unknown) there.
STEP_ADDED_COLUMNS: tuple[str, ...] = ("cuda_graph",)

# One engine step as the engine records it: its number, its times, its counts.
STEP_RECORD_COLUMNS: tuple[str, ...] = ("step", *STEP_TIME_COLUMNS, *STEP_COUNT_COLUMNS)

# One probe reading, name -> type: t_ns (perf_counter_ns of the reading), source ("nvml",
# "cpu", "engine", ...), name, value, and labels (a JSON object as text, '' when none).
# samples.parquet holds t_s (seconds on the run's clock) in place of t_ns.
SAMPLE_COLUMNS: dict[str, type] = {
    "t_ns": int,
    "source": str,
    "name": str,
    "value": float,
    "labels": str,
}

# A part of samples.parts (probes.sample_stream) holds the readings as taken (SAMPLE_COLUMNS)
# and, in this int32 column, the index of the sampler that took each in its probe session:
# samples.parquet orders readings of one time by it, as a table of every sampler's readings, one
# sampler after another in session order, sorted stably by time would.
SAMPLE_PART_SAMPLER = "sampler"
