"""results.figures.engine_facts: "is simulated" from the engine's description, and the prefix
cache's
share of the prompt tokens from run.json's engine counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from results.figures.engine_facts import (
    engine_folder_name,
    prefix_cache_line,
    prefix_cache_reuse,
    simulated_device,
)
from results.folder.run_folder import RunData


def _run(engine: dict[str, Any], prompts: list[int], steps: pd.DataFrame | None) -> RunData:
    requests = pd.DataFrame({"prompt_tokens": prompts})
    run_json: Any = {"engine": engine}
    return RunData(Path("."), run_json, requests, pd.DataFrame(), None, steps)


def test_only_a_sim_device_is_simulated_and_its_folder_says_so() -> None:
    real = {"device": "cpu", "simulated": None}
    assert simulated_device(real) is None and simulated_device(None) is None
    assert engine_folder_name("reference", real) == "reference"
    sim = {"device": "sim", "simulated": {"gpu": "H100 SXM", "tp": 2}}
    assert simulated_device(sim) == {"gpu": "H100 SXM", "tp": 2}
    assert engine_folder_name("reference", sim) == "reference-sim"
    assert engine_folder_name("reference-sim", sim) == "reference-sim"


def test_prefix_cache_hits_are_the_runs_increase_of_the_counter() -> None:
    engine = {
        "description": {"stats": {"prefix_cache_hits": 100}},
        "stats_end": {"prefix_cache_hits": 400},
    }
    steps = pd.DataFrame({"num_prefill_tokens": [300, 200]})
    reuse = prefix_cache_reuse(_run(engine, [500, 300], steps))
    assert reuse == {
        "prompt_tokens": 800,
        "prefilled_tokens": 500,
        "prefix_cache_hit_tokens": 300,
        "hit_share": 0.375,
    }
    assert prefix_cache_line(reuse) == (
        "prompt tokens 800, prefilled 500 over the whole run: 300 (38%) came from the prefix cache"
    )
    # Without steps.parquet, what was prefilled is what the cache did not hold.
    no_steps = prefix_cache_reuse(_run(engine, [500, 300], None))
    assert no_steps is not None and no_steps["prefilled_tokens"] == 500


def test_no_counters_or_no_hits_say_nothing() -> None:
    assert prefix_cache_reuse(_run({"description": None, "stats_end": None}, [10], None)) is None
    engine = {
        "description": {"stats": {"prefix_cache_hits": 5}},
        "stats_end": {"prefix_cache_hits": 5},
    }
    reuse = prefix_cache_reuse(_run(engine, [10], None))
    assert reuse is not None and reuse["prefix_cache_hit_tokens"] == 0
    assert prefix_cache_line(reuse) is None
