"""Real engine steps to fit the simulated CPU to (`bench sim-calibrate`).

Runs the torch executor itself, so it sits above the engine: engine.sim.calibration fits what
this measures and never imports the engine that it calibrates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine

__all__ = ["measure_steps"]


def measure_steps(
    model: str = "tiny",
    batch_sizes: Sequence[int] = (1, 8, 32, 96),
    prompt_tokens: int = 128,
    output_tokens: int = 32,
    seed: int = 0,
    num_threads: int | None = 1,
) -> dict[str, list[int]]:
    """Run batches of ``batch_sizes`` greedy requests through the torch executor on the CPU and
    return the step records (engine.core.telemetry columns) after a warm-up batch.

    One torch thread by default: on a machine shared with other processes, intra-op threads
    that wait for each other make step times swing tenfold; serve with the same num_threads.
    """
    engine = LLMEngine(
        EngineConfig.from_flat({"model": model, "device": "cpu", "seed": seed,
                                "num_threads": num_threads, "max_num_seqs": max(batch_sizes),
                                "enable_prefix_caching": False})
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    vocab = engine.model_config.vocab_size
    params = SamplingParams(max_tokens=output_tokens, temperature=0.0, ignore_eos=True)
    first = 0
    for round_, size in enumerate((2, *batch_sizes)):
        for i in range(size):
            prompt = rng.integers(2, vocab, prompt_tokens).tolist()
            engine.add_request(f"cal-{round_}-{i}", prompt, params)
        while engine.has_unfinished_requests():
            engine.step()
        if round_ == 0:  # the warm-up batch: allocations, lazy initialisation
            first = engine.steps.num_steps
    return engine.steps.since(first)
