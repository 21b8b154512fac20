"""Synthetic run folders for the gate's tests: a closed loop of fake requests, written with the
real RunFolder writers and summarized by the real compute_summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from results.figures.summary import compute_summary
from results.folder.records import ChunkRecord, RequestRecord
from results.folder.run_folder import RunFolder
from tests.support.run_json import fake_run_json

HARDWARE = {"cpu": "Fake CPU 9000", "cpu_count_logical": 2, "gpus": [], "memory_bytes": 1 << 34}


def fake_records(
    seed: int, requests: int, users: int, slowdown: float, errors: int = 0
) -> list[RequestRecord]:
    """A closed loop: each user sends its next request when the last one is done. TTFT about
    20 ms and ITL about 8 ms (lognormal), times ``slowdown``; 16-32 output tokens."""
    rng = np.random.default_rng(seed)
    cursor_s = np.zeros(users)
    records = []
    for i in range(requests):
        user = int(np.argmin(cursor_s))
        sent = float(cursor_s[user])
        rid = f"req-{i:05d}"
        if i < errors:
            records.append(
                RequestRecord(
                    rid,
                    user,
                    sent,
                    sent,
                    None,
                    sent + 0.001,
                    40,
                    0,
                    "usage",
                    "error",
                    "HTTP 500",
                    500,
                )
            )
            cursor_s[user] = sent + 0.001
            continue
        out = int(rng.integers(16, 33))
        first = sent + 0.02 * slowdown * float(rng.lognormal(0.0, 0.3))
        gaps = 0.008 * slowdown * rng.lognormal(0.0, 0.2, out - 1)
        times = first + np.concatenate([[0.0], np.cumsum(gaps)])
        chunks = [ChunkRecord(rid, k, float(t), 1) for k, t in enumerate(times)]
        records.append(
            RequestRecord(
                rid,
                user,
                sent,
                sent,
                first,
                float(times[-1]),
                int(rng.integers(32, 65)),
                out,
                "usage",
                "ok",
                None,
                200,
                chunks,
            )
        )
        cursor_s[user] = times[-1]
    return records


def write_fake_run(
    root: Path,
    seed: int = 0,
    requests: int = 120,
    users: int = 4,
    slowdown: float = 1.0,
    hardware: dict[str, Any] | None = None,
    slo: dict[str, float | None] | None = None,
    errors: int = 0,
    scenario_name: str = "synthetic",
    engine: dict[str, Any] | None = None,
    warmup_s: float = 0.0,
    fingerprint: dict[str, Any] | None = None,
) -> Path:
    """Write a complete run folder under ``root``; returns its path. With ``fingerprint``
    (run.json's, bench.run.endpoint.run_fingerprint's shape) its summary is summarize_run's, so it
    carries the validity a real run's does."""
    records = fake_records(seed, requests, users, slowdown, errors)
    folder = RunFolder.create(root, scenario_name, "fake")
    requests_df = folder.write_requests(records)
    tokens_df = folder.write_tokens(records)
    slo = slo or {"ttft_ms": None, "tpot_ms": None, "e2el_ms": None}
    folder.write_summary(compute_summary(requests_df, tokens_df, warmup_s, 0.0, slo))
    folder.write_run_json(
        fake_run_json(
            folder.run_id,
            scenario={
                "name": scenario_name,
                "users": users,
                "num_requests": requests,
                "warmup_s": warmup_s,
                "cooldown_s": 0.0,
                "slo": slo,
                "engine": {"preset": "tiny"},
            },
            engine=engine or {"adapter": "fake", "model": "tiny", "settings": {"x": 1}},
            hardware=hardware or HARDWARE,
            versions={"python": "3.11", "torch": "2.13.0"},
            git_commit="abc123",
            **({"fingerprint": fingerprint} if fingerprint is not None else {}),
        )
    )
    if fingerprint is not None:
        from results.folder.run_folder import load_run
        from results.run_summary import summarize_run

        folder.write_summary(summarize_run(load_run(folder.path)))
    return folder.path


def write_loaded_run(root: Path, other_share: float, seed: int = 0, **kwargs: Any) -> Path:
    """A fake run (write_fake_run) whose CPU probe saw other processes use ``other_share`` of the
    machine (tests.support.cpu_load); its summary.json is recomputed by summarize_run, so it
    carries machine_load as a real run's does."""
    # Imported here: only the busy-machine tests need the CPU readings and the full summary.
    from results.folder.run_folder import load_run
    from results.run_summary import summarize_run
    from tests.support.cpu_load import cpu_readings

    path = write_fake_run(root, seed=seed, **kwargs)
    folder = RunFolder(path)
    folder.write_samples(cpu_readings(other_share, ticks=8))
    folder.write_summary(summarize_run(load_run(path)))
    return path
