"""A load sharded across worker processes, for more concurrency than one event loop sustains.

One Python process spends roughly 20-40 µs of CPU per streamed chunk; past a few thousand
chunks a second its event loop falls behind and every timestamp it takes is late. Sharding
gives each worker process its own event loop and core:

    * closed loop: users are dealt round robin (user ``u`` runs in worker ``u % W``); every
      worker has the whole session list and takes the next session from one counter shared
      across processes, so the order in which sessions start is the single-process order;
    * open loop: request ``i`` goes to worker ``i % W`` at its planned time; the concurrency
      cap is split between workers (each gets its share, at least 1).

One clock: every worker stamps with ``time.perf_counter_ns``, which on Linux is
CLOCK_MONOTONIC, one clock for every process on the machine; each builds a ``RunClock`` with the
parent's ``t0_ns``, so their times share the run's origin. Workers start, report ready, and all
begin at one start time the parent sets after the last is ready (process start-up is not load).

Records stream back to the parent in batches (for the live display) and are returned in plan
order, with each worker's self-check samples (``worker`` = its index).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue as queue_module
import signal
import sys
import time
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan, LoadResult, run_plan
from loadgen.drivers.sending import LiveCounters, RecordCallback
from loadgen.drivers.stop import LoadStop
from loadgen.protocols import TokenizerLike
from results.folder.client_samples import ClientSamples
from results.folder.records import RequestRecord

__all__ = ["ShardError", "run_load", "run_plan_sharded", "shard_plan"]

_FLUSH_S = 0.1
_READY_TIMEOUT_S = 60.0
_START_MARGIN_S = 0.1


class ShardError(RuntimeError):
    """A worker process failed; the message carries its traceback."""


@dataclass(frozen=True)
class _Shard:
    worker: int
    plan: LoadPlan
    user_ids: list[int]


def shard_plan(plan: LoadPlan, workers: int) -> list[_Shard]:
    """Split ``plan`` into ``workers`` shards (module docstring); empty shards are dropped."""
    if workers < 1:
        raise ValueError(f"workers: expected >= 1, got {workers}")
    shards = []
    for w in range(workers):
        if plan.mode == "closed":
            ids = list(range(w, plan.users, workers))
            if ids:
                shards.append(_Shard(w, plan.with_changes(users=len(ids)), ids))
            continue
        assert plan.schedule_s is not None
        ids = list(range(w, len(plan.sessions), workers))
        if not ids:
            continue
        share = max(1, plan.cap // workers + (1 if w < plan.cap % workers else 0))
        sub = plan.with_changes(
            sessions=[plan.sessions[i] for i in ids],
            schedule_s=plan.schedule_s[ids],
            users=share,
            max_concurrency=share,
        )
        shards.append(_Shard(w, sub, ids))
    return shards


def _worker_main(
    shard: _Shard,
    config: ClientConfig,
    tokenizer: TokenizerLike | None,
    t0_ns: int,
    counter: Any,
    start: Any,
    go: Any,
    out: Any,
    halt: Any,
) -> None:
    """A worker process: wait for the start, run its shard, stream records back; ``halt`` (a
    multiprocessing event) set by the parent ends the shard early (loadgen.drivers.stop)."""
    import asyncio

    # A terminal's Ctrl-C signals the whole process group: the parent decides what stops, and
    # tells this worker through ``halt``.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        clock = RunClock(t0_ns)
        buffer: list[RequestRecord] = []

        def take_next() -> int:
            with counter.get_lock():
                counter.value += 1
                return counter.value - 1

        async def main() -> LoadResult:
            async def flush_forever() -> None:
                while True:
                    await asyncio.sleep(_FLUSH_S)
                    if buffer:
                        out.put(("records", shard.worker, buffer[:]))
                        buffer.clear()

            # Everything slow (client set-up) happens before "ready", so the start is on time.
            client = config.client(shard.plan.cap, tokenizer)
            await client.warm_up()
            out.put(("ready", shard.worker, None))
            await asyncio.to_thread(go.wait)
            delay = start.value - clock.now_s()
            if delay > 0:
                await asyncio.sleep(delay)
            flusher = asyncio.create_task(flush_forever())
            try:
                return await run_plan(
                    shard.plan, config, clock, tokenizer,
                    on_record=buffer.append, worker=shard.worker, start_s=start.value,
                    take_next=take_next if shard.plan.mode == "closed" else None,
                    user_ids=shard.user_ids, client=client, warm=False, stop=LoadStop(halt),
                    keep_records=False,  # shipped to the parent as they come (buffer)
                )  # fmt: skip
            finally:
                flusher.cancel()

        result = asyncio.run(main())
        if buffer:
            out.put(("records", shard.worker, buffer[:]))
        out.put(("done", shard.worker, (result.client, result.stamps)))
    except BaseException:
        out.put(("error", shard.worker, traceback.format_exc()))


@contextlib.contextmanager
def _without_main_module() -> Iterator[None]:
    """Start spawned workers without re-importing the parent's ``__main__``.

    spawn runs the parent's main script (or ``-m`` module) again in every child, so that
    functions defined there can be unpickled. Ours live in loadgen.drivers.workers, and re-running a
    main module without an ``if __name__ == "__main__"`` guard (``python -m bench`` or a
    script) would start the whole command again in each worker. A bare stand-in is shown to
    the spawn machinery while the workers start.
    """
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_plan_sharded(
    plan: LoadPlan,
    config: ClientConfig,
    clock: RunClock,
    tokenizer: TokenizerLike | None,
    workers: int,
    *,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    stop: LoadStop | None = None,
    keep_records: bool = True,
) -> LoadResult:
    """Run ``plan`` across ``workers`` processes (blocking; call it outside an event loop or
    through ``asyncio.to_thread``). Returns records in plan order (none unless keep_records)
    and every worker's samples. ``stop``, once set, ends every shard (loadgen.drivers.stop).

    Raises:
        ShardError: a worker failed to start within 60 s or raised; the others are stopped.
    """
    shards = shard_plan(plan, workers)
    ctx = mp.get_context("spawn")  # no fork of a parent holding threads, sockets or a GPU
    counter, start, go, out = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event(), ctx.Queue()
    halt = ctx.Event()
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(shard, config, tokenizer, clock.t0_ns, counter, start, go, out, halt),
            name=f"loadgen-worker-{shard.worker}",
            daemon=True,
        )
        for shard in shards
    ]
    with _without_main_module():
        for proc in procs:
            proc.start()
    live = counters if counters is not None else LiveCounters()
    done_before = live.done
    received: list[RequestRecord] = []
    samples = ClientSamples()
    stamps: list[dict[str, Any]] = []
    pending = {shard.worker for shard in shards}
    ready: set[int] = set()
    deadline = time.monotonic() + _READY_TIMEOUT_S
    try:
        while pending:
            if stop is not None and stop.is_set() and not halt.is_set():
                halt.set()
            try:
                kind, worker, payload = out.get(timeout=0.5)
            except queue_module.Empty:
                dead = [p.name for p in procs if p.exitcode not in (None, 0)]
                if dead or (not go.is_set() and time.monotonic() > deadline):
                    raise ShardError(
                        f"worker processes {dead or 'not ready'}: they died or did not start "
                        f"within {_READY_TIMEOUT_S:.0f} s"
                    ) from None
                continue
            if kind == "ready":
                ready.add(worker)
                if len(ready) == len(shards):
                    start.value = clock.now_s() + _START_MARGIN_S
                    go.set()
            elif kind == "records":
                cut = stop if halt.is_set() else None
                _take_records(payload, received if keep_records else None, live, on_record, cut)
            elif kind == "done":
                samples.extend(payload[0])
                stamps.extend(payload[1])
                pending.discard(worker)
            else:
                raise ShardError(f"worker {worker} failed:\n{payload}")
    finally:
        go.set()
        _join_workers(procs)
    order = {spec.request_id: i for i, spec in enumerate(plan.requests)}
    received.sort(key=lambda r: order.get(r.request_id, len(order)))
    return LoadResult(
        received, samples, workers=len(shards), stamps=stamps, finished=live.done - done_before
    )


def _take_records(
    records: list[RequestRecord],
    received: list[RequestRecord] | None,
    live: LiveCounters,
    on_record: RecordCallback | None,
    halted_by: LoadStop | None,
) -> None:
    """Append a worker's finished ``records`` to ``received`` (None: keep none), counting each
    in ``live`` and passing it to ``on_record``; ``halted_by``: the stop the workers were
    halted by, whose message each cancelled record then carries."""
    for record in records:
        if record.status == "cancelled" and halted_by is not None:
            record.error = halted_by.message()
        if received is not None:
            received.append(record)
        live.request_started()
        live.request_finished(record)
        if on_record is not None:
            on_record(record)


def _join_workers(procs: list[mp.process.BaseProcess]) -> None:
    """Wait up to 5 s for each worker process to exit; terminate one that does not."""
    for proc in procs:
        proc.join(timeout=5.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5.0)


async def run_load(
    plan: LoadPlan,
    config: ClientConfig,
    clock: RunClock,
    tokenizer: TokenizerLike | None,
    workers: int = 1,
    *,
    on_record: RecordCallback | None = None,
    counters: LiveCounters | None = None,
    stop: LoadStop | None = None,
    keep_records: bool = True,
) -> LoadResult:
    """Run ``plan`` in this event loop (``workers == 1``) or sharded over ``workers`` processes
    (then from a thread, so the caller's loop keeps serving a live display); ``stop`` ends it
    early when set (loadgen.drivers.stop). ``keep_records`` False: ``on_record`` keeps the
    records (a stream to disk) and the result holds none (run_plan)."""
    if workers <= 1:
        return await run_plan(
            plan, config, clock, tokenizer, on_record=on_record, counters=counters, stop=stop,
            keep_records=keep_records,
        )  # fmt: skip
    import asyncio

    return await asyncio.to_thread(
        run_plan_sharded, plan, config, clock, tokenizer, workers,
        on_record=on_record, counters=counters, stop=stop, keep_records=keep_records,
    )  # fmt: skip
