"""Facts about a run's engine read from its own description (``/debug/engine``, run.json's
engine.description) and cumulative counters (engine.stats_end), derived once for summary.json:

- :func:`simulated_device`: whether the engine ran on a simulated device, and which. The one
  test of "is simulated"; the run folder's name, the terminal and the dashboard all use it.
- :func:`prefix_cache_reuse`: how many of the prompt tokens sent were not prefilled because the
  engine's prefix cache held them, so that prompt tokens and prefilled tokens that differ are
  explained where both are shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.folder.run_folder import RunData

SIM_DEVICE = "sim"
"""The device the reference engine's description names when it runs simulated."""


def simulated_device(description: Any) -> JSONObject | None:
    """``{"gpu": str, "tp": int}`` when ``description`` (an engine's ``/debug/engine``
    document) says the engine ran on a simulated device, else None (a real device, an engine
    that describes nothing, or a description that is not a mapping)."""
    if not isinstance(description, Mapping) or description.get("device") != SIM_DEVICE:
        return None
    sim = description.get("simulated")
    sim = sim if isinstance(sim, Mapping) else {}
    tp = sim.get("tp")
    return {"gpu": str(sim.get("gpu") or "unknown"), "tp": int(tp) if isinstance(tp, int) else 1}


def engine_folder_name(engine_name: str, description: Any) -> str:
    """The engine part of a run folder's name: ``engine_name``, ending ``-sim`` when
    ``description`` says the engine is simulated (so `bench run` against `bench serve --device
    sim` is named as `bench simulate` names its folders)."""
    if simulated_device(description) is None or engine_name.endswith(f"-{SIM_DEVICE}"):
        return engine_name
    return f"{engine_name}-{SIM_DEVICE}"


def simulated_line(sim: JSONView) -> str:
    """The one line every report shows for a simulated run (``sim`` from simulated_device)."""
    return f"simulated device: {sim['gpu']} x {sim['tp']}, figures are predictions"


def _counter_increase(start: Any, end: Any, key: str) -> int | None:
    if not isinstance(start, Mapping) or not isinstance(end, Mapping):
        return None
    a, b = start.get(key), end.get(key)
    if not isinstance(a, int | float) or not isinstance(b, int | float):
        return None
    return int(b - a)


def prefix_cache_reuse(run: RunData) -> JSONObject | None:
    """Prompt tokens sent against tokens the engine prefilled, over the whole run (tokens).

    ``prompt_tokens``: the sum of every request's prompt_tokens (requests.parquet);
    ``prefix_cache_hit_tokens``: engine.stats_end["prefix_cache_hits"] minus
    engine.description["stats"]["prefix_cache_hits"] (run.json); ``prefilled_tokens``: the sum of
    steps.parquet's num_prefill_tokens when steps were recorded, else prompt minus hits;
    ``hit_share``: hits / prompt tokens. None when the engine reports no prefix cache counters
    (an engine other than the reference one, or an older run.json) or no prompt token was sent.
    """
    engine = run.run_json.get("engine")
    if not isinstance(engine, Mapping):
        return None
    desc = engine.get("description")
    start = desc.get("stats") if isinstance(desc, Mapping) else None
    hits = _counter_increase(start, engine.get("stats_end"), "prefix_cache_hits")
    if hits is None:
        return None
    prompt = int(pd.to_numeric(run.requests["prompt_tokens"], errors="coerce").fillna(0).sum())
    if prompt <= 0:
        return None
    steps = run.steps
    if steps is not None and "num_prefill_tokens" in steps.columns:
        prefilled = int(steps["num_prefill_tokens"].sum())
    else:
        prefilled = max(prompt - hits, 0)
    return {
        "prompt_tokens": prompt,
        "prefilled_tokens": prefilled,
        "prefix_cache_hit_tokens": hits,
        "hit_share": hits / prompt,
    }


def prefix_cache_line(reuse: JSONView | None) -> str | None:
    """The note that explains prefilled tokens fewer than prompt tokens, or None when there is
    nothing to explain (no counters, or no prompt token came from the cache)."""
    if not reuse or not reuse.get("prefix_cache_hit_tokens"):
        return None
    return (
        f"prompt tokens {reuse['prompt_tokens']:,}, prefilled {reuse['prefilled_tokens']:,} "
        "over the whole run: "
        f"{reuse['prefix_cache_hit_tokens']:,} ({reuse['hit_share']:.0%}) came from the "
        "prefix cache"
    )
