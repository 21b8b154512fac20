"""Sampler threads: fixed rate, missed ticks, errors, cost; the CPU sampler; the probe process."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from probes.cpu import CpuSampler
from probes.probe_process import ProbeProcess
from probes.probe_spec import ProbeSpec
from probes.sampler import Emit, Sampler, SamplerThread
from probes.session import ProbeSession


class Counting(Sampler):
    """Emits its tick number; sleeps ``slow_s`` on tick ``slow_at``; raises on ``fail_at``."""

    source = "test"

    def __init__(self, interval_s: float, slow_at: int = -1, slow_s: float = 0.0,
                 fail_at: int = -1, unavailable: str | None = None) -> None:  # fmt: skip
        super().__init__(interval_s)
        self.n, self.slow_at, self.slow_s, self.fail_at = 0, slow_at, slow_s, fail_at
        self.unavailable = unavailable
        self.closed = False

    def open(self) -> str | None:
        return self.unavailable

    def sample(self, t_ns: int, emit: Emit) -> None:
        n, self.n = self.n, self.n + 1
        if n == self.fail_at:
            raise OSError("sensor went away")
        if n == self.slow_at:
            time.sleep(self.slow_s)
        emit("tick", n, {"k": "v"})

    def close(self) -> None:
        self.closed = True


def test_ticks_at_a_fixed_rate_with_a_closing_tick() -> None:
    thread = SamplerThread(Counting(0.05))
    t0 = time.perf_counter_ns()
    thread.start()
    time.sleep(0.32)
    thread.stop()
    report = thread.report()
    cols = thread.buffer.columns()
    # Deadlines at 0, 50, ..., 300 ms (7) plus the closing tick; a loaded machine may lose some.
    assert 5 <= report["ticks"] <= 9 and report["missed_ticks"] <= 2
    assert cols["value"] == list(range(report["ticks"]))
    assert cols["labels"][0] == '{"k":"v"}' and cols["source"][0] == "test"
    assert cols["t_ns"] == sorted(cols["t_ns"]) and cols["t_ns"][0] >= t0
    assert report["status"] == "ok" and thread.sampler.closed
    assert report["tick_wall_ms"]["max"] < 50 and report["cpu_fraction_of_one_core"] < 0.5


def test_a_slow_tick_is_counted_as_missed_ticks_not_run_late() -> None:
    thread = SamplerThread(Counting(0.02, slow_at=1, slow_s=0.1))
    thread.start()
    time.sleep(0.3)
    thread.stop()
    report = thread.report()
    # The 100 ms tick spans five 20 ms deadlines: at least three are skipped.
    assert report["missed_ticks"] >= 3
    assert report["tick_wall_ms"]["max"] >= 100


def test_errors_are_counted_and_the_first_one_kept() -> None:
    thread = SamplerThread(Counting(0.01, fail_at=2))
    thread.start()
    time.sleep(0.1)
    thread.stop()
    report = thread.report()
    assert report["errors"] == 1 and report["first_error"] == "OSError: sensor went away"
    assert report["ticks"] > 3  # it went on after the failure


def test_an_unavailable_sampler_never_starts_a_thread() -> None:
    session = ProbeSession([Counting(0.01, unavailable="no sensor here"), Counting(0.01)])
    assert session.start() == ["probe test: no sensor here"]
    time.sleep(0.05)
    result = session.stop()
    first, second = result.reports
    assert first["status"] == "unavailable" and first["ticks"] == 0
    assert second["status"] == "ok" and second["ticks"] >= 2
    assert result.num_samples == second["samples"]
    assert result.messages() == []  # unavailable ones were said at start


# A child that spins until its stdin closes (or 60 s pass): the busy work a CPU sampler test
# observes runs in its own process. A spin in this process would hold the GIL that the sampler
# thread's /proc reads give up, so its ticks would wait out the spin and read nothing busy.
_SPIN = (
    "import sys, threading, time\n"
    "done = threading.Event()\n"
    "threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()\n"
    "print('spinning', flush=True)\n"
    "end = time.monotonic() + 60\n"
    "while not done.is_set() and time.monotonic() < end:\n"
    "    sum(range(1000))\n"
)


def test_cpu_sampler_reads_a_busy_and_an_idle_process_and_notes_a_gone_one() -> None:
    gone = psutil.Popen(["true"])
    gone.wait()
    busy = subprocess.Popen(
        [sys.executable, "-c", _SPIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time; print('sleeping', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Both past their interpreter's start-up, which is CPU time of its own.
        assert busy.stdout is not None and busy.stdout.readline().strip() == "spinning"
        assert idle.stdout is not None and idle.stdout.readline().strip() == "sleeping"
        roots = {"busy": busy.pid, "idle": idle.pid, "client": os.getpid(), "gone": gone.pid}
        thread = SamplerThread(CpuSampler(roots, interval_s=0.1))
        thread.start()
        time.sleep(0.8)  # this process sleeps: the sampler thread has the GIL to itself
        thread.stop()
    finally:
        assert busy.stdin is not None
        busy.stdin.close()
        idle.kill()
        busy.wait(10), idle.wait(10)
    cols = thread.buffer.columns()
    rows = list(zip(cols["name"], cols["value"], cols["labels"], strict=True))

    def pct(group: str) -> list[float]:
        return [v for n, v, lab in rows if n == "process_cpu_pct" and f'"{group}"' in lab]

    # A spinning process has all of a core, or its share of a loaded machine's two; a sleeping
    # one has none (the kernel counts CPU time in 10 ms ticks: one tick per 100 ms is 10%).
    assert pct("busy") and max(pct("busy")) > 20, pct("busy")
    assert pct("idle") and max(pct("idle")) <= 10, pct("idle")
    system = [v for n, v, _ in rows if n == "system_cpu_pct"]
    assert system and all(0 <= v <= 100 for v in system), system
    assert any(n == "process_rss_bytes" and v > 10e6 for n, v, _ in rows)
    assert "gone" in thread.report()["exited"]


def test_the_probe_process_runs_the_samplers_apart() -> None:
    spec = ProbeSpec(nvml=True, processes={"client": os.getpid()}, cpu_interval_s=0.05)
    probes = ProbeProcess(spec)
    reasons = probes.start()
    assert probes.pid not in (None, os.getpid())
    time.sleep(0.3)
    result = probes.stop()
    reports = {r["source"]: r for r in result.reports}
    assert reports["cpu"]["status"] == "ok" and reports["cpu"]["ticks"] >= 4
    assert result.num_samples == reports["cpu"]["samples"] > 0
    # Without a GPU driver NVML says why, at start, once; with one it samples.
    assert (reports["nvml"]["status"] == "unavailable") == bool(reasons)
    assert result.process is not None and result.process["cpu_s"] > 0
    assert not psutil.pid_exists(probes.pid) or psutil.Process(probes.pid).status() == "zombie"
