"""The client table and the client-bound verdict, computed from the table alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from results.figures.client_check import (
    client_health,
    client_warning,
    read_client_table,
    read_delay,
    write_client_table,
)
from results.folder.client_samples import ClientSamples


def samples(loop_lag_s: float, schedule_lag_s: float, cpu_per_s: float, workers: int = 1):
    out = ClientSamples()
    for w in range(workers):
        for i in range(200):
            out.add(i * 0.01, w, "loop_lag_s", loop_lag_s if i % 50 == 0 else 0.0005)
        for i in range(20):
            out.add(i * 0.1, w, "schedule_lag_s", schedule_lag_s if i % 10 == 0 else 0.001)
        for i in range(9):
            out.add(i * 0.25, w, "cpu_s", 1.0 + i * 0.25 * cpu_per_s)
    return out


def test_a_healthy_client_is_not_client_bound(tmp_path: Path) -> None:
    write_client_table(tmp_path, samples(0.002, 0.002, 0.2))
    frame = read_client_table(tmp_path)
    assert list(frame.columns) == ["t_s", "worker", "name", "value"] and len(frame) == 229
    health = client_health(frame, output_tokens=4000)
    assert health["client_bound"] is False and health["reasons"] == []
    assert health["loop_lag_ms"]["p50"] == pytest.approx(0.5)
    assert health["cpu"]["cpu_s"] == pytest.approx(0.4)
    assert health["cpu"]["utilization_max"] == pytest.approx(0.2)
    assert health["cpu"]["cpu_s_per_1k_output_tokens"] == pytest.approx(0.1)
    assert client_warning({"client": health}) is None
    assert client_health(frame, 4000) == health  # deterministic


def test_each_rule_marks_the_run_client_bound() -> None:
    late = client_health(read_frame(samples(0.002, 0.5, 0.2)))
    assert late["client_bound"] and "schedule lag p99" in late["reasons"][0]
    busy_loop = client_health(read_frame(samples(0.2, 0.001, 0.2)))
    assert busy_loop["client_bound"] and "loop lag p99" in busy_loop["reasons"][0]
    hot = client_health(read_frame(samples(0.001, 0.001, 0.97, workers=2)))
    assert hot["client_bound"] and "97% of a core" in hot["reasons"][0]
    assert hot["workers"] == 2 and set(hot["cpu"]["per_worker"]) == {"0", "1"}
    assert "--workers" in client_warning({"client": hot})
    relaxed = client_health(
        read_frame(samples(0.2, 0.001, 0.2)), thresholds={"loop_lag_p99_ms": 500}
    )
    assert relaxed["client_bound"] is False and relaxed["thresholds"]["loop_lag_p99_ms"] == 500


def test_the_window_limits_the_lag_figures() -> None:
    frame = read_frame(samples(0.3, 0.001, 0.1))  # the loop stalls at t = 0, 0.5, 1.0, 1.5
    inside = client_health(frame, window={"start_s": 0.6, "end_s": 0.9})
    assert inside["loop_lag_ms"]["max"] == pytest.approx(0.5)


def test_without_a_table_the_verdict_is_unknown(tmp_path: Path) -> None:
    assert read_client_table(tmp_path) is None
    health = client_health(None)
    assert health["recorded"] is False and health["client_bound"] is None


def read_frame(s: ClientSamples):
    import pandas as pd

    return pd.DataFrame(s.columns()).astype({"t_s": np.float64, "value": np.float64})


def stamped(delays_ms: list[float], stamps: str = "kernel") -> tuple[pd.DataFrame, pd.DataFrame]:
    """One request whose chunks arrived 10 ms apart and were read ``delays_ms`` later."""
    t = np.arange(len(delays_ms)) * 0.01 + 0.1
    tokens = pd.DataFrame(
        {"request_id": "r1", "index": range(len(t)), "t_s": t,
         "read_s": t + np.asarray(delays_ms) / 1e3, "n_tokens": 1}
    )  # fmt: skip
    return pd.DataFrame({"request_id": ["r1"], "stamps": [stamps]}), tokens


def test_the_read_delay_is_read_s_minus_the_kernel_stamp() -> None:
    delay = read_delay(*stamped([0.1] * 90 + [3.0] * 10))
    assert delay["available"] and delay["kernel_share"] == 1.0
    assert delay["ms"]["p50"] == pytest.approx(0.1) and delay["ms"]["max"] == pytest.approx(3.0)
    assert delay["late_share"] == pytest.approx(0.1)
    user = read_delay(*stamped([0.0] * 5, stamps="user"))
    assert user == {"available": False, "reason": "no chunk had a kernel receive stamp"}
    inside = read_delay(*stamped([5.0] + [0.1] * 9), window={"start_s": 0.105, "end_s": 1.0})
    assert inside["ms"]["max"] == pytest.approx(0.1)


def test_with_kernel_stamps_the_read_delay_judges_the_timestamps() -> None:
    busy_loop = read_frame(samples(0.2, 0.001, 0.2))  # loop lag p99 200 ms
    prompt = client_health(busy_loop, delay=read_delay(*stamped([0.5] * 100)))
    assert prompt["client_bound"] is False and prompt["read_delay"]["ms"]["p99"] == pytest.approx(
        0.5
    )
    late = client_health(busy_loop, delay=read_delay(*stamped([0.5] * 90 + [40.0] * 10)))
    assert late["client_bound"] and "read delay p99 40.0 ms > 20 ms" in late["reasons"][0]
    # User-space stamps: the loop lag still bounds how late they were.
    user = client_health(busy_loop, delay=read_delay(*stamped([0.0] * 5, stamps="user")))
    assert user["client_bound"] and "loop lag p99" in user["reasons"][0]
