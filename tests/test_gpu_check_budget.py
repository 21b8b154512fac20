"""The GPU check's budgets and its device, on the CPU: a line past its budget is a MISS and
what it started (a child and its own child, as `bench run` and its engine) is killed; the whole
check's deadline stops the lines left, even one stuck where its budget cannot reach it; a MIG
instance scales the KV budget and roofs and skips what cannot fit in it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.gpu_checks import budget, engine_checks, quality_checks, runner
from benchmarks.gpu_checks.rows import Row
from benchmarks.gpu_checks.target import Target, scoped_target
from tests.support.fake_nvml import H100_MEMORY, FakeGpu, FakeMig, FakeNvml
from tests.support.paths import REPO_ROOT


def test_a_line_past_its_budget_is_a_miss_and_what_it_started_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    def starts_a_tree(ref: object, name: str) -> Row:
        # A shell (the line's child) and the sleep it starts (a grandchild, as bench run's
        # engine is), each writing its pid.
        budget.run_child(["sh", "-c", f"sleep 120 & echo $! > {pids}; echo $$ >> {pids}; wait"],
                         600)  # fmt: skip
        return Row(name, "PASS")

    t0 = time.monotonic()
    row = runner.run_line(starts_a_tree, engine_checks.Reference(), "child", 1.0)
    assert row.status == "MISS" and "ran past its budget of 1 s" in row.detail, row
    assert "what it started was killed" in row.detail
    assert time.monotonic() - t0 < 30
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    for pid in started:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_the_checks_deadline_stops_the_lines_left(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(ref: object, name: str) -> Row:
        time.sleep(30)
        return Row(name, "PASS")

    def quick(ref: object, name: str) -> Row:
        return Row(name, "PASS")

    monkeypatch.setattr(runner, "CHECKS", [("slow", slow, 60), ("quick", quick, 60)])
    printed: list[Row] = []
    rows = runner.run_checks(None, printed.append, 2.0, None, engine_checks.Reference())
    assert printed == rows and [r.status for r in rows] == ["MISS", "MISS"]
    assert "ran past its budget of 2 s" in rows[0].detail
    assert rows[1].detail.startswith("not run: the check's deadline of 2 s")


def test_the_watchdog_ends_a_line_stuck_where_its_budget_cannot_reach() -> None:
    # A line blocking SIGALRM stands for one stuck in a single CUDA call: the deadline's
    # watchdog prints the lines not run and exits 1.
    script = (
        "import signal, time\n"
        "from benchmarks.gpu_checks import budget, engine_checks, runner\n"
        "from benchmarks.gpu_checks.rows import Row, render_line\n"
        "budget.KILL_GRACE_S = 0.5\n"
        "def stuck(ref, name):\n"
        "    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n"
        "    time.sleep(60)\n"
        "runner.CHECKS = [('stuck', stuck, 60), ('after', stuck, 60)]\n"
        "runner.run_checks(None, lambda r: print(render_line(r), flush=True), 2.0, None,\n"
        "                  engine_checks.Reference())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip
    assert done.returncode == 1, done
    assert done.stdout.count("not run: the check's deadline of 2 s passed") == 2, done.stdout


def _mig_target(memory_mib: int, sms: int) -> Target:
    gpu = FakeGpu(
        uuid="GPU-aaaaaaaa-1111-2222-3333-444455556666",
        migs=[FakeMig("MIG-bbbbbbbb-1111-2222-3333-444455556666", 1, sms, memory_mib)],
    )
    fake = FakeNvml([gpu])
    return scoped_target(fake.module(), "NVIDIA H100 80GB HBM3 MIG", 80 * 2**30, 4242,
                         "MIG-bbbbbbbb-1111-2222-3333-444455556666")  # fmt: skip


def test_a_mig_instance_scales_sizes_and_skips_what_cannot_fit() -> None:
    small = _mig_target(9_856, 16)  # a 1g.10gb instance
    assert small.mig and small.memory_bytes == 9_856 * 2**20
    ref = engine_checks.Reference(small)
    row = engine_checks.check_decode_batch_1(ref, "batch 1")
    assert row.status == "SKIP" and "the MIG instance has 10 GiB" in row.detail, row
    assert quality_checks.check_speculation(ref, "spec").status == "SKIP"
    big = engine_checks.Reference(_mig_target(40_192, 60))  # 3g.40gb
    assert big.unfit("the bf16 8B engine") is None
    share = 40_192 / (H100_MEMORY / 2**20)  # of NVML's total for the whole GPU
    # The KV budget and (through the scope given to the analytic section) the roofs scale.
    assert big.settings()["kv_cache_memory_bytes"] == int(8 * 2**30 * share)
    mig = big.target.scope["gpus"][0]["mig"]
    assert mig["compute_fraction"] == pytest.approx(60 / 132)
