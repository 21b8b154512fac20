"""CPU and memory of the machine and of the processes of a run (psutil), as a sampler.

Source "cpu":
  system_cpu_pct        busy share of all logical CPUs since the previous tick (0..100)
  system_memory_used_bytes
  process_cpu_pct       CPU time of one process (user + system, its threads included) per second
                        of wall time since the previous tick, in % of one core (200 = two cores)
  process_rss_bytes     its resident set size
Process readings carry labels ``process`` (a role: "client", "engine", "probes") and ``pid``.
Rates need two readings, so the first tick of each series only primes it. A process that exits
is dropped from then on and listed in run.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psutil

from probes.sampler import Emit, Sampler


def _busy_total_s(times: Any) -> tuple[float, float]:
    """(busy, total) CPU seconds from psutil.cpu_times(); idle and iowait are not busy."""
    total = sum(times)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


class CpuSampler(Sampler):
    """The system's and ``processes``' CPU and memory (role -> pid) every ``interval_s``."""

    source = "cpu"

    def __init__(self, processes: Mapping[str, int], interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self._pids = dict(processes)
        self._procs: dict[str, psutil.Process] = {}
        self._last_proc: dict[str, tuple[int, float]] = {}  # role -> (t_ns, cpu seconds)
        self._last_system: tuple[float, float] | None = None
        self.exited: dict[str, str] = {}

    def open(self) -> str | None:
        for role, pid in self._pids.items():
            try:
                self._procs[role] = psutil.Process(pid)
            except psutil.Error as exc:
                self.exited[role] = f"pid {pid}: {exc}"
        return None

    def sample(self, t_ns: int, emit: Emit) -> None:
        busy, total = _busy_total_s(psutil.cpu_times())
        if self._last_system is not None:
            d_total = total - self._last_system[1]
            if d_total > 0:
                emit("system_cpu_pct", 100.0 * (busy - self._last_system[0]) / d_total)
        self._last_system = (busy, total)
        emit("system_memory_used_bytes", float(psutil.virtual_memory().used))
        for role, proc in list(self._procs.items()):
            labels = {"process": role, "pid": str(proc.pid)}
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
            except psutil.Error as exc:
                self.exited[role] = f"pid {proc.pid}: {type(exc).__name__}"
                del self._procs[role]
                continue
            cpu_s = times.user + times.system
            last = self._last_proc.get(role)
            if last is not None and t_ns > last[0]:
                pct = 100.0 * (cpu_s - last[1]) / ((t_ns - last[0]) / 1e9)
                emit("process_cpu_pct", pct, labels)
            self._last_proc[role] = (t_ns, cpu_s)
            emit("process_rss_bytes", float(rss), labels)

    def describe(self) -> dict[str, Any]:
        return {"processes": dict(self._pids), "exited": dict(self.exited)}
