"""The client measures itself: schedule lag, event-loop lag and CPU time.

A load generator that cannot keep up reports the server as slower than it is. So while the load
runs, :class:`ClientMonitor` records three series on the run clock, in one long table (the
client table, ``client.parquet``: ``t_s, worker, name, value``):

    * ``schedule_lag_s``: for each request, when the driver actually got to send it minus when
      it was due (open loop: the planned time; closed loop: when its user was ready). Recorded
      at the request's due time. Waiting for a concurrency cap is not lag: drivers stamp the
      moment they start the request, before any cap.
    * ``loop_lag_s``: a ticker task asks to wake every ``tick_s``; how late it wakes is how long
      the event loop was busy with something else, which delays every timestamp taken on it.
    * ``cpu_s``: the process's CPU time so far (user + system, every thread), every
      ``cpu_every_s``; its slope is the cores the client used.

The verdict (client-bound or not) is computed from this table later, by whoever summarizes the
run, so that it can be recomputed from the run folder alone. Costs: one ``perf_counter_ns`` and a
list append per tick; about 100 wake-ups a second at the default 10 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from loadgen.clock import RunClock
from results.folder.client_samples import ClientSamples

__all__ = ["ClientMonitor"]

_NS = 1_000_000_000


class ClientMonitor:
    """Records the client's self-check series while a load runs (module docstring).

    Use ``async with ClientMonitor(clock) as monitor:`` around the driver inside its event loop
    and pass ``monitor.note_schedule_lag`` to the driver; :attr:`samples` holds the rows.

    Args:
        clock: the run clock.
        worker: the worker process's index (0 when the load runs in one process).
        tick_s: the ticker's period, seconds (> 0).
        cpu_every_s: how often to read the process CPU time, seconds (> 0).
    """

    def __init__(
        self, clock: RunClock, worker: int = 0, tick_s: float = 0.01, cpu_every_s: float = 0.25
    ) -> None:
        if not tick_s > 0 or not cpu_every_s > 0:
            raise ValueError(
                f"ClientMonitor: tick_s and cpu_every_s must be seconds > 0, got {tick_s}, "
                f"{cpu_every_s}"
            )
        self.clock = clock
        self.worker = worker
        self.tick_s = tick_s
        self.cpu_every_s = cpu_every_s
        self.samples = ClientSamples()
        self._task: asyncio.Task[None] | None = None

    def note_schedule_lag(self, due_s: float, started_s: float) -> None:
        """Record that a request due at ``due_s`` was started at ``started_s`` (run seconds)."""
        self.samples.add(due_s, self.worker, "schedule_lag_s", started_s - due_s)

    def _cpu(self) -> None:
        self.samples.add(self.clock.now_s(), self.worker, "cpu_s", time.process_time())

    async def _tick(self) -> None:
        tick_ns = int(self.tick_s * _NS)
        cpu_every_ns = int(self.cpu_every_s * _NS)
        t0 = self.clock.t0_ns
        due_ns = time.perf_counter_ns() + tick_ns
        next_cpu_ns = due_ns
        add = self.samples.add
        while True:
            await asyncio.sleep(max(due_ns - time.perf_counter_ns(), 0) / _NS)
            now_ns = time.perf_counter_ns()
            add((due_ns - t0) / _NS, self.worker, "loop_lag_s", (now_ns - due_ns) / _NS)
            if now_ns >= next_cpu_ns:
                self._cpu()
                next_cpu_ns = now_ns + cpu_every_ns
            # The next wake-up is one period after this one; a late wake does not shift the grid
            # by more than it was late, and a long stall is one large lag, not many small ones.
            due_ns = max(due_ns + tick_ns, now_ns)

    def start(self) -> None:
        """Start the ticker (inside a running event loop); reads the CPU time once now."""
        if self._task is None:
            self._cpu()
            self._task = asyncio.get_running_loop().create_task(self._tick(), name="client-monitor")

    async def stop(self) -> ClientSamples:
        """Stop the ticker, read the CPU time a last time, and return the samples."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            self._cpu()
        return self.samples

    async def __aenter__(self) -> ClientMonitor:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
