"""The executor interface: runs one scheduled batch and returns the sampled tokens.

vLLM's scheduler / executor split. The scheduler decides what runs; an executor runs it. The
torch executor (engine.model.model_runner.ModelRunner) runs the model on a CPU or GPU; the
simulated device (engine.sim.executor.SimExecutor) implements the same interface without a
model, advancing a clock instead. ``Executor`` declares every member the engine reads: a member
that does not apply to an executor returns the neutral value its docstring names, so the
engine never probes for one.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from engine.config import SpeculativeSettings
from engine.core.scheduler import SchedulerOutput
from engine.core.speculation import Proposer, SpecStats


class Executor(Protocol):
    def execute_model(
        self, scheduler_output: SchedulerOutput, block_tables: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        """Run the batch; map each request whose step samples to its new token ids (one, or
        under speculative decoding the accepted draft tokens plus one).

        ``block_tables`` maps request id to the ids of its KV blocks, in token order.
        """
        ...

    def clock_ns(self) -> int:
        """The time the engine stamps steps and arrivals with, in integer nanoseconds:
        time.perf_counter_ns for an executor that runs in real time, the simulated device's
        virtual clock when it runs faster than real time."""
        ...

    def make_proposer(self, settings: SpeculativeSettings) -> Proposer:
        """The proposer of ``settings.method`` ("ngram" or "draft"), drafting
        ``settings.num_speculative_tokens`` tokens per step; the executor keeps it and feeds it
        what it needs. Raises ValueError, naming the setting, when this executor cannot
        speculate as configured."""
        ...

    def describe(self) -> dict[str, Any] | None:
        """The simulated device's description (JSON-safe: its GPU, time model, capacity and
        clock mode), or None for an executor on a real device, which the engine describes."""
        ...

    @property
    def num_kv_blocks(self) -> int:
        """How many KV blocks of the engine's block size this executor holds memory for."""
        ...

    @property
    def kv_cache_dtype(self) -> torch.dtype | None:
        """The dtype the KV cache stores (its element size sets the KV bytes per token); None
        means the engine's activation dtype."""
        ...

    @property
    def weight_bytes(self) -> int | None:
        """Bytes the model's weights occupy on this executor's device, as loaded (quantized
        layers at their packed size); None for an executor that holds no weights."""
        ...

    @property
    def native_decode(self) -> bool:
        """Whether decode attention runs in the C kernel (engine.native.attention); False for
        an executor that runs no kernels."""
        ...

    @property
    def native_custom_ops(self) -> bool:
        """Whether small-batch linear layers and add + RMSNorm run in the C kernels; False for
        an executor that runs no kernels."""
        ...

    def embed(self, prompts: list[list[int]]) -> list[list[float]]:
        """Each prompt's embedding: its final hidden states mean-pooled and L2-normalized
        (what vLLM's pooling runner gives a decoder model with mean pooling), outside any step
        and without touching the engine's KV cache. Raises ValueError, saying why, on an
        executor that holds no weights."""
        ...

    @property
    def replayed_graph(self) -> bool:
        """Whether the last ``execute_model`` ran its forward as the replay of a CUDA graph
        (steps.parquet's ``cuda_graph``); False for an executor that captures none."""
        ...

    @property
    def spec_stats(self) -> SpecStats:
        """The verifier's acceptance counters since the executor was built (all zero when
        speculative decoding is off)."""
        ...
