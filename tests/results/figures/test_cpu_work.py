"""CPU seconds per output token from the CPU probe's process counters."""

from __future__ import annotations

import pandas as pd
import pytest

from results.figures.cpu_work import cpu_work, cpu_work_windows
from tests.support.cpu_load import cpu_readings


def tokens(times: list[float], n: int = 2) -> pd.DataFrame:
    return pd.DataFrame({"t_s": times, "n_tokens": [n] * len(times)})


def test_each_group_spends_its_counters_increase_per_token_of_the_span() -> None:
    # Engine 0.6 + 0.4 and client 0.2 CPU seconds per second, readings at 0..5 s; tokens at
    # 0 (before the span: not counted), then 50 chunks of 2 tokens inside it.
    work = cpu_work(cpu_readings(0.1, ticks=6), tokens([0.0] + [0.1 * k for k in range(1, 51)]))
    assert work["available"] and work["interval_s"] == 5.0 and work["output_tokens"] == 100
    assert work["engine_processes"] == 2 and work["engine_cpu_s"] == pytest.approx(5.0)
    assert work["engine_cpu_s_per_output_token"] == pytest.approx(0.05)
    assert work["client_cpu_s_per_output_token"] == pytest.approx(0.01)


def test_other_processes_load_moves_no_cpu_work() -> None:
    quiet = cpu_work(cpu_readings(0.0), tokens([1.0, 2.0]))
    busy = cpu_work(cpu_readings(0.3), tokens([1.0, 2.0]))
    assert quiet["engine_cpu_s_per_output_token"] == busy["engine_cpu_s_per_output_token"]


def test_without_process_counters_it_says_so() -> None:
    readings = cpu_readings(0.0)
    work = cpu_work(readings[readings["name"] != "process_cpu_s_total"], tokens([1.0]))
    assert work == {"available": False, "reason": "no process CPU counters in the window"}


def test_the_windows_add_up_to_the_figure() -> None:
    # Readings every 0.5 s over 5 s: 5 windows of 1 s, two of the probe's increments each.
    readings = cpu_readings(0.1, ticks=11, tick_s=0.5)
    chunks = tokens([0.05 * k for k in range(1, 101)])
    work = cpu_work(readings, chunks)
    windows = cpu_work_windows(readings, chunks)
    engine_s, engine_tokens = windows["engine"]
    client_s, client_tokens = windows["client"]
    assert engine_s.size == 5 and list(engine_tokens) == list(client_tokens)
    assert engine_s == pytest.approx([1.0] * 5) and client_s == pytest.approx([0.2] * 5)
    assert engine_tokens.sum() == work["output_tokens"] == 200
    assert engine_s.sum() / engine_tokens.sum() == pytest.approx(
        work["engine_cpu_s_per_output_token"]
    )


def test_without_readings_there_are_no_windows() -> None:
    readings = cpu_readings(0.0)
    empty = readings[readings["name"] != "process_cpu_s_total"]
    cpu_s, counts = cpu_work_windows(empty, tokens([1.0]))["engine"]
    assert cpu_s.size == counts.size == 0
