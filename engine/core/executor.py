"""The executor interface: runs one scheduled batch and returns the sampled tokens.

vLLM's scheduler / executor split. The scheduler decides what runs; an executor runs it. The
torch executor (engine.model.model_runner.ModelRunner) runs the model on a CPU or GPU; a simulated
device can implement the same interface without a model, advancing a clock instead.
"""

from __future__ import annotations

from typing import Protocol

from engine.core.scheduler import SchedulerOutput


class Executor(Protocol):
    def execute_model(
        self, scheduler_output: SchedulerOutput, block_tables: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        """Run the batch; map each request whose step samples to its new token ids (one, or
        under speculative decoding the accepted draft tokens plus one).

        ``block_tables`` maps request id to the ids of its KV blocks, in token order.
        """
        ...

    @property
    def num_kv_blocks(self) -> int:
        """How many KV blocks of the engine's block size this executor holds memory for."""
        ...
