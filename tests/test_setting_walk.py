"""benchmarks/setting_walk.py: the walk of an engine setting from `bench run` to the scheduler,
traced in every process of a real run."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.setting_walk import DESTINATION, REPO, rooms, walk


def test_rooms_count_calls_between_rooms_and_climbs_and_stop_at_the_scheduler() -> None:
    entries = [
        (1, "-", "bench/cli/app.py:run:engine_set"),
        (1, "bench/cli/app.py", "engine/config/engine_config.py:from_flat:values"),
        # A call up from the engine's room into bench's: a climb.
        (1, "engine/config/engine_config.py", "bench/run/orchestrate.py:back:opts"),
        (2, "-", "engine/llm_engine.py:__init__:config"),
        (2, "engine/llm_engine.py", f"{DESTINATION}:__init__:max_num_seqs"),
        # Read back after the engine took it: not the way there.
        (1, "bench/run/orchestrate.py", "results/figures/engine_facts.py:facts:run"),
    ]
    walked = rooms(entries)
    assert walked["rooms"] == [
        "bench/cli/app.py", "engine/config/engine_config.py", "bench/run/orchestrate.py",
        "engine/llm_engine.py", DESTINATION,
    ]  # fmt: skip
    assert walked["calls_between_rooms"] == 3
    assert walked["climbs"] == 1
    assert walked["processes"] == 2


def test_a_real_run_carries_the_setting_to_the_scheduler_through_few_rooms() -> None:
    with tempfile.TemporaryDirectory() as runs_dir:
        walked = rooms(walk(REPO, Path(runs_dir)))
    order = walked["rooms"]
    assert isinstance(order, list)
    assert order[0] == "bench/cli/app.py"
    assert order[-1] == DESTINATION
    # 15 rooms at the commit (2301656): --set's refusal for an external engine had a
    # room of its own. Crossing into the engine's process is no climb.
    assert walked["rooms_entered"] <= 14
    assert walked["climbs"] == 0
