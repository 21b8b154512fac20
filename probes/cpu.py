"""CPU and memory of the machine and of every process of a run (psutil), as a sampler.

Source "cpu":
  system_cpu_pct            busy share of all logical CPUs since the previous tick (0..100)
  system_busy_cpu_s_total   busy CPU seconds of all logical CPUs since boot (a counter; idle and
                            iowait are not busy)
  system_cpu_s_total        all CPU seconds (busy + idle) of all logical CPUs since boot: the
                            machine's capacity, logical CPUs x seconds (a counter)
  system_memory_used_bytes
  process_cpu_pct           CPU time of one process (user + system, its threads included) per
                            second of wall time since the previous tick, in % of one core
                            (200 = two cores)
  process_cpu_s_total       its CPU seconds (user + system) since it started (a counter)
  process_rss_bytes         its resident set size

A run names its *groups* by a root process each (role -> pid: "client" is bench itself,
"engine" the engine it launched or found listening). Every tick re-discovers each root's
descendants (``psutil.Process.children(recursive=True)``), so a child that appears during the
run (an engine's core, the load generator's workers, the probe process) is sampled from then on;
a process belongs to the group of its nearest root, so a launched engine, itself a child of
bench, is the engine's and not the client's. Process readings carry labels ``group`` (the role),
``process`` (:func:`process_title`: what the process calls itself, e.g. "engine-core",
"VLLM::EngineCore", "llama-server"; else the role for a root and "<role>-child" for a child)
and ``pid``.

Rates need two readings. A process that exists when sampling starts is primed by its first
tick; one that starts later is read from its creation (0 CPU seconds then, a counter reading of
0 at its creation time), so the run's own CPU seconds include the children it started. A process
that exits is dropped from then on and listed in run.json.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import psutil

from perfmodel.files import JSONObject
from probes.sampler import Emit, Sampler
from results.folder import sample_sources

# Names that say which interpreter or shell runs a process, not which process it is.
_GENERIC_NAMES = ("python", "pypy", "sh", "bash", "dash", "node", "uv")


def _busy_total_s(times: Any) -> tuple[float, float]:
    """(busy, total) CPU seconds from psutil.cpu_times(); idle and iowait are not busy."""
    total = sum(times)
    idle = times.idle + getattr(times, "iowait", 0.0)
    return total - idle, total


def process_title(proc: psutil.Process) -> str | None:
    """What ``proc`` calls itself: a title it set (setproctitle's full argv[0], as vLLM's
    "VLLM::EngineCore"; or its thread name, as `bench serve`'s "engine-core"), or its program's
    name; None for an interpreter or shell name, which says nothing about the process."""
    try:
        name = proc.name()
        cmdline = proc.cmdline()
    except psutil.Error:
        return None
    # The kernel keeps 15 characters of a name; a title set with setproctitle is whole in argv.
    if len(cmdline) == 1 and cmdline[0].startswith(name) and "/" not in cmdline[0]:
        return cmdline[0]
    if not name or name.lower().startswith(_GENERIC_NAMES):
        return None
    return name


class _Tracked:
    """One sampled process: its labels and its last (t_ns, cpu seconds) reading."""

    def __init__(self, proc: psutil.Process, labels: dict[str, str]) -> None:
        self.proc = proc
        self.labels = labels
        self.last: tuple[int, float] | None = None


class CpuSampler(Sampler):
    """The system's CPU and memory, and those of every process of the ``roots``' groups
    (role -> pid of the group's root), every ``interval_s``; see the module docstring."""

    source = sample_sources.CPU

    def __init__(self, roots: Mapping[str, int], interval_s: float = 0.5) -> None:
        super().__init__(interval_s)
        self._pids = dict(roots)
        self._roots: dict[str, psutil.Process] = {}
        self._tracked: dict[int, _Tracked] = {}
        self._last_system: tuple[float, float] | None = None
        self._opened_wall_s = 0.0
        self.exited: dict[str, str] = {}
        self.seen: dict[str, dict[str, str]] = {}  # pid -> its labels, every process sampled

    def open(self) -> str | None:
        self._opened_wall_s = time.time()
        for role, pid in self._pids.items():
            try:
                self._roots[role] = psutil.Process(pid)
            except psutil.Error as exc:
                self.exited[role] = f"pid {pid}: {exc}"
        return None

    def _members(self) -> dict[int, tuple[str, psutil.Process, bool]]:
        """pid -> (role, process, is_root) of every live process of every group."""
        trees: dict[str, list[psutil.Process]] = {}
        for role, root in list(self._roots.items()):
            try:
                trees[role] = root.children(recursive=True)
            except psutil.Error as exc:
                self.exited[role] = f"pid {root.pid}: {type(exc).__name__}"
                del self._roots[role]
        root_pids = {root.pid: role for role, root in self._roots.items()}
        members: dict[int, tuple[str, psutil.Process, bool]] = {}
        for role, root in self._roots.items():
            # Another root inside this tree takes its own subtree: it is the nearer root.
            inner = {c.pid for c in trees.get(role, []) if c.pid in root_pids}
            claimed = set()
            for other in inner:
                claimed |= {c.pid for c in trees.get(root_pids[other], [])} | {other}
            members[root.pid] = (role, root, True)
            for child in trees.get(role, []):
                if child.pid not in claimed:
                    members[child.pid] = (role, child, False)
        return members

    def _track(self, pid: int, role: str, proc: psutil.Process, is_root: bool) -> _Tracked:
        title = process_title(proc) or (role if is_root else f"{role}-child")
        labels = {"group": role, "process": title, "pid": str(pid)}
        tracked = _Tracked(proc, labels)
        self.seen[str(pid)] = {"group": role, "process": title}
        return tracked

    def sample(self, t_ns: int, emit: Emit) -> None:
        busy, total = _busy_total_s(psutil.cpu_times())
        if self._last_system is not None:
            d_total = total - self._last_system[1]
            if d_total > 0:
                # Clamped: on a machine busy for the whole tick, busy and total are the same
                # sum of the same counters rounded apart (100.00000000000001), and the kernel's
                # iowait may step back (proc(5)).
                share = (busy - self._last_system[0]) / d_total
                emit("system_cpu_pct", 100.0 * min(1.0, max(0.0, share)))
        first_tick = self._last_system is None
        self._last_system = (busy, total)
        emit("system_busy_cpu_s_total", busy)
        emit("system_cpu_s_total", total)
        emit("system_memory_used_bytes", float(psutil.virtual_memory().used))
        now_wall_s = time.time()
        members = self._members()
        for pid, (role, proc, is_root) in members.items():
            tracked = self._tracked.get(pid)
            if tracked is None:
                tracked = self._tracked[pid] = self._track(pid, role, proc, is_root)
                try:
                    created_s = proc.create_time()
                except psutil.Error:
                    created_s = 0.0
                if not first_tick and created_s > self._opened_wall_s:
                    # Born during the run: it had used no CPU at its creation.
                    born_ns = t_ns - max(0, round((now_wall_s - created_s) * 1e9))
                    tracked.last = (born_ns, 0.0)
                    emit("process_cpu_s_total", 0.0, tracked.labels, t_ns=born_ns)
            self._read(tracked, t_ns, emit)
        for pid in set(self._tracked) - set(members):
            gone = self._tracked.pop(pid)
            self.exited.setdefault(f"{gone.labels['process']} (pid {pid})", "exited")

    def _read(self, tracked: _Tracked, t_ns: int, emit: Emit) -> None:
        try:
            with tracked.proc.oneshot():
                times = tracked.proc.cpu_times()
                rss = tracked.proc.memory_info().rss
        except psutil.Error:
            return  # it exited between discovery and this reading: dropped at the next tick
        cpu_s = times.user + times.system
        last = tracked.last
        if last is not None and t_ns > last[0]:
            emit("process_cpu_pct", 100.0 * (cpu_s - last[1]) / ((t_ns - last[0]) / 1e9),
                 tracked.labels)  # fmt: skip
        tracked.last = (t_ns, cpu_s)
        emit("process_cpu_s_total", cpu_s, tracked.labels)
        emit("process_rss_bytes", float(rss), tracked.labels)

    def describe(self) -> JSONObject:
        return {"processes": dict(self._pids), "sampled": dict(self.seen),
                "exited": dict(self.exited)}  # fmt: skip
