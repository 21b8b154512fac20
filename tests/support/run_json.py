"""run.json documents for tests that write run folders by hand: every key results.schema.RunJson
requires, with fake values a test may override."""

from __future__ import annotations

from typing import Any

from results.schema import RUN_JSON_VERSION, RunJson


def fake_run_json(run_id: str, **sections: Any) -> RunJson:
    """A RunJson for ``run_id``: an empty scenario, a fake engine and CPU, fixed times and the
    run clock at 0; ``sections`` (any RunJson key) replace or add to these."""
    document: dict[str, Any] = {
        "schema_version": RUN_JSON_VERSION,
        "run_id": run_id,
        "scenario": {},
        "engine": {"adapter": "fake"},
        "tokenizer": None,
        "hardware": {"cpu": "Fake CPU", "gpus": []},
        "versions": {},
        "git_commit": None,
        "started_utc": "2026-01-01T00:00:00+00:00",
        "ended_utc": "2026-01-01T00:01:00+00:00",
        "client": {"clock": "time.perf_counter_ns", "t0_ns": 0},
    }
    document.update(sections)
    return RunJson(**document)  # type: ignore[typeddict-item]
